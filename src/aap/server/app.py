"""The composition root: one :class:`~aap.agent.DealerAgent`, every surface, shared middleware.

:func:`create_app` builds the agent and wires, with plain imports, the
surfaces (:data:`SURFACES`: each a ``build(agent) -> BindingParts``), the
background services (:data:`SERVICES`: lifespans started after the
surfaces' and stopped before them) and the operator endpoints. Adding a
surface is one function in :data:`SURFACES` and never an edit to another
surface; tests pass their own lists.

Middleware, outermost first: the access log (one line and one metrics
observation per request), with ``[server] metrics_listen`` the operator's door
(:class:`~aap.server.operations.OperatorDoor`), the request limits (413 for a
body over the limit, and the 414/431/408 the server's protocol refused before
the app, in the shape of the path's surface: :mod:`aap.web.body`), then the
surfaces' hot paths answered ahead of the router (:mod:`aap.web.direct`). Exception handlers answer 404/405 as plain JSON and an uncaught
exception as a logged 500 in the path's shape (:mod:`aap.web.errors`).

``app.state`` carries ``agent``, ``settings``, ``stores`` and ``metrics``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

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
from aap.leads.worker import delivery_lifespan
from aap.paths import HEALTHZ_PATH, METRICS_PATH
from aap.server.operations import OperatorDoor, healthz_endpoint, metrics_endpoint
from aap.store import Stores
from aap.web.accesslog import AccessLogMiddleware
from aap.web.body import RequestLimitMiddleware
from aap.web.direct import DirectPaths
from aap.web.errors import ErrorShape, ErrorShapes, http_exception_handler, server_error_handler
from aap.web.metrics import Metrics
from aap.web.parts import BindingParts, Lifespan

Surface = Callable[[DealerAgent], BindingParts]


def mcp_surface(agent: DealerAgent) -> BindingParts:
    """The MCP binding, verifying the Bearer tokens the Poppy issuer exchanges for it (docs/mcp.md)."""
    return mcp.build(agent, verifier=aap.poppy.mcp_verifier(agent))


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
async def posting_index_lifespan(app: Starlette) -> AsyncIterator[None]:
    """Start building this process's posting index at start-up rather than on the first search
    (docs/search.md, "Counting at marketplace scale"); searches count in SQL meanwhile."""
    app.state.stores.inventory.postings.warm()
    yield


#: Background services: entered after the surfaces' lifespans, left before them.
SERVICES: tuple[Lifespan, ...] = (delivery_lifespan, feeds_lifespan, posting_index_lifespan)


class PublicUrlError(ValueError):
    """The public base URL cannot be published in the AAP discovery documents."""


def check_public_url(url: str) -> None:
    """Refuse a base URL the discovery documents may not carry: the configuration's own check."""
    problem = public_url_problem(url)
    if problem:
        raise PublicUrlError(f"public_url {url!r}: {problem}")


def _lifespan(lifespans: Sequence[Lifespan]) -> Lifespan:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for factory in lifespans:
                await stack.enter_async_context(factory(app))
            yield
        # Tokens this process leased and did not spend go back to the shared buckets.
        await run_in_threadpool(app.state.agent.limiter.release)

    return lifespan


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
    services: Sequence[Lifespan] | None = None,
) -> Starlette:
    """Build the app for ``settings`` on ``stores`` (by default with :data:`SURFACES` and :data:`SERVICES`)."""
    check_public_url(settings.public_url)
    agent = DealerAgent(settings, stores)
    metrics = Metrics()

    routes: list[BaseRoute] = [
        Route(HEALTHZ_PATH, healthz_endpoint, methods=["GET"], name="healthz"),
        Route(METRICS_PATH, metrics_endpoint(metrics_token(settings)), methods=["GET"], name="metrics"),
    ]
    lifespans: list[Lifespan] = []
    shapes: dict[str, ErrorShape] = {}
    direct: dict[tuple[str, str | None], ASGIApp] = {}
    for build in SURFACES if surfaces is None else surfaces:
        parts = build(agent)
        routes.extend(parts.routes)
        lifespans.extend(parts.lifespans)
        shapes.update(parts.error_shapes)
        direct.update(parts.direct)
    lifespans.extend(SERVICES if services is None else services)
    error_shapes = ErrorShapes(shapes)

    middleware = [
        Middleware(AccessLogMiddleware, metrics=metrics),
        Middleware(RequestLimitMiddleware, max_bytes=settings.max_body_bytes, shapes=error_shapes),
        Middleware(DirectPaths, paths=direct),
    ]
    if settings.metrics_listen is not None:
        middleware.insert(1, Middleware(OperatorDoor, port=settings.metrics_listen[1]))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception_handler, Exception: server_error_handler(error_shapes)},
        lifespan=_lifespan(lifespans),
    )
    app.state.agent = agent
    app.state.settings = settings
    app.state.stores = stores
    app.state.metrics = metrics
    return app
