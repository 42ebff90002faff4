"""The tenants one worker serves: each an :class:`~aap.server.runtime.AgentRuntime` built on first use.

A tenant's runtime is its agent at one public URL: its Settings (parsed from the registry), its
Stores (its view of the platform's database: :mod:`aap.store.tenancy`), its
:class:`~aap.agent.DealerAgent` and :class:`~aap.gateway.Gateway` (:meth:`Gateway.of`, as for a
deployment that is one agent) over the worker's one :class:`~aap.work.Work` — a thousand
tenants do not make a thousand executors — and its surfaces, each built on the first request
that needs it. :class:`Runtimes` keeps them in a bounded least-recently-used table and drops a
tenant's when the registry says it changed (docs/platform.md). A dropped tenant's Settings stay
behind, packed (:class:`~aap.config.shared.PackedSettings`), until its next change: building it
again then reads and parses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
import tomllib
from collections import OrderedDict
from collections.abc import Sequence

from aap.agent import DealerAgent
from aap.config.loader import ConfigError
from aap.config.model import Settings
from aap.config.shared import PackedSettings, SettingsPacker
from aap.fairshare import TenantShares
from aap.gateway import Gateway
from aap.server.runtime import AgentRuntime
from aap.store import Stores
from aap.store.platform import TenantRecord
from aap.store.replicas import ReadRouter
from aap.store.state import KeysKept
from aap.tenants import TenantRegistry, load_reason
from aap.web.surface import Surface
from aap.work import Work

log = logging.getLogger("aap.platform")


#: How long a dropped runtime keeps serving the requests it has in flight before it is closed.
GRACE_SECONDS = 30.0
#: A tenant's inventory is counted in SQL until it holds this many listings, and only then
#: indexed in memory: a worker serving thousands of small tenants holds no index for each
#: (docs/platform.md, "Sizing").
INDEX_MIN_ROWS = 5_000
#: Facets objects a tenant keeps (a deployment that is one agent keeps 256).
FACET_CACHE = 16
#: Tenants whose loaded revision a worker remembers for its checks.
LOADED_KEPT = 100_000


#: ``Retry-After`` (seconds) of a suspended tenant's answers: a suspension is the operator's
#: decision and may last; a client asks again in a few minutes (**decision**, docs/platform.md).
SUSPENDED_RETRY_AFTER = 300
#: ``Retry-After`` of a tenant whose configuration does not load: fixed by a change, any time.
BROKEN_RETRY_AFTER = 60


class TenantUnavailable(Exception):
    """A registered tenant this worker does not serve now: ``state`` is ``suspended`` (by the
    platform's operator) or ``broken`` (its stored configuration does not load, ``reason``
    says why: for the operator's log and ``aap tenants show``, never for the tenant's callers)."""

    def __init__(self, tenant_id: str, state: str, reason: str = "") -> None:
        super().__init__(f"tenant {tenant_id} is {state}")
        self.tenant_id, self.state, self.reason = tenant_id, state, reason

    @property
    def retry_after(self) -> int:
        return SUSPENDED_RETRY_AFTER if self.state == "suspended" else BROKEN_RETRY_AFTER


# -- the tenants a worker serves ------------------------------------------------------------------


class Runtimes:
    """The tenant runtimes of one worker: built on first use, at most ``kept`` of them, least
    recently used dropped first; a tenant's Stores are shared by its runtimes (its domain and
    its /t/ID/ prefix) and dropped with the last of them. A tenant that is suspended, or whose
    stored configuration does not load, is remembered as :class:`TenantUnavailable` until the
    registry says it changed: its requests are answered without reading the registry again,
    and a configuration that fails is logged and reported once per change, not per request."""

    def __init__(
        self,
        registry: TenantRegistry,
        work: Work,
        surfaces: Sequence[Surface],
        reads: ReadRouter,
        *,
        kept: int,
        parked: int = 0,
        shares: TenantShares | None = None,
    ) -> None:
        self.registry = registry
        self.work = work
        #: The worker's slots per tenant, shared by a tenant's runtimes (its domain and its prefix).
        self.shares = shares
        self.surfaces = surfaces
        #: The platform's read replicas, which every tenant reads through (its view of them).
        self.reads = reads
        self.kept = kept
        #: Tenants whose packed Settings are kept once loaded (least recently used dropped first).
        self.parked = parked
        self._runtimes: OrderedDict[tuple[str, str], AgentRuntime] = OrderedDict()
        #: Each tenant's Settings as last loaded, packed, until the tenant changes: a worker
        #: serving more tenants than it keeps built builds most of them again, from these.
        self._packed: OrderedDict[str, PackedSettings] = OrderedDict()
        self.packer = SettingsPacker()
        #: Each tenant's secrets as last read, until the tenant changes (bounded like the packed
        #: settings): a tenant built again does not read its cursor key again.
        self.keys = KeysKept(parked)
        self._stores: dict[str, tuple[Stores, int]] = {}
        self._building: dict[tuple[str, str], asyncio.Future[AgentRuntime | None]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        #: Tenants found suspended or broken, until their next change (bounded like the runtimes).
        self._unavailable: OrderedDict[str, TenantUnavailable] = OrderedDict()
        #: How often each tenant was dropped: what was read of it before a drop is not remembered.
        self._drops: dict[str, int] = {}
        self._checking: set[asyncio.Task[None]] = set()
        #: The revision of each tenant found to load here by :meth:`check` (bounded): a
        #: configuration is loaded once per revision by the checks, not at every sweep.
        self._loaded: OrderedDict[str, int] = OrderedDict()
        #: The revision (and reason) of each tenant this worker logged as not loading (bounded).
        self._reported: OrderedDict[str, tuple[int, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._runtimes)

    @property
    def packed_count(self) -> int:
        """Tenants whose settings are kept packed."""
        return len(self._packed)

    async def get(self, tenant_id: str, public_url: str) -> AgentRuntime | None:
        """The runtime of ``tenant_id`` at ``public_url``, or None when there is no such tenant;
        :class:`TenantUnavailable` when it is suspended or its configuration does not load."""
        known = self._unavailable.get(tenant_id)
        if known is not None:
            raise known
        key = (tenant_id, public_url)
        runtime = self._runtimes.get(key)
        if runtime is not None:
            self._runtimes.move_to_end(key)
            return runtime
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        settings = self._unpacked(tenant_id, public_url)
        if settings is not None:
            # Nothing to read: built before any other request runs, so none waits for it.
            return self._keep(key, self._assemble(tenant_id, settings))
        future: asyncio.Future[AgentRuntime | None] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            runtime = await self._build(tenant_id, public_url)
            if runtime is not None:
                self._keep(key, runtime)
            future.set_result(runtime)
            return runtime
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            del self._building[key]

    def _unpacked(self, tenant_id: str, public_url: str) -> Settings | None:
        """The tenant's Settings at ``public_url`` from those packed, if they are: unchanged
        since they were loaded (a change drops them), so nothing is read or parsed. None when
        not packed, or packed for another of the tenant's URLs (loaded for this one)."""
        packed = self._packed.get(tenant_id)
        if packed is None:
            return None
        settings = self.packer.unpack(packed)
        if settings.public_url != public_url:
            return None
        self._packed.move_to_end(tenant_id)
        return settings

    def _keep(self, key: tuple[str, str], runtime: AgentRuntime) -> AgentRuntime:
        """Keep ``runtime`` built, the least recently used pushed out past :attr:`kept`."""
        self._runtimes[key] = runtime
        while len(self._runtimes) > self.kept:
            _, oldest = self._runtimes.popitem(last=False)
            self._retire(oldest)
        return runtime

    async def _build(self, tenant_id: str, public_url: str) -> AgentRuntime | None:
        """The tenant's runtime from the registry (its packed Settings did not serve)."""
        registry = self.registry.store
        seen = self._drops.get(tenant_id, 0)
        record, loaded, packed = await self.work.blocking(self._load, tenant_id, public_url)
        if record is None:
            return None
        if record.suspended_ms is not None:
            raise self._remember(TenantUnavailable(tenant_id, "suspended"), seen)
        if isinstance(loaded, (ConfigError, tomllib.TOMLDecodeError)):
            raise self._broken(record, load_reason(loaded), seen) from None
        assert loaded is not None
        if record.broken is not None:  # this revision loads here: the report was another worker's
            self.work.in_background(("loaded", tenant_id), registry.clear_broken, tenant_id, record.revision)
        self._park(tenant_id, packed, seen, evict=True)
        # Built from what was packed, as a build again would be: the runtime holds the ready
        # fields, and the tenant's own parts only once a request reads them.
        return self._assemble(tenant_id, self.packer.unpack(packed) if packed is not None else loaded)

    def _park(self, tenant_id: str, packed: PackedSettings | None, seen: int, *, evict: bool) -> bool:
        """Keep ``packed`` for the tenant's next build, unless it changed since ``seen`` (what
        was loaded may be older than the change); ``evict``: room is made for it. Whether kept."""
        if packed is None or self._drops.get(tenant_id, 0) != seen:
            return False
        if not evict and tenant_id not in self._packed and len(self._packed) >= self.parked:
            return False
        self._packed[tenant_id] = packed
        self._packed.move_to_end(tenant_id)
        self._loaded.pop(tenant_id, None)
        while len(self._packed) > self.parked:
            self._packed.popitem(last=False)
        return True

    def _loaded_revision(self, tenant_id: str) -> int | None:
        """The revision of the tenant found to load here (packed, or only noted), if any."""
        packed = self._packed.get(tenant_id)
        return packed.revision if packed is not None else self._loaded.get(tenant_id)

    def _assemble(self, tenant_id: str, settings: Settings) -> AgentRuntime:
        """The tenant's runtime from its Settings: objects only, nothing read."""
        stores = self._acquire(tenant_id)
        agent = DealerAgent(settings, stores)
        gateway = Gateway.of(agent, self.work, shares=self.shares, tenant=tenant_id)
        return AgentRuntime(gateway, self.surfaces, tenant_id=tenant_id)

    def _load(
        self, tenant_id: str, public_url: str | None
    ) -> tuple[TenantRecord | None, Settings | ConfigError | tomllib.TOMLDecodeError | None, PackedSettings | None]:
        """Blocking: the tenant's registry row, its Settings at ``public_url`` (None: its first
        domain's, or its prefix's) or why they do not load, and those packed to keep — in one
        trip to the executor, where a first request waits for them."""
        record = self.registry.store.tenant(tenant_id, domains=public_url is None)
        if record is None or record.suspended_ms is not None:
            return record, None, None
        try:
            settings = self.registry.settings_for(record, public_url or self.registry.public_url(record))
        except (ConfigError, tomllib.TOMLDecodeError) as exc:
            return record, exc, None
        return record, settings, self.packer.pack(settings, record.revision) if self.parked else None

    def _remember(self, unavailable: TenantUnavailable, seen: int) -> TenantUnavailable:
        """Remember ``unavailable`` until the tenant's next change, unless it changed (was
        dropped) since ``seen``: then what was read may be older than the change."""
        if self._drops.get(unavailable.tenant_id, 0) == seen:
            self._unavailable[unavailable.tenant_id] = unavailable
            while len(self._unavailable) > self.kept:
                self._unavailable.popitem(last=False)
        return unavailable

    async def check(self, tenant_id: str, revision: int | None = None) -> None:
        """Load the tenant's stored configuration as a request would (building nothing), so that
        one that does not load in this worker is reported before a request or its background
        work finds it: after a change (:meth:`check_soon`). A tenant already served, known
        unavailable, or whose ``revision`` was loaded here already, is not loaded again."""
        if tenant_id in self._unavailable or tenant_id in self._stores:  # served: its stores are held
            return
        if revision is not None and self._loaded_revision(tenant_id) == revision:
            return
        seen = self._drops.get(tenant_id, 0)
        record, loaded, packed = await self.work.blocking(self._load, tenant_id, None)
        if record is not None and record.suspended_ms is None:
            self._checked(record, loaded, packed, seen)

    async def check_records(self, records: Sequence[TenantRecord]) -> float:
        """:meth:`check` of each of ``records``, a page of the registry as read (nothing read
        again), in one trip to the executor: when the worker starts, every tenant's
        configuration is loaded this way, and kept packed for its first request while there is
        room (docs/platform.md, "Sizing"). Returns the CPU seconds the executor's thread spent
        (the pass paces itself by them)."""
        wanted = [
            record
            for record in records
            if record.suspended_ms is None
            and record.tenant_id not in self._unavailable
            and record.tenant_id not in self._stores
            and self._loaded_revision(record.tenant_id) != record.revision
        ]
        if not wanted:
            return 0.0
        seen = {record.tenant_id: self._drops.get(record.tenant_id, 0) for record in wanted}
        found, cpu = await self.work.blocking(self._load_records, wanted)
        for record, loaded, packed in found:
            self._checked(record, loaded, packed, seen[record.tenant_id])
        return cpu

    def _load_records(
        self, records: Sequence[TenantRecord]
    ) -> tuple[
        list[tuple[TenantRecord, Settings | ConfigError | tomllib.TOMLDecodeError, PackedSettings | None]], float
    ]:
        """Blocking: each record's Settings at its public URL (or why they do not load), packed;
        and the CPU seconds this thread spent on them."""
        began = time.thread_time()
        loaded: list[tuple[TenantRecord, Settings | ConfigError | tomllib.TOMLDecodeError, PackedSettings | None]] = []
        for record in records:
            try:
                settings = self.registry.settings_for(record, self.registry.public_url(record))
            except (ConfigError, tomllib.TOMLDecodeError) as exc:
                loaded.append((record, exc, None))
                continue
            loaded.append((record, settings, self.packer.pack(settings, record.revision) if self.parked else None))
        return loaded, time.thread_time() - began

    def _checked(
        self,
        record: TenantRecord,
        loaded: Settings | ConfigError | tomllib.TOMLDecodeError | None,
        packed: PackedSettings | None,
        seen: int,
    ) -> None:
        """What a check found: a configuration that does not load reported; one that loads noted
        (its revision) and kept packed while there is room — a pass over every tenant does not
        push out the tenants that were asked for."""
        tenant_id = record.tenant_id
        if isinstance(loaded, (ConfigError, tomllib.TOMLDecodeError)):
            self._broken(record, load_reason(loaded), seen)
            return
        if not self._park(tenant_id, packed, seen, evict=False):  # a packed tenant's revision is its own
            self._loaded[tenant_id] = record.revision
            self._loaded.move_to_end(tenant_id)
            while len(self._loaded) > LOADED_KEPT:
                self._loaded.popitem(last=False)
        if record.broken is not None:
            self.work.in_background(("loaded", tenant_id), self.registry.store.clear_broken, tenant_id, record.revision)

    def check_soon(self, tenant_ids: Sequence[str]) -> None:
        """:meth:`check` each of ``tenant_ids``, one after the other, without waiting."""

        async def run() -> None:
            for tenant_id in tenant_ids:
                try:
                    await self.check(tenant_id)
                except Exception as exc:  # the database may be briefly unavailable: the sweep looks again
                    log.warning("tenant check failed", extra={"fields": {"error_type": type(exc).__name__}})

        task = asyncio.get_running_loop().create_task(run())
        self._checking.add(task)
        task.add_done_callback(self._checking.discard)

    def _broken(self, record: TenantRecord, reason: str, seen: int) -> TenantUnavailable:
        """Log (once per change of the tenant, in this worker) and report (once per revision,
        in the registry: ``aap tenants show``, ``/metrics``) a configuration that does not load."""
        unavailable = self._remember(TenantUnavailable(record.tenant_id, "broken", reason), seen)
        if self._reported.get(record.tenant_id) == (record.revision, reason):
            return unavailable  # found again (a check and a request crossed a change): said already
        self._reported[record.tenant_id] = (record.revision, reason)
        while len(self._reported) > LOADED_KEPT:
            self._reported.popitem(last=False)
        log.error(
            "tenant configuration does not load",
            extra={"fields": {"tenant": record.tenant_id, "revision": record.revision, "reason": reason}},
        )
        report = self.registry.store.report_broken
        self.work.in_background(
            ("broken", record.tenant_id), report, record.tenant_id, record.revision, reason, int(time.time() * 1000)
        )
        return unavailable

    def _acquire(self, tenant_id: str) -> Stores:
        held = self._stores.get(tenant_id)
        if held is not None:
            self._stores[tenant_id] = (held[0], held[1] + 1)
            return held[0]
        db = self.registry.data.open(tenant_id)  # a view of the platform's database: nothing opened
        stores = Stores(
            db,
            self.reads.for_tenant(tenant_id, db),
            index_min_rows=INDEX_MIN_ROWS,
            facet_cache_size=FACET_CACHE,
            keys=self.keys,
        )
        self._stores[tenant_id] = (stores, 1)
        return stores

    def drop(self, tenant_id: str) -> int:
        """Stop serving ``tenant_id`` from what was built for it (its next request rebuilds)."""
        self._unavailable.pop(tenant_id, None)
        self._packed.pop(tenant_id, None)
        self.keys.forget(tenant_id)
        self._drops[tenant_id] = self._drops.get(tenant_id, 0) + 1
        keys = [key for key in self._runtimes if key[0] == tenant_id]
        for key in keys:
            self._retire(self._runtimes.pop(key))
        return len(keys)

    def _retire(self, runtime: AgentRuntime) -> None:
        """Close ``runtime``: after the grace its requests in flight may need when one of its
        surfaces entered lifespans (an MCP session manager), else now — a request in flight
        keeps the objects it holds, and the gateway's unspent rate-limit tokens are given back
        in the background. A worker spreading requests over more tenants than it keeps retires
        a runtime for most of them: held for the grace, they would be many more than it keeps."""
        if not runtime.lingering:
            runtime.closed = True
            self._release_stores(runtime)
            if runtime.gateway.limiter.holds_leases:
                self.work.in_background(("release", id(runtime)), runtime.gateway.release)
            return

        async def later() -> None:
            await asyncio.sleep(GRACE_SECONDS)
            await self._close(runtime)

        task = asyncio.get_running_loop().create_task(later())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, runtime: AgentRuntime) -> None:
        await runtime.close()
        self._release_stores(runtime)

    def _release_stores(self, runtime: AgentRuntime) -> None:
        """One runtime fewer holds its tenant's stores (dropped with the last)."""
        tenant_id = runtime.tenant_id or ""
        stores, refs = self._stores.get(tenant_id, (None, 0))
        if stores is runtime.gateway.stores:
            if refs <= 1:
                del self._stores[tenant_id]
            else:
                self._stores[tenant_id] = (stores, refs - 1)

    async def close(self) -> None:
        """Close every runtime now (the worker is stopping)."""
        for task in [*self._closing, *self._checking]:
            task.cancel()
        runtimes = list(self._runtimes.values())
        self._runtimes.clear()
        self._packed.clear()
        for runtime in runtimes:
            await self._close(runtime)
        self._stores.clear()
