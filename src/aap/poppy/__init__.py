"""The Poppy binding (Personal Agent Protocol 0.3 as pinned by AAP 3.1).

``build(gateway)`` returns the routes of the whole publication: poppy.json, the
issuer and protected-resource metadata, the excluded-tasks document, the guest
OAuth issuer (``/oauth/token``, ``/oauth/revoke``, ``/oauth/jwks.json``), the
native OpenAPI API (``/poppy/openapi.json``, ``/poppy/v1/{skill id}``) and
feedback (``/poppy/feedback``). With ``mcp_enabled`` the issuer also exchanges
Session tokens for MCP Bearer tokens (:mod:`.exchange`), poppy.json lists the
MCP endpoint and its RFC 9728 metadata is served; :func:`mcp_verifier` gives
the MCP binding the matching verifier (:mod:`.bearer`). See docs/poppy.md for
every rule enforced.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from aap.config.model import Settings
from aap.config.poppy import PoppySettings
from aap.errors import unexpected
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
from aap.poppy.authn import authenticate
from aap.poppy.bearer import McpBearerVerifier
from aap.poppy.context import PoppyContext
from aap.poppy.keys import SigningKeys
from aap.poppy.oauth import OAuthError, oauth_error_shape, server_error
from aap.store import Stores
from aap.web.body import BodyTooLarge, read_request_body
from aap.web.direct import endpoint_app
from aap.web.documents import StaticDocument
from aap.web.errors import ErrorShape
from aap.web.parts import BindingParts

__all__ = ["build", "mcp_verifier", "PoppySettings", "PoppyContext", "rotate_signing_key"]


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
            _document(lambda: discovery.mcp_resource_metadata(ctx)),
            methods=["GET", "HEAD"],
            name="poppy_mcp_protected_resource",
        )
    ]


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


def build(
    gateway: Gateway, *, settings: PoppySettings | None = None, ssl_context: ssl.SSLContext | None = None
) -> BindingParts:
    """All Poppy routes of ``gateway``'s agent. ``settings`` overrides its ``settings.poppy`` (tests);
    ``ssl_context`` overrides the trust store used to fetch client metadata."""
    options = settings if settings is not None else gateway.settings.poppy
    if not options.enabled:
        return BindingParts()
    ctx = PoppyContext(gateway, options, gateway.stores.poppy, ssl_context)

    async def feedback_endpoint(request: Request) -> Response:
        try:
            caller = await authenticate(ctx, request, ctx.urls.poppy_feedback)
            try:
                raw = await read_request_body(request, feedback.MAX_BODY)
            except BodyTooLarge:
                raise OAuthError("invalid_request", "the feedback report is too large", 400) from None
            return await feedback.receive(ctx, caller, raw)
        except OAuthError as exc:
            return exc.response()
        except Exception as exc:
            unexpected(exc, binding="poppy", endpoint="feedback")
            return server_error().response()

    async def token(request: Request) -> Response:
        return await token_endpoint.token(ctx, request)

    async def revoke(request: Request) -> Response:
        return await token_endpoint.revoke(ctx, request)

    routes: list[BaseRoute] = [
        *mcp_routes(ctx),
        Route(POPPY_PATH, _document(lambda: discovery.poppy_document(ctx)), methods=["GET", "HEAD"], name="poppy"),
        Route(
            OAUTH_METADATA_PATH,
            _document(lambda: discovery.issuer_metadata(ctx)),
            methods=["GET", "HEAD"],
            name="poppy_issuer_metadata",
        ),
        Route(
            PROTECTED_RESOURCE_PATH,
            _document(lambda: discovery.protected_resource_metadata(ctx)),
            methods=["GET", "HEAD"],
            name="poppy_protected_resource",
        ),
        Route(
            POPPY_EXCLUDED_TASKS_PATH,
            _document(lambda: discovery.excluded_tasks_document(ctx)),
            methods=["GET", "HEAD"],
            name="poppy_excluded_tasks",
        ),
        Route(
            POPPY_OPENAPI_PATH,
            _document(_cached(lambda: openapi_document(ctx))),
            methods=["GET", "HEAD"],
            name="poppy_openapi",
        ),
        Route(
            JWKS_PATH,
            _document(ctx.keys.public_jwks, max_age=60, blocking=gateway),
            methods=["GET", "HEAD"],
            name="poppy_jwks",
        ),
        Route(TOKEN_PATH, token, methods=["POST"], name="poppy_token"),
        Route(REVOKE_PATH, revoke, methods=["POST"], name="poppy_revoke"),
    ]
    if options.feedback_enabled:
        routes.append(Route(POPPY_FEEDBACK_PATH, feedback_endpoint, methods=["POST"], name="poppy_feedback"))
    direct: dict[tuple[str, str | None], ASGIApp] = {}
    for skill in gateway.agent.skills:
        endpoint = SkillEndpoint(ctx, skill).handle
        routes.append(Route(POPPY_API_PREFIX + skill.id, endpoint, methods=["POST"], name=f"poppy_{skill.id}"))
        direct[(POPPY_API_PREFIX + skill.id, "POST")] = endpoint_app(endpoint)  # the API calls: ahead of the router

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Signing keys are made on first use (and shared through the database), so that a
        # worker loads the JOSE library only when Poppy traffic reaches it.
        await gateway.blocking(ctx.store.purge_expired, options.session_idle_ttl)
        app.state.poppy = ctx
        yield

    return BindingParts(routes=routes, lifespans=[lifespan], direct=direct)


def mcp_verifier(gateway: Gateway) -> McpBearerVerifier | None:
    """The MCP binding's Bearer verifier, when this issuer exchanges MCP tokens; else None."""
    options = gateway.settings.poppy
    if not (options.enabled and options.mcp_enabled):
        return None
    return McpBearerVerifier(gateway, options)


def rotate_signing_key(stores: Stores, settings: Settings | None = None) -> str:
    """Operator action (e.g. ``aap poppy rotate-keys``): a new active signing key; returns its kid."""
    options = settings.poppy if settings is not None else PoppySettings()
    return SigningKeys(stores.poppy, options.access_token_ttl).rotate()
