"""A platform deployment's background work: every tenant's lead deliveries and scheduled feeds,
and the platform's events (:mod:`aap.platform.events`).

One runner for the whole deployment, not one per tenant: a worker asks the registry which
tenants have work due (``platform_due``, :mod:`aap.store.platform`), does it with the
tenant's own stores and settings (its :class:`~aap.server.runtime.AgentRuntime`), and
writes back when that tenant is next due. Several workers and hosts may run it at once: a
lead delivery is sent only by the runner whose claim it carries and a feed only by the runner
holding its lease, in the tenant's namespace, exactly as for a deployment that is one agent
(docs/leads.md, docs/feeds.md).

How work becomes due:

- **deliveries**: every write that makes a tenant's delivery due (a lead stored, a lead
  retried, a claim handed back, rows restored or moved in) notes it in ``platform_due`` in
  its own transaction (:func:`aap.store.platform.note_due`); after a pass the runner notes the
  outbox's next time, holding the note's row so that a lead stored meanwhile is not lost
  (:meth:`~aap.store.leads.LeadStore.settle_due`);
- **feeds**: a tenant added or changed with ``[[feeds]]`` is due at once
  (:class:`~aap.tenants.TenantRegistry`), then at its scheduler's next due time;
- a slow **sweep** (:data:`SWEEP_SECONDS`) walks the tenants whose configuration holds
  feeds or a retention period, a page at a time: it notes each one's feeds as due, so that
  none is lost when a worker stopped between a feed run and its note, and it erases the leads
  of each tenant that sets ``[leads] retention_days`` past that period
  (:func:`retain`, docs/leads.md, "Erasure and retention"). One worker of the deployment
  sweeps at a time (the registry's ``sweep`` row:
  :meth:`~aap.store.platform.PlatformStore.claim_sweep`).

When a worker starts it also loads every tenant's configuration once (:func:`load_every_tenant`),
so a tenant that does not load in this worker's environment is reported without waiting for a
request, and keeps what it loaded packed for the tenant's first request while there is room
(docs/platform.md, "Sizing"). Both passes pace themselves (:data:`SWEEP_SHARE`): at a hundred
thousand tenants a pass is minutes of a core, which requests must not wait behind.

A suspended tenant's work is not done: it is let go from ``platform_due`` (resuming it makes
it due at once), and the sweep passes it by. A tenant whose configuration does not load is
tried again a minute later, without a log line each time (the worker that found it logged it
once, :class:`~aap.server.tenant_runtime.Runtimes`). Every log line written while a tenant's
work is done names the tenant (:func:`aap.telemetry.logfields.working_for`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from aap.feeds.scheduler import FeedScheduler
from aap.leads import transports
from aap.leads.worker import DeliveryWorker
from aap.platform.events import EventSender
from aap.server.platform import PlatformContext, Service
from aap.server.runtime import AgentRuntime
from aap.server.tenant_runtime import TenantUnavailable
from aap.store.platform import DELIVERIES, FEEDS, TenantRecord
from aap.store.platform_events import EventStore
from aap.telemetry.logfields import working_for

log = logging.getLogger("aap.platform")
T = TypeVar("T")

#: How often a worker looks for due tenants when none was due at its last look.
POLL_SECONDS = 1.0
#: How often the tenants with feeds or a retention period are walked again, whatever the notes say.
SWEEP_SECONDS = 600.0
#: How often a worker that found the sweep taken by another asks again.
SWEEP_ASK_SECONDS = 60.0
#: The share of a core a pass over every tenant takes, at most: after each page of tenants it
#: waits as long again as the CPU the page took (**decision**).
SWEEP_SHARE = 0.5
#: Tenants taken per look (the longest-waiting first).
BATCH = 50
#: Tenants read per page by the passes over every tenant.
PAGE = 200
#: How long a tenant whose work failed (or whose configuration does not load) waits.
RETRY_MS = 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _runtime(ctx: PlatformContext, tenant_id: str) -> AgentRuntime | None:
    record = await ctx.work.blocking(ctx.registry.store.tenant, tenant_id)
    if record is None:
        return None
    return await ctx.runtimes.get(tenant_id, ctx.registry.public_url(record))


async def _serve_due(
    ctx: PlatformContext, kind: str, failed: str, serve: Callable[[AgentRuntime], Awaitable[None]]
) -> int:
    """Serve every tenant whose ``kind`` of work is due now; ``serve`` notes when the tenant's
    work is due again. When it cannot: nothing more for a tenant removed, never while it is
    suspended, a minute later after a failure. Returns how many tenants were served."""
    store = ctx.registry.store
    due = await ctx.work.blocking(store.due, kind, _now_ms(), BATCH)
    for tenant_id in due:
        with working_for(tenant_id):
            try:
                runtime = await _runtime(ctx, tenant_id)
                if runtime is None:
                    await ctx.work.blocking(store.set_due, tenant_id, kind, None)
                else:
                    await serve(runtime)
            except TenantUnavailable as unavailable:
                await ctx.work.blocking(store.set_due, tenant_id, kind, _paused(unavailable))
            except Exception as exc:  # one tenant's failure must not hold up the others
                log.error(failed, extra={"fields": {"error_type": type(exc).__name__}})
                await ctx.work.blocking(store.set_due, tenant_id, kind, _now_ms() + RETRY_MS)
    return len(due)


async def deliver_due(ctx: PlatformContext, client: httpx.AsyncClient) -> int:
    """Deliver the outbox of every tenant due now; returns how many tenants were served."""

    async def deliver(runtime: AgentRuntime) -> None:
        settings, stores = runtime.gateway.settings, runtime.gateway.stores
        if not settings.leads.delivery.in_process:  # delivered by `aap deliver --tenant ID` processes
            await ctx.work.blocking(ctx.registry.store.set_due, stores.tenant, DELIVERIES, None)
            return
        await DeliveryWorker(stores.leads, settings, work=ctx.work).drain(client)
        await ctx.work.blocking(stores.leads.settle_due)

    return await _serve_due(ctx, DELIVERIES, "delivery pass failed", deliver)


def _paused(unavailable: TenantUnavailable) -> int | None:
    """When an unavailable tenant's work is due again: never while it is suspended (resuming
    makes it due), a minute later while its configuration does not load."""
    return None if unavailable.state == "suspended" else _now_ms() + RETRY_MS


async def run_feeds_due(ctx: PlatformContext) -> int:
    """Run the scheduled feeds of every tenant due now; returns how many tenants were served."""

    async def run_feeds(runtime: AgentRuntime) -> None:
        following = None
        if runtime.gateway.settings.feeds:
            scheduler = FeedScheduler(runtime.gateway.stores, runtime.gateway.settings, work=ctx.work)
            await scheduler.run_due()
            following = _now_ms() + int(await scheduler.seconds_until_due() * 1000)
        await ctx.work.blocking(ctx.registry.store.set_due, runtime.gateway.stores.tenant, FEEDS, following)

    return await _serve_due(ctx, FEEDS, "feed pass failed", run_feeds)


@dataclass(eq=False)
class _Page:
    """A page of the registry in a pass over many tenants, with what it cost."""

    records: list[TenantRecord]
    #: The hosts' generation it was read at (:meth:`Hosts.learn`).
    generation: int
    #: CPU seconds the executor's threads spent on it: its read, and what the pass adds.
    cpu: float


def _timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """Blocking: ``fn``'s result, and the CPU seconds this thread spent on it."""
    began = time.thread_time()
    result = fn(*args, **kwargs)
    return result, time.thread_time() - began


