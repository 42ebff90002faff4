"""The Poppy publication as a surface: the paths it answers, their error shapes, its route table.

Each endpoint is a named handler of the module that owns it (:mod:`~aap.poppy.discovery`'s
documents, :mod:`~aap.poppy.token_endpoint`, :mod:`~aap.poppy.feedback`,
:class:`~aap.poppy.api.SkillEndpoint`), bound here to the app's one
:class:`~aap.poppy.context.PoppyContext`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aap.config.poppy import PoppySettings
from aap.gateway import Gateway
from aap.paths import (
    JWKS_PATH,
    MCP_PROTECTED_RESOURCE_PATH,
    OAUTH_METADATA_PATH,
    OAUTH_PREFIX,
    POPPY_API_PREFIX,
    POPPY_EXCLUDED_TASKS_PATH,
    POPPY_FEEDBACK_PATH,
    POPPY_OPENAPI_PATH,
    POPPY_PATH,
    PROTECTED_RESOURCE_PATH,
    REVOKE_PATH,
    TOKEN_PATH,
)
from aap.poppy import discovery, feedback, token_endpoint
from aap.poppy.api import SkillEndpoint, aap_error_shape, openapi_document
from aap.poppy.context import PoppyContext
from aap.poppy.oauth import oauth_error_shape
from aap.web.direct import endpoint_app
from aap.web.documents import StaticDocument
from aap.web.errors import ErrorShape
from aap.web.parts import BindingParts

#: The paths this surface answers, and their error shapes (:mod:`aap.web.surface`).
PATHS = (
    POPPY_PATH,
    OAUTH_METADATA_PATH,
    PROTECTED_RESOURCE_PATH,
    MCP_PROTECTED_RESOURCE_PATH,
    POPPY_OPENAPI_PATH,
    POPPY_EXCLUDED_TASKS_PATH,
    POPPY_FEEDBACK_PATH,
    POPPY_API_PREFIX,
    OAUTH_PREFIX,
)
ERROR_SHAPES: dict[str, ErrorShape] = {
    OAUTH_PREFIX: oauth_error_shape,
    POPPY_FEEDBACK_PATH: oauth_error_shape,
    POPPY_API_PREFIX: aap_error_shape,
}


def _document(
    render: Callable[[], dict[str, Any]], max_age: int = 300, *, blocking: Gateway | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """A JSON document route; ``blocking``: rendered on that gateway's executor (it reads the database)."""

    async def endpoint(request: Request) -> Response:
        document = await blocking.blocking(render) if blocking is not None else render()
        body = orjson.dumps(document, option=orjson.OPT_INDENT_2)
        return StaticDocument(body, "application/json", max_age).respond(request)

    return endpoint


def _cached(render: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Render once, on first use (the skills are all registered by then)."""
    memo: list[dict[str, Any]] = []

    def cached() -> dict[str, Any]:
        if not memo:
            memo.append(render())
        return memo[0]

    return cached


def mcp_routes(ctx: PoppyContext) -> list[BaseRoute]:
    """RFC 9728 metadata of the MCP endpoint, when signed-in agents get MCP tokens.

    Served at the path-suffixed well-known URL of ``/mcp`` (RFC 9728 §3.1) below
    the public base URL: the URL the MCP endpoint's 401 challenge names.
    """
    if not ctx.mcp_enabled:
        return []
    return [
        Route(
            MCP_PROTECTED_RESOURCE_PATH,
            _document(partial(discovery.mcp_resource_metadata, ctx)),
            methods=["GET", "HEAD"],
            name="poppy_mcp_protected_resource",
        )
    ]


@asynccontextmanager
async def lifespan(ctx: PoppyContext, app: Starlette) -> AsyncIterator[None]:
    """Expired Sessions purged at start, the context on ``app.state.poppy``.

    Signing keys are made on first use (and shared through the database), so that a worker
    loads the JOSE library only when Poppy traffic reaches it."""
    await ctx.gateway.blocking(ctx.store.purge_expired, ctx.settings.session_idle_ttl)
    app.state.poppy = ctx
    yield


def build(
    gateway: Gateway, *, settings: PoppySettings | None = None, ssl_context: ssl.SSLContext | None = None
) -> BindingParts:
    """All Poppy routes of ``gateway``'s agent. ``settings`` overrides its ``settings.poppy`` (tests);
    ``ssl_context`` overrides the trust store used to fetch client metadata."""
    options = settings if settings is not None else gateway.settings.poppy
    if not options.enabled:
        return BindingParts()
    ctx = PoppyContext(gateway, options, gateway.stores.poppy, ssl_context)
    routes: list[BaseRoute] = [
        *mcp_routes(ctx),
        *(
            Route(path, _document(answer), methods=["GET", "HEAD"], name=name)
            for path, answer, name in (
                (POPPY_PATH, partial(discovery.poppy_document, ctx), "poppy"),
                (OAUTH_METADATA_PATH, partial(discovery.issuer_metadata, ctx), "poppy_issuer_metadata"),
                (
                    PROTECTED_RESOURCE_PATH,
                    partial(discovery.protected_resource_metadata, ctx),
                    "poppy_protected_resource",
                ),
                (POPPY_EXCLUDED_TASKS_PATH, partial(discovery.excluded_tasks_document, ctx), "poppy_excluded_tasks"),
                (POPPY_OPENAPI_PATH, _cached(partial(openapi_document, ctx)), "poppy_openapi"),
            )
        ),
        Route(
            JWKS_PATH,
            _document(ctx.keys.public_jwks, max_age=60, blocking=gateway),
            methods=["GET", "HEAD"],
            name="poppy_jwks",
        ),
        Route(TOKEN_PATH, partial(token_endpoint.token, ctx), methods=["POST"], name="poppy_token"),
        Route(REVOKE_PATH, partial(token_endpoint.revoke, ctx), methods=["POST"], name="poppy_revoke"),
    ]
    if options.feedback_enabled:
        routes.append(
            Route(POPPY_FEEDBACK_PATH, partial(feedback.endpoint, ctx), methods=["POST"], name="poppy_feedback")
        )
    direct: dict[tuple[str, str | None], ASGIApp] = {}
    for skill in gateway.agent.skills:
        endpoint = SkillEndpoint(ctx, skill).handle
        routes.append(Route(POPPY_API_PREFIX + skill.id, endpoint, methods=["POST"], name=f"poppy_{skill.id}"))
        direct[(POPPY_API_PREFIX + skill.id, "POST")] = endpoint_app(endpoint)  # the API calls: ahead of the router
    return BindingParts(routes=routes, lifespans=[partial(lifespan, ctx)], direct=direct)
