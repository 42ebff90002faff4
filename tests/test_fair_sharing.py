"""Fair sharing of a worker between a platform's tenants (docs/platform.md, "Fair sharing").

Deterministic throughout: a tenant's slots are held by requests blocked on an event inside
the skill's work, never by timing; the admission rule (yielding included) is checked against a
small reference model over random arrival orders (bounded by hypothesis example counts); the
hold of a refused request's slot and the bound of a yield are timers, checked by the order in
which the event loop runs what is due, never by a measured duration. What a request costs is
counted (transactions, skill calls, placements, threads reached), never timed.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers

from aap.agent import DealerAgent
from aap.bindings.a2a import A2ABinding
from aap.config.loader import parse_settings
from aap.config.model import RateLimit
from aap.errors import AapError
from aap.fairshare import TenantShares
from aap.gateway import Caller, Gateway
from aap.ratelimit import RateLimiter
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database, open_stores
from aap.tenants import TenantRegistry
from aap.work import Work
from conftest import make_settings as agent_settings
from http_helpers import AAP_HEADERS, aap_error_of, make_settings, send_message, serve
from mcp_helpers import legacy_headers, modern_call, rpc
from platform_support import PLATFORM_HOST, listings, platform_settings, tenant_config, tenant_stores
from poppy_client import HttpsServer, PersonalAgent, PoppyClient
from poppy_env import PoppyDeployment, agent_host, poppy_ca  # noqa: F401

SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 5}}


# -- the rule, unit by unit -------------------------------------------------------------------------


async def settle() -> None:
    """Let every task that can run, run (a bounded number of loop turns, no clock)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_tenant_holds_at_most_its_slots_and_others_are_not_counted() -> None:
    async def scenario() -> None:
        shares = TenantShares(limit=2, queue=0, wait=3600)
        await shares.enter("a")
        await shares.enter("a")
        with pytest.raises(AapError) as refused:
            await shares.enter("a")
        assert refused.value.code == "RATE_LIMITED" and refused.value.details["retry_after_ms"] == 3_600_000
        await shares.enter("b")  # another tenant: its own slots
        assert (shares.running("a"), shares.running("b")) == (2, 1)
        shares.leave("a")
        await shares.enter("a")
        for tenant in ("a", "a", "b"):
            shares.leave(tenant)
        assert shares._tenants == {}  # nothing kept for a tenant with nothing in flight

    asyncio.run(scenario())


def test_a_waiting_request_gets_the_next_slot_or_is_refused_when_its_wait_runs_out() -> None:
    async def scenario() -> None:
        shares = TenantShares(limit=1, queue=1, wait=3600)
        await shares.enter("a")
        waiter = asyncio.ensure_future(shares.enter("a"))
        await settle()
        assert not waiter.done() and shares.waiting("a") == 1
        shares.leave("a")  # handed over: the waiter runs, still one in flight
        await settle()
        assert waiter.done() and waiter.exception() is None and shares.running("a") == 1
        shares.leave("a")
        impatient = TenantShares(limit=1, queue=1, wait=0)  # no wait at all: refused at once
        await impatient.enter("a")
        with pytest.raises(AapError) as refused:
            await impatient.enter("a")
        assert refused.value.code == "RATE_LIMITED" and impatient.waiting("a") == 0

    asyncio.run(scenario())


def test_a_slot_handed_to_a_request_cancelled_meanwhile_goes_on_to_the_next() -> None:
    async def scenario() -> None:
        shares = TenantShares(limit=1, queue=2, wait=3600)
        await shares.enter("a")
        first = asyncio.ensure_future(shares.enter("a"))
        second = asyncio.ensure_future(shares.enter("a"))
        await settle()
        shares.leave("a")  # the slot is the first waiter's ...
        first.cancel()  # ... which is cancelled before it runs: the second gets it
        await settle()
        assert first.cancelled() and second.done() and second.exception() is None
        assert (shares.running("a"), shares.waiting("a")) == (1, 0)
        shares.leave("a")
        assert shares._tenants == {}

    asyncio.run(scenario())


