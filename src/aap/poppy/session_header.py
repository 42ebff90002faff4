"""The AAP 3.2 ``Poppy-Session`` header: a per-request JWT signed by a delegated key.

Verification (seed 003 plus the project's delegation rules, docs/poppy.md):

1. one header, one compact JWS; ``typ: poppy-session+jwt``, ``alg: ES256``, ``kid`` a
   43-character RFC 7638 thumbprint, ``poppy_dlg`` a compact JWS;
2. the payload's ``iss`` is the personal agent's ``client_id``: policy, then its
   metadata and JWKS are loaded exactly as for the token endpoint;
3. ``poppy_dlg`` is verified with the identity key its ``kid`` names (ES256); its
   claims must be ``iss`` = that ``client_id``, ``cnf.jwk`` = the delegated public
   key, numeric ``iat``/``exp`` with ``exp - iat`` ≤ ``delegation_max_lifetime`` and
   the current time inside them, an optional ``nbf`` not in the future (RFC 7519
   §4.1.5); ``sub`` must equal the session JWT's (a delegation without one binds to
   no user, so it vouches for none), optional ``sid`` too; optional ``aud`` must be
   (or contain) the issuer;
4. the thumbprint of ``cnf.jwk`` must equal the session JWT's ``kid`` and must not
   be one of the agent's identity keys (a delegation hands a *different*, short-lived
   key the right to sign), and the session JWT must verify with that key;
5. ``aud`` = ``auth.issuer``, ``htm``/``htu`` match the request (public URL),
   ``iat`` inside the DPoP window, an optional ``exp`` not in the past and ``nbf``
   not in the future (RFC 7519 §4.1.4, §4.1.5), ``jti`` single-use per client,
   ``ath`` present exactly when an access token is sent, and equal to its hash.

Every time comparison allows ``[poppy] clock_skew`` seconds (30 by default) of
clock difference between the agent and this server (RFC 7519 §4.1.4: "some small
leeway").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aap.poppy import assertions
from aap.poppy.client_metadata import ClientMetadataError
from aap.poppy.context import PoppyContext
from aap.poppy.dpop import DpopProblem, header_value, normalize_url
from aap.poppy.jose import (
    CompactJws,
    JoseProblem,
    access_token_hash,
    b64url_decode,
    numeric_date,
    parse_jws,
    public_p256_key,
    same,
)

SESSION_TYP = "poppy-session+jwt"
_KID = re.compile(r"^[A-Za-z0-9_-]{43}$")
_SID = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_FOREIGN_TYPES = {"dpop+jwt", "poppy-session+jwt", "poppy-browser+jwt", "at+jwt"}


class SessionProblem(ValueError):
    """Why a Poppy-Session header was refused (safe to send)."""


@dataclass(frozen=True)
class PoppySession:
    client_id: str
    sub: str
    sid: str
    agent_id: str | None
    jkt: str  # thumbprint of the delegated key
    replay: tuple[str, str, float]


def _parse(value: str) -> CompactJws:
    jwt = parse_jws(value, lambda why: SessionProblem(f"Poppy-Session is {why}"))
    header = jwt.header
    if header.get("typ") != SESSION_TYP:
        raise SessionProblem('Poppy-Session typ must be "poppy-session+jwt"')
    if header.get("alg") != "ES256":
        raise SessionProblem("Poppy-Session alg must be ES256")
    if not isinstance(header.get("kid"), str) or not _KID.match(header["kid"]):
        raise SessionProblem("Poppy-Session kid must be the delegated key's RFC 7638 thumbprint")
    if not isinstance(header.get("poppy_dlg"), str):
        raise SessionProblem("Poppy-Session needs the poppy_dlg delegation")
    return jwt


async def verify_session_header(
    ctx: PoppyContext,
    values: list[str],
    *,
    method: str,
    url: str,
    now: float,
    access_token: str | None,
) -> PoppySession:
    """Verify one request's ``Poppy-Session`` header; the replay entry is returned, not written."""
    try:
        value = header_value(values, "Poppy-Session")
    except DpopProblem as exc:
        raise SessionProblem(str(exc)) from exc
    jwt = _parse(value)
    claims = jwt.claims
    client_id = claims.get("iss")
    if not isinstance(client_id, str) or not client_id.startswith("https://"):
        raise SessionProblem("Poppy-Session iss must be the agent's https client_id")
    if not ctx.settings.client_allowed(client_id):
        raise SessionProblem("this personal agent is not allowed")
    try:
        client = await ctx.clients.get(client_id)
    except ClientMetadataError as exc:
        raise SessionProblem(f"client metadata unusable: {exc}") from exc

    # The delegation: signed by a published identity key, naming the delegated key.
    delegation = parse_jws(jwt.header["poppy_dlg"], lambda why: SessionProblem(f"poppy_dlg is {why}"))
    dheader = delegation.header
    if dheader.get("alg") != "ES256":
        raise SessionProblem("poppy_dlg alg must be ES256")
    typ = dheader.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() in _FOREIGN_TYPES):
        raise SessionProblem("poppy_dlg has the type of another token")
    if any(name in dheader for name in ("jku", "x5u", "jwk", "x5c")):
        raise SessionProblem("poppy_dlg must not carry or point at keys; they come from jwks_uri")
    kid = dheader.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise SessionProblem("poppy_dlg kid must be a string")
    identity_key = assertions.select_key(client.keys, kid)
    if identity_key is None and kid is not None:
        client = await ctx.clients.refresh_keys(client)
        identity_key = assertions.select_key(client.keys, kid)
    if identity_key is None:
        raise SessionProblem("poppy_dlg is not signed by a published identity key")
    try:
        delegation.verify(identity_key)
    except JoseProblem as exc:
        raise SessionProblem("poppy_dlg signature invalid") from exc
    return _check_claims(
        ctx,
        jwt,
        delegation.claims,
        client_id,
        identity_keys=client.keys,
        method=method,
        url=url,
        now=now,
        access_token=access_token,
    )


