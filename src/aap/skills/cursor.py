"""Opaque, tamper-evident search cursors (``InventorySearchRequest.pagination.cursor``, seed 004).

A cursor is ``base64url(payload) "." base64url(HMAC-SHA256(payload))`` where the
payload names the effective-query digest, the keyset position (last sort key
and tie-break id), the issue time and the inventory version of the page (so
that, whichever read replica answers, the next page never comes from an older
inventory). The HMAC key is a database-held secret,
so every worker accepts every other worker's cursors. Anything wrong —
malformed, forged, bound to another query, expired — is ``INVALID_CURSOR``
(docs/search.md, "Cursors").

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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from aap.errors import AapError
from aap.inventory.query import CURSOR_HINT, Position
from aap.store.state import StateStore

MAX_CURSOR_CHARS = 4096
_VERSION = 1
_SECRET_NAME = "cursor-hmac"
_PARKED = "cursor-position"
_MALFORMED = "The pagination cursor is malformed."
_EXPIRED = "The pagination cursor has expired."


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def invalid(reason: str) -> AapError:
    return AapError("INVALID_CURSOR", reason, hint=CURSOR_HINT)


class CursorCodec:
    """Issues and checks cursors for one deployment."""

    def __init__(self, state: StateStore, ttl_seconds: int) -> None:
        self.state = state
        self.ttl = ttl_seconds

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self.state.secret(_SECRET_NAME), payload, hashlib.sha256).digest()

    def _sign(self, body: list[Any]) -> str:
        payload = orjson.dumps(body)
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def encode(self, digest: str, position: Position, now: datetime, inventory_version: int = 0) -> str:
        """A cursor continuing after ``position``; the next page is read from an inventory at
        ``inventory_version`` or later (whichever replica answers it)."""
        issued = int(now.timestamp())
        key = list(position.key) if position.key is not None else None
        token = self._sign([_VERSION, digest, issued, key, position.id, inventory_version])
        if len(token) <= MAX_CURSOR_CHARS:
            return token
        ref = secrets.token_urlsafe(24)
        self.state.put_value(_PARKED, ref, orjson.dumps([key, position.id]).decode(), issued + self.ttl + 60)
        return self._sign([_VERSION, digest, issued, {"ref": ref}, inventory_version])

    def read(self, token: str, now: datetime) -> ReadCursor:
        """Check ``token`` as far as it can be without its query.

        Reading needs the state store (the HMAC secret, a parked position), so a
        search reads its cursor before opening its inventory snapshot; the
        problems are raised later, by :meth:`ReadCursor.continue_from`, after the
        request's own checks.
        """
        try:
            encoded_payload, encoded_mac = token.split(".")
            payload = _unb64(encoded_payload)
            mac = _unb64(encoded_mac)
        except (ValueError, binascii.Error):
            return ReadCursor(None, invalid(_MALFORMED))
        if not hmac.compare_digest(mac, self._mac(payload)):
            return ReadCursor(None, invalid("The pagination cursor was not issued by this agent or was altered."))
        try:
            body = orjson.loads(payload)
            version, bound, issued = body[0], body[1], body[2]
        except (orjson.JSONDecodeError, TypeError, IndexError, KeyError):
            return ReadCursor(None, invalid(_MALFORMED))
        if version != _VERSION or not isinstance(issued, int) or not isinstance(bound, str):
            return ReadCursor(None, invalid(_MALFORMED))
        if now.timestamp() > issued + self.ttl:
            return ReadCursor(bound, invalid(_EXPIRED))
        parked = len(body) >= 4 and isinstance(body[3], dict)
        pinned = body[-1] if len(body) == (5 if parked else 6) else 0
        return ReadCursor(bound, self._position(body, now), pinned if isinstance(pinned, int) else 0)

    def _position(self, body: list[Any], now: datetime) -> Position | AapError:
        # [v, digest, issued, {"ref"}, (version)] or [v, digest, issued, key, id, (version)]:
        # cursors issued before the inventory version was pinned have none.
        if len(body) in (4, 5) and isinstance(body[3], dict):
            parked = self.state.get_value(_PARKED, str(body[3].get("ref")), now=now)
            if parked is None:
                return invalid(_EXPIRED)
            key, last_id = orjson.loads(parked)
        elif len(body) in (5, 6):
            key, last_id = body[3], body[4]
        else:
            return invalid(_MALFORMED)
        if not isinstance(last_id, str) or not (key is None or isinstance(key, list)):
            return invalid(_MALFORMED)
        return Position(tuple(key) if key is not None else None, last_id)

    def decode(self, token: str, digest: str, now: datetime) -> Position:
        """The position a cursor of the query ``digest`` continues from, or ``INVALID_CURSOR``."""
        return self.read(token, now).continue_from(digest)


@dataclass(frozen=True)
class ReadCursor:
    """A cursor as read: the query digest it is bound to (None: unreadable) and where it
    continues from, or the problem to report."""

    bound_to: str | None
    outcome: Position | AapError
    #: The inventory version of the page that issued it: the next page is read from this one or
    #: a later one (a read replica further behind passes the read on).
    min_version: int = 0

    def continue_from(self, digest: str) -> Position:
        """The position, or ``INVALID_CURSOR``: malformed or forged first, then bound to
        another query, then expired or malformed position."""
        if self.bound_to is not None and self.bound_to != digest:
            raise invalid(
                "The pagination cursor belongs to a different query; resend the same currency, "
                "mileage_unit, filters, sort and limit."
            )
        if isinstance(self.outcome, AapError):
            raise self.outcome
        return self.outcome
