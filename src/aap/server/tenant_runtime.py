"""The tenants one worker serves: each a :class:`TenantRuntime` built on first use (docs/platform.md).

A runtime is one tenant's agent at one public URL: its Settings (parsed from the registry),
its Stores on its own database namespace (:mod:`aap.store.tenancy`), its
:class:`~aap.agent.DealerAgent` and :class:`~aap.gateway.Gateway` — over the worker's one
:class:`~aap.work.Work`, so a thousand tenants do not make a thousand executors — and, built on
the first request that needs each, the surfaces of :data:`aap.server.app.SURFACES`. Which
surface owns a path is found once for the deployment, from a probe build with every surface
enabled (:class:`SurfaceTable`), so a tenant that is only ever searched over ``/a2a`` holds its
agent and its A2A door and nothing else. :class:`Runtimes` keeps them in a bounded
least-recently-used table and drops a tenant's when the registry says it changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Receive, Scope, Send

from aap.agent import DealerAgent
from aap.config.model import Settings
from aap.gateway import Gateway
from aap.ratelimit import RateLimiter
from aap.skills.catalog import SkillInfo
from aap.store import Stores
from aap.store.db import Database
from aap.store.platform import DELIVERIES
from aap.tenants import TenantRegistry
from aap.web.errors import ErrorShape, route_path
from aap.web.parts import BindingParts
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

Surface = Callable[[Gateway], BindingParts]


# -- which surface owns a path ----------------------------------------------------------------


@dataclasses.dataclass
class SurfaceTable:
    """Path → the index of the surface (in ``SURFACES``) whose routes answer it."""

    exact: dict[str, int]
    patterned: list[tuple[BaseRoute, int]]
    shapes: dict[str, ErrorShape]

    @classmethod
    def probe(cls, surfaces: Sequence[Surface], parts: Sequence[BindingParts]) -> SurfaceTable:
        exact: dict[str, int] = {}
        patterned: list[tuple[BaseRoute, int]] = []
        shapes: dict[str, ErrorShape] = {}
        for index, built in enumerate(parts):
            shapes.update(built.error_shapes)
            for route in built.routes:
                path = getattr(route, "path", None)
                if isinstance(route, Route) and path is not None and "{" not in path:
                    exact.setdefault(path, index)
                else:
                    patterned.append((route, index))
            for path, _method in built.direct:
                exact.setdefault(path, index)
        return cls(exact, patterned, shapes)

    def owner(self, path: str, method: str) -> int | None:
        index = self.exact.get(path)
        if index is not None:
            return index
        probe = {"type": "http", "path": path, "root_path": "", "method": method}
        for route, index in self.patterned:
            match, _ = route.matches(probe)
            if match is not Match.NONE:
                return index
        return None


def probe_parts(surfaces: Sequence[Surface], deployment: Settings) -> list[BindingParts]:
    """Every surface built once, with every optional part on, for its routes (never served)."""
    from aap.config.poppy import PoppySettings
    from aap.config.web import WebSettings
    from aap.store import open_stores

    settings = dataclasses.replace(
        deployment,
        poppy=PoppySettings(enabled=True, mcp_enabled=True, feedback_enabled=True),
        web=WebSettings(public_page=True, console=True),
        platform=None,
    )
    stores = open_stores("sqlite://:memory:")
    try:
        gateway = Gateway.of(DealerAgent(settings, stores), Work(inline=True, threads=1))
        parts = [build(gateway) for build in surfaces]
        gateway.work.close()
        return parts
    finally:
        stores.close()


# -- one tenant, as served at one public URL ----------------------------------------------------


class _Built:
    """One surface of one runtime: its router, its direct paths, the lifespans it entered."""

    def __init__(self, parts: BindingParts) -> None:
        self.router = Router(routes=parts.routes)
        self.direct = dict(parts.direct)
        self.lifespans = list(parts.lifespans)
        self.stop = asyncio.Event()
        self.keeper: asyncio.Task[None] | None = None

    async def start(self, app: Any) -> None:
        """Enter the surface's lifespans in a task of their own, which leaves them when told to
        (a task group must be entered and left by one task, the MCP SDK's among them)."""
        if not self.lifespans:
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def keep() -> None:
            try:
                async with AsyncExitStack() as stack:
                    for lifespan in self.lifespans:
                        await stack.enter_async_context(lifespan(app))
                    ready.set_result(None)
                    await self.stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        self.keeper = asyncio.create_task(keep())
        await ready

    async def close(self) -> None:
        self.stop.set()
        if self.keeper is not None:
            try:
                await asyncio.wait_for(self.keeper, timeout=10)
            except Exception as exc:  # a surface that cannot stop cleanly must not stop the others
                log.warning("a tenant surface did not stop cleanly: %s", type(exc).__name__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.direct.get((route_path(scope), scope["method"])) or self.direct.get((route_path(scope), None))
        if handler is not None:
            await handler(scope, receive, send)
        else:
            await self.router(scope, receive, send)


class TenantRuntime:
    """One tenant's agent at one public URL: Settings, Stores, agent, gateway, surfaces built on demand."""

    def __init__(
        self, tenant_id: str, public_url: str, gateway: Gateway, surfaces: Sequence[Surface], app: Any
    ) -> None:
        self.tenant_id = tenant_id
        self.public_url = public_url
        self.gateway = gateway
        self._surfaces = surfaces
        self._app = app
        self._built: dict[int, _Built] = {}
        self._building: dict[int, asyncio.Future[_Built]] = {}
        self.closed = False

    async def surface(self, index: int) -> _Built:
        built = self._built.get(index)
        if built is not None:
            return built
        pending = self._building.get(index)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[_Built] = asyncio.get_running_loop().create_future()
        self._building[index] = future
        try:
            built = _Built(self._surfaces[index](self.gateway))
            await built.start(self._app)
            self._built[index] = built
            future.set_result(built)
            return built
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failed build is answered, never logged as unretrieved
            raise
        finally:
            del self._building[index]

    async def close(self) -> None:
        """Leave every surface's lifespans and give back unspent rate-limit tokens."""
        self.closed = True
        for built in list(self._built.values()):
            await built.close()
        self._built.clear()
        try:
            await self.gateway.blocking(self.gateway.release)
        except Exception as exc:
            log.warning("tenant %s: leases not returned: %s", self.tenant_id, type(exc).__name__)


# -- the tenants a worker serves ------------------------------------------------------------------


class Runtimes:
    """The tenant runtimes of one worker: built on first use, at most ``kept`` of them, least
    recently used dropped first; a tenant's Stores are shared by its runtimes (its domain and
    its /t/ID/ prefix) and closed with the last of them."""

    def __init__(
        self, registry: TenantRegistry, work: Work, surfaces: Sequence[Surface], app: Any, *, kept: int
    ) -> None:
        self.registry = registry
        self.work = work
        self.surfaces = surfaces
        self.app = app
        self.kept = kept
        self._runtimes: OrderedDict[tuple[str, str], TenantRuntime] = OrderedDict()
        self._stores: dict[str, tuple[Stores, int]] = {}
        self._building: dict[tuple[str, str], asyncio.Future[TenantRuntime | None]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._notes: set[asyncio.Task[None]] = set()  # referenced until done

    def __len__(self) -> int:
        return len(self._runtimes)

    async def get(self, tenant_id: str, public_url: str) -> TenantRuntime | None:
        """The runtime of ``tenant_id`` at ``public_url``, or None when there is no such tenant."""
        key = (tenant_id, public_url)
        runtime = self._runtimes.get(key)
        if runtime is not None:
            self._runtimes.move_to_end(key)
            return runtime
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[TenantRuntime | None] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            runtime = await self._build(tenant_id, public_url)
            if runtime is not None:
                self._runtimes[key] = runtime
                while len(self._runtimes) > self.kept:
                    _, oldest = self._runtimes.popitem(last=False)
                    self._retire(oldest)
            future.set_result(runtime)
            return runtime
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            del self._building[key]

    async def _build(self, tenant_id: str, public_url: str) -> TenantRuntime | None:
        record = await asyncio.to_thread(self.registry.store.tenant, tenant_id)
        if record is None:
            return None
        settings = await asyncio.to_thread(self.registry.settings_for, record, public_url)
        stores = await self._acquire(tenant_id)
        agent = DealerAgent(settings, stores)
        registry = self.registry.store

        def stored(skill: SkillInfo) -> None:  # a lead: its deliveries are due now, on any worker
            note = asyncio.to_thread(registry.set_due, tenant_id, DELIVERIES, int(time.time() * 1000))
            task = asyncio.get_running_loop().create_task(note)
            self._notes.add(task)
            task.add_done_callback(self._notes.discard)

        limiter = RateLimiter(stores.state, settings.rate_limit)
        gateway = Gateway(agent, limiter, self.work, after_write=stored)
        return TenantRuntime(tenant_id, public_url, gateway, self.surfaces, self.app)

    async def _acquire(self, tenant_id: str) -> Stores:
        held = self._stores.get(tenant_id)
        if held is not None:
            self._stores[tenant_id] = (held[0], held[1] + 1)
            return held[0]
        db: Database = self.registry.data.open(tenant_id)
        stores = Stores(db, index_min_rows=INDEX_MIN_ROWS, facet_cache_size=FACET_CACHE)
        again = self._stores.get(tenant_id)  # another build opened it meanwhile
        if again is not None:
            db.close()
            self._stores[tenant_id] = (again[0], again[1] + 1)
            return again[0]
        self._stores[tenant_id] = (stores, 1)
        return stores

    def drop(self, tenant_id: str) -> int:
        """Stop serving ``tenant_id`` from what was built for it (its next request rebuilds)."""
        keys = [key for key in self._runtimes if key[0] == tenant_id]
        for key in keys:
            self._retire(self._runtimes.pop(key))
        return len(keys)

    def _retire(self, runtime: TenantRuntime) -> None:
        """Close ``runtime`` after the grace its requests in flight may need."""

        async def later() -> None:
            await asyncio.sleep(GRACE_SECONDS)
            await self._close(runtime)

        task = asyncio.get_running_loop().create_task(later())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, runtime: TenantRuntime) -> None:
        await runtime.close()
        stores, refs = self._stores.get(runtime.tenant_id, (None, 0))
        if stores is runtime.gateway.stores:
            if refs <= 1:
                del self._stores[runtime.tenant_id]
                await asyncio.to_thread(stores.close)
            else:
                self._stores[runtime.tenant_id] = (stores, refs - 1)

    async def close(self) -> None:
        """Close every runtime now (the worker is stopping)."""
        for task in list(self._closing):
            task.cancel()
        runtimes = list(self._runtimes.values())
        self._runtimes.clear()
        for runtime in runtimes:
            await self._close(runtime)
        for stores, _ in list(self._stores.values()):
            stores.close()
        self._stores.clear()
