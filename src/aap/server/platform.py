"""Platform hosting: one deployment serving every tenant's agent at its own domains (docs/platform.md).

This module is the composition root of such a deployment (:func:`create_platform_app`): one
:class:`~aap.work.Work`, one :class:`~aap.tenants.TenantRegistry`, one route table for every
tenant, and the middleware that routes a request to its tenant
(:mod:`aap.server.tenant_routing`) ahead of the tenant's own surfaces, built per worker on
demand (:mod:`aap.server.tenant_runtime`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route

import aap.console
from aap.agent import DealerAgent
from aap.config.model import Settings
from aap.config.platform import PlatformSettings
from aap.discovery.platform_catalog import PlatformCatalog
from aap.gateway import Gateway
from aap.paths import AI_CATALOG_PATH, HEALTHZ_PATH, LIVEZ_PATH, METRICS_PATH, READYZ_PATH
from aap.platform.console import PlatformConsole
from aap.ratelimit import RateLimiter
from aap.server.operations import (
    OperatorDoor,
    Readiness,
    healthz_endpoint,
    livez_endpoint,
    platform_metrics_endpoint,
    readyz_endpoint,
)
from aap.server.tenant_routing import (
    TLS_ALLOWED_PATH,
    ChangeFeed,
    Hosts,
    TenantDispatch,
    TenantRouting,
    tls_allowed_endpoint,
)
from aap.server.tenant_runtime import Runtimes, Surface, SurfaceTable, probe_parts
from aap.store import Stores
from aap.store.migrations import PLATFORM_DOMAINS
from aap.tenants import TenantRegistry
from aap.web.accesslog import AccessLogMiddleware
from aap.web.body import RequestLimitMiddleware
from aap.web.errors import ErrorShapes, http_exception_handler, server_error_handler
from aap.web.metrics import Metrics
from aap.web.parts import BindingParts
from aap.work import Work

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

Service = Callable[["PlatformContext"], AbstractAsyncContextManager[None]]


@dataclasses.dataclass
class PlatformContext:
    """What a platform's background services and surfaces are given."""

    deployment: Settings
    registry: TenantRegistry
    stores: Stores  # the platform's own namespace
    work: Work
    runtimes: Runtimes
    #: The platform's own gateway (its own namespace's buckets): the provisioning API's admission.
    gateway: Gateway
    #: The platform console at ``https://PLATFORM_HOST/console/`` (docs/platform.md, "Platform administrators").
    console: PlatformConsole


def tenant_surfaces(
    surfaces: Sequence[Surface], console: PlatformConsole, platform: PlatformSettings
) -> tuple[Surface, ...]:
    """``surfaces`` with the staff console's builder wrapped: a tenant's console served under its
    prefix on the platform host admits the platform's administrators as guests
    (:class:`aap.platform.console.TenantGuests`); at the tenant's own domains it is built as in a
    deployment that is one agent, without guests, so the platform's session is never accepted there."""

    def console_surface(gateway: Gateway) -> BindingParts:
        settings = gateway.settings
        prefixed = settings.public_url == platform.prefix_url(settings.deployment_id)
        return aap.console.build(gateway, guests=console.guests_of(settings.deployment_id) if prefixed else None)

    return tuple(console_surface if build is aap.console.build else build for build in surfaces)


def create_platform_app(
    deployment: Settings,
    platform_stores: Stores,
    *,
    surfaces: Sequence[Surface] | None = None,
    services: Sequence[Service] = (),
    platform_routes: Sequence[Callable[[PlatformContext], list[BaseRoute]]] = (),
    tracing: Tracing | None = None,
) -> Starlette:
    """The ASGI app of a platform deployment: every tenant of its registry, routed by host (with
    ``tracing``, a span per request: :mod:`aap.telemetry`)."""
    from aap.server.app import SURFACES

    assert deployment.platform is not None, "a platform deployment has a [platform] table"
    work = Work(inline=platform_stores.db.in_process)
    registry = TenantRegistry(deployment, platform_stores.db)
    own_gateway = Gateway(
        DealerAgent(deployment, platform_stores), RateLimiter(platform_stores.state, deployment.rate_limit), work
    )
    console = PlatformConsole(own_gateway, registry)
    chosen = tenant_surfaces(SURFACES if surfaces is None else surfaces, console, deployment.platform)
    table = SurfaceTable.probe(chosen, probe_parts(chosen, deployment))
    metrics = Metrics()
    shapes = ErrorShapes(table.shapes)
    hosts = Hosts(registry.store)

    runtimes = Runtimes(registry, work, chosen, None, kept=deployment.platform.tenants_in_memory)
    context = PlatformContext(deployment, registry, platform_stores, work, runtimes, own_gateway, console)
    feed = ChangeFeed(registry.store, runtimes, hosts, deployment.platform.changes_poll_ms)
    ai_catalog = PlatformCatalog(registry.store, deployment.platform, registry.public_url)
    readiness = Readiness(platform_stores.db, PLATFORM_DOMAINS, feed.age, feed.max_age)
    own: list[BaseRoute] = [
        Route(HEALTHZ_PATH, healthz_endpoint, methods=["GET"], name="healthz"),
        Route(LIVEZ_PATH, livez_endpoint, methods=["GET"], name="livez"),
        Route(READYZ_PATH, readyz_endpoint(readiness), methods=["GET"], name="readyz"),
        Route(METRICS_PATH, platform_metrics_endpoint(deployment), methods=["GET"], name="metrics"),
        Route(TLS_ALLOWED_PATH, tls_allowed_endpoint(hosts), methods=["GET"], name="platform_tls_allowed"),
        Route(AI_CATALOG_PATH, ai_catalog.endpoint, methods=["GET", "HEAD"], name="platform_ai_catalog"),
        *console.routes(),
    ]
    for routes in platform_routes:
        own.extend(routes(context))
    handlers = {HTTPException: http_exception_handler, Exception: server_error_handler(shapes)}
    platform_app = Starlette(routes=own, exception_handlers=handlers)
    platform_app.state.settings = deployment
    platform_app.state.stores = platform_stores
    platform_app.state.metrics = metrics

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await feed.start()
        stop = asyncio.Event()
        follower = asyncio.create_task(feed.run(stop))
        try:
            async with AsyncExitStack() as stack:
                for service in services:
                    await stack.enter_async_context(service(context))
                yield
        finally:
            stop.set()
            await follower
            await runtimes.close()
            work.close()

    middleware = [
        Middleware(AccessLogMiddleware, metrics=metrics),
        Middleware(
            TenantRouting,
            platform=deployment.platform,
            runtimes=runtimes,
            hosts=hosts,
            platform_app=platform_app,
            max_body_bytes=deployment.max_body_bytes,
            operator_port=deployment.metrics_listen is not None,
        ),
        Middleware(RequestLimitMiddleware, max_bytes=deployment.max_body_bytes, shapes=shapes),
    ]
    if deployment.metrics_listen is not None:
        middleware.insert(1, Middleware(OperatorDoor, port=deployment.metrics_listen[1]))
    if tracing is not None:
        from aap.web.tracing import RouteTemplates, TracingMiddleware

        templates = RouteTemplates([*own, *(route for route, _ in table.patterned)], table.exact)
        middleware.insert(0, Middleware(TracingMiddleware, tracing=tracing, routes=templates))
    app = Starlette(
        routes=[Mount("/", app=TenantDispatch(table))],
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    runtimes.app = app  # what the tenants' surface lifespans are given
    app.state.settings = deployment
    app.state.stores = platform_stores
    app.state.metrics = metrics
    app.state.platform = context
    return app
