"""DPoP proof verification (RFC 9449 §4.3), ES256, against the configured public URL.

``htu`` is compared with the deployment's public base URL, never with the
Host header that happened to arrive (a proxy may rewrite it). The replay
entry is returned, not written: the caller records it in the same database
transaction as the rest of the request, so a refused request changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aap.poppy.jose import (
    CompactJws,
    JoseProblem,
    access_token_hash,
    numeric_date,
    p256_thumbprint,
    public_p256_key,
    same,
)

DPOP_TYP = "dpop+jwt"
#: Any whitespace character (``str.isspace``'s, in C: a proof is checked on every API call).
_SPACE = re.compile(r"\s")
MAX_JTI = 256


class DpopProblem(ValueError):
    """Why a proof was refused (safe to send)."""


@dataclass(frozen=True)
class DpopProof:
    jkt: str  # RFC 7638 thumbprint of the proof key
    jti: str
    iat: float
    replay: tuple[str, str, float]  # (scope, entry, expires_at) to consume


def normalize_url(url: Any) -> str | None:
    """Scheme and host lower-cased, default port dropped; None if it has a query or fragment."""
    if not isinstance(url, str) or "?" in url or "#" in url or _SPACE.search(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80
    netloc = host if port in (None, default) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path or '/'}"


def header_value(values: list[str], name: str) -> str:
    """Exactly one header holding one compact JWS (no lists, no whitespace)."""
    if len(values) != 1:
        raise DpopProblem(f"send exactly one {name} header")
    value = values[0]
    if not value or "," in value or _SPACE.search(value):
        raise DpopProblem(f"the {name} header must hold a single compact JWS")
    return value


def verify_proof(
    values: list[str],
    *,
    method: str,
    url: str,
    now: float,
    window: int,
    access_token: str | None,
) -> DpopProof:
    """Verify the ``DPoP`` header(s) of one request. ``access_token`` None: ``ath`` must be absent."""
    value = header_value(values, "DPoP")
    try:
        proof = CompactJws(value)
        header = proof.header
        if header.get("typ") != DPOP_TYP:
            raise DpopProblem('typ must be "dpop+jwt"')
        if header.get("alg") != "ES256":
            raise DpopProblem("alg must be ES256")
        if "jwk" not in header:
            raise DpopProblem("the proof header needs the public jwk")
        key = public_p256_key(header["jwk"])
        proof.verify(key)
    except JoseProblem as exc:
        raise DpopProblem(f"proof {exc}") from exc
    claims = proof.claims
    jti = claims.get("jti")
    if not isinstance(jti, str) or not 1 <= len(jti) <= MAX_JTI:
        raise DpopProblem("jti must be a string of 1 to 256 characters")
    if claims.get("htm") != method:
        raise DpopProblem("htm does not match the request method")
    expected = normalize_url(url)
    if expected is None or normalize_url(claims.get("htu")) != expected:
        raise DpopProblem("htu does not match the request URL")
    try:
        iat = numeric_date(claims, "iat")
    except JoseProblem as exc:
        raise DpopProblem(str(exc)) from exc
    if abs(now - iat) > window:
        raise DpopProblem("iat is outside the acceptance window")
    if access_token is None:
        if "ath" in claims:
            raise DpopProblem("ath must not be present here")
    else:
        ath = claims.get("ath")
        if not isinstance(ath, str):
            raise DpopProblem("ath is required with an access token")
        if not same(ath, access_token_hash(access_token)):
            raise DpopProblem("ath does not match the access token")
    jkt = p256_thumbprint(header["jwk"]["x"], header["jwk"]["y"])  # checked by public_p256_key
    return DpopProof(jkt, jti, iat, ("dpop", f"{jkt}:{jti}", max(iat, now) + window + 1))