def test_a_tenant_at_its_bound_yields_its_next_slot_to_another_tenants_request() -> None:
    """The flooded tenant's queued requests start after the quiet tenant's request, not before."""

    async def scenario() -> None:
        shares = TenantShares(limit=2, queue=8, wait=3600, yield_for=3600)
        await shares.enter("flood")
        await shares.enter("flood")
        queued = [asyncio.ensure_future(shares.enter("flood")) for _ in range(3)]
        await settle()
        await shares.enter("quiet")  # below its bound: admitted at once, ahead of the flood's queue
        shares.leave("flood")  # the flood's freed slot is not handed on while "quiet" is at work
        await settle()
        assert [q.done() for q in queued] == [False, False, False] and shares.yielding("flood")
        assert (shares.running("flood"), shares.waiting("flood")) == (1, 3)
        await shares.enter("quiet")  # and the quiet tenant is still never made to wait
        shares.leave("quiet")  # one of its requests ended: the flood goes on, up to its bound
        await settle()
        assert [q.done() for q in queued] == [True, False, False] and not shares.yielding("flood")
        assert (shares.running("flood"), shares.waiting("flood")) == (2, 2)
        shares.leave("quiet")
        for _ in range(2):
            shares.leave("flood")  # alone again: handed on at once
        await settle()
        assert [q.done() for q in queued] == [True, True, True] and shares.running("flood") == 2
        shares.leave("flood")
        shares.leave("flood")
        assert shares._tenants == {} and shares._yielding == {}

    asyncio.run(scenario())


def test_a_tenant_yields_for_at_most_its_bound() -> None:
    """One long request of another tenant does not stall a flooded tenant's queue: after
    ``yield_for`` its slot goes on (the loop runs timers in the order they are due, no clock read)."""

    async def scenario() -> None:
        shares = TenantShares(limit=1, queue=1, wait=3600, yield_for=0.001)
        await shares.enter("flood")
        queued = asyncio.ensure_future(shares.enter("flood"))
        await shares.enter("slow")
        await settle()
        shares.leave("flood")
        assert shares.yielding("flood") and not queued.done()
        await asyncio.sleep(0.01)  # due after the yield's timer
        await settle()
        assert queued.done() and shares.running("flood") == 1 and not shares.yielding("flood")
        shares.leave("flood")
        shares.leave("slow")
        assert shares._tenants == {}

    asyncio.run(scenario())


def test_a_slot_given_back_later_is_held_until_then() -> None:
    async def scenario() -> None:
        shares = TenantShares(limit=1, queue=0, wait=3600)
        await shares.enter("a")
        shares.leave("a", after=0.001)
        assert shares.running("a") == 1
        with pytest.raises(AapError):
            await shares.enter("a")  # still held: refused by the share
        await asyncio.sleep(0.01)  # due after the hold's timer
        assert shares.running("a") == 0 and shares._tenants == {}

    asyncio.run(scenario())


def test_a_share_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        TenantShares(limit=0, queue=1, wait=1)


# -- what a refusal costs, and what a waiting request holds --------------------------------------


class Clock:
    """A clock that stands still: a refusal's wait never runs out during the test."""

    now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
