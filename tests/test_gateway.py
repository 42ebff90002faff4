"""The call pipeline every door shares (aap/gateway.py), and what the composition root gives each agent.

- The source: only the gateway admits callers, prices calls and places work; no skill or
  lead module reaches back up to the agent or the gateway; no process-global registry is
  left (the three that were: the Work per agent, the rooftop indexes by settings id, the
  built-in feed formats).
- Behaviour: one call means the same on every door (price, placement, errors); the public
  page is admitted and priced like the other doors; an unexpected exception becomes one
  logged ``INTERNAL_ERROR``.
- Isolation: two agents built in one process, with different settings and stores, share
  nothing: their answers, their rate-limit buckets, their executors and what they derive
  from their settings are their own.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import logging
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aap.agent import DealerAgent
from aap.config.model import RateLimit
from aap.errors import AapError
from aap.gateway import Caller, Gateway, work_shape
from aap.server.app import create_app
from aap.skills.catalog import SKILLS
from aap.store import open_stores
from conftest import OAKLAND, SF, make_settings, rooftop

SRC = Path(__file__).resolve().parent.parent / "src" / "aap"
SOURCES = sorted(SRC.rglob("*.py"))
SEARCH = SKILLS["inventory.search"]


def calls_named(path: Path, names: set[str]) -> list[str]:
    """``file:line name`` of every call of an attribute or function in ``names`` in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in names:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {name}")
    return found


# -- the source --------------------------------------------------------------------------------


@pytest.mark.slow
def test_only_the_gateway_admits_callers_and_places_work() -> None:
    """The limiter's admission (check_local, check, running_low, top_up) and the placement of a
    skill's work by its shape (Work.run, run_in_executor) are the gateway's alone; blocking work
    of any other kind goes through a Work too (``blocking``, ``single_flight``, ``in_background``),
    never through a thread pool of its own (``asyncio.to_thread``, ``run_in_threadpool``), so a
    worker's threads and their connections stay one bounded set (docs/architecture.md,
    "Where the work runs")."""
    admission = {"check_local", "running_low", "top_up"}
    placement = {"run_in_executor"}
    owners = {SRC / "gateway.py", SRC / "work.py", SRC / "ratelimit.py"}
    offences = [hit for path in SOURCES if path not in owners for hit in calls_named(path, admission | placement)]
    offences += [
        f"{path.relative_to(SRC)}: {text}"
        for path in SOURCES
        if path not in owners
        for text in (r"limiter\.check\(", r"\.work\.run\(")
        if re.search(text, path.read_text(encoding="utf-8"))
    ]
    offences += [
        f"{path.relative_to(SRC)}: {text}"
        for path in SOURCES
        for text in (r"\bto_thread\(", r"\brun_in_threadpool\b", r"ThreadPoolExecutor\(")
        if path not in {SRC / "work.py", SRC / "store" / "inventory" / "importer.py"}
        and re.search(text, path.read_text(encoding="utf-8"))
    ]
    # The executor itself is built by the composition roots and the gateway alone.
    offences += [
        f"{path.relative_to(SRC)}: builds a Work"
        for path in SOURCES
        if path not in owners and path.parent.name != "server" and re.search(r"\bWork\(", path.read_text("utf-8"))
    ]
    assert offences == []


def test_the_checker_sees_a_call_it_forbids(tmp_path: Path) -> None:
    module = tmp_path / "aap" / "x.py"
    module.parent.mkdir()
    module.write_text("def f(limiter):\n    return limiter.check_local('k')\n")
    global SRC
    saved, SRC = SRC, tmp_path / "aap"
    try:
        assert calls_named(module, {"check_local"}) == ["x.py:2 check_local"]
    finally:
        SRC = saved


def test_no_skill_or_lead_module_imports_the_agent_or_the_gateway() -> None:
    from test_layers import imports

    offences = [
        f"{path.relative_to(SRC)}:{line} {target}"
        for package in ("skills", "leads")
        for path in sorted((SRC / package).rglob("*.py"))
        for line, target in imports(path)
        if target in ("aap.agent", "aap.gateway") or target.startswith(("aap.agent.", "aap.gateway."))
    ]
    assert offences == []


@pytest.mark.slow
def test_no_process_global_registry_is_left() -> None:
    """The registries that made two agents in one process share state by accident are gone, and
    no module keeps a weak-keyed table of objects it did not build."""
    offences = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and target.id in {"_WORK", "_INDEXES", "_BUILT"}:
                    offences.append(f"{path.relative_to(SRC)}:{node.lineno} {target.id}")
            if isinstance(node, ast.Assign | ast.AnnAssign) and "WeakKeyDictionary(" in ast.unparse(node):
                offences.append(f"{path.relative_to(SRC)}:{node.lineno} module-level WeakKeyDictionary")
    assert offences == []


