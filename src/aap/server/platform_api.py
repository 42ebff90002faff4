"""The provisioning API in a platform deployment's app (:mod:`aap.platform.api`, docs/platform.md).

Built from the platform's context: its registry, the platform's own gateway (its rate-limit
buckets are in the platform's namespace, never a tenant's), and the bearer token from the
environment variable ``[platform] api_token_env`` names, read once when a worker builds its app.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.routing import BaseRoute

from aap.platform.api import ProvisioningApi
from aap.server.platform import PlatformContext


def provisioning_routes(environ: Mapping[str, str]) -> Callable[[PlatformContext], list[BaseRoute]]:
    """The ``platform_routes`` hook of :func:`aap.server.platform.create_platform_app` for the API."""

    def routes(context: PlatformContext) -> list[BaseRoute]:
        platform = context.deployment.platform
        assert platform is not None
        return ProvisioningApi(
            context.registry, context.gateway.admit, environ.get(platform.api_token_env), work=context.work
        ).routes()

    return routes
