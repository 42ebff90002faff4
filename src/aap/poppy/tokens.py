"""Guest access tokens: minted as ES256 JWTs, trusted only through their database record.

The signature lets a worker refuse garbage without a lookup; the record (kept
as a hash) is the truth: revocation, Session end, a renewed Session and a
blocked client all take effect on the very next request. Agents must not
parse the token; its claims are only ``iss``, ``iat``, ``exp``, ``jti``,
``cnf.jkt`` (DPoP tokens) and, for a resource-bound token, ``aud`` (every MCP
Bearer token, :mod:`aap.poppy.exchange`).
"""

from __future__ import annotations

import secrets
from typing import Any

from aap.poppy.context import PoppyContext
from aap.poppy.jose import CompactJws, JoseProblem, sign
from aap.poppy.oauth import resource_error
from aap.store.poppy import TokenRecord

MAX_TOKEN_LENGTH = 4096
TOKEN_TYP = "at+jwt"


def mint(
    ctx: PoppyContext, *, jkt: str | None, resource: str | None, now: float, expires_at: float | None = None
) -> tuple[str, float]:
    """A new signed token; returns (token, expires_at).

    ``jkt`` binds a DPoP token to its key (``cnf.jkt``); an exchanged MCP Bearer
    token has none and is bound to its ``resource`` (``aud``) instead. The
    lifetime is ``access_token_ttl`` unless ``expires_at`` says otherwise.
    """
    kid, key = ctx.keys.active()
    if expires_at is None:
        expires_at = float(int(now) + ctx.settings.access_token_ttl)
    claims: dict[str, Any] = {
        "iss": ctx.issuer,
        "iat": int(now),
        "exp": int(expires_at),
        "jti": secrets.token_urlsafe(24),
    }
    if jkt is not None:
        claims["cnf"] = {"jkt": jkt}
    if resource is not None:
        claims["aud"] = resource
    return sign({"alg": "ES256", "typ": TOKEN_TYP, "kid": kid}, claims, key), expires_at


def check(ctx: PoppyContext, token: str, *, now: float, token_type: str = "DPoP") -> TokenRecord:
    """The live record of ``token`` or ``401 invalid_token`` (one description for every miss)."""
    refused = resource_error("invalid_token", "the access token is invalid, expired or revoked")
    if not token or len(token) > MAX_TOKEN_LENGTH:
        raise refused
    verified = ctx.verified_tokens.peek(token)
    if verified is None or ctx.keys.verification_key(verified[0]) is None:
        try:
            jwt = CompactJws(token)
            if jwt.header.get("typ") != TOKEN_TYP:
                raise refused
            kid = jwt.header.get("kid")
            key = ctx.keys.verification_key(kid)
            if key is None or not isinstance(kid, str):
                raise refused
            jwt.verify(key)
        except JoseProblem as exc:
            raise refused from exc
        checked = (kid, jwt.claims)
        # the same bytes under the same key stay valid (the key is looked up again on every use,
        # so a dropped key ends them; the record is the truth)
        ctx.verified_tokens.put(token, checked)
        verified = checked
    if verified[1].get("iss") != ctx.issuer:
        raise refused
    record = ctx.store.find_token(token)
    if record is None or record.revoked_at is not None or record.expires_at <= now:
        raise refused
    session = record.session
    if session.ended_at is not None or session.last_used_at + ctx.settings.session_idle_ttl < now:
        raise refused
    if not ctx.settings.client_allowed(session.client_id):
        raise refused
    if record.token_type != token_type:
        raise refused
    return record
