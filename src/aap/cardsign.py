"""Agent card signatures (A2A §8.4): sign a card, verify a card's ``signatures``.

The signed payload is the card's canonical form: the ``signatures`` member left out, every empty
string, array and object left out (A2A §8.4.1, "Field Presence and Default Value Handling": the
defaults a card's members can hold), then RFC 8785 (JCS). Each entry of ``signatures`` is a JWS
(RFC 7515) with a detached payload: ``protected`` (``alg``, ``typ: JOSE``, ``kid``, optionally
``jku``) and ``signature``, both base64url. Only asymmetric algorithms are accepted (a verifier
must never be handed a public key to use as an HMAC secret): ES256, ES384, RS256, PS256, and
Ed25519 (RFC 9864's name; the older ``EdDSA`` is deprecated there). **Decision:** cards are signed
with P-256, P-384 or RSA keys only: ES256 is the algorithm A2A's own example uses, and the JWT
libraries buyer agents verify with (the a2a-sdk's) do not all know ``Ed25519`` yet.

One module for the three sides that need it (docs/a2a.md, "Signed agent card"): the server that
signs its card (:mod:`aap.discovery.agent_card`), ``aap check`` and the buyer SDK that verify it.
joserfc and ``cryptography`` load on the first use, never at import.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785

#: Algorithms a signature may use (asymmetric only), by what the key is.
ALGORITHMS = ("ES256", "ES384", "RS256", "PS256", "Ed25519")
#: Bound on the members of one signature a verifier reads (a card is a few kilobytes).
MAX_SIGNATURES = 8


class SignatureError(ValueError):
    """A card's signatures could not be verified; ``problems`` says why, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def _clean(value: Any) -> Any:
    """``value`` without empty strings, arrays and objects (recursively; None when all empty)."""
    if isinstance(value, dict):
        cleaned = {k: c for k, v in value.items() if (c := _clean(v)) is not None}
        return cleaned or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean(v)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def canonical_payload(card: Mapping[str, Any]) -> bytes:
    """The bytes a signature of ``card`` covers."""
    body = {k: v for k, v in card.items() if k != "signatures"}
    return rfc8785.dumps(_clean(body) or {})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class SigningKey:
    """A private key to sign cards with, its ``kid`` and the ``jku`` where its public key is."""

    key: Any  # a joserfc key (OKP, EC or RSA), private
    kid: str
    jku: str | None = None

    @property
    def algorithm(self) -> str:
        return algorithm_of(self.key)

    def public_jwk(self) -> dict[str, Any]:
        jwk: dict[str, Any] = dict(self.key.as_dict(private=False))
        return {**jwk, "kid": self.kid, "alg": self.algorithm, "use": "sig"}


def algorithm_of(key: Any) -> str:
    """The JWS algorithm a card is signed with by ``key``: ES256 (P-256), ES384 (P-384), RS256 (RSA)."""
    kty = key.key_type
    curve = key.as_dict(private=False).get("crv")
    if kty == "EC" and curve in ("P-256", "P-384"):
        return "ES256" if curve == "P-256" else "ES384"
    if kty == "RSA":
        return "RS256"
    raise ValueError(f"a card is signed with a P-256, P-384 or RSA key, not {kty} {curve or ''}".strip())


def load_private_key(text: str, *, kid: str | None = None, jku: str | None = None) -> SigningKey:
    """A :class:`SigningKey` from a private key as PEM or as a JWK (JSON); ``kid`` defaults to the
    key's RFC 7638 thumbprint."""
    from joserfc.jwk import JWKRegistry

    text = text.strip()
    data: Any = json.loads(text) if text.startswith("{") else text.encode()
    if isinstance(data, dict):
        key = JWKRegistry.import_key(data)
    else:  # PEM names no key type: the first that reads it
        for key_type in ("EC", "RSA", "OKP"):
            try:
                key = JWKRegistry.import_key(data, key_type)
                break
            except Exception:  # not this type (the reader's text may quote the key)
                continue
        else:
            raise ValueError("not a PEM private key of a type a card is signed with")
    if not key.is_private:
        raise ValueError("the card signing key must be a private key")
    algorithm_of(key)  # refuse what cannot sign a card
    return SigningKey(key, kid or (data.get("kid") if isinstance(data, dict) else None) or key.thumbprint(), jku)


