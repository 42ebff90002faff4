"""Bounded work per request (docs/search.md, "Request bounds"): structural bounds before validation, a budget for
explaining a failure, and rate-limit costs that follow the work.

The 20 ms CPU target of a refusal is measured by bench/adversarial.py, not here: these tests
assert the structure that makes it hold (what runs, how often, on how much), never a time.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aap.agent
import aap.spec.bounds
import aap.spec.validator
from aap.agent import CallContext
from aap.config.model import RateLimit
from aap.errors import AapError
from aap.spec import validate
from aap.spec.bounds import Bounds, within
from conftest import open_memory_agent
from http_helpers import AAP_HEADERS, Deployment, aap_error_of, send_message
from lead_support import lead_request

SEARCH = {"type": "inventory.search.request"}


class Calls:
    """Counts calls of a function replaced on a module (and still calls it)."""

    def __init__(self, monkeypatch, module, name: str) -> None:
        self.count = 0
        self.sizes: list[int] = []
        original = getattr(module, name)

        def counted(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def refusal(agent, payload) -> AapError:
    with pytest.raises(AapError) as caught:
        agent.handle(payload, CallContext(binding="test"))
    return caught.value


def test_a_hundred_thousand_feature_codes_are_refused_before_validation(monkeypatch):
    """The request that set the bounds: 100,000 copies of "x" (about 500 KB) cost 0.8-1.5 s of CPU."""
    validations = Calls(monkeypatch, aap.agent, "validate")
    explanations = Calls(monkeypatch, aap.spec.validator, "_explain")
    with open_memory_agent() as agent:
        error = refusal(agent, {**SEARCH, "filters": {"features_all": ["x"] * 100_000}})
    assert error.code == "SCHEMA_VALIDATION_FAILED"
    assert error.errors == [
        {
            "instanceLocation": "/filters/features_all",
            "keyword": "maxItems",
            "error": "must have at most 100 items (this endpoint's bound)",
        }
    ]
    assert validations.count == 0 and explanations.count == 0


def test_many_distinct_values_of_a_valid_request_never_reach_the_search(monkeypatch):
    """100,000 distinct makes are schema-valid; before the bounds they were searched (33 s of CPU)."""
    with open_memory_agent() as agent:
        # the agent's own search handler, counted (agents share the default skill table)
        searches = Calls(monkeypatch, aap.agent.inventory_search, "run")
        agent.register("inventory.search", lambda *args, **kwargs: aap.agent.inventory_search.run(*args, **kwargs))
        error = refusal(agent, {**SEARCH, "filters": {"make": [f"m{i}" for i in range(100_000)]}})
        assert [p["keyword"] for p in error.errors] == ["maxItems"]
        assert searches.count == 0
        agent.handle({**SEARCH, "filters": {"make": [f"m{i}" for i in range(100)]}}, CallContext("test"))
        assert searches.count == 1  # at the bound: searched


def test_every_bound_is_reported_at_its_place_without_quoting_anything():
    from aap.spec.bounds import Bounds, bound_problems

    bounds = Bounds(items=4, string=5, name=5, depth=3, values=40)
    instance = {"list": [1, 2, 3, 4, 5], "text": "toolong", "names": {"longname": 1}, "a": {"b": {"c": {"d": 1}}}}
    problems = bound_problems(instance, bounds)
    assert [(p["instanceLocation"], p["keyword"]) for p in problems] == [
        ("/list", "maxItems"),
        ("/text", "maxLength"),
        ("/names", "propertyNames"),
        ("/a/b/c", "maxDepth"),
    ]
    assert all("toolong" not in p["error"] and "longname" not in p["instanceLocation"] for p in problems)


def test_the_walk_stops_at_the_value_budget_whatever_the_body():
    from aap.spec.bounds import REQUEST_BOUNDS, Bounds, bound_problems

    problems = bound_problems([[0] * 20 for _ in range(100)], Bounds(items=1000, values=50))
    assert problems == [
        {
            "instanceLocation": "",
            "keyword": "maxValues",
            "error": "must hold at most 50 JSON values in all (this endpoint's bound on one request)",
        }
    ]
    problems = bound_problems({"k": ["x" * 20_000] * 100_000}, Bounds(problems=5))
    assert problems == [
        {
            "instanceLocation": "/k",
            "keyword": "maxItems",
            "error": "must have at most 100 items (this endpoint's bound)",
        }
    ]
    # within the bounds nothing is reported
    assert bound_problems(lead_request()) == []
    assert bound_problems({**SEARCH, "filters": {"make": ["Honda"] * REQUEST_BOUNDS.items}}) == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=7),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=7), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(
    instance=_JSON,
    bounds=st.builds(
        Bounds,
        items=st.integers(0, 6),
        string=st.integers(0, 7),
        name=st.integers(0, 7),
        depth=st.integers(0, 5),
        values=st.integers(0, 40),
    ),
)
def test_the_quick_check_agrees_with_the_walk_that_lists_problems(instance, bounds):
    """Requests within their bounds pay only :func:`within`; it must pass exactly what the walk
    that lists the problems finds nothing in."""
    assert within(instance, bounds) == (aap.spec.bounds._problems(instance, bounds) == [])


def test_a_lead_over_the_bounds_is_refused_with_the_bounds_alone(monkeypatch):
    validations = Calls(monkeypatch, aap.agent, "validate")
    lead = lead_request(message="x" * 10_001)
    with open_memory_agent() as agent:
        error = refusal(agent, lead)
    assert (error.code, [(p["instanceLocation"], p["keyword"]) for p in error.errors]) == (
        "SCHEMA_VALIDATION_FAILED",
        [("/message", "maxLength")],
    )
    assert validations.count == 0


def test_explaining_a_failure_stops_at_its_budget(monkeypatch):
    explained = Calls(monkeypatch, aap.spec.validator, "_explain")
    instance = {**SEARCH, "filters": {"make": list(range(50))}}
    everything = validate(instance, "inventory-search-request")
    assert len(everything) == 50 and explained.count == 50
    explained.count = 0
    cut = validate(instance, "inventory-search-request", budget=0)  # out of time after the first
    assert explained.count == 1
    assert cut[0]["keyword"] == "budget" and cut[0]["instanceLocation"] == ""
    assert len(cut) == 2


def test_the_agent_validates_with_its_budget(monkeypatch):
    budgets = []
    original = aap.agent.validate

    def spy(instance, name, *, budget=None):
        budgets.append(budget)
        return original(instance, name, budget=budget)

    monkeypatch.setattr(aap.agent, "validate", spy)
    with open_memory_agent() as agent:
        refusal(agent, {**SEARCH, "filters": {"make": 5}})
    assert budgets == [0.015]  # aap.agent.VALIDATION_BUDGET


# -- rate-limit costs ---------------------------------------------------------------------


def test_tokens_follow_the_skill_and_what_its_shape_was_seen_to_cost():
    from aap.gateway import MAX_TOKENS, SKILL_TOKENS, TOKEN_CPU, Gateway
    from aap.skills.catalog import SKILLS
    from aap.work import Work

    work = Work(inline=True, threads=1)
    search, lead = SKILLS["inventory.search"], SKILLS["lead.submit"]
    try:
        with open_memory_agent() as agent:
            gateway = Gateway.of(agent, work)
            assert gateway.price(search, ("s",)) == 1  # never seen
            assert gateway.price(lead, None) == SKILL_TOKENS["lead.submit"]
            work.note(("s",), TOKEN_CPU * 3.5)
            assert gateway.price(search, ("s",)) == 4
            work.note(("huge",), 10.0)
            assert gateway.price(search, ("huge",)) == MAX_TOKENS
    finally:
        work.close()


@pytest.mark.slow
def test_over_a2a_a_lead_costs_its_tokens(tmp_path):
    """Burst 8: two leads (4 tokens each) pass, the third is refused; a search still costs one."""
    rule = RateLimit(enabled=True, per_minute=1, burst=8)
    with Deployment(tmp_path, inventory=0, rate_limit=rule) as dep, httpx.Client(base_url=dep.base_url) as http:
        answers = [http.post("/a2a", headers=AAP_HEADERS, json=send_message(lead_request())).json() for _ in range(3)]
    assert ["result" in a for a in answers] == [True, True, False]
    assert aap_error_of(answers[2])["code"] == "RATE_LIMITED"


# -- the search budget ------------------------------------------------------------------------


class FrozenClock:
    """``time`` for aap.store.dialect: monotonic() is whatever the test says it is."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


