"""One agent as it is served: its gateway, and its surfaces built for it.

The same object serves a deployment that is one agent and every tenant of a platform
(docs/architecture.md, "Composition"): an :class:`AgentRuntime` holds the agent's
:class:`~aap.gateway.Gateway` (its settings, stores, skills and rate limiter, over the
worker's one :class:`~aap.work.Work`) and builds each of its surfaces (:mod:`aap.web.surface`)
on the first request that needs it — or all of them at once when the app starts
(:meth:`AgentRuntime.start`), which is what a deployment that is one agent does, so that its
first request costs what any other does. A platform's tenant that is only ever searched over
``/a2a`` holds its agent and its A2A door, and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from functools import cached_property
from typing import Any

from starlette.routing import BaseRoute, Router

from aap.gateway import Gateway
from aap.web.parts import BindingParts
from aap.web.surface import Surface

log = logging.getLogger("aap.server")


class BuiltSurface:
    """One surface built for one agent: its routes, its direct paths, the lifespans it entered.

    It holds what the surface built as it is (no copies); its routes when the surface gives
    what makes them, its router, which only a request off the direct paths needs, and what
    leaving its lifespans takes are made on first use: a platform worker holds a built surface
    for each of thousands of tenants, and builds one again for most requests spread over more
    tenants than it keeps."""

    def __init__(self, parts: BindingParts) -> None:
        self._routes = parts.routes
        self.direct = parts.direct
        self.lifespans = tuple(parts.lifespans)
        self._stop: asyncio.Event | None = None
        self.keeper: asyncio.Task[None] | None = None

    @property
    def routes(self) -> Sequence[BaseRoute]:
        routes = self._routes
        if callable(routes):
            routes = self._routes = routes()
        return routes

    @cached_property
    def router(self) -> Router:
        return Router(routes=self.routes)

    @property
    def stop(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    async def start(self, app: Any) -> None:
        """Enter the surface's lifespans in a task of their own, which leaves them when told to
        (a task group must be entered and left by one task, the MCP SDK's among them)."""
        if not self.lifespans or self.keeper is not None:
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
        if self.keeper is None:
            return  # no lifespans entered: nothing to leave
        self.stop.set()
        try:
            await asyncio.wait_for(self.keeper, timeout=10)
        except Exception as exc:  # a surface that cannot stop cleanly must not stop the others
            log.warning("a surface did not stop cleanly: %s", type(exc).__name__)


class AgentRuntime:
    """One agent at one public URL: its gateway, and its surfaces built on demand."""

    def __init__(self, gateway: Gateway, surfaces: Sequence[Surface], *, tenant_id: str | None = None) -> None:
        self.gateway = gateway
        self.surfaces = tuple(surfaces)
        #: The platform tenant it is (None: the deployment's own agent).
        self.tenant_id = tenant_id
        self.public_url = gateway.settings.public_url
        self._built: dict[int, BuiltSurface] = {}
        #: Surfaces being built (made by the first build: most runtimes never wait on one).
        self._building: dict[int, asyncio.Future[BuiltSurface]] | None = None
        #: Whether a surface was started with lifespans to enter (most runtimes never are).
        self._entered = False
        self.closed = False

    @property
    def lingering(self) -> bool:
        """True when one of its surfaces entered lifespans, which requests in flight may still
        use, or is being built (and may enter some)."""
        return self._entered or bool(self._building)

    def prepare(self) -> None:
        """Build every surface now, in order (a deployment that is one agent, as its app is made);
        their lifespans are entered by :meth:`start`."""
        for index, surface in enumerate(self.surfaces):
            if index not in self._built:
                self._built[index] = BuiltSurface(surface.build(self.gateway))

    async def start(self, app: Any) -> None:
        """Build every surface not built yet and enter every surface's lifespans, in order."""
        self.prepare()
        for index in range(len(self.surfaces)):
            built = self._built[index]
            self._entered = self._entered or bool(built.lifespans)
            await built.start(app)

    def routes(self) -> list[BaseRoute]:
        """The routes of the surfaces built so far (every one, once a deployment that is one
        agent has started): what the operator's tools and the tests list."""
        return [route for built in self._built.values() for route in built.routes]

    def built(self, index: int) -> BuiltSurface | None:
        """Surface ``index`` if it is built (a dictionary read: the hot path asks this first)."""
        return self._built.get(index)

    async def surface(self, index: int, app: Any) -> BuiltSurface:
        """Surface ``index``, built (and its lifespans entered, given ``app``) on first use."""
        built = self._built.get(index)
        if built is not None:
            return built
        pending = self._building.get(index) if self._building is not None else None
        if pending is not None:
            return await asyncio.shield(pending)
        built = BuiltSurface(self.surfaces[index].build(self.gateway))
        if not built.lifespans:
            # Nothing to enter: ready before any other request runs, so none waits for it.
            self._built[index] = built
            return built
        if self._building is None:
            self._building = {}
        future: asyncio.Future[BuiltSurface] = asyncio.get_running_loop().create_future()
        self._building[index] = future
        self._entered = True
        try:
            await built.start(app)
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
        """Leave every surface's lifespans (the last built first) and give back unspent rate-limit tokens."""
        self.closed = True
        for built in reversed(list(self._built.values())):
            await built.close()
        self._built.clear()
        try:
            await self.gateway.blocking(self.gateway.release)
        except Exception as exc:
            log.warning("leases not returned: %s", type(exc).__name__, extra={"fields": {"tenant": self.tenant_id}})
