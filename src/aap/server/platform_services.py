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

- **deliveries**: a tenant's gateway says when a lead was stored (``Gateway.after_write``),
  and a delivery that failed is due again at its next attempt;
- **feeds**: a tenant added or changed with ``[[feeds]]`` is due at once
  (:class:`~aap.tenants.TenantRegistry`), then at its scheduler's next due time;
- a slow **sweep** (:data:`SWEEP_SECONDS`) walks every tenant a page at a time and records
  what it finds, so that nothing is lost when a worker stopped between a write and its note;
  it also loads each tenant's configuration once per revision (all of them when the worker
  starts), so a tenant that does not load in this worker's environment is reported without
  waiting for a request; and it erases the leads of each tenant that sets ``[leads]
  retention_days`` past that period (:func:`retain`, docs/leads.md, "Erasure and retention").

A suspended tenant's work is not done: it is let go from ``platform_due`` (resuming it makes
it due at once), and the sweep passes it by. A tenant whose configuration does not load is
tried again a minute later, without a log line each time (the worker that found it logged it
once, :class:`~aap.server.tenant_runtime.Runtimes`). Every log line written while a tenant's
work is done names the tenant (:func:`aap.telemetry.logfields.working_for`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx

from aap.feeds.scheduler import FeedScheduler
from aap.leads import transports
from aap.leads.worker import DeliveryWorker
from aap.platform.events import EventSender
from aap.server.platform import PlatformContext, Service
from aap.server.runtime import AgentRuntime
from aap.server.tenant_runtime import TenantUnavailable
from aap.store.leads import LeadStore
from aap.store.platform import DELIVERIES, FEEDS
from aap.store.platform_events import EventStore
from aap.telemetry.logfields import working_for

log = logging.getLogger("aap.platform")

#: How often a worker looks for due tenants when none was due at its last look.
POLL_SECONDS = 1.0
#: How often every tenant's outbox and feed schedule is read again, whatever the notes say.
SWEEP_SECONDS = 600.0
#: Tenants taken per look (the longest-waiting first).
BATCH = 50
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
    ctx: PlatformContext, kind: str, failed: str, serve: Callable[[AgentRuntime], Awaitable[int | None]]
) -> int:
    """Serve every tenant whose ``kind`` of work is due now, and note when each is due again:
    when ``serve`` says (None: not until something makes it due), never while it is suspended,
    a minute later after a failure. Returns how many tenants were served."""
    store = ctx.registry.store
    due = await ctx.work.blocking(store.due, kind, _now_ms(), BATCH)
    for tenant_id in due:
        with working_for(tenant_id):
            try:
                runtime = await _runtime(ctx, tenant_id)
                following = None if runtime is None else await serve(runtime)
                await ctx.work.blocking(store.set_due, tenant_id, kind, following)
            except TenantUnavailable as unavailable:
                await ctx.work.blocking(store.set_due, tenant_id, kind, _paused(unavailable))
            except Exception as exc:  # one tenant's failure must not hold up the others
                log.error(failed, extra={"fields": {"error_type": type(exc).__name__}})
                await ctx.work.blocking(store.set_due, tenant_id, kind, _now_ms() + RETRY_MS)
    return len(due)


async def deliver_due(ctx: PlatformContext, client: httpx.AsyncClient) -> int:
    """Deliver the outbox of every tenant due now; returns how many tenants were served."""

    async def deliver(runtime: AgentRuntime) -> int | None:
        settings, stores = runtime.gateway.settings, runtime.gateway.stores
        if not settings.leads.delivery.in_process:
            return None  # delivered by `aap deliver --tenant ID` processes
        await DeliveryWorker(stores.leads, settings, work=ctx.work).drain(client)
        following: int | None = await ctx.work.blocking(stores.leads.next_due_ms)
        return following

    return await _serve_due(ctx, DELIVERIES, "delivery pass failed", deliver)


def _paused(unavailable: TenantUnavailable) -> int | None:
    """When an unavailable tenant's work is due again: never while it is suspended (resuming
    makes it due), a minute later while its configuration does not load."""
    return None if unavailable.state == "suspended" else _now_ms() + RETRY_MS


async def run_feeds_due(ctx: PlatformContext) -> int:
    """Run the scheduled feeds of every tenant due now; returns how many tenants were served."""

    async def run_feeds(runtime: AgentRuntime) -> int | None:
        if not runtime.gateway.settings.feeds:
            return None
        scheduler = FeedScheduler(runtime.gateway.stores, runtime.gateway.settings, work=ctx.work)
        await scheduler.run_due()
        wait = await scheduler.seconds_until_due()
        return _now_ms() + int(wait * 1000)

    return await _serve_due(ctx, FEEDS, "feed pass failed", run_feeds)


async def sweep(ctx: PlatformContext) -> None:
    """Note every tenant with feeds, and every tenant whose outbox holds a row, as due."""
    store = ctx.registry.store
    after = ""
    while True:
        page = await ctx.work.blocking(ctx.registry.list, after=after, limit=200)
        if not page:
            return
        for record in page:
            if record.suspended_ms is not None:  # its work waits until it is resumed
                continue
            try:
                await ctx.runtimes.check(record.tenant_id, record.revision)  # reported if it does not load here
                following = await ctx.work.blocking(LeadStore(ctx.registry.data.open(record.tenant_id)).next_due_ms)
                if following is not None:
                    await ctx.work.blocking(store.set_due, record.tenant_id, DELIVERIES, following)
                if "[[feeds]]" in record.config:
                    await ctx.work.blocking(store.set_due, record.tenant_id, FEEDS, _now_ms())
                if "retention_days" in record.config:  # only a tenant that may set it is loaded for it
                    await retain(ctx, record.tenant_id)
            except Exception as exc:
                fields = {"tenant": record.tenant_id, "error_type": type(exc).__name__}
                log.warning("sweep failed", extra={"fields": fields})
        after = page[-1].tenant_id


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
    """The deliveries and feeds of every tenant, for as long as the app runs."""
    stop = asyncio.Event()

    async def loop() -> None:
        next_sweep = 0.0
        # Every tenant's deliveries go where a tenant's destinations may (docs/platform.md).
        assert ctx.deployment.platform is not None
        events = EventSender(EventStore(ctx.stores.db), ctx.deployment.platform, work=ctx.work)
        async with transports.delivery_client(ctx.deployment.platform.outbound) as client:
            while not stop.is_set():
                busy = 0
                try:
                    if time.monotonic() >= next_sweep:
                        await sweep(ctx)
                        await events.prune()
                        next_sweep = time.monotonic() + SWEEP_SECONDS
                    busy += await deliver_due(ctx, client)
                    busy += await run_feeds_due(ctx)
                    busy += await events.run_once(client)
                except Exception as exc:  # the database may be briefly unavailable: keep going
                    log.error("platform background pass failed: %s", type(exc).__name__)
                if busy < BATCH:
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=POLL_SECONDS)
                    except TimeoutError:
                        pass

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=15)
        except TimeoutError:
            task.cancel()


SERVICES: tuple[Service, ...] = (background,)