LONG_QUERY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT count(*) FROM c"


def test_time_limits_nest_and_the_outer_one_holds_again(database_url, monkeypatch):
    """A count's limit inside a request's budget: never beyond the budget, which holds again after."""
    import aap.store.dialect as dialect_module
    from aap.store import open_stores
    from aap.store.dialect import StatementTimeout

    stores = open_stores(database_url)
    db = stores.db
    try:
        with db.read() as tx:
            if db.dialect.name == "sqlite":
                clock = FrozenClock()
                monkeypatch.setattr(dialect_module, "time", clock)
                with pytest.raises(StatementTimeout):
                    with db.dialect.time_limit(tx, 10_000):  # deadline 10 s
                        with pytest.raises(StatementTimeout):
                            with db.dialect.time_limit(tx, 60_000):  # never beyond the outer one
                                clock.now = 11.0
                                tx.one(LONG_QUERY)
                        clock.now = 0.0
                        with db.dialect.time_limit(tx, 5_000):
                            assert tx.one(LONG_QUERY)[0] == 100_000
                        clock.now = 20.0  # past the outer deadline only
                        tx.one(LONG_QUERY)
                assert tx.one(LONG_QUERY)[0] == 100_000  # no limit left open
            else:
                with db.dialect.time_limit(tx, 10_000):
                    with pytest.raises(StatementTimeout):
                        with db.dialect.time_limit(tx, 5):
                            tx.one("SELECT pg_sleep(0.5)")
                    assert tx.one("SELECT current_setting('statement_timeout')")[0] == "10s"
                    with db.dialect.time_limit(tx, 5_000):
                        tx.one("SELECT 1")
                    assert tx.one("SELECT current_setting('statement_timeout')")[0] == "10s"
                assert tx.one("SELECT current_setting('statement_timeout')")[0] == "0"
    finally:
        stores.close()


