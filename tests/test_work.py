"""Where the gateway runs blocking work (aap/work.py): on the event loop when its shape
has been seen short on an in-process database, on the executor otherwise."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from aap.agent import DealerAgent
from aap.config.model import RateLimit
from aap.gateway import Gateway, work_shape
from aap.server.app import create_app
from aap.skills.catalog import SKILLS
from aap.work import INLINE_BUDGET, SHAPES, Work


def where() -> str:
    return threading.current_thread().name


@pytest.fixture
def work():
    return Work(inline=True, threads=2)


async def test_an_unknown_shape_runs_on_the_executor_then_inline_once_seen_short(work):
    loop_thread = where()
    assert await work.run(("s",), where) != loop_thread  # never seen: measured off the loop
    assert work.short(("s",))
    assert await work.run(("s",), where) == loop_thread


async def test_a_shape_seen_slow_leaves_the_loop_and_comes_back_by_halves(work):
    loop_thread = where()
    work.note(("s",), 0.0)
    work.note(("s",), 16 * INLINE_BUDGET)  # one slow run counts at once
    assert await work.run(("s",), where) != loop_thread
    for _ in range(3):
        work.note(("s",), 0.0)  # 8, 4, 2 budgets: still not short
    assert not work.short(("s",))
    work.note(("s",), 0.0)
    assert work.short(("s",))


async def test_writes_and_blocking_calls_never_run_on_the_loop(work):
    loop_thread = where()
    assert await work.run(None, where) != loop_thread
    assert await work.blocking(where) != loop_thread


async def test_long_calls_never_hold_the_threads_requests_run_on(work):
    """A feed import or an SMTP session waiting seconds: the request executor stays free."""
    release = threading.Event()
    started = threading.Event()

    def wait() -> str:
        started.set()
        release.wait(timeout=30)
        return where()

    waiting = [asyncio.ensure_future(work.long(wait)) for _ in range(2)]  # as many as the request threads
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
    request_threads = {await work.blocking(where) for _ in range(4)}  # served while both wait
    release.set()
    long_threads = set(await asyncio.gather(*waiting))
    assert all(name.startswith("aap-work") for name in request_threads)
    assert all(name.startswith("aap-long") for name in long_threads)
    work.close()


async def test_a_database_across_the_network_never_runs_on_the_loop():
    work = Work(inline=False, threads=1)
    work.note(("s",), 0.0)
    assert not work.short(("s",))
    assert await work.run(("s",), where) != where()


async def test_exceptions_come_back_to_the_caller_and_the_run_still_counts(work):
    def boom() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        await work.run(("s",), boom)
    assert work.short(("s",))


def test_shapes_are_bounded(work):
    for i in range(SHAPES + 10):
        work.note((str(i),), 0.0)
    assert len(work._cost) == SHAPES
    assert not work.short(("0",))  # the oldest were forgotten


def test_one_work_per_app_shared_by_its_doors(agent_factory):
    agent = agent_factory()
    app = create_app(agent.settings, agent.stores)
    gateway = app.state.gateway
    assert gateway.work.inline is agent.stores.db.in_process
    poppy_uses = [r for r in app.state.runtime.routes() if getattr(r, "path", "") == "/oauth/token"]
    assert poppy_uses, "the app serves the Poppy issuer"
    assert create_app(agent.settings, agent.stores).state.gateway.work is not gateway.work


def test_work_shape_keeps_names_not_values():
    search, lead = SKILLS["inventory.search"], SKILLS["lead.submit"]
    one = {
        "type": "inventory.search.request",
        "filters": {"make": ["Honda"], "price_max": 1},
        "sort": {"field": "price"},
    }
    two = {
        "type": "inventory.search.request",
        "filters": {"price_max": 99, "make": ["Kia"]},
        "sort": {"field": "price", "order": "desc"},
    }
    assert work_shape(search, one) == work_shape(search, two)
    paged = {**one, "pagination": {"cursor": "abc"}}
    assert work_shape(search, paged) != work_shape(search, one)
    assert work_shape(lead, {"type": "lead.submit.request"}) is None  # a write
    hostile = {"filters": {"x" * 10_000: 1, **{f"f{i}": 1 for i in range(500)}}, "sort": "price"}
    shape = work_shape(search, hostile)
    assert shape is not None and len(shape) < 50 and all(len(part) <= 40 for part in shape)
    assert work_shape(search, [1, 2]) == ("inventory.search",)


@pytest.mark.slow
async def test_callers_waiting_on_an_empty_lease_share_one_lease(agent_factory):
    """16 requests of one caller arriving together: a few lease writes, not one each."""
    import asyncio

    from aap.errors import AapError
    from test_ratelimit import WriteCounter

    agent: DealerAgent = agent_factory()
    counter = WriteCounter(agent.stores.db)
    gateway = Gateway.of(agent)
    await asyncio.gather(*(gateway.admit("busy") for _ in range(16)))
    assert 1 <= counter.writes <= 4  # leases of 1, 4 and 16 tokens at most
    # A refusal reaches every waiting request, and each is refused without a write of its own.
    limited = agent_factory(settings=dataclasses.replace(agent.settings, rate_limit=RateLimit(per_minute=1, burst=2)))
    counter = WriteCounter(limited.stores.db)
    gateway = Gateway.of(limited)
    outcomes = await asyncio.gather(*(gateway.admit("busy") for _ in range(8)), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, AapError)]
    assert len(refused) == 6 and all(o.code == "RATE_LIMITED" for o in refused)
    assert counter.writes <= 3