def test_a_refusal_for_the_rate_limit_costs_no_transaction_no_skill_and_keeps_its_slot(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the A2A door, inside the tenant's share as the platform's routing enters it: once its
    caller is refused, each further request is refused from this worker's memory (no database
    transaction, no skill looked up, no schema validation, no work placed), and its slot stays
    taken for the share's ``hold`` after its answer, so the tenant's next request waits."""
    stores = open_stores(database_url)
    transactions = {"count": 0}
    transaction = stores.db.transaction

    def counted(*args: Any, **kwargs: Any) -> Any:
        transactions["count"] += 1
        return transaction(*args, **kwargs)

    monkeypatch.setattr(stores.db, "transaction", counted)
    assert stores.state.db is stores.db
    skill_work = {"skill_for": 0, "answer": 0, "placed": 0}

    def counting(name: str) -> Any:
        original = getattr(DealerAgent, name)

        def counted_call(self: DealerAgent, *args: Any) -> Any:
            skill_work[name] += 1
            return original(self, *args)

        return counted_call

    for name in ("skill_for", "answer"):
        monkeypatch.setattr(DealerAgent, name, counting(name))
    limiter = RateLimiter(stores.state, RateLimit(enabled=True, per_minute=60, burst=4), clock=Clock())
    work = Work(inline=stores.db.in_process)
    run = work.run

    async def placed(*args: Any) -> Any:
        skill_work["placed"] += 1
        return await run(*args)

    monkeypatch.setattr(work, "run", placed)
    caller = Caller("a2a", "ip:flood")
    headers = Headers(AAP_HEADERS)
    body = orjson.dumps(send_message(SEARCH))

    async def request(gateway: Gateway) -> dict[str, Any] | None:
        async with gateway.arrival("POST"):
            outcome = await A2ABinding(gateway).process(body, headers, caller)
        return aap_error_of(outcome.payload)

    async def scenario() -> None:
        shares = TenantShares(limit=1, queue=0, wait=3600, hold=0)
        gateway = Gateway(DealerAgent(agent_settings(), stores), limiter, work, shares=shares, tenant="flood")
        answers = [await request(gateway)]  # searched, from its burst ...
        while answers[-1] is None and len(answers) < 10:
            answers.append(await request(gateway))  # ... until the bucket is empty
        assert answers[0] is None and answers[-1] is not None and answers[-1]["code"] == "RATE_LIMITED"
        before, work_before = transactions["count"], dict(skill_work)
        again = [await request(gateway) for _ in range(20)]
        assert all(e is not None and "requests per minute" in e["details"]["hint"] for e in again)
        assert transactions["count"] == before and skill_work == work_before

        held = TenantShares(limit=1, queue=0, wait=3600, hold=3600)
        gateway = Gateway(DealerAgent(agent_settings(), stores), limiter, work, shares=held, tenant="flood")
        refused = await request(gateway)
        assert refused is not None and "requests per minute" in refused["details"]["hint"]
        assert held.running("flood") == 1  # answered, and its slot still held
        refused = await request(gateway)  # so the tenant's next request is refused by its share
        assert refused is not None and "at once" in refused["details"]["hint"]
        assert transactions["count"] == before and skill_work == work_before

    try:
        asyncio.run(scenario())
    finally:
        work.close()
        stores.close()


def test_requests_waiting_for_their_tenants_slot_hold_no_thread_or_connection(tmp_path: Path) -> None:
    """A tenant at its bound, with requests waiting: the worker's other executor thread (and
    the database connection each thread holds) still serves another tenant at once."""
    stores = open_stores(f"sqlite:///{tmp_path}/one.db")
    work = Work(inline=False, threads=2)
    shares = TenantShares(limit=1, queue=8, wait=3600)
    flood = Gateway.of(DealerAgent(agent_settings(), stores), work, shares=shares, tenant="flood")
    quiet = Gateway.of(DealerAgent(agent_settings(), stores), work, shares=shares, tenant="quiet")
    release = threading.Event()
    entered: list[str] = []

    def held_work() -> None:
        entered.append("flood")
        release.wait(timeout=120)

    async def flooding() -> None:
        async with flood.arrival("POST"):
            await flood.blocking(held_work)

    async def scenario() -> None:
        requests = [asyncio.ensure_future(flooding()) for _ in range(6)]
        await settle()
        assert (shares.running("flood"), shares.waiting("flood")) == (1, 5)
        async with quiet.arrival("POST"):  # the second thread is free: served meanwhile
            assert await asyncio.wait_for(quiet.blocking(str, "served"), 120) == "served"
        assert entered == ["flood"]  # the waiting five never reached a thread
        release.set()
        await asyncio.gather(*requests)
        assert entered == ["flood"] * 6 and shares._tenants == {}

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        work.close()
        stores.close()


def test_the_work_of_a_tenant_at_its_bound_runs_off_the_event_loop(tmp_path: Path) -> None:
    """A shape short enough for the loop runs there for a tenant below its bound, and on the
    executor for a request that arrived while its tenant's slots were all taken."""
    stores = open_stores(f"sqlite:///{tmp_path}/one.db")
    work = Work(inline=True, threads=1)
    shape = ("inventory.search", "", "|")
    work.note(shape, 0.0)  # seen to cost nothing: runs inline
    shares = TenantShares(limit=1, queue=4, wait=3600)
    flood = Gateway.of(DealerAgent(agent_settings(), stores), work, shares=shares, tenant="flood")
    quiet = Gateway.of(DealerAgent(agent_settings(), stores), work, shares=shares, tenant="quiet")
    inline: dict[str, bool] = {}
    first_may_end = asyncio.Event()

    async def request(gateway: Gateway, name: str, hold: asyncio.Event | None = None) -> None:
        async with gateway.arrival("POST"):
            inline[name] = work.short(shape)
            if hold is not None:
                await hold.wait()

    async def scenario() -> None:
        first = asyncio.ensure_future(request(flood, "flood, below its bound", first_may_end))
        await settle()
        second = asyncio.ensure_future(request(flood, "flood, at its bound"))
        await settle()
        assert shares.waiting("flood") == 1
        await request(quiet, "quiet")
        first_may_end.set()
        await asyncio.gather(first, second)
        assert inline == {"flood, below its bound": True, "quiet": True, "flood, at its bound": False}
        assert work.short(shape)  # outside any request: as the shape was seen

    try:
        asyncio.run(scenario())
    finally:
        work.close()
        stores.close()