def sign(card: Mapping[str, Any], signing: SigningKey) -> dict[str, Any]:
    """One ``AgentCardSignature`` of ``card`` (its existing ``signatures`` are not signed)."""
    from joserfc import jws

    header: dict[str, Any] = {"alg": signing.algorithm, "typ": "JOSE", "kid": signing.kid}
    if signing.jku:
        header["jku"] = signing.jku
    compact = jws.serialize_compact(header, canonical_payload(card), signing.key, algorithms=[signing.algorithm])
    protected, _payload, signature = compact.split(".")
    return {"protected": protected, "signature": signature}


def signed(card: Mapping[str, Any], signing: SigningKey) -> dict[str, Any]:
    """``card`` with its signature in ``signatures``."""
    return {**card, "signatures": [sign(card, signing)]}


#: Finds the public key of a signature: (kid, jku) → a joserfc key, or None when unknown.
KeyFinder = Callable[[str | None, str | None], Any]


def headers(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The protected headers of ``card``'s signatures (unreadable ones as ``{}``)."""
    found = []
    for entry in list(card.get("signatures") or [])[:MAX_SIGNATURES]:
        try:
            header = json.loads(_unb64(entry["protected"]))
            found.append(header if isinstance(header, dict) else {})
        except (KeyError, TypeError, ValueError):
            found.append({})
    return found


def verify(card: Mapping[str, Any], find_key: KeyFinder) -> str:
    """The ``kid`` of the first of ``card``'s signatures that verifies with the key ``find_key``
    gives for it; :class:`SignatureError` listing each signature's problem when none does."""
    from joserfc import jws
    from joserfc.errors import JoseError

    signatures = card.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SignatureError(["the card carries no signatures"])
    payload = _b64(canonical_payload(card))
    problems = []
    for index, (entry, header) in enumerate(zip(signatures[:MAX_SIGNATURES], headers(card))):
        where = f"signatures[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("signature"), str) or not header:
            problems.append(f"{where}: not a JWS (protected header and signature, base64url)")
            continue
        alg, kid, jku = header.get("alg"), header.get("kid"), header.get("jku")
        if alg not in ALGORITHMS:
            problems.append(f"{where}: algorithm {alg!r} is not accepted ({', '.join(ALGORITHMS)})")
            continue
        try:
            key = find_key(kid if isinstance(kid, str) else None, jku if isinstance(jku, str) else None)
        except Exception as exc:  # a key that cannot be fetched: this signature is unverified
            problems.append(f"{where}: key {kid!r} not found ({type(exc).__name__})")
            continue
        if key is None:
            problems.append(f"{where}: key {kid!r} is not known")
            continue
        try:
            jws.deserialize_compact(f"{entry['protected']}.{payload}.{entry['signature']}", key, algorithms=[alg])
        except (JoseError, ValueError):
            problems.append(f"{where}: the signature does not match the card")
            continue
        return str(kid)
    raise SignatureError(problems)


def key_set_finder(jwks: Mapping[str, Any]) -> KeyFinder:
    """A :data:`KeyFinder` over a JWK Set (RFC 7517 §5): the key whose ``kid`` is asked for."""
    from joserfc.jwk import JWKRegistry

    keys = {k.get("kid"): k for k in jwks.get("keys", []) if isinstance(k, dict)}

    def find(kid: str | None, _jku: str | None) -> Any:
        data = keys.get(kid)
        return JWKRegistry.import_key(data) if data is not None else None

    return find
