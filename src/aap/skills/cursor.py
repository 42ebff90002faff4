"""Opaque, tamper-evident search cursors (notes §2.9).

A cursor is ``base64url(payload) "." base64url(HMAC-SHA256(payload))`` where the
payload names the effective-query digest, the keyset position (last sort key
and tie-break id) and the issue time. The HMAC key is a database-held secret,
so every worker accepts every other worker's cursors. Anything wrong —
malformed, forged, bound to another query, expired — is ``INVALID_CURSOR``.

Sort keys are dealer data of any length; when a cursor would exceed the
4096-character limit, the position is parked in the shared state store for the
cursor's lifetime and the cursor carries a random reference instead.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Any

import orjson

from aap.errors import AapError
from aap.inventory.query import CURSOR_HINT, Position

MAX_CURSOR_CHARS = 4096
_VERSION = 1
_SECRET_NAME = "cursor-hmac"
_PARKED = "cursor-position"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def invalid(reason: str) -> AapError:
    return AapError("INVALID_CURSOR", reason, hint=CURSOR_HINT)


class CursorCodec:
    """Issues and checks cursors for one deployment (``state``: the StateStore)."""

    def __init__(self, state: Any, ttl_seconds: int) -> None:
        self.state = state
        self.ttl = ttl_seconds

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self.state.secret(_SECRET_NAME), payload, hashlib.sha256).digest()

    def _sign(self, body: list[Any]) -> str:
        payload = orjson.dumps(body)
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def encode(self, digest: str, position: Position, now: datetime) -> str:
        issued = int(now.timestamp())
        key = list(position.key) if position.key is not None else None
        token = self._sign([_VERSION, digest, issued, key, position.id])
        if len(token) <= MAX_CURSOR_CHARS:
            return token
        ref = secrets.token_urlsafe(24)
        self.state.put_value(
            _PARKED, ref, orjson.dumps([key, position.id]).decode(), issued + self.ttl + 60
        )
        return self._sign([_VERSION, digest, issued, {"ref": ref}])

    def decode(self, token: str, digest: str, now: datetime) -> Position:
        """The position a cursor continues from, or ``INVALID_CURSOR``."""
        try:
            encoded_payload, encoded_mac = token.split(".")
            payload = _unb64(encoded_payload)
            mac = _unb64(encoded_mac)
        except (ValueError, binascii.Error):
            raise invalid("The pagination cursor is malformed.") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise invalid("The pagination cursor was not issued by this agent or was altered.")
        try:
            body = orjson.loads(payload)
            version, bound, issued = body[0], body[1], body[2]
        except (orjson.JSONDecodeError, TypeError, IndexError, KeyError):
            raise invalid("The pagination cursor is malformed.") from None
        if version != _VERSION or not isinstance(issued, int):
            raise invalid("The pagination cursor is malformed.")
        if bound != digest:
            raise invalid(
                "The pagination cursor belongs to a different query; resend the same currency, "
                "mileage_unit, filters, sort and limit."
            )
        if now.timestamp() > issued + self.ttl:
            raise invalid("The pagination cursor has expired.")
        if len(body) == 4 and isinstance(body[3], dict):
            parked = self.state.get_value(_PARKED, str(body[3].get("ref")), now=now)
            if parked is None:
                raise invalid("The pagination cursor has expired.")
            key, last_id = orjson.loads(parked)
        elif len(body) == 5:
            key, last_id = body[3], body[4]
        else:
            raise invalid("The pagination cursor is malformed.")
        if not isinstance(last_id, str) or not (key is None or isinstance(key, list)):
            raise invalid("The pagination cursor is malformed.")
        return Position(tuple(key) if key is not None else None, last_id)
