"""``POST /oauth/token`` (guest Sessions, MCP token exchange) and ``POST /oauth/revoke`` (RFC 7009).

The guest grant is the RFC 7523 JWT bearer grant with ``private_key_jwt`` client
authentication and a DPoP proof (RFC 9449); the same client authentication
precedes RFC 8693 token exchange for MCP (:mod:`aap.poppy.exchange`). Checks run in the order of
docs/poppy.md; every one of them happens before anything is written, and the
three single-use values (client assertion, Session assertion and proof
``jti``) are consumed in the same transaction that creates the Session and
stores the token. A refused request therefore changes nothing.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aap.errors import AapError, unexpected
from aap.poppy import assertions, tokens
from aap.poppy.assertions import Assertion, AssertionProblem
from aap.poppy.client_metadata import ClientInfo, ClientMetadataError
from aap.poppy.context import PoppyContext
from aap.poppy.exchange import TOKEN_EXCHANGE, exchange
from aap.poppy.grant import TokenRequest
from aap.poppy.jose import public_p256_key
from aap.poppy.oauth import (
    NO_STORE,
    OAuthError,
    invalid_client,
    invalid_grant,
    invalid_request,
    server_error,
    token_endpoint_dpop_error,
)
from aap.ratelimit import retry_after_seconds
from aap.store.poppy import Replayed, SessionConflict
from aap.web.body import BodyTooLarge, read_request_body
from aap.web.callers import anonymous_caller

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_FORM_BYTES = 32_768
FORM_TYPE = "application/x-www-form-urlencoded"


async def read_form(request: Request) -> dict[str, str]:
    """The form body; a repeated parameter is ``invalid_request`` (RFC 6749 §3.2)."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != FORM_TYPE:
        raise invalid_request(f"send the parameters as {FORM_TYPE}")
    try:
        body = await read_request_body(request, MAX_FORM_BYTES)
    except BodyTooLarge:
        raise invalid_request("the request body is too large") from None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise invalid_request("the form body is not valid UTF-8 form encoding") from exc
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise invalid_request(f"the parameter {name} is repeated")
        form[name] = value
    # RFC 6749 §3.1: a parameter sent without a value is treated as omitted.
    return {name: value for name, value in form.items() if value != ""}


async def _identity_key(ctx: PoppyContext, client: ClientInfo, jwt: Any) -> tuple[ClientInfo, Any]:
    kid = jwt.header.get("kid")
    key = assertions.select_key(client.keys, kid)
    if key is None and kid is not None:
        client = await ctx.clients.refresh_keys(client)
        key = assertions.select_key(client.keys, kid)
    return client, key


async def authenticate_client(ctx: PoppyContext, form: dict[str, str], now: float) -> tuple[ClientInfo, Assertion]:
    """``private_key_jwt``: policy, identity documents, then the client assertion (not yet consumed)."""
    client_id = form.get("client_id")
    if client_id is None:
        raise invalid_client("client_id is required")
    if form.get("client_assertion_type") != CLIENT_ASSERTION_TYPE:
        raise invalid_client(f"client_assertion_type must be {CLIENT_ASSERTION_TYPE}")
    if "client_assertion" not in form:
        raise invalid_client("client_assertion is required")
    if not ctx.settings.client_allowed(client_id):
        raise invalid_client("this personal agent is not allowed")
    try:
        client = await ctx.clients.get(client_id)
        jwt = assertions.parse(form["client_assertion"])
    except (ClientMetadataError, AssertionProblem) as exc:
        raise invalid_client(str(exc)) from exc
    client, key = await _identity_key(ctx, client, jwt)
    if key is None:
        raise invalid_client("the client assertion is not signed by a published identity key")
    try:
        assertion = assertions.verify(
            jwt, key, kind="client", client_id=client_id, issuer=ctx.issuer, now=now, skew=ctx.settings.clock_skew
        )
    except AssertionProblem as exc:
        raise invalid_client(f"client assertion: {exc}") from exc
    return client, assertion


async def limit_network(ctx: PoppyContext, request: Request) -> None:
    """Unauthenticated endpoints are rate-limited per network address (database buckets)."""
    key = "poppy-issuer:" + anonymous_caller(request)
    try:
        await ctx.gateway.admit(key)
    except AapError as exc:
        raise OAuthError(
            "rate_limited", "too many requests; retry later", 429, retry_after=retry_after_seconds(exc)
        ) from exc


async def token(ctx: PoppyContext, request: Request) -> Response:
    try:
        await limit_network(ctx, request)
        form = await read_form(request)
        return await _grant(ctx, request, form)
    except OAuthError as exc:
        return exc.response()
    except Exception as exc:  # never a stack trace on the wire or in the log
        unexpected(exc, binding="poppy", endpoint="token")
        return server_error().response()


