"""The composition root: every object an app uses, built once and passed down.

One root for both kinds of deployment (docs/architecture.md, "Composition"). A deployment
that is one agent (:func:`create_app`) and a platform of many (:func:`aap.server.platform.create_platform_app`)
are assembled the same way (:func:`assemble`): the worker's one :class:`~aap.work.Work`, each
agent an :class:`~aap.server.runtime.AgentRuntime` over it — its
:class:`~aap.agent.DealerAgent`, rate limiter and :class:`~aap.gateway.Gateway` made by
:meth:`Gateway.of`, its surfaces (:data:`SURFACES`, each declaring its paths:
:mod:`aap.web.surface`) — the deployment's own endpoints, and one middleware stack. They differ
in one part only, the routing that finds a request's agent: here the one agent
(:class:`~aap.server.dispatch.OneAgent`), on a platform its tenants by host
(:mod:`aap.server.tenant_routing`). Nothing is looked up in a process-global registry, so two
apps built in one process share nothing by accident; adding a surface is one entry in
:data:`SURFACES` and never an edit to another surface; tests pass their own lists.

Middleware, outermost first: the access log (one line and one metrics observation per
request), with ``[server] metrics_listen`` the operator's door
(:class:`~aap.server.operations.OperatorDoor`), the routing, the request limits (413 for a body
over the limit, and the 414/431/408 the server's protocol refused before the app, in the shape
of the path's surface: :mod:`aap.web.body`), then the dispatch to the agent's surface, which
answers the hot paths itself (:mod:`aap.server.dispatch`). Exception handlers answer 404/405 as
plain JSON (or a page) and an uncaught exception as a logged 500 in the path's shape
(:mod:`aap.web.errors`).

``app.state`` carries ``gateway``, ``agent``, ``settings``, ``stores``, ``metrics`` and the
agent's ``runtime`` for the operator endpoints and the tests; no core service reads it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

import aap.console
import aap.discovery
import aap.poppy
import aap.site
from aap.agent import DealerAgent
from aap.bindings import a2a, mcp
from aap.config.model import Settings
from aap.config.urls import public_url_problem
from aap.gateway import Gateway
from aap.leads.worker import delivery_lifespan
from aap.paths import HEALTHZ_PATH, LIVEZ_PATH, METRICS_PATH, READYZ_PATH
from aap.server.dispatch import AgentDispatch, OneAgent, surface_routes
from aap.server.operations import (
    OperatorDoor,
    Readiness,
    healthz_endpoint,
    livez_endpoint,
    metrics_endpoint,
    metrics_token,
    readyz_endpoint,
)
from aap.server.runtime import AgentRuntime
from aap.store import Stores
from aap.store.migrations import DOMAINS
from aap.web.accesslog import AccessLogMiddleware
from aap.web.body import RequestLimitMiddleware
from aap.web.errors import http_exception_handler, server_error_handler
from aap.web.metrics import Metrics
from aap.web.parts import BindingParts, Lifespan
from aap.web.surface import Surface, SurfaceTable
from aap.work import Work

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

#: A background service of the app: entered after the surfaces' lifespans, left before them.
Service = Callable[[Gateway], AbstractAsyncContextManager[None]]


def mcp_surface(gateway: Gateway) -> BindingParts:
    """The MCP binding, verifying the Bearer tokens the Poppy issuer exchanges for it (docs/mcp.md)."""
    return mcp.build(gateway, verifier=aap.poppy.mcp_verifier(gateway))


#: The protocol doors, then the pages for people (docs/console.md), in the order they are built.
SURFACES: tuple[Surface, ...] = (
    Surface("a2a", a2a.PATHS, a2a.build, a2a.ERROR_SHAPES),
    Surface("mcp", mcp.PATHS, mcp_surface, mcp.ERROR_SHAPES),
    Surface("discovery", aap.discovery.PATHS, aap.discovery.build, aap.discovery.ERROR_SHAPES),
    Surface("poppy", aap.poppy.PATHS, aap.poppy.build, aap.poppy.ERROR_SHAPES),
    Surface("site", aap.site.PATHS, aap.site.build, aap.site.ERROR_SHAPES),
    Surface("console", aap.console.PATHS, aap.console.build, aap.console.ERROR_SHAPES),
)


@asynccontextmanager
async def posting_index_service(gateway: Gateway) -> AsyncIterator[None]:
    """Start building this process's posting index at start-up rather than on the first search
    (docs/search.md, "Counting at marketplace scale"); searches count in SQL meanwhile."""
    gateway.stores.inventory.postings.warm()
    yield


def delivery_service(gateway: Gateway) -> AbstractAsyncContextManager[None]:
    """The lead outbox worker (docs/leads.md), unless deliveries run in their own process."""
    return delivery_lifespan(gateway.stores, gateway.settings, gateway.work)


def feeds_service(gateway: Gateway) -> AbstractAsyncContextManager[None]:
    """The ``[[feeds]]`` scheduler (docs/feeds.md), when there are feeds: only then are the feed
    readers and the import pipeline loaded (about 1 MiB a worker without feeds never holds)."""
    if not gateway.settings.feeds:
        return nullcontext()
    from aap.feeds.scheduler import feeds_lifespan

    return feeds_lifespan(gateway.stores, gateway.settings, gateway.work)


#: Background services: entered after the surfaces' lifespans, left before them.
SERVICES: tuple[Service, ...] = (delivery_service, feeds_service, posting_index_service)


class PublicUrlError(ValueError):
    """The public base URL cannot be published in the AAP discovery documents."""


def check_public_url(url: str) -> None:
    """Refuse a base URL the discovery documents may not carry: the configuration's own check."""
    problem = public_url_problem(url)
    if problem:
        raise PublicUrlError(f"public_url {url!r}: {problem}")


