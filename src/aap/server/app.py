"""The composition root: one agent, its gateway, every surface, shared middleware.

:func:`create_app` builds every object the app uses and passes it down: the
:class:`~aap.agent.DealerAgent` (the skills over :class:`~aap.skills.context.SkillDeps`),
the rate limiter, the worker's :class:`~aap.work.Work` and the
:class:`~aap.gateway.Gateway` over them; then, with plain imports, the surfaces
(:data:`SURFACES`: each a ``build(gateway) -> BindingParts``), the background services
(:data:`SERVICES`: each a ``service(gateway)`` context entered after the surfaces'
lifespans and left before them) and the operator endpoints. Nothing is looked up in a
process-global registry, so two apps built in one process share nothing by accident.
Adding a surface is one function in :data:`SURFACES` and never an edit to another
surface; tests pass their own lists.

Middleware, outermost first: the access log (one line and one metrics
observation per request), with ``[server] metrics_listen`` the operator's door
(:class:`~aap.server.operations.OperatorDoor`), the request limits (413 for a
body over the limit, and the 414/431/408 the server's protocol refused before
the app, in the shape of the path's surface: :mod:`aap.web.body`), then the
surfaces' hot paths answered ahead of the router (:mod:`aap.web.direct`). Exception handlers answer 404/405 as plain JSON and an uncaught
exception as a logged 500 in the path's shape (:mod:`aap.web.errors`).

``app.state`` carries ``gateway``, ``agent``, ``settings``, ``stores`` and ``metrics`` for
the operator endpoints and the tests; no core service reads it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

import aap.console
import aap.discovery
import aap.poppy
import aap.site
from aap.agent import DealerAgent
from aap.bindings import a2a, mcp
from aap.config.model import Settings
from aap.config.urls import public_url_problem
from aap.feeds.scheduler import feeds_lifespan
from aap.gateway import Gateway
from aap.leads.worker import delivery_lifespan
from aap.paths import HEALTHZ_PATH, LIVEZ_PATH, METRICS_PATH, READYZ_PATH
from aap.server.operations import (
    OperatorDoor,
    Readiness,
    healthz_endpoint,
    livez_endpoint,
    metrics_endpoint,
    readyz_endpoint,
)
from aap.store import Stores
from aap.store.migrations import DOMAINS
from aap.web.accesslog import AccessLogMiddleware
from aap.web.body import RequestLimitMiddleware
from aap.web.direct import DirectPaths
from aap.web.errors import ErrorShape, ErrorShapes, http_exception_handler, server_error_handler
from aap.web.metrics import Metrics
from aap.web.parts import BindingParts, Lifespan

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

Surface = Callable[[Gateway], BindingParts]
#: A background service of the app: entered after the surfaces' lifespans, left before them.
Service = Callable[[Gateway], AbstractAsyncContextManager[None]]


def mcp_surface(gateway: Gateway) -> BindingParts:
    """The MCP binding, verifying the Bearer tokens the Poppy issuer exchanges for it (docs/mcp.md)."""
    return mcp.build(gateway, verifier=aap.poppy.mcp_verifier(gateway))


#: The protocol doors, then the pages for people (docs/console.md), in mounting order.
SURFACES: tuple[Surface, ...] = (
    a2a.build,
    mcp_surface,
    aap.discovery.build,
    aap.poppy.build,
    aap.site.build,
    aap.console.build,
)


@asynccontextmanager
async def posting_index_service(gateway: Gateway) -> AsyncIterator[None]:
    """Start building this process's posting index at start-up rather than on the first search
    (docs/search.md, "Counting at marketplace scale"); searches count in SQL meanwhile."""
    gateway.stores.inventory.postings.warm()
    yield


def delivery_service(gateway: Gateway) -> AbstractAsyncContextManager[None]:
    """The lead outbox worker (docs/leads.md), unless deliveries run in their own process."""
    return delivery_lifespan(gateway.stores, gateway.settings)


def feeds_service(gateway: Gateway) -> AbstractAsyncContextManager[None]:
    """The ``[[feeds]]`` scheduler (docs/feeds.md), when there are feeds."""
    return feeds_lifespan(gateway.stores, gateway.settings)


#: Background services: entered after the surfaces' lifespans, left before them.
SERVICES: tuple[Service, ...] = (delivery_service, feeds_service, posting_index_service)


class PublicUrlError(ValueError):
    """The public base URL cannot be published in the AAP discovery documents."""


def check_public_url(url: str) -> None:
    """Refuse a base URL the discovery documents may not carry: the configuration's own check."""
    problem = public_url_problem(url)
    if problem:
        raise PublicUrlError(f"public_url {url!r}: {problem}")