# -- the call ------------------------------------------------------------------------------------


def search(**filters: object) -> dict[str, object]:
    return {"type": "inventory.search.request", "filters": filters}


def priced_by_hand(gateway: Gateway) -> Gateway:
    """The gateway, with its Work learning no costs by itself: the test sets them (no timing)."""
    gateway.work.note = lambda shape, seconds: None  # type: ignore[method-assign]
    return gateway


@pytest.fixture
def gateway(agent_factory):
    from inventory_reference import INVENTORY

    gateway = Gateway.of(agent_factory(listings=INVENTORY))
    yield gateway
    gateway.work.close()


async def test_a_call_takes_its_first_token_itself_unless_the_door_paid_it(agent_factory) -> None:
    rule = RateLimit(enabled=True, per_minute=1, burst=3)
    agent = agent_factory(settings=dataclasses.replace(make_settings(), rate_limit=rule))
    gateway = priced_by_hand(Gateway.of(agent))
    caller = Caller("test", "one")
    for _ in range(3):
        await gateway.call(caller, SEARCH, search())
    with pytest.raises(AapError) as refused:
        await gateway.call(caller, SEARCH, search())
    assert refused.value.code == "RATE_LIMITED"
    other = Caller("test", "two")
    await gateway.admit(other)
    for _ in range(2):  # paid by the door: the calls cost nothing more while their shape is cheap
        await gateway.call(other, SEARCH, search(), paid=1)
        await gateway.call(other, SEARCH, search(), paid=1)
    gateway.work.close()


@pytest.mark.slow
async def test_a_call_pays_what_its_shape_was_seen_to_cost(agent_factory) -> None:
    rule = RateLimit(enabled=True, per_minute=1, burst=10)
    agent = agent_factory(settings=dataclasses.replace(make_settings(), rate_limit=rule))
    gateway = Gateway.of(agent)
    payload = search(make=["Honda"])
    gateway.work.note(work_shape(SEARCH, payload), 0.045)  # 4 tokens of CPU: 5 in all
    priced_by_hand(gateway)
    caller = Caller("test", "heavy")
    await gateway.call(caller, SEARCH, payload)
    await gateway.call(caller, SEARCH, payload)
    with pytest.raises(AapError) as refused:
        await gateway.call(caller, SEARCH, payload)
    assert refused.value.code == "RATE_LIMITED"
    gateway.work.close()


@pytest.mark.slow
async def test_the_answer_keeps_stored_documents_for_the_wire(gateway) -> None:
    from aap.jsontext import StoredJson, decoded, encode

    answer = await gateway.call(Caller("test", "k"), SEARCH, search(make=["Honda"]))
    vehicles = answer["data"]["vehicles"]
    assert vehicles and all(isinstance(v, StoredJson) for v in vehicles)
    plain = decoded(answer)
    assert {v["make"].strip().casefold() for v in plain["data"]["vehicles"]} == {"honda"}
    import orjson

    assert orjson.loads(encode(answer)) == plain


async def test_an_unexpected_exception_is_one_logged_internal_error(gateway, monkeypatch, caplog) -> None:
    def broken(deps, request, ctx):
        raise RuntimeError("customer Zelda-Quixote-555-0100 leaked into an exception")

    gateway.agent.register("inventory.search", broken)
    caplog.set_level(logging.ERROR, logger="aap")
    with pytest.raises(AapError) as failed:
        await gateway.call(Caller("poppy", "k"), SEARCH, search())
    assert failed.value.code == "INTERNAL_ERROR"
    records = [r for r in caplog.records if r.getMessage() == "internal error"]
    assert len(records) == 1
    fields = records[0].fields
    assert fields["binding"] == "poppy" and fields["skill"] == "inventory.search"
    assert fields["error_type"] == "RuntimeError" and fields["error_id"] == failed.value.error_id
    assert "Zelda-Quixote" not in repr(fields) and "555-0100" not in repr(fields)


async def test_validation_errors_pass_through_unchanged(gateway) -> None:
    with pytest.raises(AapError) as failed:
        await gateway.call(Caller("test", "k"), SEARCH, {"type": "inventory.search.request", "filters": {"make": 5}})
    assert failed.value.code == "SCHEMA_VALIDATION_FAILED"
    assert [e["instanceLocation"] for e in failed.value.errors] == ["/filters/make"]


# -- the public page is a door like the others --------------------------------------------------------


def page_app(tmp_path: Path, burst: int):
    rule = RateLimit(enabled=True, per_minute=1, burst=burst)
    settings = dataclasses.replace(make_settings(), rate_limit=rule, database_url=f"sqlite:///{tmp_path}/aap.db")
    stores = open_stores(settings.database_url)
    from inventory_reference import INVENTORY

    stores.inventory.import_listings(INVENTORY)
    return create_app(settings, stores, services=()), stores