def operator_routes(
    settings: Settings, readiness: Readiness, *, metrics: Callable[[Request], Awaitable[Response]] | None = None
) -> list[BaseRoute]:
    """The operator's endpoints of every deployment: ``/healthz``, ``/livez``, ``/readyz`` and
    ``/metrics`` (docs/deployment.md, "Health, liveness and readiness"); ``metrics``: its endpoint
    when not the default (a platform's, private by default)."""
    return [
        Route(HEALTHZ_PATH, healthz_endpoint, methods=["GET"], name="healthz"),
        Route(LIVEZ_PATH, livez_endpoint, methods=["GET"], name="livez"),
        Route(READYZ_PATH, readyz_endpoint(readiness), methods=["GET"], name="readyz"),
        Route(METRICS_PATH, metrics or metrics_endpoint(metrics_token(settings)), methods=["GET"], name="metrics"),
    ]


def own_app(
    deployment: Settings, routes: Sequence[BaseRoute], table: SurfaceTable, state: Mapping[str, Any]
) -> Starlette:
    """The deployment's own endpoints (the operator's; a platform's host) as an app of their own,
    behind the same request limits as the agents' (the routing hands them on ahead of those)."""
    limits = Middleware(RequestLimitMiddleware, max_bytes=deployment.max_body_bytes, shapes=table.shapes)
    return _starlette(table, state, routes=list(routes), middleware=[limits])


def _starlette(table: SurfaceTable, state: Mapping[str, Any], **options: Any) -> Starlette:
    """A Starlette app answering errors in the shape of the surface asked (never a stack trace),
    with ``state`` on ``app.state``."""
    handlers = {HTTPException: http_exception_handler, Exception: server_error_handler(table.shapes)}
    app = Starlette(exception_handlers=handlers, **options)
    for name, value in state.items():
        setattr(app.state, name, value)
    return app


def assemble(
    deployment: Settings,
    *,
    routing: Middleware,
    table: SurfaceTable,
    metrics: Metrics,
    lifespan: Lifespan,
    state: Mapping[str, Any],
    own_routes: Sequence[BaseRoute],
    tracing: Tracing | None = None,
) -> Starlette:
    """The app of a deployment, whichever it is: its middleware, the dispatch to agents' surfaces,
    its error handlers and its lifespan. ``routing`` finds a request's agent; ``own_routes`` are the
    deployment's own endpoints; with ``tracing``, a span per request (:mod:`aap.telemetry`)."""
    middleware = [
        Middleware(AccessLogMiddleware, metrics=metrics),
        routing,
        Middleware(RequestLimitMiddleware, max_bytes=deployment.max_body_bytes, shapes=table.shapes),
        Middleware(AgentDispatch, table=table),
    ]
    if deployment.metrics_listen is not None:
        middleware.insert(1, Middleware(OperatorDoor, port=deployment.metrics_listen[1]))
    if tracing is not None:
        from aap.web.tracing import SurfaceTemplates, TracingMiddleware

        templates = SurfaceTemplates(table, own_routes)
        middleware.insert(0, Middleware(TracingMiddleware, tracing=tracing, routes=templates))
    return _starlette(table, state, routes=[Mount("/", app=surface_routes)], middleware=middleware, lifespan=lifespan)


def create_app(
    settings: Settings,
    stores: Stores,
    *,
    surfaces: Sequence[Surface] | None = None,
    services: Sequence[Service] | None = None,
    tracing: Tracing | None = None,
) -> Starlette:
    """The app of a deployment that is one agent: ``settings`` on ``stores`` (by default with
    :data:`SURFACES` and :data:`SERVICES`), its surfaces built when it starts; with ``tracing``
    (this process traces: :mod:`aap.telemetry`), a span per request."""
    check_public_url(settings.public_url)
    chosen = SURFACES if surfaces is None else tuple(surfaces)
    running = SERVICES if services is None else tuple(services)
    work = Work(inline=stores.db.in_process)
    agent = DealerAgent(settings, stores)
    gateway = Gateway.of(agent, work)
    runtime = AgentRuntime(gateway, chosen)
    runtime.prepare()  # every surface built now, as the app is made; their lifespans when it starts
    table = SurfaceTable(chosen)
    for index in range(len(chosen)):  # the route templates its traces name, known from the start
        built = runtime.built(index)
        if built is not None:
            table.routes[index] = built.router.routes
    metrics = Metrics()
    state = {
        "gateway": gateway,
        "work": work,
        "agent": agent,
        "settings": settings,
        "stores": stores,
        "metrics": metrics,
        "runtime": runtime,
    }
    own_routes = operator_routes(settings, Readiness(stores.db, DOMAINS))
    own = own_app(settings, own_routes, table, state)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            try:
                await runtime.start(app)
                async with AsyncExitStack() as stack:
                    for service in running:
                        await stack.enter_async_context(service(gateway))
                    yield
            finally:
                # Surfaces stopped; tokens this process leased and did not spend back to the buckets.
                await runtime.close()
        finally:
            work.close()

    routing = Middleware(OneAgent, runtime=runtime, own=own, own_paths=[getattr(r, "path", "") for r in own_routes])
    return assemble(
        settings,
        routing=routing,
        table=table,
        metrics=metrics,
        lifespan=lifespan,
        state=state,
        own_routes=own_routes,
        tracing=tracing,
    )
