"""Verifying a dealer's signed agent card (A2A §8.4.3): the buyer SDK's and ``aap check``'s.

The public key of each signature is looked up by its ``kid`` among keys the caller trusts (a JWK
Set given to the client), else in the JWK Set its ``jku`` names — **only on the card's own
origin** (**decision**, docs/client.md "Signed agent cards"): a card fetched over TLS from the
dealer's domain, signed with a key the same domain publishes, ties the card to that domain; a
``jku`` elsewhere would let whoever changed the card name their own keys. The JWK Set is read
with a bound (64 KiB) and never through a redirect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from aap.cardsign import SignatureError, headers, key_set_finder, verify
from aap.client.transport import json_body
from aap.loopback import is_loopback_url

MAX_KEY_SET_BYTES = 64 * 1024


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or ""), parts.port


async def _key_set(http: httpx.AsyncClient, card_url: str, jku: str) -> Mapping[str, Any]:
    if _origin(jku) != _origin(card_url):
        raise SignatureError([f"jku {jku} is not on the card's origin: its keys are not trusted"])
    if not (jku.startswith("https://") or is_loopback_url(jku)):
        raise SignatureError([f"jku {jku} is not an https URL"])
    response = await http.get(jku, headers={"Accept": "application/jwk-set+json, application/json"})
    if response.status_code != 200 or len(response.content) > MAX_KEY_SET_BYTES:
        raise SignatureError([f"jku {jku}: HTTP {response.status_code}, {len(response.content)} bytes"])
    body = json_body(response)
    if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
        raise SignatureError([f"jku {jku} is not a JWK Set"])
    return body


async def verify_card(
    http: httpx.AsyncClient, card_url: str, card: Mapping[str, Any], trusted: Mapping[str, Any] | None = None
) -> str:
    """The ``kid`` of a signature of ``card`` that verifies; :class:`~aap.cardsign.SignatureError`
    (every signature's problem) when none does, or when the card carries none."""
    sets: dict[str, Mapping[str, Any]] = {}
    problems: list[str] = []
    for header in headers(card):
        jku = header.get("jku")
        if isinstance(jku, str) and jku not in sets:
            try:
                sets[jku] = await _key_set(http, card_url, jku)
            except SignatureError as exc:
                problems += exc.problems
            except httpx.HTTPError as exc:
                problems.append(f"jku {jku}: {type(exc).__name__}")
    from_trusted = key_set_finder(trusted) if trusted is not None else None
    from_jku = {jku: key_set_finder(keys) for jku, keys in sets.items()}

    def find(kid: str | None, jku: str | None) -> Any:
        key = from_trusted(kid, jku) if from_trusted is not None else None
        if key is None and jku in from_jku:
            key = from_jku[jku](kid, jku)
        return key

    try:
        return verify(card, find)
    except SignatureError as exc:
        raise SignatureError(problems + exc.problems) from None