def test_a_time_limit_ended_with_its_transaction_is_never_undone_on_its_own(pg_cluster):
    """PostgreSQL: the way out of a time limit (``SET LOCAL`` back, ``RELEASE SAVEPOINT``) goes
    with the transaction's next statement, and when the transaction ends first it is never sent:
    the end undoes the same. Nothing of the limit outlives its transaction, and what a write
    transaction wrote inside the limit is committed with it."""
    from aap.store import open_stores

    stores = open_stores(pg_cluster.create_database())
    db = stores.db
    sent: list[str] = []

    class Recording:
        """The driver's cursor, each statement it is sent noted."""

        def __init__(self, cursor) -> None:
            self.cursor = cursor

        def execute(self, sql, params=()):
            sent.append(sql)
            return self.cursor.execute(sql, params)

        def __getattr__(self, name):
            return getattr(self.cursor, name)

    def recording(tx):
        tx._raw = Recording(tx._raw)
        return tx

    try:
        with db.read() as tx:
            recording(tx)
            with db.dialect.time_limit(tx, 10_000):
                assert tx.one("SELECT current_setting('statement_timeout')")[0] == "10s"
        assert sent[-1] == "SELECT current_setting('statement_timeout')"  # nothing after it
        assert not any("RELEASE" in sql for sql in sent)
        with db.transaction() as tx:
            recording(tx)
            with db.dialect.time_limit(tx, 10_000):
                tx.execute("CREATE TABLE limited (x INTEGER)")
                tx.execute("INSERT INTO limited VALUES (1)")
            sent.clear()
            assert tx.one("SELECT current_setting('statement_timeout')")[0] == "0"  # undone first
            assert "RELEASE SAVEPOINT aap_time_limit" in sent[0] and len(sent) == 2
            with db.dialect.time_limit(tx, 10_000):
                tx.execute("INSERT INTO limited VALUES (2)")
        with db.read() as tx:  # the transactions after carry no limit
            assert tx.one("SELECT current_setting('statement_timeout')")[0] == "0"
            assert tx.fetchall("SELECT x FROM limited ORDER BY x") == [(1,), (2,)]
    finally:
        stores.close()


