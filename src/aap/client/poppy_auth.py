"""Poppy (PAP 0.3) guest sessions for a personal agent: assertions and DPoP proofs.

The caller brings its *identity*: the HTTPS ``client_id`` URL that serves its
client metadata and the ES256 private key whose public half is in that
metadata's ``jwks_uri``. Everything per-session is made here: a separate
ES256 DPoP key (never published; it identifies the Session in 0.3), the
client assertion, the session assertion naming an opaque User ID, and one
fresh DPoP proof per HTTP request (``ath`` on API calls, never on the token
request; RFC 9449 §4.2). The exchange is the one docs/poppy.md ("Getting a
guest token") describes from the dealer's side and docs/client.md ("Poppy:
guest session with DPoP") from the agent's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from joserfc import jwt
from joserfc.jwk import ECKey, KeyParameters

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME = 60


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def new_jti() -> str:
    """128 random bits, base64url: unique per assertion and per proof."""
    return b64url(secrets.token_bytes(16))


def access_token_hash(token: str) -> str:
    """DPoP ``ath``: base64url(SHA-256(ASCII token))."""
    return b64url(hashlib.sha256(token.encode("ascii")).digest())


def htu(url: str) -> str:
    """The DPoP ``htu`` of a request URL: no query or fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", "", ""))


def generate_es256_key(kid: str | None = None) -> ECKey:
    parameters: KeyParameters = {"alg": "ES256", "use": "sig"}
    if kid:
        parameters["kid"] = kid
    return ECKey.generate_key("P-256", parameters=parameters, private=True)


def load_private_key(source: str | bytes | dict[str, Any], kid: str | None = None) -> ECKey:
    """An ES256 private key from a PEM (text/bytes) or a JWK dict; ``kid`` overrides the key's own."""
    key = ECKey.import_key(source)
    if not key.is_private:
        raise ValueError("the Poppy identity key must be a private key")
    if key.as_dict(private=False).get("crv") != "P-256":
        raise ValueError("the Poppy identity key must be an EC P-256 (ES256) key")
    if kid is not None or key.kid is None:
        data = key.as_dict(private=True)
        data["kid"] = kid or key.thumbprint()
        data.setdefault("alg", "ES256")
        key = ECKey.import_key(data)
    return key


@dataclass
class PoppyIdentity:
    """A personal agent's long-term identity and the User it acts for."""

    client_id: str
    key: ECKey
    user_id: str = field(default_factory=lambda: "usr_" + b64url(secrets.token_bytes(16)))
    agent_id: str | None = None

    @classmethod
    def from_key_file(cls, client_id: str, path: str, kid: str | None = None, **kwargs: Any) -> PoppyIdentity:
        with open(path, "rb") as fh:
            raw = fh.read()
        source: Any = raw
        if raw.lstrip().startswith(b"{"):
            source = json.loads(raw)
        return cls(client_id, load_private_key(source, kid), **kwargs)

    @property
    def kid(self) -> str:
        return self.key.kid or self.key.thumbprint()

    def public_jwks(self) -> dict[str, Any]:
        """What the agent publishes at its ``jwks_uri``."""
        return {"keys": [self.key.as_dict(private=False)]}

    def client_metadata(self, jwks_uri: str, redirect_uris: list[str], client_name: str) -> dict[str, Any]:
        """A client ID metadata document for this identity (for agents that host their own)."""
        return {
            "client_id": self.client_id,
            "client_name": client_name,
            "jwks_uri": jwks_uri,
            "redirect_uris": redirect_uris,
            "token_endpoint_auth_method": "private_key_jwt",
        }

    def _assertion(self, subject: str, audience: str, extra: dict[str, Any] | None = None) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.client_id,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
            "jti": new_jti(),
        }
        claims.update(extra or {})
        return jwt.encode({"alg": "ES256", "kid": self.kid, "typ": "JWT"}, claims, self.key)

    def client_assertion(self, issuer: str) -> str:
        """RFC 7523 client authentication: iss = sub = client_id, aud = the issuer exactly."""
        return self._assertion(self.client_id, issuer)

    def session_assertion(self, issuer: str) -> str:
        """Who the Session is for: sub = the opaque User ID (a different jti)."""
        extra = {"agent_id": self.agent_id} if self.agent_id else None
        return self._assertion(self.user_id, issuer, extra)


class DpopKey:
    """A per-Session ES256 key that signs one proof per request (RFC 9449)."""

    def __init__(self, key: ECKey | None = None) -> None:
        self.key = key or generate_es256_key()
        public = self.key.as_dict(private=False)
        self.public_jwk = {k: public[k] for k in ("kty", "crv", "x", "y")}

    @property
    def thumbprint(self) -> str:
        return self.key.thumbprint()

    def proof(
        self,
        method: str,
        url: str,
        *,
        access_token: str | None = None,
        nonce: str | None = None,
        iat: int | None = None,
        jti: str | None = None,
    ) -> str:
        claims: dict[str, Any] = {
            "htm": method.upper(),
            "htu": htu(url),
            "iat": int(time.time()) if iat is None else iat,
            "jti": jti or new_jti(),
        }
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        return jwt.encode({"typ": "dpop+jwt", "alg": "ES256", "jwk": self.public_jwk}, claims, self.key)