def _lifespan(gateway: Gateway, lifespans: Sequence[Lifespan], services: Sequence[Service]) -> Lifespan:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                for factory in lifespans:
                    await stack.enter_async_context(factory(app))
                for service in services:
                    await stack.enter_async_context(service(gateway))
                yield
            # Tokens this process leased and did not spend go back to the shared buckets.
            await run_in_threadpool(gateway.release)
        finally:
            gateway.work.close()

    return lifespan


def direct_paths(direct: dict[tuple[str, str | None], ASGIApp]) -> list[str]:
    """The paths the surfaces answer ahead of the router (each its own route template)."""
    return [path for path, _method in direct]


def metrics_token(settings: Settings) -> str | None:
    """The bearer token ``/metrics`` requires: the value of ``[server] metrics_token_env``
    (the server refuses to start while it is unset, :mod:`aap.config.environment`)."""
    if settings.metrics_token_env is None:
        return None
    token = os.environ.get(settings.metrics_token_env)
    if not token:
        raise ValueError(f"[server] metrics_token_env: environment variable {settings.metrics_token_env} is not set")
    return token


def create_app(
    settings: Settings,
    stores: Stores,
    *,
    surfaces: Sequence[Surface] | None = None,
    services: Sequence[Service] | None = None,
    tracing: Tracing | None = None,
) -> Starlette:
    """Build the app for ``settings`` on ``stores`` (by default with :data:`SURFACES` and :data:`SERVICES`);
    with ``tracing`` (this process traces: :mod:`aap.telemetry`), a span per request."""
    check_public_url(settings.public_url)
    agent = DealerAgent(settings, stores)
    gateway = Gateway.of(agent)
    metrics = Metrics()

    routes: list[BaseRoute] = [
        Route(HEALTHZ_PATH, healthz_endpoint, methods=["GET"], name="healthz"),
        Route(LIVEZ_PATH, livez_endpoint, methods=["GET"], name="livez"),
        Route(READYZ_PATH, readyz_endpoint(Readiness(stores.db, DOMAINS)), methods=["GET"], name="readyz"),
        Route(METRICS_PATH, metrics_endpoint(metrics_token(settings)), methods=["GET"], name="metrics"),
    ]
    lifespans: list[Lifespan] = []
    shapes: dict[str, ErrorShape] = {}
    direct: dict[tuple[str, str | None], ASGIApp] = {}
    for build in SURFACES if surfaces is None else surfaces:
        parts = build(gateway)
        routes.extend(parts.routes)
        lifespans.extend(parts.lifespans)
        shapes.update(parts.error_shapes)
        direct.update(parts.direct)
    error_shapes = ErrorShapes(shapes)

    middleware = [
        Middleware(AccessLogMiddleware, metrics=metrics),
        Middleware(RequestLimitMiddleware, max_bytes=settings.max_body_bytes, shapes=error_shapes),
        Middleware(DirectPaths, paths=direct),
    ]
    if settings.metrics_listen is not None:
        middleware.insert(1, Middleware(OperatorDoor, port=settings.metrics_listen[1]))
    if tracing is not None:
        from aap.web.tracing import RouteTemplates, TracingMiddleware

        middleware.insert(
            0, Middleware(TracingMiddleware, tracing=tracing, routes=RouteTemplates(routes, direct_paths(direct)))
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception_handler, Exception: server_error_handler(error_shapes)},
        lifespan=_lifespan(gateway, lifespans, SERVICES if services is None else services),
    )
    app.state.gateway = gateway
    app.state.agent = agent
    app.state.settings = settings
    app.state.stores = stores
    app.state.metrics = metrics
    return app
