"""The provisioning API in a platform deployment's app (:mod:`aap.platform.api`, docs/platform.md).

Built from the platform's context: its registry, the platform's own gateway (its rate-limit
buckets are in the platform's namespace, never a tenant's), and the bearer token from the
environment variable ``[platform] api_token_env`` names, read once when a worker builds its app.
A tenant's inventory is imported with the stores and settings the worker serves it with (its
runtime), so that what is imported is what its agent answers from at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.routing import BaseRoute

from aap.config.model import Settings
from aap.platform.api import ProvisioningApi, TenantAgent
from aap.server.platform import PlatformContext
from aap.server.tenant_runtime import TenantUnavailable
from aap.store import Stores
from aap.tenants import TenantError


def tenant_agent(context: PlatformContext) -> TenantAgent:
    """A tenant's stores and settings as this worker serves it (:data:`aap.platform.api.TenantAgent`)."""

    async def agent(tenant_id: str) -> tuple[Stores, Settings]:
        registry = context.registry
        record = await context.work.blocking(registry.get, tenant_id)  # 404 when there is none
        if record.suspended_ms is not None:  # as the registry says now, before any worker follows it
            raise TenantError([f"tenant {tenant_id!r} is suspended: its inventory waits until it is resumed"], 409)
        try:
            runtime = await context.runtimes.get(tenant_id, registry.public_url(record))
        except TenantUnavailable as unavailable:
            raise TenantError(
                [f"tenant {tenant_id!r} is {unavailable.state}: its inventory waits until it is served again"],
                status=409,
            ) from None
        if runtime is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        return runtime.gateway.stores, runtime.gateway.settings

    return agent


def provisioning_routes(environ: Mapping[str, str]) -> Callable[[PlatformContext], list[BaseRoute]]:
    """The ``platform_routes`` hook of :func:`aap.server.platform.create_platform_app` for the API."""

    def routes(context: PlatformContext) -> list[BaseRoute]:
        platform = context.deployment.platform
        assert platform is not None
        return ProvisioningApi(
            context.registry,
            context.gateway.admit,
            environ.get(platform.api_token_env),
            work=context.work,
            agent=tenant_agent(context),
            max_upload_bytes=context.deployment.max_body_bytes,
        ).routes()

    return routes
