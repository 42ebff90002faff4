"""Fair sharing of a worker between a platform's tenants (docs/platform.md, "Fair sharing").

Deterministic throughout: a tenant's slots are held by requests blocked on an event inside
the skill's work, never by timing; the admission rule is checked against a small reference
model over random arrival orders (bounded by hypothesis example counts).
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
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aap.agent import DealerAgent
from aap.config.loader import parse_settings
from aap.errors import AapError
from aap.fairshare import TenantShares
from aap.gateway import Gateway
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database, open_stores
from aap.tenants import TenantRegistry
from aap.work import Work
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


def test_a_share_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        TenantShares(limit=0, queue=1, wait=1)


# -- the rule against a reference model -------------------------------------------------------------

TENANTS = ("a", "b", "c")
operation = st.tuples(st.sampled_from(("arrive", "arrive", "finish", "cancel")), st.sampled_from(TENANTS))


class Model:
    """The admission rule as plainly as it can be said: per tenant, ``limit`` running, first come
    first served, ``queue`` waiting, the rest refused; a finished request's slot goes to the
    oldest waiting one."""

    def __init__(self, limit: int, queue: int) -> None:
        self.limit, self.queue = limit, queue
        self.running: dict[str, list[int]] = {t: [] for t in TENANTS}
        self.waiting: dict[str, deque[int]] = {t: deque() for t in TENANTS}
        self.status: dict[int, str] = {}

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
        if self.waiting[tenant]:
            nxt = self.waiting[tenant].popleft()
            self.running[tenant].append(nxt)
            self.status[nxt] = "running"
        return done

    def cancel(self, tenant: str) -> int | None:
        if not self.waiting[tenant]:
            return None
        gone = self.waiting[tenant].pop()
        self.status[gone] = "cancelled"
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
        shares = TenantShares(limit=limit, queue=queue, wait=3600)  # never runs out: no clock
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
