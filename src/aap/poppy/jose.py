"""JOSE primitives with Poppy's limits: compact JWS parsing, ES256 verification, thumbprints.

joserfc does the cryptography. Parsing is strict and done here, before any key
is touched: exactly three base64url segments, a JSON-object header and
payload, bounded sizes. Callers get the decoded header and claims only after
the signature verified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from joserfc.jwk import ECKey
    from joserfc.jws import JWSRegistry

ALGORITHMS = ("ES256",)
MAX_JWS_BYTES = 16_384
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


@cache
def _registry() -> JWSRegistry:
    """joserfc's ES256-only registry with Poppy's size limits. joserfc and ``cryptography``
    (~9 MiB) are imported on the first JWS a worker meets, not when it starts: a worker
    that serves no Poppy traffic never loads them (docs/benchmarks.md, "Memory")."""
    from joserfc.jws import JWSRegistry

    # Unknown header members (poppy_dlg ...) are allowed; CompactJws.verify refuses "crit".
    registry = JWSRegistry(algorithms=list(ALGORITHMS), strict_check_header=False)
    registry.max_header_length = MAX_JWS_BYTES
    registry.max_payload_length = MAX_JWS_BYTES
    return registry


class JoseProblem(ValueError):
    """A JWS that is malformed or fails verification; the message is safe to send."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(segment: str) -> bytes:
    if not _SEGMENT.match(segment):
        raise JoseProblem("not base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError) as exc:
        raise JoseProblem("not base64url") from exc


def access_token_hash(token: str) -> str:
    """The DPoP ``ath`` value: base64url(SHA-256(ASCII token))."""
    return b64url(hashlib.sha256(token.encode("ascii", "strict")).digest())


def same(a: str, b: str) -> bool:
    """Constant-time string equality."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


class CompactJws:
    """A parsed, not yet verified, compact JWS."""

    def __init__(self, token: Any) -> None:
        if not isinstance(token, str) or not token or len(token) > MAX_JWS_BYTES:
            raise JoseProblem("not a compact JWS")
        parts = token.split(".")
        if len(parts) != 3 or not all(parts):
            raise JoseProblem("not a compact JWS")
        self.token = token
        self.header = _json_object(b64url_decode(parts[0]), "header")
        self.claims = _json_object(b64url_decode(parts[1]), "payload")
        b64url_decode(parts[2])

    @property
    def alg(self) -> Any:
        return self.header.get("alg")

    def verify(self, key: ECKey) -> None:
        """Check the signature with ``key`` (ES256 only).

        The token was parsed strictly above, so the signature is checked on the
        segments as they came (RFC 7515 §5.2: the signing input is the ASCII of
        ``header.payload``) by joserfc's ES256 algorithm, without parsing the
        token a second time: one DPoP proof per request makes that parse count.
        """
        if self.alg not in ALGORITHMS:
            raise JoseProblem("unsupported alg")
        if "crit" in self.header:
            # RFC 7515 §4.1.11: an extension the recipient does not understand must be
            # refused, and no Poppy or DPoP token needs one.
            raise JoseProblem("crit header extensions are not supported")
        # joserfc on the first JWS a worker meets (_registry says why).
        from joserfc.errors import JoseError

        signing_input, _, signature = self.token.rpartition(".")
        try:
            ok = _registry().get_alg("ES256").verify(signing_input.encode("ascii"), b64url_decode(signature), key)
        except (JoseError, ValueError, TypeError) as exc:
            raise JoseProblem("signature invalid") from exc
        if not ok:
            raise JoseProblem("signature invalid")


def parse_jws(token: Any, refused: Callable[[str], Exception]) -> CompactJws:
    """``token`` as a compact JWS, or the caller's refusal ``refused(why)`` raised (from the
    :class:`JoseProblem`): each token kind words its own errors."""
    try:
        return CompactJws(token)
    except JoseProblem as exc:
        raise refused(str(exc)) from exc


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise JoseProblem(f"{what} is not JSON") from exc
    if not isinstance(value, dict):
        raise JoseProblem(f"{what} is not a JSON object")
    return value


def public_p256_key(jwk: Any) -> ECKey:
    """Import a public EC P-256 JWK; anything private, other curves or extra key types refused."""
    if not isinstance(jwk, dict):
        raise JoseProblem("jwk must be an object")
    if _PRIVATE_MEMBERS & set(jwk):
        raise JoseProblem("jwk must be a public key")
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise JoseProblem("jwk must be an EC P-256 key")
    if not isinstance(jwk.get("x"), str) or not isinstance(jwk.get("y"), str):
        raise JoseProblem("jwk needs x and y")
    return _p256_point(jwk["x"], jwk["y"])


@lru_cache(maxsize=1024)
def _p256_point(x: str, y: str) -> ECKey:
    """The key of one point, imported once: a DPoP key signs every request of its Session,
    and importing (checking the point is on the curve) costs ~80 µs each time."""
    # joserfc on the first JWS a worker meets (_registry says why).
    from joserfc.errors import JoseError
    from joserfc.jwk import ECKey

    try:
        key = ECKey.import_key({"kty": "EC", "crv": "P-256", "x": x, "y": y})
    except (JoseError, ValueError, TypeError) as exc:
        raise JoseProblem("jwk is not a valid P-256 point") from exc
    return key


@lru_cache(maxsize=1024)
def p256_thumbprint(x: str, y: str) -> str:
    """The RFC 7638 thumbprint of the P-256 point (``x``, ``y``), computed once per point."""
    return _p256_point(x, y).thumbprint()


def numeric_date(claims: dict[str, Any], name: str) -> float:
    """A JWT NumericDate: a JSON number (fractions allowed), never a bool or string."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise JoseProblem(f"{name} must be a number")
    if value < 0:
        raise JoseProblem(f"{name} must not be negative")
    return float(value)


def sign(header: dict[str, Any], claims: dict[str, Any], private_key: ECKey) -> str:
    """ES256-sign ``claims`` under ``header`` (used for issued tokens and by the test client)."""
    # joserfc on the first JWS a worker meets (_registry says why).
    from joserfc import jws

    return jws.serialize_compact(header, orjson.dumps(claims), private_key, registry=_registry())
