"""Who is calling the native API: a DPoP-bound guest token, or a 3.2 ``Poppy-Session`` header.

:func:`authenticate` only verifies; :func:`consume` then records the request's
single-use values (proof ``jti``, Poppy-Session ``jti``) in one transaction, shared with
the other calls in flight (:mod:`aap.poppy.uses`).
Endpoints consume once the request is known to be well-formed, so a refused
request — bad credentials or a bad body — leaves the database exactly as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from starlette.requests import Request

from aap.poppy import tokens
from aap.poppy.context import PoppyContext, caller_identity
from aap.poppy.dpop import DpopProblem, verify_proof
from aap.poppy.oauth import OAuthError, resource_error
from aap.poppy.session_header import SessionProblem, verify_session_header
from aap.store.poppy import Replayed, SessionUse

TOUCH_EVERY = 60.0
TOKEN_CHECK = ("poppy.token",)  # the work shape of a token check (a read)


@dataclass(frozen=True)
class Caller:
    """A verified, signed-out personal-agent caller."""

    client_id: str
    sub: str  # the stable, opaque Poppy User ID
    agent_id: str | None
    session_id: str | None  # the guest Session behind the token, if a token was used
    via: str  # "dpop" or "poppy-session"
    pending: tuple[tuple[str, str, float], ...] = ()  # single-use values to consume
    touch: bool = False  # mark the Session as used now

    @property
    def caller_id(self) -> str:
        return caller_identity(self.client_id, self.sub)


def _bad_request(description: str) -> OAuthError:
    return OAuthError("invalid_request", description, 400, challenge=True)


def _access_token(request: Request) -> str | None:
    """The token from ``Authorization: DPoP <token>`` (None when no Authorization header)."""
    values = request.headers.getlist("authorization")
    if not values:
        return None
    if len(values) != 1:
        raise _bad_request("send one Authorization header")
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer":
        raise resource_error("invalid_token", "this API takes DPoP-bound tokens: use the DPoP scheme")
    if scheme.lower() != "dpop" or not token or " " in token:
        raise resource_error("invalid_token", "send Authorization: DPoP <access token>")
    return token


async def authenticate(ctx: PoppyContext, request: Request, url: str) -> Caller:
    """Verify the credentials of one API request to ``url`` (its public URL); nothing is written."""
    if "access_token" in request.query_params:
        raise _bad_request("access tokens are accepted only in the Authorization header")
    now = time.time()
    token = _access_token(request)
    session_values = request.headers.getlist("poppy-session")
    if session_values and ctx.settings.accept_poppy_session:
        if request.headers.getlist("dpop"):
            raise _bad_request("send either a DPoP proof or a Poppy-Session, not both")
        try:
            session = await verify_session_header(
                ctx, session_values, method=request.method, url=url, now=now, access_token=token
            )
        except SessionProblem as exc:
            raise resource_error("invalid_token", str(exc)) from exc
        session_id = None
        touch = False
        if token is not None:
            record = await ctx.gateway.placed(TOKEN_CHECK, partial(tokens.check, ctx, token, now=now))
            bound = record.session
            if (bound.jkt, bound.client_id, bound.sub) != (session.jkt, session.client_id, session.sub):
                raise resource_error("invalid_token", "the access token is not bound to this Poppy-Session key")
            session_id = bound.id
            touch = now - bound.last_used_at > TOUCH_EVERY
        return Caller(
            session.client_id, session.sub, session.agent_id, session_id, "poppy-session", (session.replay,), touch
        )

    if token is None:
        raise resource_error("invalid_token", "a DPoP-bound access token is required")
    record = await ctx.gateway.placed(TOKEN_CHECK, partial(tokens.check, ctx, token, now=now))
    try:
        proof = verify_proof(
            request.headers.getlist("dpop"),
            method=request.method,
            url=url,
            now=now,
            window=ctx.settings.dpop_iat_window,
            access_token=token,
        )
    except DpopProblem as exc:
        raise resource_error("invalid_dpop_proof", str(exc)) from exc
    bound = record.session
    if proof.jkt != bound.jkt:
        raise resource_error("invalid_dpop_proof", "the proof is not signed by the token's key")
    return Caller(
        bound.client_id,
        bound.sub,
        bound.agent_id,
        bound.id,
        "dpop",
        (proof.replay,),
        now - bound.last_used_at > TOUCH_EVERY,
    )


async def consume(ctx: PoppyContext, caller: Caller) -> None:
    """Record the request's single-use values, in the next batch of concurrent calls
    (:mod:`aap.poppy.uses`): one write for the calls in flight together."""
    try:
        await ctx.uses.record(
            SessionUse(caller.session_id, caller.pending, touch=caller.touch and caller.session_id is not None)
        )
    except Replayed as exc:
        if caller.via == "dpop":
            raise resource_error("invalid_dpop_proof", "the proof jti was already used") from exc
        raise resource_error("invalid_token", "the Poppy-Session jti was already used") from exc