# -- the rule against a reference model -------------------------------------------------------------

TENANTS = ("a", "b", "c")
operation = st.tuples(st.sampled_from(("arrive", "arrive", "finish", "cancel")), st.sampled_from(TENANTS))


class Model:
    """The admission rule as plainly as it can be said: per tenant, ``limit`` running, first come
    first served, ``queue`` waiting, the rest refused; a finished request's slot goes to the
    oldest waiting one, unless another tenant has a request running: then the tenant yields,
    and its free slots go to its waiting ones when another tenant's request finishes."""

    def __init__(self, limit: int, queue: int) -> None:
        self.limit, self.queue = limit, queue
        self.running: dict[str, list[int]] = {t: [] for t in TENANTS}
        self.waiting: dict[str, deque[int]] = {t: deque() for t in TENANTS}
        self.yielding: dict[str, None] = {}  # in the order they began to yield
        self.status: dict[int, str] = {}

    def fill(self, tenant: str) -> None:
        while len(self.running[tenant]) < self.limit and self.waiting[tenant]:
            nxt = self.waiting[tenant].popleft()
            self.running[tenant].append(nxt)
            self.status[nxt] = "running"

    def arrive(self, tenant: str, request: int) -> None:
        if len(self.running[tenant]) < self.limit and not self.waiting[tenant]:
            self.running[tenant].append(request)
            self.status[request] = "running"
        elif len(self.waiting[tenant]) < self.queue:
            self.waiting[tenant].append(request)
            self.status[request] = "waiting"
        else:
            self.status[request] = "refused"

    def finish(self, tenant: str) -> int | None:
        if not self.running[tenant]:
            return None
        done = self.running[tenant].pop(0)
        self.status[done] = "finished"
        for other in [t for t in self.yielding if t != tenant]:
            del self.yielding[other]
            self.fill(other)
        if self.waiting[tenant] and tenant not in self.yielding:
            if any(self.running[t] for t in TENANTS if t != tenant):
                self.yielding[tenant] = None
            else:
                self.fill(tenant)
        return done

    def cancel(self, tenant: str) -> int | None:
        if not self.waiting[tenant]:
            return None
        gone = self.waiting[tenant].pop()
        self.status[gone] = "cancelled"
        if not self.waiting[tenant]:
            self.yielding.pop(tenant, None)
        return gone


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 3),
    queue=st.integers(0, 3),
    operations=st.lists(operation, min_size=1, max_size=40),
)
def test_the_shares_admit_as_the_reference_model_in_any_arrival_order(
    limit: int, queue: int, operations: list[tuple[str, str]]
) -> None:
    async def scenario() -> None:
        shares = TenantShares(limit=limit, queue=queue, wait=3600, yield_for=3600)  # no clock
        model = Model(limit, queue)
        status: dict[int, str] = {}
        finish: dict[int, asyncio.Event] = {}
        tasks: dict[int, asyncio.Task[None]] = {}

        async def request(tenant: str, number: int) -> None:
            status[number] = "waiting"
            try:
                await shares.enter(tenant)
            except AapError as exc:
                assert exc.code == "RATE_LIMITED"
                status[number] = "refused"
                return
            except asyncio.CancelledError:
                status[number] = "cancelled"
                return
            status[number] = "running"
            await finish[number].wait()
            shares.leave(tenant)
            status[number] = "finished"

        for number, (kind, tenant) in enumerate(operations):
            if kind == "arrive":
                model.arrive(tenant, number)
                finish[number] = asyncio.Event()
                tasks[number] = asyncio.ensure_future(request(tenant, number))
            elif kind == "finish":
                done = model.finish(tenant)
                if done is not None:
                    finish[done].set()
            else:
                gone = model.cancel(tenant)
                if gone is not None:
                    tasks[gone].cancel()
            await settle()
            assert status == model.status
            for t in TENANTS:
                assert shares.running(t) == len(model.running[t])
                assert shares.waiting(t) == len(model.waiting[t])
                assert shares.yielding(t) == (t in model.yielding)
        for event in finish.values():
            event.set()
        await settle()
        assert shares._tenants == {}

    asyncio.run(scenario())


