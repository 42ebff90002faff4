"""Which agent a request is for, and which of its surfaces answers it.

Two steps, the same for a deployment that is one agent and for a platform
(docs/architecture.md, "Composition"):

1. **Routing** (middleware, ahead of the body limit): the deployment's own endpoints
   (``/healthz``, ``/metrics``; on a platform its host's console, provisioning API and the
   like) go to the deployment's own app; any other request is given its agent's
   :class:`~aap.server.runtime.AgentRuntime` under :data:`RUNTIME_KEY`. A deployment that is
   one agent routes every request to that one (:class:`OneAgent`); a platform routes by
   ``Host`` and path (:mod:`aap.server.tenant_routing`).
2. **Dispatch** (the innermost middleware, :class:`AgentDispatch`): the surface that declared
   the request's path (:class:`~aap.web.surface.SurfaceTable`), built for that agent on first
   use, answers it — its hot paths directly, the rest through its router
   (:func:`surface_routes`, behind Starlette's exception middleware).
"""

from __future__ import annotations

from collections.abc import Collection

import orjson
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from aap.server.runtime import AgentRuntime, BuiltSurface
from aap.web.errors import route_path
from aap.web.surface import SurfaceTable

#: The scope key under which routing hands a request's agent to the dispatch.
RUNTIME_KEY = "aap.runtime"
#: The scope key under which the dispatch hands the surface it chose to :func:`surface_routes`.
SURFACE_KEY = "aap.surface"


def not_found(message: str = "Not found") -> Response:
    """The 404 of an unknown host, tenant or path: the app's plain JSON shape, no tenant named."""
    body = {"error": {"status": 404, "message": message}}
    return Response(orjson.dumps(body), status_code=404, media_type="application/json")


class OneAgent:
    """Pure ASGI middleware of a deployment that is one agent: its own endpoints (``own_paths``)
    to ``own``, everything else to ``runtime``."""

    def __init__(self, app: ASGIApp, runtime: AgentRuntime, own: ASGIApp, own_paths: Collection[str]) -> None:
        self.app = app
        self.runtime = runtime
        self.own = own
        self.own_paths = frozenset(own_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and route_path(scope) in self.own_paths:
            await self.own(scope, receive, send)
            return
        scope[RUNTIME_KEY] = self.runtime
        await self.app(scope, receive, send)


class AgentDispatch:
    """Pure ASGI middleware, innermost: the request's agent and the surface declaring its path.

    A hot path of that surface (:attr:`~aap.web.parts.BindingParts.direct`) is answered right
    here, ahead of Starlette's exception middleware and router (:mod:`aap.web.direct` says why);
    any other request goes on to :class:`SurfaceRoutes` with its surface.
    """

    def __init__(self, app: ASGIApp, table: SurfaceTable) -> None:
        self.app = app
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            runtime: AgentRuntime | None = scope.get(RUNTIME_KEY)
            path = route_path(scope)
            index = self.table.owner(path)
            if runtime is not None and index is not None:
                built = runtime.built(index) or await runtime.surface(index, scope.get("app"))
                if index not in self.table.routes:
                    self.table.routes[index] = built.router.routes
                direct = built.direct
                handler = direct.get((path, scope["method"])) or direct.get((path, None))
                if handler is not None:
                    await handler(scope, receive, send)
                    return
                scope[SURFACE_KEY] = built
        await self.app(scope, receive, send)


async def surface_routes(scope: Scope, receive: Receive, send: Send) -> None:
    """The app behind the router: the routes of the surface :class:`AgentDispatch` chose, or the
    app's 404 (a page for a browser, plain JSON for anyone else) when no surface declares the path."""
    built: BuiltSurface | None = scope.get(SURFACE_KEY)
    if built is None:
        raise HTTPException(404)
    await built.router(scope, receive, send)