def test_search_and_facets_read_within_their_budget_and_are_refused_past_it(monkeypatch):
    """Structure, not time: the reads run inside ``time_limit(search_timeout_ms)``, and a
    StatementTimeout from them is the typed refusal."""
    import dataclasses
    from contextlib import contextmanager

    from aap.store.dialect import Dialect, StatementTimeout
    from aap.store.inventory.snapshot import InventorySnapshot
    from conftest import make_settings

    open_limits: list[float] = []
    real = Dialect.time_limit

    @contextmanager
    def watched(self, tx, milliseconds):
        open_limits.append(milliseconds)
        try:
            with real(self, tx, milliseconds):
                yield
        finally:
            open_limits.pop()

    monkeypatch.setattr(Dialect, "time_limit", watched)
    seen: list[list[float]] = []
    overrun = False

    def recording(original):
        def reading(self, *args, **kwargs):
            seen.append(list(open_limits))
            if overrun:
                raise StatementTimeout()
            return original(self, *args, **kwargs)

        return reading

    for name in ("search", "facets"):
        monkeypatch.setattr(InventorySnapshot, name, recording(getattr(InventorySnapshot, name)))
    with open_memory_agent(dataclasses.replace(make_settings(), search_timeout_ms=750)) as agent:
        for skill in ("inventory.search.request", "inventory.facets.request"):
            assert agent.handle({"type": skill, "filters": {"make": ["Honda"]}}, CallContext("test"))["data"]
        assert seen == [[750], [750]]
        overrun = True
        for skill in ("inventory.search.request", "inventory.facets.request"):
            error = refusal(agent, {"type": skill, "filters": {"query": "zq"}})
            assert (error.code, error.retryable) == ("INTERNAL_ERROR", False)
            assert error.message == "The request needed more work than this endpoint spends on one request."
            assert "Narrow" in error.details["hint"]


@pytest.mark.slow
def test_mcp_never_hands_a_request_over_the_bounds_to_the_sdk(tmp_path):
    """The SDK's reader cost ~100-300 ms on a 1 MiB call (bench/adversarial.py): a message it would
    read is refused at the front when it is over the bounds; a plain call meets them in the core."""
    import aap.bindings.mcp.sdk as sdk_module
    from mcp_helpers import ACCEPT, LEGACY, live_dealer

    huge = {"type": "inventory.search.request", "filters": {"features_all": ["x"] * 100_000}}
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": LEGACY}
    handed: list[int] = []
    real = sdk_module.LazySdk.handle_request

    async def counted(self, *args, **kwargs):
        handed.append(1)
        return await real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch, live_dealer(tmp_path, count=0) as dealer:
        patch.setattr(sdk_module.LazySdk, "handle_request", counted)
        unusual = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "x-extra": 1,  # not plain: the SDK's
            "params": {"name": "aap_inventory_search", "arguments": huge},
        }
        answer = httpx.post(dealer.mcp_url, json=unusual, headers=headers, timeout=60)
        assert answer.status_code == 400 and handed == []
        error = answer.json()["error"]
        assert (answer.json()["id"], error["code"]) == (7, -32602)
        assert error["data"]["errors"] == [
            {
                "instanceLocation": "/params/arguments/filters/features_all",
                "keyword": "maxItems",
                "error": "must have at most 100 items (this endpoint's bound)",
            }
        ]
        plain = {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "aap_inventory_search", "arguments": huge},
        }
        result = httpx.post(dealer.mcp_url, json=plain, headers=headers, timeout=60).json()["result"]
        assert result["isError"] and result["structuredContent"]["details"]["errors"][0]["keyword"] == "maxItems"
        small = {
            **unusual,
            "params": {"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request"}},
        }
        assert httpx.post(dealer.mcp_url, json=small, headers=headers, timeout=60).status_code in (200, 400)
        assert handed == [1]  # within the bounds, the SDK answers it as before
