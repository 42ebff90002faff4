"""RFC 8693 token exchange at ``/oauth/token``: a Session's DPoP token → a Bearer token for ``/mcp``.

PAP 0.3 reaches a non-DPoP MCP server this way (seed 004:
``PoppyTokenExchangeRequest``, ``PoppyTokenExchangeResponse``,
``PoppyMcpResourceMetadata``): the agent authenticates as for a guest grant,
proves possession of the Session key with a fresh DPoP proof *without* ``ath``
(RFC 9449 §5: a token request), names its DPoP Session token as the subject and
the advertised MCP URL as the ``resource``, and gets a short-lived Bearer token
bound to that URL, for the same Session, with no scope (a guest subject has
none, and scopes never widen) and no refresh token. docs/poppy.md ("MCP for
signed-in agents") lists every check in order.

The token endpoint (:mod:`aap.poppy.token_endpoint`) authenticates the client
and dispatches here on ``grant_type``; as for the guest grant, every check runs
before anything is written, and the single-use values are consumed in the
transaction that stores the token.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from aap.poppy import tokens
from aap.poppy.context import PoppyContext
from aap.poppy.grant import TokenRequest
from aap.poppy.oauth import NO_STORE, OAuthError, invalid_client, invalid_request, token_endpoint_dpop_error
from aap.store.poppy import Replayed, SubjectGone

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def invalid_target(description: str) -> OAuthError:
    return OAuthError("invalid_target", description, 400)


def _check_form(ctx: PoppyContext, form: dict[str, str]) -> str:
    """The request's own rules (RFC 8693 §2.1, seed 004 PoppyTokenExchangeRequest); the subject token."""
    if "session_id" in form:
        raise invalid_request("session_id is not a PAP 0.3 parameter; the DPoP key identifies the Session")
    if form.get("subject_token_type") != ACCESS_TOKEN_TYPE:
        raise invalid_request(f"subject_token_type must be {ACCESS_TOKEN_TYPE}")
    if "subject_token" not in form:
        raise invalid_request("subject_token (the DPoP Session token) is required")
    if "actor_token" in form or "actor_token_type" in form:
        raise invalid_request("actor tokens are not accepted: an agent exchanges its own Session token")
    if form.get("requested_token_type", ACCESS_TOKEN_TYPE) != ACCESS_TOKEN_TYPE:
        raise invalid_request(f"requested_token_type must be {ACCESS_TOKEN_TYPE}")
    if form.get("resource") != ctx.mcp_resource:
        raise invalid_target("resource must be the MCP endpoint's URL exactly, as poppy.json lists it")
    if form.get("audience", ctx.mcp_resource) != ctx.mcp_resource:
        raise invalid_target("audience, when sent, must be the MCP endpoint's URL")
    if "scope" in form:
        raise OAuthError("invalid_scope", "a guest Session has no scope, and an exchange never widens it", 400)
    return form["subject_token"]


async def exchange(ctx: PoppyContext, grant: TokenRequest) -> Response:
    """Answer one token-exchange request from the authenticated ``grant.client``."""
    form, client, now = grant.form, grant.client, grant.now
    subject_token = _check_form(ctx, form)
    try:
        subject = await ctx.gateway.blocking(tokens.check, ctx, subject_token, now=now)
    except OAuthError as exc:  # RFC 8693 §2.2.2: an unacceptable subject token is invalid_request
        raise invalid_request("subject_token is not a live DPoP Session token of this issuer") from exc
    if subject.session.client_id != client.client_id:
        raise invalid_request("subject_token was not issued to this client")
    proof = grant.proof(ctx)
    if proof.jkt != subject.session.jkt:
        raise token_endpoint_dpop_error("the proof is not signed by the subject token's Session key")

    expires_at = min(float(int(now) + ctx.settings.mcp_token_ttl), subject.expires_at)
    token, expires_at = await ctx.gateway.blocking(
        tokens.mint, ctx, jkt=None, resource=ctx.mcp_resource, now=now, expires_at=expires_at
    )
    client_entry = grant.client_assertion.replay_entry(client.client_id, ctx.settings.clock_skew)
    try:
        await ctx.gateway.blocking(
            ctx.store.exchange,
            subject_token=subject_token,
            token=token,
            resource=ctx.mcp_resource,
            expires_at=expires_at,
            consumed=[client_entry, proof.replay],
            now=now,
        )
    except Replayed as exc:
        if exc.entry == client_entry[1]:
            raise invalid_client("the client assertion jti was already used") from exc
        raise token_endpoint_dpop_error("the proof jti was already used") from exc
    except SubjectGone as exc:
        raise invalid_request("subject_token is not a live DPoP Session token of this issuer") from exc
    body: dict[str, Any] = {
        "access_token": token,
        "issued_token_type": ACCESS_TOKEN_TYPE,
        "token_type": "Bearer",
        "expires_in": max(1, int(expires_at - int(now))),
    }
    return JSONResponse(body, headers=NO_STORE)