def test_a_page_view_costs_one_token_like_an_api_request(tmp_path: Path) -> None:
    app, stores = page_app(tmp_path, burst=3)
    priced_by_hand(app.state.gateway)  # every call of the page at its base price, however long it ran
    try:
        with TestClient(app, base_url="https://dealer.example") as client:
            assert [client.get("/").status_code for _ in range(3)] == [200, 200, 200]
            refused = client.get("/")
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
            vehicle = client.get("/vehicles/h1")
            assert vehicle.status_code == 429  # the same caller's bucket, whichever page
    finally:
        stores.close()


def test_a_page_pays_for_its_work_as_the_other_doors_do(tmp_path: Path) -> None:
    """Once the page's calls are seen to cost 25 ms of CPU each, a view costs one token plus
    two for each of its three calls (profile, facets, search): 7, as three A2A calls of those
    shapes would cost 3 + 2 + 2 (an A2A request pays one token itself, then its work)."""
    app, stores = page_app(tmp_path, burst=14)
    try:
        with TestClient(app, base_url="https://dealer.example") as client:
            assert client.get("/?make=Honda").status_code == 200  # 1 token: the shapes are new
            work = priced_by_hand(app.state.gateway).work  # the shapes are known now: set their costs
            for shape in ("dealer.information", "inventory.facets", "inventory.search"):
                work._cost[next(key for key in work._cost if key[0] == shape)] = 0.025
            assert client.get("/?make=Honda").status_code == 200  # 7 tokens: 8 spent
            assert client.get("/?make=Honda").status_code == 429  # 7 more would be 15 > 14
    finally:
        stores.close()


# -- two agents in one process share nothing --------------------------------------------------------


def test_two_agents_in_one_process_share_nothing(tmp_path: Path) -> None:
    from inventory_reference import listing

    north = dataclasses.replace(
        make_settings(rooftops=[rooftop("North Lot", SF, city="San Francisco")]),
        rate_limit=RateLimit(enabled=True, per_minute=1, burst=2),
        public_url="https://north.example",
    )
    south = dataclasses.replace(
        make_settings(rooftops=[rooftop("South Lot", OAKLAND, city="Oakland")]),
        rate_limit=RateLimit(enabled=True, per_minute=1, burst=50),
        public_url="https://south.example",
    )
    first, second = open_stores(f"sqlite:///{tmp_path}/north.db"), open_stores(f"sqlite:///{tmp_path}/south.db")
    first.inventory.import_listings([listing("n1", make="Honda", price=20000, rooftop="North Lot")])
    second.inventory.import_listings([listing(f"s{i}", make="Kia", price=30000, rooftop="South Lot") for i in range(3)])
    apps = [create_app(north, first, services=()), create_app(south, second, services=())]
    try:
        one, two = (app.state.gateway for app in apps)
        assert one.work is not two.work and one.work.executor is not two.work.executor
        assert one.limiter is not two.limiter
        assert one.agent.deps is not two.agent.deps
        everywhere = (0.0, 0.0, 13_000.0)  # half the earth's circumference: every rooftop
        assert [p.item[1] for p, _ in one.agent.deps.rooftops.within(*everywhere)] == ["North Lot"]
        assert [p.item[1] for p, _ in two.agent.deps.rooftops.within(*everywhere)] == ["South Lot"]

        async def run() -> None:
            caller = Caller("test", "same-address")  # the same caller key at both agents
            near = search(near={"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": 5})
            assert (await one.call(caller, SEARCH, near))["data"]["total"] == 1
            assert (await two.call(caller, SEARCH, near))["data"]["total"] == 0  # Oakland is 8 mi away
            assert (await one.call(caller, SEARCH, search()))["data"]["total"] == 1  # its own stores
            with pytest.raises(AapError):
                await one.call(caller, SEARCH, search())  # north's burst of 2 is spent
            for _ in range(10):
                assert (await two.call(caller, SEARCH, search()))["data"]["total"] == 3  # south's bucket

        asyncio.run(run())
    finally:
        for app, stores in zip(apps, (first, second)):
            app.state.gateway.work.close()
            stores.close()


def test_an_agent_built_without_an_app_has_its_own_dependencies(agent_factory) -> None:
    a, b = agent_factory(), agent_factory(settings=make_settings(rooftops=[rooftop("Only", None, city="Reno")]))
    assert isinstance(a, DealerAgent) and a.deps.settings is a.settings and a.deps.stores is a.stores
    assert a.deps.rooftops is a.deps.rooftops  # made once per agent
    assert a.deps.rooftops is not b.deps.rooftops and len(b.deps.rooftops) == 0 < len(a.deps.rooftops)
