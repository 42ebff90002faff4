"""The platform's events: what happened to its tenants, kept until the platform is told.

``platform_events`` is one of the platform's registry tables (a reference table, no row-level
security: :mod:`aap.store.platform`). A row is written in the same transaction as what caused
it — a tenant's change and its audit row, a configuration reported broken, a feed run recorded
as failed, a lead delivery marked dead — so an event is never lost nor told of something that
was rolled back. The sender (:mod:`aap.platform.events`) then claims due rows with a lease, as
the lead outbox does (docs/leads.md, "Claims"): a row is posted only by the worker whose claim
token it carries, and a claim lapses ``lease`` after its worker stopped renewing it.

Rows hold ids, states and reasons only, never customer data (a lead's id at most: the reason
of a dead delivery names status codes and error classes, :mod:`aap.leads.transports`).

States: ``pending`` (due at ``next_ms``), ``sending`` (claimed until ``claimed_until_ms``),
``delivered``, ``dead`` (given up after the attempts the platform allows, or refused for
good), ``skipped`` (no ``events_url`` configured when it was due, or its type is not among
``events_types``: docs/platform.md, "Events").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.config.platform import EVENT_TYPES
from aap.store.db import DEPLOYMENT_TENANT, Database, Tx

#: The platform's migration step that adds the table (:data:`aap.store.platform.MIGRATIONS`).
LAYOUT = """
CREATE TABLE platform_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    occurred_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_ms INTEGER NOT NULL,
    claim_token TEXT,
    claimed_until_ms INTEGER,
    last_error TEXT,
    done_ms INTEGER
);
CREATE INDEX platform_events_due ON platform_events (state, next_ms);
CREATE INDEX platform_events_tenant ON platform_events (tenant_id, seq)
"""

# -- the event types (docs/platform.md, "Events") ----------------------------------------------
TENANT_ADDED = "tenant.added"
TENANT_UPDATED = "tenant.updated"
TENANT_REMOVED = "tenant.removed"
TENANT_SUSPENDED = "tenant.suspended"
TENANT_RESUMED = "tenant.resumed"
TENANT_BROKEN = "tenant.broken"
FEED_FAILED = "feed.failed"
DELIVERY_DEAD = "lead.delivery_dead"
TYPES = EVENT_TYPES
assert set(TYPES) == {
    TENANT_ADDED,
    TENANT_UPDATED,
    TENANT_REMOVED,
    TENANT_SUSPENDED,
    TENANT_RESUMED,
    TENANT_BROKEN,
    FEED_FAILED,
    DELIVERY_DEAD,
}
STATES = ("pending", "sending", "delivered", "dead", "skipped")

#: The longest reason an event carries (a feed's message, a configuration's problems).
MAX_REASON = 500
#: How long finished events are kept for ``aap tenants events`` (they are pruned after).
RETENTION_MS = 30 * 86_400_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def emit(tx: Tx, type_: str, data: dict[str, Any], *, tenant: str | None = None, now_ms: int | None = None) -> None:
    """Record an event of ``tenant`` (default: ``tx``'s) in ``tx``, when ``tx`` is a platform's.

    The one call every hook makes. A single deployment has no platform to tell (and no table):
    nothing is written for its own agent, nor in a database that is not a platform's."""
    tenant_id = tenant if tenant is not None else tx.tenant
    if tenant_id == DEPLOYMENT_TENANT or not tx.db.platform:
        return
    assert type_ in TYPES, type_
    at = _now_ms() if now_ms is None else now_ms
    tx.execute(
        "INSERT INTO platform_events (event_id, tenant_id, type, data, occurred_ms, state, attempts, next_ms)"
        " VALUES (?, ?, ?, ?, ?, 'pending', 0, ?)",
        ("evt_" + uuid.uuid4().hex, tenant_id, type_, orjson.dumps(data).decode(), at, at),
    )


def reason(text: str | None) -> str:
    """A reason as an event carries it: bounded."""
    return (text or "")[:MAX_REASON]


@dataclass(frozen=True)
class Event:
    """One event, as stored."""

    event_id: str
    tenant_id: str
    type: str
    data: dict[str, Any]
    occurred_ms: int
    state: str
    attempts: int
    next_ms: int
    claim_token: str | None = None
    last_error: str | None = None
    done_ms: int | None = None


_COLUMNS = "event_id, tenant_id, type, data, occurred_ms, state, attempts, next_ms, claim_token, last_error, done_ms"


def _event(row: Sequence[Any]) -> Event:
    return Event(
        row[0],
        row[1],
        row[2],
        orjson.loads(row[3]),
        int(row[4]),
        row[5],
        int(row[6]),
        int(row[7]),
        row[8],
        row[9],
        None if row[10] is None else int(row[10]),
    )


class EventStore:
    """The platform's events on its database (the registry's, :func:`aap.store.open_platform_database`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[Event]:
        """Atomically claim up to ``limit`` due rows (pending and due, or with a lapsed claim),
        oldest first. The outer ``WHERE`` repeats the due condition, so on PostgreSQL a row
        another worker claimed meanwhile is skipped; on SQLite the write lock serialises claims.
        Claiming counts as an attempt (a row that keeps killing its worker still ends up dead)."""
        token = "clm_" + uuid.uuid4().hex
        due = "((state = 'pending' AND next_ms <= ?) OR (state = 'sending' AND claimed_until_ms <= ?))"
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE platform_events SET state = 'sending', claim_token = ?, claimed_until_ms = ?,"
                " attempts = attempts + 1"
                f" WHERE seq IN (SELECT seq FROM platform_events WHERE {due} ORDER BY next_ms, seq LIMIT ?)"
                f" AND {due}",
                (token, now_ms + lease_ms, now_ms, now_ms, limit, now_ms, now_ms),
            )
            rows = tx.fetchall(f"SELECT {_COLUMNS} FROM platform_events WHERE claim_token = ? ORDER BY seq", (token,))
        return [_event(r) for r in rows]

    def any_due(self, now_ms: int) -> bool:
        """Whether any row is due (a read: an idle worker's look takes no write lock)."""
        with self.db.read() as tx:
            return (
                tx.fetchone(
                    "SELECT 1 FROM platform_events WHERE (state = 'pending' AND next_ms <= ?)"
                    " OR (state = 'sending' AND claimed_until_ms <= ?) LIMIT 1",
                    (now_ms, now_ms),
                )
                is not None
            )

    def renew(self, token: str, until_ms: int) -> int:
        """Extend the claim ``token`` on the rows it still holds (the sender's heartbeat)."""
        with self.db.transaction() as tx:
            return tx.execute(
                "UPDATE platform_events SET claimed_until_ms = ? WHERE claim_token = ? AND state = 'sending'",
                (until_ms, token),
            ).rowcount

    def _finish(self, event: Event, sql: str, params: Sequence[Any]) -> bool:
        """Apply an outcome while our claim still holds (False: another worker took the row)."""
        with self.db.transaction() as tx:
            return (
                tx.execute(
                    f"UPDATE platform_events SET {sql}, claim_token = NULL, claimed_until_ms = NULL"
                    " WHERE event_id = ? AND claim_token = ? AND state = 'sending'",
                    (*params, event.event_id, event.claim_token),
                ).rowcount
                == 1
            )

    def mark_delivered(self, event: Event, now_ms: int) -> bool:
        return self._finish(event, "state = 'delivered', done_ms = ?, last_error = NULL", (now_ms,))

    def mark_retry(self, event: Event, next_ms: int, error: str) -> bool:
        return self._finish(event, "state = 'pending', next_ms = ?, last_error = ?", (next_ms, error[:MAX_REASON]))

    def mark_dead(self, event: Event, now_ms: int, error: str) -> bool:
        return self._finish(event, "state = 'dead', done_ms = ?, last_error = ?", (now_ms, error[:MAX_REASON]))

    def mark_skipped(self, event: Event, now_ms: int, why: str) -> bool:
        return self._finish(event, "state = 'skipped', done_ms = ?, last_error = ?", (now_ms, why[:MAX_REASON]))

    def release(self, token: str) -> int:
        """Hand back, due now, what claim ``token`` still holds (a sender stopping part way)."""
        with self.db.transaction() as tx:
            return tx.execute(
                "UPDATE platform_events SET state = 'pending', claim_token = NULL, claimed_until_ms = NULL"
                " WHERE claim_token = ? AND state = 'sending'",
                (token,),
            ).rowcount

    def retry(self, event_id: str, now_ms: int) -> bool:
        """Make a dead or skipped event due again now (``aap tenants events --retry``)."""
        with self.db.transaction() as tx:
            return (
                tx.execute(
                    "UPDATE platform_events SET state = 'pending', next_ms = ?, attempts = 0, done_ms = NULL,"
                    " last_error = NULL WHERE event_id = ? AND state IN ('dead', 'skipped')",
                    (now_ms, event_id),
                ).rowcount
                == 1
            )

    def next_due_ms(self) -> int | None:
        with self.db.read() as tx:
            row = tx.one("SELECT MIN(next_ms) FROM platform_events WHERE state = 'pending'")
        return None if row[0] is None else int(row[0])

    def get(self, event_id: str) -> Event | None:
        with self.db.read() as tx:
            row = tx.fetchone(f"SELECT {_COLUMNS} FROM platform_events WHERE event_id = ?", (event_id,))
        return None if row is None else _event(row)

    def recent(
        self, *, tenant: str | None = None, states: Sequence[str] = (), limit: int = 100, before_seq: int | None = None
    ) -> list[Event]:
        """The newest events first, of one tenant and in some states when asked."""
        conditions: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            conditions.append("tenant_id = ?")
            params.append(tenant)
        if states:
            conditions.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(states)
        if before_seq is not None:
            conditions.append("seq < ?")
            params.append(before_seq)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        with self.db.read() as tx:
            rows = tx.fetchall(
                f"SELECT {_COLUMNS} FROM platform_events{where} ORDER BY seq DESC LIMIT ?", (*params, limit)
            )
        return [_event(r) for r in rows]

    def prune(self, before_ms: int) -> int:
        """Forget finished events that occurred before ``before_ms``."""
        with self.db.transaction() as tx:
            return tx.execute(
                "DELETE FROM platform_events WHERE occurred_ms < ? AND state IN ('delivered', 'dead', 'skipped')",
                (before_ms,),
            ).rowcount