def _point(jwk: Any) -> tuple[int, int] | None:
    """The (x, y) of an EC JWK, as numbers (so two spellings of one key compare equal)."""
    try:
        return int.from_bytes(b64url_decode(jwk["x"]), "big"), int.from_bytes(b64url_decode(jwk["y"]), "big")
    except (JoseProblem, KeyError, TypeError, ValueError):
        return None


def _not_before(claims: dict[str, Any], now: float, skew: int, name: str) -> None:
    """RFC 7519 §4.1.5: an ``nbf``, when present, is a NumericDate not later than now (± skew)."""
    if "nbf" not in claims:
        return
    try:
        nbf = numeric_date(claims, "nbf")
    except JoseProblem as exc:
        raise SessionProblem(f"{name} {exc}") from exc
    if nbf > now + skew:
        raise SessionProblem(f"{name} is not valid yet (nbf)")


def _check_claims(
    ctx: PoppyContext,
    jwt: CompactJws,
    dclaims: dict[str, Any],
    client_id: str,
    *,
    identity_keys: tuple[dict[str, Any], ...],
    method: str,
    url: str,
    now: float,
    access_token: str | None,
) -> PoppySession:
    settings = ctx.settings
    claims = jwt.claims
    if dclaims.get("iss") != client_id:
        raise SessionProblem("poppy_dlg iss must equal the session's client_id")
    cnf = dclaims.get("cnf")
    if not isinstance(cnf, dict) or "jwk" not in cnf:
        raise SessionProblem("poppy_dlg must name the delegated key in cnf.jwk")
    try:
        delegated = public_p256_key(cnf["jwk"])
        d_iat = numeric_date(dclaims, "iat")
        d_exp = numeric_date(dclaims, "exp")
    except JoseProblem as exc:
        raise SessionProblem(f"poppy_dlg {exc}") from exc
    if d_exp <= d_iat or d_exp - d_iat > settings.delegation_max_lifetime:
        raise SessionProblem("poppy_dlg lifetime is invalid or too long")
    if d_iat > now + settings.clock_skew or now > d_exp + settings.clock_skew:
        raise SessionProblem("poppy_dlg is not valid at this time")
    _not_before(dclaims, now, settings.clock_skew, "poppy_dlg")
    aud = dclaims.get("aud")
    if aud is not None and aud != ctx.issuer and not (isinstance(aud, list) and ctx.issuer in aud):
        raise SessionProblem("poppy_dlg aud does not name this issuer")
    jkt = delegated.thumbprint()
    if not same(jkt, jwt.header["kid"]):
        raise SessionProblem("Poppy-Session kid is not the thumbprint of the delegated key")
    if any(_point(jwk) == _point(cnf["jwk"]) for jwk in identity_keys):
        raise SessionProblem("poppy_dlg must delegate a key other than the agent's identity keys")
    try:
        jwt.verify(delegated)
    except JoseProblem as exc:
        raise SessionProblem("Poppy-Session signature invalid") from exc

    if claims.get("aud") != ctx.issuer:
        raise SessionProblem("Poppy-Session aud must equal the issuer")
    sid = claims.get("sid")
    if not isinstance(sid, str) or not _SID.match(sid):
        raise SessionProblem("Poppy-Session sid must match [A-Za-z0-9_-]{1,256}")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not 1 <= len(sub) <= assertions.MAX_ID or sub == client_id:
        raise SessionProblem("Poppy-Session sub must be the opaque User ID")
    if "sub" not in dclaims:
        raise SessionProblem("poppy_dlg names no user (sub), so it vouches for none")
    for name, expected in (("sub", sub), ("sid", sid)):
        if name in dclaims and dclaims[name] != expected:
            raise SessionProblem(f"poppy_dlg {name} does not match the session")
    agent_id = claims.get("agent_id")
    if agent_id is not None and (not isinstance(agent_id, str) or not 1 <= len(agent_id) <= assertions.MAX_ID):
        raise SessionProblem("Poppy-Session agent_id must be a string of 1 to 256 characters")
    if claims.get("htm") != method:
        raise SessionProblem("Poppy-Session htm does not match the request method")
    if normalize_url(claims.get("htu")) != normalize_url(url):
        raise SessionProblem("Poppy-Session htu does not match the request URL")
    try:
        iat = numeric_date(claims, "iat")
    except JoseProblem as exc:
        raise SessionProblem(f"Poppy-Session {exc}") from exc
    if abs(now - iat) > settings.dpop_iat_window:
        raise SessionProblem("Poppy-Session iat is outside the acceptance window")
    if "exp" in claims:
        try:
            exp = numeric_date(claims, "exp")
        except JoseProblem as exc:
            raise SessionProblem(f"Poppy-Session {exc}") from exc
        if now > exp + settings.clock_skew:
            raise SessionProblem("Poppy-Session has expired (exp)")
    _not_before(claims, now, settings.clock_skew, "Poppy-Session")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not 1 <= len(jti) <= 256:
        raise SessionProblem("Poppy-Session jti must be a string of 1 to 256 characters")
    ath = claims.get("ath")
    if access_token is None:
        if ath is not None:
            raise SessionProblem("Poppy-Session ath is present but no access token was sent")
    elif not isinstance(ath, str) or not same(ath, access_token_hash(access_token)):
        raise SessionProblem("Poppy-Session ath does not match the access token")
    replay = ("poppy-session", f"{client_id} {jti}", max(iat, now) + settings.dpop_iat_window + 1)
    return PoppySession(client_id, sub, sid, agent_id if isinstance(agent_id, str) else None, jkt, replay)