# -- on a platform, over HTTP ---------------------------------------------------------------------


class Held:
    """Tenant ``dealer-a``'s skill work, blocked inside its executor thread until released."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def wait_for(self, count: int) -> None:
        for _ in range(count):
            assert self.entered.acquire(timeout=120), "a held request never reached its work"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    holder = Held()
    answer = DealerAgent.answer

    def held_answer(self: DealerAgent, *args: Any) -> Any:
        if self.settings.deployment_id == "dealer-a" and not holder.release.is_set():
            holder.entered.release()
            holder.release.wait(timeout=120)
        return answer(self, *args)

    monkeypatch.setattr(DealerAgent, "answer", held_answer)
    # Every call on the executor, as on PostgreSQL: a held call must not hold the event loop.
    monkeypatch.setattr(Work, "short", lambda self, shape: False)
    yield holder
    holder.release.set()


@pytest.fixture
def platform_url(tmp_path: Path) -> Iterator[str]:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db", tenant_concurrency=2, tenant_queue=0)
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example"])
    registry.add("dealer-b", tenant_config("Beta Cars"), ["beta.example"])
    for tenant_id, make, rooftop in (("dealer-a", "Honda", "Alpha Motors Main"), ("dealer-b", "Kia", "Beta Cars Main")):
        own = tenant_stores(registry, tenant_id)
        own.inventory.import_listings(listings(tenant_id, make, 3, rooftop))
        own.close()
    for server in serve(create_platform_app(settings, stores)):
        yield server.base_url
    stores.close()


def a2a(origin: str, host: str) -> httpx.Response:
    return httpx.post(origin + "/a2a", json=send_message(SEARCH), headers={**AAP_HEADERS, "host": host}, timeout=120)


def mcp(origin: str, host: str) -> httpx.Response:
    body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": SEARCH})
    return httpx.post(origin + "/mcp", json=body, headers={**headers, "host": host}, timeout=120)


def found(answer: httpx.Response) -> int:
    assert answer.status_code == 200, answer.text
    return int(answer.json()["result"]["message"]["parts"][0]["data"]["data"]["total"])


@pytest.mark.slow
def test_a_tenant_at_its_share_is_refused_while_another_is_served(platform_url: str, held: Held) -> None:
    with ThreadPoolExecutor(2) as pool:
        holding = [pool.submit(a2a, platform_url, "alpha.example") for _ in range(2)]
        held.wait_for(2)  # both of dealer-a's slots are taken, by work that has not ended
        assert found(a2a(platform_url, "beta.example")) == 3  # dealer-b: admitted and served meanwhile
        assert mcp(platform_url, "beta.example").json()["result"]["isError"] is False

        refused = a2a(platform_url, "alpha.example")  # A2A: the AAP error in the JSON-RPC error
        assert refused.status_code == 200
        error = aap_error_of(refused.json())
        assert error is not None and error["code"] == "RATE_LIMITED"
        assert int(refused.headers["retry-after"]) == math.ceil(error["details"]["retry_after_ms"] / 1000)

        refused = mcp(platform_url, "alpha.example")  # MCP: a tool error, and Retry-After
        result = refused.json()["result"]
        assert result["isError"] is True and result["structuredContent"]["code"] == "RATE_LIMITED"
        assert int(refused.headers["retry-after"]) >= 1

        legacy = httpx.post(  # MCP 2025-11-25, through the SDK's path
            platform_url + "/mcp",
            json=rpc("tools/call", {"name": "aap_inventory_search", "arguments": SEARCH}),
            headers={**legacy_headers(), "host": "alpha.example"},
            timeout=120,
        )
        result = legacy.json()["result"]
        assert result["isError"] is True and result["structuredContent"]["code"] == "RATE_LIMITED"

        held.release.set()
        assert [found(f.result()) for f in holding] == [3, 3]
    assert found(a2a(platform_url, "alpha.example")) == 3  # its slots are back


@pytest.mark.slow
def test_poppy_answers_a_tenant_at_its_share_with_429_and_retry_after(
    tmp_path: Path, poppy_ca, agent_host, held: Held, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Poppy API over a gateway with a tenant's share (one slot, no queue), each request
    entering it on arrival as the platform's tenant routing has it enter: the excess is the
    API's own RATE_LIMITED answer."""
    shares = TenantShares(limit=1, queue=0, wait=2)
    made = Gateway.of.__func__  # type: ignore[attr-defined]
    gateways: list[Gateway] = []

    def of(cls: type[Gateway], agent: DealerAgent, work: Work | None = None, **kw: Any) -> Gateway:
        gateways.append(made(cls, agent, work, shares=shares, tenant="dealer-a", **kw))
        return gateways[-1]

    start = HttpsServer.start

    def routed(server: HttpsServer, app: Any) -> HttpsServer:
        async def arriving(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            async with gateways[0].arrival(scope["method"]):
                await app(scope, receive, send)

        return start(server, arriving)

    monkeypatch.setattr(Gateway, "of", classmethod(of))
    monkeypatch.setattr(HttpsServer, "start", routed)
    dealer = PoppyDeployment(tmp_path, poppy_ca, inventory=0, deployment_id="dealer-a")
    client = PoppyClient(PersonalAgent(agent_host, name="fair-agent"), dealer.url, poppy_ca.context())
    info = {"type": "dealer.information.request"}
    try:
        client.discover()
        client.start_session()
        with ThreadPoolExecutor(1) as pool:
            holding = pool.submit(client.call, "dealerInformation", info)
            held.wait_for(1)
            refused = client.call("dealerInformation", info)
            assert refused.status_code == 429
            assert refused.json()["code"] == "RATE_LIMITED"
            assert int(refused.headers["retry-after"]) == 2
            held.release.set()
            assert holding.result().status_code == 200
    finally:
        client.close()
        dealer.stop()


def test_the_shares_are_a_platform_setting_derived_from_the_executor() -> None:
    plain = platform_settings("sqlite:///x.db").platform
    assert plain is not None and plain.tenant_concurrency is None
    assert (plain.tenant_slots(4), plain.tenant_slots(10), plain.tenant_slots(2), plain.tenant_slots(1)) == (2, 2, 1, 1)
    assert (plain.tenant_queue, plain.tenant_queue_ms) == (256, 1000)
    chosen = platform_settings("sqlite:///x.db", tenant_concurrency=3, tenant_queue=0, tenant_queue_ms=0).platform
    assert chosen is not None and chosen.tenant_slots(10) == 3
    with pytest.raises(Exception) as bad:
        parse_settings({"platform": {"host": PLATFORM_HOST, "tenant_concurrency": 0, "tenant_queue": -1}}, environ={})
    assert "tenant_concurrency" in str(bad.value) and "tenant_queue" in str(bad.value)


@pytest.mark.slow
def test_a_single_deployment_has_no_share(tmp_path: Path) -> None:
    settings = make_settings("https://dealer.example", f"sqlite:///{tmp_path}/one.db")
    stores = open_stores(settings.database_url)
    try:
        gateway = Gateway.of(DealerAgent(settings, stores))
        assert gateway.shares is None
        gateway.work.close()
    finally:
        stores.close()
