"""Platform hosting: one deployment serving every tenant's agent at its own domains (docs/platform.md).

The platform's part of the composition root (:func:`create_platform_app`), assembled by the
same root as a deployment that is one agent (:func:`aap.server.app.assemble`): the worker's one
:class:`~aap.work.Work`, one :class:`~aap.tenants.TenantRegistry`, the surfaces' one route
table, the platform host's own endpoints, and the routing that finds a request's tenant
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
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

import aap.console
from aap.agent import DealerAgent
from aap.config.model import Settings
from aap.config.platform import PlatformSettings
from aap.discovery.platform_catalog import PlatformCatalog
from aap.fairshare import TenantShares
from aap.gateway import Gateway
from aap.paths import AI_CATALOG_PATH
from aap.platform.console import PlatformConsole
from aap.server.app import SURFACES, assemble, metrics_token, operator_routes, own_app
from aap.server.operations import Readiness, platform_metrics_endpoint
from aap.server.tenant_routing import TLS_ALLOWED_PATH, ChangeFeed, Hosts, TenantRouting, tls_allowed_endpoint
from aap.server.tenant_runtime import Runtimes
from aap.store import Stores
from aap.store.migrations import PLATFORM_DOMAINS
from aap.tenants import TenantRegistry
from aap.web.metrics import Metrics, tenant_gauges
from aap.web.parts import BindingParts
from aap.web.surface import Surface, SurfaceTable
from aap.work import Work

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

Service = Callable[["PlatformContext"], AbstractAsyncContextManager[None]]


@dataclasses.dataclass
class PlatformContext:
    """What a platform's background services and surfaces are given."""

    deployment: Settings
    registry: TenantRegistry
    stores: Stores  # the platform's own rows (its administrators' accounts) and its registry
    work: Work
    runtimes: Runtimes
    #: The platform's own gateway (its own buckets): the provisioning API's admission.
    gateway: Gateway
    #: The platform console at ``https://PLATFORM_HOST/console/`` (docs/platform.md, "Platform administrators").
    console: PlatformConsole
    #: Which tenant each host name is (learned for every tenant when the worker starts).
    hosts: Hosts


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

    return tuple(dataclasses.replace(s, build=console_surface) if s.build is aap.console.build else s for s in surfaces)


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
    assert deployment.platform is not None, "a platform deployment has a [platform] table"
    work = Work(inline=platform_stores.db.in_process)
    registry = TenantRegistry(deployment, platform_stores.db)
    own_gateway = Gateway.of(DealerAgent(deployment, platform_stores), work)
    console = PlatformConsole(own_gateway, registry)
    chosen = tenant_surfaces(SURFACES if surfaces is None else surfaces, console, deployment.platform)
    table = SurfaceTable(chosen)
    metrics = Metrics()
    hosts = Hosts(registry.store, work)
    platform = deployment.platform
    shares = TenantShares(
        limit=platform.tenant_slots(work.threads), queue=platform.tenant_queue, wait=platform.tenant_queue_ms / 1000
    )
    runtimes = Runtimes(
        registry,
        work,
        chosen,
        platform_stores.reads,
        kept=platform.tenants_in_memory,
        parked=platform.settings_in_memory,
        shares=shares,
    )
    context = PlatformContext(deployment, registry, platform_stores, work, runtimes, own_gateway, console, hosts)
    state = {"settings": deployment, "stores": platform_stores, "metrics": metrics, "work": work}
    feed = ChangeFeed(registry.store, runtimes, hosts, deployment.platform.changes_poll_ms)
    ai_catalog = PlatformCatalog(registry.store, deployment.platform, registry.public_url, work)

    def tenant_states() -> str:  # blocking: read at each scrape
        unavailable = registry.store.unavailable()
        broken = [r.tenant_id for r in unavailable if r.broken is not None]
        return tenant_gauges(broken, [r.tenant_id for r in unavailable if r.suspended_ms is not None])

    readiness = Readiness(platform_stores.db, PLATFORM_DOMAINS, feed.age, feed.max_age)
    own: list[BaseRoute] = [
        *operator_routes(
            deployment,
            readiness,
            metrics=platform_metrics_endpoint(deployment, metrics_token(deployment), tenant_states),
        ),
        Route(TLS_ALLOWED_PATH, tls_allowed_endpoint(hosts), methods=["GET"], name="platform_tls_allowed"),
        Route(AI_CATALOG_PATH, ai_catalog.endpoint, methods=["GET", "HEAD"], name="platform_ai_catalog"),
        *console.routes(),
    ]
    for routes in platform_routes:
        own.extend(routes(context))
    platform_app = own_app(deployment, own, table, state)

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

    routing = Middleware(
        TenantRouting,
        platform=deployment.platform,
        runtimes=runtimes,
        hosts=hosts,
        platform_app=platform_app,
        max_body_bytes=deployment.max_body_bytes,
        operator_port=deployment.metrics_listen is not None,
        shapes=table.shapes,
    )
    return assemble(
        deployment,
        routing=routing,
        table=table,
        metrics=metrics,
        lifespan=lifespan,
        state={**state, "platform": context},
        own_routes=own,
        tracing=tracing,
    )
