"""The provisioning API in a platform deployment's app (:mod:`aap.platform.api`, docs/platform.md).

Built from the platform's context: its registry, a rate limiter on the platform's own state
store (its buckets are never a tenant's), and the bearer token from the environment variable
``[platform] api_token_env`` names, read once when a worker builds its app.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.routing import BaseRoute

from aap.platform.api import ProvisioningApi
from aap.ratelimit import RateLimiter
from aap.server.platform import PlatformContext


def provisioning_routes(environ: Mapping[str, str]) -> Callable[[PlatformContext], list[BaseRoute]]:
    """The ``platform_routes`` hook of :func:`aap.server.platform.create_platform_app` for the API."""

    def routes(context: PlatformContext) -> list[BaseRoute]:
        platform = context.deployment.platform
        assert platform is not None
        limiter = RateLimiter(context.stores.state, context.deployment.rate_limit)
        return ProvisioningApi(context.registry, limiter, environ.get(platform.api_token_env)).routes()

    return routes