async def _pages(ctx: PlatformContext, read: Callable[..., list[TenantRecord]]) -> AsyncIterator[_Page]:
    """The tenants ``read`` gives (a :class:`~aap.store.platform.PlatformStore` listing taking
    ``after`` and ``limit``), a page at a time, paced: after each page, a pause as long as the
    CPU it took over :data:`SWEEP_SHARE`, so that a pass over many tenants (minutes of a
    core) takes at most that share of a core, which requests have the rest of. Paced by CPU,
    not by wall time: under load, a page's wall time is mostly waiting for the CPU requests
    use, and a pass paced by it would last as long as the load does."""
    after = ""
    while True:
        generation = ctx.hosts.generation
        records, cpu = await ctx.work.blocking(_timed, read, after=after, limit=PAGE)
        if not records:
            return
        page = _Page(records, generation, cpu)
        yield page
        after = records[-1].tenant_id
        await asyncio.sleep(page.cpu * (1 - SWEEP_SHARE) / SWEEP_SHARE)


async def load_every_tenant(ctx: PlatformContext) -> None:
    """Every tenant's configuration loaded in this worker, once, when it starts: one that does not
    load here is reported before a request finds it, and what loads is kept packed for the
    tenant's first request while there is room (:meth:`Runtimes.check_records`); every tenant's
    domains are learned, so that no request waits for a read of which tenant its host is."""
    started, tenants = time.monotonic(), 0
    async for page in _pages(ctx, ctx.registry.store.tenants):
        ctx.hosts.learn(page.records, page.generation)
        page.cpu += await ctx.runtimes.check_records(page.records)
        tenants += len(page.records)
    fields = {"tenants": tenants, "packed": ctx.runtimes.packed_count, "seconds": round(time.monotonic() - started, 1)}
    log.info("tenants loaded", extra={"fields": fields})