async def _grant(ctx: PoppyContext, request: Request, form: dict[str, str]) -> Response:
    """Client authentication first, then the grant: JWT bearer (a guest Session) or token exchange (MCP)."""
    now = time.time()
    client, client_assertion = await authenticate_client(ctx, form, now)
    grant_type = form.get("grant_type")
    if grant_type is None:
        raise invalid_request("grant_type is required")
    if grant_type == "refresh_token":
        raise invalid_grant("this guest issuer issues no refresh tokens; start a new guest Session")
    if grant_type == TOKEN_EXCHANGE and ctx.mcp_enabled:
        return await exchange(ctx, TokenRequest(request, form, client, client_assertion, now))
    if grant_type != JWT_BEARER:
        supported = "the JWT bearer grant and token exchange for MCP" if ctx.mcp_enabled else "the JWT bearer grant"
        raise OAuthError("unsupported_grant_type", f"only {supported} are supported", 400)
    return await _guest_grant(ctx, TokenRequest(request, form, client, client_assertion, now))


async def _guest_grant(ctx: PoppyContext, grant: TokenRequest) -> Response:
    form, client, client_assertion, now = grant.form, grant.client, grant.client_assertion, grant.now
    settings = ctx.settings
    if "assertion" not in form:
        raise invalid_request("assertion (the Session assertion) is required")
    try:
        jwt = assertions.parse(form["assertion"])
        client, key = await _identity_key(ctx, client, jwt)
        if key is None:
            raise AssertionProblem("not signed by a published identity key")
        session = assertions.verify(
            jwt, key, kind="session", client_id=client.client_id, issuer=ctx.issuer, now=now, skew=settings.clock_skew
        )
    except AssertionProblem as exc:
        raise invalid_grant(f"Session assertion: {exc}") from exc
    if session.jti == client_assertion.jti:
        raise invalid_grant("the Session assertion and the client assertion need different jti values")
    if "session_id" in form:
        raise invalid_request("session_id is not a PAP 0.3 parameter; the DPoP key identifies the Session")
    if "scope" in form:
        raise OAuthError("invalid_scope", "a guest grant takes no scope", 400)
    resource = form.get("resource")
    if resource is not None and resource not in ctx.protected_resources:
        raise OAuthError("invalid_target", "resource is not a protected resource of this issuer", 400)
    if resource is not None and resource == ctx.mcp_resource:
        raise OAuthError("invalid_target", "MCP tokens come from token exchange, not from the guest grant", 400)
    proof = grant.proof(ctx)
    identity_thumbprints = {public_p256_key(jwk).thumbprint() for jwk in client.keys}
    if proof.jkt in identity_thumbprints:
        raise token_endpoint_dpop_error("the Session key must not be a published identity key")

    client_entry = client_assertion.replay_entry(client.client_id, settings.clock_skew)
    session_entry = session.replay_entry(client.client_id, settings.clock_skew)
    access_token, expires_at = await ctx.gateway.blocking(tokens.mint, ctx, jkt=proof.jkt, resource=resource, now=now)
    try:
        await ctx.gateway.blocking(
            ctx.store.start_session,
            jkt=proof.jkt,
            client_id=client.client_id,
            sub=session.sub,
            agent_id=session.agent_id,
            token=access_token,
            token_type="DPoP",
            resource=resource,
            expires_at=expires_at,
            idle_ttl=settings.session_idle_ttl,
            consumed=[client_entry, session_entry, proof.replay],
            now=now,
        )
    except Replayed as exc:
        if exc.entry == client_entry[1]:
            raise invalid_client("the client assertion jti was already used") from exc
        if exc.entry == session_entry[1]:
            raise invalid_grant("the Session assertion jti was already used") from exc
        raise token_endpoint_dpop_error("the proof jti was already used") from exc
    except SessionConflict as exc:
        raise invalid_grant("this DPoP key already identifies another Session; use one key per User ID") from exc
    await ctx.gateway.blocking(ctx.maybe_purge)
    body = {"access_token": access_token, "token_type": "DPoP", "expires_in": int(expires_at - int(now))}
    return JSONResponse(body, headers=NO_STORE)


async def revoke(ctx: PoppyContext, request: Request) -> Response:
    """RFC 7009: always ``200 {}`` once the client authenticated, known token or not."""
    try:
        await limit_network(ctx, request)
        form = await read_form(request)
        now = time.time()
        client, assertion = await authenticate_client(ctx, form, now)
        if "token" not in form:
            raise invalid_request("token is required")
        entry = assertion.replay_entry(client.client_id, ctx.settings.clock_skew)
        try:
            await ctx.gateway.blocking(ctx.store.revoke, form["token"], client.client_id, [entry], now)
        except Replayed as exc:
            raise invalid_client("the client assertion jti was already used") from exc
        return JSONResponse({}, headers=NO_STORE)
    except OAuthError as exc:
        return exc.response()
    except Exception as exc:
        unexpected(exc, binding="poppy", endpoint="revoke")
        return server_error().response()
