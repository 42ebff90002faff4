"""The two JWTs of a guest grant: the client assertion and the Session assertion.

Both are signed with the personal agent's published identity key (from its
``jwks_uri``; ``jku``/``x5u``/embedded keys are ignored by refusal), addressed to
``auth.issuer`` as one exact string, live at most 300 seconds, and carry a
``jti`` that is single-use per client until expiry. Both kinds share one
replay scope, so one JWS can never serve as both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aap.poppy.jose import CompactJws, JoseProblem, numeric_date, parse_jws, public_p256_key

if TYPE_CHECKING:
    from joserfc.jwk import ECKey

MAX_LIFETIME = 300
MIN_JTI, MAX_JTI = 16, 256
MAX_ID = 256
# Typed JWTs of other protocols that must never be accepted as an assertion.
_FOREIGN_TYPES = {"dpop+jwt", "poppy-browser+jwt", "poppy-session+jwt", "at+jwt"}
_EMBEDDED_KEY_HEADERS = ("jku", "x5u", "jwk", "x5c")


class AssertionProblem(ValueError):
    """Why an assertion was refused (safe to send)."""


@dataclass(frozen=True)
class Assertion:
    claims: dict[str, Any]
    sub: str
    jti: str
    exp: float
    agent_id: str | None

    def replay_entry(self, client_id: str, skew: int) -> tuple[str, str, float]:
        return ("assertion", f"{client_id} {self.jti}", self.exp + skew + 1)


def parse(token: Any) -> CompactJws:
    jwt = parse_jws(token, lambda why: AssertionProblem(f"not a compact JWS ({why})"))
    header = jwt.header
    if header.get("alg") != "ES256":
        raise AssertionProblem("alg must be ES256")
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() != "jwt"):
        if isinstance(typ, str) and typ.lower() in _FOREIGN_TYPES:
            raise AssertionProblem(f"a {typ} token is not an assertion")
        raise AssertionProblem('typ must be absent or "JWT"')
    for name in _EMBEDDED_KEY_HEADERS:
        if name in header:
            raise AssertionProblem(f"the {name} header is not accepted; keys come from jwks_uri")
    if "kid" in header and not isinstance(header["kid"], str):
        raise AssertionProblem("kid must be a string")
    return jwt


def select_key(keys: tuple[dict[str, Any], ...], kid: str | None) -> ECKey | None:
    """The identity key named ``kid``; without ``kid`` only a JWKS with exactly one key."""
    if kid is None:
        return public_p256_key(keys[0]) if len(keys) == 1 else None
    for jwk in keys:
        if jwk.get("kid") == kid:
            return public_p256_key(jwk)
    return None


def verify(
    jwt: CompactJws,
    key: ECKey,
    *,
    kind: Literal["client", "session"],
    client_id: str,
    issuer: str,
    now: float,
    skew: int,
) -> Assertion:
    """Signature, ``iss``/``sub``/``aud``, lifetime and ``jti`` shape; replay is the caller's step."""
    try:
        jwt.verify(key)
    except JoseProblem as exc:
        raise AssertionProblem(str(exc)) from exc
    claims = jwt.claims
    if claims.get("iss") != client_id:
        raise AssertionProblem("iss must equal client_id")
    sub = claims.get("sub")
    if kind == "client":
        if sub != client_id:
            raise AssertionProblem("sub must equal client_id")
    else:
        if not isinstance(sub, str) or not 1 <= len(sub) <= MAX_ID:
            raise AssertionProblem("sub must be the opaque User ID (1 to 256 characters)")
        if sub == client_id:
            raise AssertionProblem("sub must be a User ID, not the client_id")
    aud = claims.get("aud")
    if not isinstance(aud, str):
        raise AssertionProblem("aud must be a single string")
    if aud != issuer:
        raise AssertionProblem("aud must equal the issuer exactly")
    try:
        iat = numeric_date(claims, "iat")
        exp = numeric_date(claims, "exp")
    except JoseProblem as exc:
        raise AssertionProblem(str(exc)) from exc
    if exp <= iat:
        raise AssertionProblem("exp must be after iat")
    if exp - iat > MAX_LIFETIME:
        raise AssertionProblem("the assertion lifetime exceeds 300 seconds")
    if iat > now + skew:
        raise AssertionProblem("iat is in the future")
    if now > exp + skew:
        raise AssertionProblem("the assertion has expired")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not MIN_JTI <= len(jti) <= MAX_JTI:
        raise AssertionProblem("jti must be a string of 16 to 256 characters")
    agent_id = claims.get("agent_id")
    if (
        kind == "session"
        and agent_id is not None
        and (not isinstance(agent_id, str) or not 1 <= len(agent_id) <= MAX_ID)
    ):
        raise AssertionProblem("agent_id must be a string of 1 to 256 characters")
    return Assertion(claims, sub, jti, exp, agent_id if kind == "session" else None)