#: What a tenant's configuration holds when the sweep has work for it: scheduled feeds, a
#: retention period (the registry passes the other tenants by; each found is checked again).
SWEPT_FOR = ("[[feeds]]", "retention_days")


async def sweep(ctx: PlatformContext) -> None:
    """Note every tenant with feeds as due, and erase each tenant's leads past its retention
    period. A tenant's deliveries are not looked for: each write that makes them due notes them
    in its own transaction (:func:`aap.store.platform.note_due`), so none waits for a sweep."""
    store = ctx.registry.store
    async for page in _pages(ctx, functools.partial(store.tenants, holding=SWEPT_FOR)):
        for record in page.records:
            if record.suspended_ms is not None:  # suspended: its work waits
                continue
            try:
                if "[[feeds]]" in record.config:
                    _, cpu = await ctx.work.blocking(_timed, store.set_due, record.tenant_id, FEEDS, _now_ms())
                    page.cpu += cpu
                if "retention_days" in record.config:  # only a tenant that may set it is loaded for it
                    await retain(ctx, record.tenant_id)
            except Exception as exc:
                fields = {"tenant": record.tenant_id, "error_type": type(exc).__name__}
                log.warning("sweep failed", extra={"fields": fields})


async def retain(ctx: PlatformContext, tenant_id: str) -> int:
    """Erase the tenant's leads past its own ``[leads] retention_days`` (one bounded pass: the next
    sweep goes on); returns how many were erased."""
    with working_for(tenant_id):
        runtime = await _runtime(ctx, tenant_id)
        if runtime is None:
            return 0
        settings, stores = runtime.gateway.settings, runtime.gateway.stores
        return await DeliveryWorker(stores.leads, settings, work=ctx.work).retain()


@asynccontextmanager
async def background(ctx: PlatformContext) -> AsyncIterator[None]:
    """The deliveries and feeds of every tenant, and the sweep, for as long as the app runs."""
    stop = asyncio.Event()
    assert ctx.deployment.platform is not None
    events = EventSender(EventStore(ctx.stores.db), ctx.deployment.platform, work=ctx.work)

    async def loop() -> None:
        # Every tenant's deliveries go where a tenant's destinations may (docs/platform.md).
        assert ctx.deployment.platform is not None
        async with transports.delivery_client(ctx.deployment.platform.outbound) as client:
            while not stop.is_set():
                busy = 0
                try:
                    busy += await deliver_due(ctx, client)
                    busy += await run_feeds_due(ctx)
                    busy += await events.run_once(client)
                except Exception as exc:  # the database may be briefly unavailable: keep going
                    log.error("platform background pass failed: %s", type(exc).__name__)
                if busy < BATCH:
                    await _pause(stop, POLL_SECONDS)

    async def sweeping() -> None:
        """The sweep, in this worker when it is this worker's turn (its own task: a sweep of
        many tenants takes minutes, which deliveries must not wait behind)."""
        while not stop.is_set():
            wait = SWEEP_ASK_SECONDS
            try:
                if await ctx.work.blocking(ctx.registry.store.claim_sweep, _now_ms(), int(SWEEP_SECONDS * 1000)):
                    wait = SWEEP_SECONDS
                    await sweep(ctx)
                    await events.prune()
            except Exception as exc:  # the database may be briefly unavailable: the next turn looks again
                log.error("platform sweep failed: %s", type(exc).__name__)
            await _pause(stop, wait)

    async def loading() -> None:
        try:
            await load_every_tenant(ctx)
        except Exception as exc:  # the database may be briefly unavailable: requests load tenants too
            log.error("loading the tenants failed: %s", type(exc).__name__)

    task = asyncio.create_task(loop())
    helpers = [asyncio.create_task(sweeping()), asyncio.create_task(loading())]
    try:
        yield
    finally:
        stop.set()
        for helper in helpers:  # each tenant's step is a transaction of its own: stopped anywhere
            helper.cancel()
        try:
            await asyncio.wait_for(task, timeout=15)
        except TimeoutError:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass


SERVICES: tuple[Service, ...] = (background,)
