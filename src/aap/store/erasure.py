"""Erasing leads: one customer's (a privacy request) or every lead past its retention period.

What an erasure does to each table of an agent is written down here, table by table
(:data:`ERASED`, :data:`ANONYMISED`, :data:`KEPT`), and a test holds that list against the
catalogue of every tenant table, so a table added later cannot be forgotten
(docs/leads.md, "Erasure and retention"):

- the rows that hold the customer's data, or point at a lead that no longer exists, are
  **deleted**: the lead (its request, result, customer search keys), its consent record, its
  appointment seats, its outbox rows (a pending delivery is cancelled with them), every
  delivery attempt with the exact body sent, and its pipeline history with staff notes;
- the lead's **idempotency record is anonymised**, not deleted: its payload hash and stored
  result are cleared and the key is kept until it expires, so an agent that resends the
  erased submission under the same key is refused (``IDEMPOTENCY_CONFLICT``) instead of
  storing the customer's data again;
- one row of ``lead_erasures`` records the erasure — when, by whom, why, the lead ids, how
  many rows of each table, and a keyed digest of the customer's e-mail and phone, never the
  values — and one audit row says the same in the agent's audit log. Lead ids are random:
  without the lead they say nothing about the customer.

Every statement is the transaction's tenant's only (:mod:`aap.store.layout`), so two agents
of one platform whose shoppers share an e-mail address never erase each other's leads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.store.console import write_audit
from aap.store.db import Database, Migrations, Tx
from aap.util.rfc3339 import ms_to_utc_z

_LAYOUT = """
CREATE TABLE lead_erasures (
    tenant_id TEXT NOT NULL,
    erasure_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    subject_digest TEXT,
    lead_count INTEGER NOT NULL,
    lead_ids TEXT NOT NULL,
    counts TEXT NOT NULL,
    PRIMARY KEY (tenant_id, erasure_id)
);
CREATE INDEX lead_erasures_at ON lead_erasures (tenant_id, at_ms, erasure_id)
"""

MIGRATIONS = Migrations("erasure", (_LAYOUT,), tables=("lead_erasures",))

#: Why leads were erased: a customer's request, or the configured retention period.
REQUEST, RETENTION = "request", "retention"
#: The audit log's action of an erasure.
AUDIT_ACTION = "leads.erased"

#: Tables whose rows of an erased lead are deleted, each with the column naming the lead, in the
#: order they are deleted: the outbox first (a worker finishing a send waits for it, then finds
#: its row gone and records nothing: :meth:`aap.store.leads.LeadStore._finish`), the lead last
#: (the others refer to it).
ERASED: dict[str, str] = {
    "lead_deliveries": "lead_id",
    "lead_delivery_attempts": "lead_id",
    "lead_events": "lead_id",
    "appointment_seats": "lead_id",
    "lead_consents": "lead_id",
    "leads": "lead_id",
}
#: Tables whose rows of an erased lead are kept with the customer's data cleared.
ANONYMISED: dict[str, str] = {"lead_idempotency": "lead_id"}
#: Every other table of an agent, and why it holds no customer's data.
KEPT: dict[str, str] = {
    "state_secret": "the agent's own keys",
    "state_bucket": "rate-limit buckets of callers (agents and addresses), not customers",
    "state_once": "replay caches of tokens",
    "state_value": "short-lived cursor positions of searches",
    "state_mark": "marks of the database itself",
    "inv_listing": "the dealer's vehicles and their search index",
    "inv_doc": "the dealer's vehicles and their search index",
    "inv_text": "the dealer's vehicles and their search index",
    "inv_term": "the dealer's vehicles and their search index",
    "inv_vocab": "the dealer's vehicles and their search index",
    "inv_feature_extra": "the dealer's vehicles and their search index",
    "inv_seller": "the dealer's vehicles and their search index",
    "inv_count": "the dealer's vehicles and their search index",
    "inv_facet_count": "the dealer's vehicles and their search index",
    "inv_change": "the dealer's vehicles and their search index",
    "inv_tombstone": "the dealer's vehicles and their search index",
    "inv_meta": "the dealer's vehicles and their search index",
    "poppy_signing_keys": "the agent's own keys",
    "poppy_replay": "replay caches of tokens",
    "poppy_sessions": "agents' sessions (client ids), not customers",
    "poppy_tokens": "digests of agents' tokens",
    "poppy_feedback": "what agents report about the agent",
    "feed_runs": "feed imports",
    "feed_state": "feed schedules",
    "feed_notes": "feed problems",
    "console_users": "staff accounts",
    "console_sessions": "staff sessions",
    "console_throttle": "sign-in attempts of staff",
    "console_audit": "who changed which lead and to what state: lead ids, never customer values",
    "console_checks": "conformance runs",
    "lead_erasures": "the erasures themselves: lead ids, counts and a keyed digest",
}

#: Lead ids per ``IN (…)`` list: well under every SQLite build's limit on parameters.
_CHUNK = 500
#: Delivery states that mean "not sent yet".
_WAITING = ("pending", "delivering")


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _marks(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


@dataclass(frozen=True)
class Erasure:
    """What one erasure did (or, for a dry run, would do)."""

    erasure_id: str | None  # None for a dry run
    at_ms: int
    actor: str
    reason: str
    subject_digest: str | None
    lead_ids: tuple[str, ...]
    #: Rows per table (``lead_idempotency``: anonymised); ``cancelled_deliveries``: how many of
    #: the deleted outbox rows had not been sent yet.
    counts: dict[str, int]

    def view(self) -> dict[str, Any]:
        """The record as JSON: ids, counts and the digest, never a customer's value."""
        return {
            "erasure_id": self.erasure_id,
            "at": ms_to_utc_z(self.at_ms),
            "actor": self.actor,
            "reason": self.reason,
            "subject_digest": self.subject_digest,
            "lead_count": len(self.lead_ids),
            "lead_ids": list(self.lead_ids),
            "counts": self.counts,
        }


class ErasureStore:
    """Finding, counting and erasing an agent's leads, and the record of each erasure."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- finding leads ---------------------------------------------------------------------------
    def leads_of(self, email_key: str | None, phone_key: str | None, *, limit: int) -> list[str]:
        """The ids of the leads whose customer has this e-mail key or this phone key (the keys
        :func:`aap.store.leads.customer_keys` stores), oldest first; at most ``limit``."""
        found: dict[str, int] = {}
        with self.db.read() as tx:
            for column, key in (("customer_email_k", email_key), ("customer_phone_r", phone_key)):
                if key is None:
                    continue
                for lead_id, received_ms in tx.fetchall(
                    f"SELECT lead_id, received_ms FROM leads WHERE tenant_id = ? AND {column} = ?"
                    f" ORDER BY received_ms, lead_id LIMIT {int(limit)}",
                    (tx.tenant, key),
                ):
                    found[lead_id] = int(received_ms)
        return sorted(found, key=lambda i: (found[i], i))[:limit]

    def expired(self, before_ms: int, *, limit: int) -> list[str]:
        """The ids of up to ``limit`` leads received before ``before_ms`` with no delivery still
        to send (pending, or being sent), oldest first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT l.lead_id FROM leads l WHERE l.tenant_id = ? AND l.received_ms < ?"
                " AND NOT EXISTS (SELECT 1 FROM lead_deliveries d WHERE d.tenant_id = l.tenant_id"
                f" AND d.lead_id = l.lead_id AND d.status IN ({_marks(_WAITING)}))"
                f" ORDER BY l.received_ms, l.lead_id LIMIT {int(limit)}",
                (tx.tenant, before_ms, *_WAITING),
            )
        return [str(r[0]) for r in rows]

    # -- counting and erasing ----------------------------------------------------------------------
    def counts(self, lead_ids: Sequence[str]) -> dict[str, int]:
        """How many rows of each table an erasure of ``lead_ids`` deletes (or anonymises)."""
        with self.db.read() as tx:
            return _counts(tx, lead_ids)

    def erase(
        self,
        lead_ids: Sequence[str],
        *,
        actor: str,
        reason: str,
        subject_digest: str | None,
        now_ms: int,
        received_before_ms: int | None = None,
    ) -> Erasure:
        """Erase ``lead_ids`` and record it, in one transaction.

        ``received_before_ms`` (retention): only the leads among them still received before it
        and with no delivery still to send are erased — checked again in the transaction, as a
        lead may have been re-queued since it was found; others are left as they are.
        """
        with self.db.transaction() as tx:
            ids = list(dict.fromkeys(lead_ids))
            # The leads' rows first (on PostgreSQL a lock: a concurrent erasure of the same leads —
            # two workers' retention passes — waits here, then finds them gone and records nothing).
            for chunk in _chunks(ids):
                tx.execute(
                    f"UPDATE leads SET status = status WHERE tenant_id = ? AND lead_id IN ({_marks(chunk)})",
                    (tx.tenant, *chunk),
                )
            ids = _still_expired(tx, ids, received_before_ms) if received_before_ms is not None else _existing(tx, ids)
            counts = _counts(tx, ids)
            for table, column in ERASED.items():
                for chunk in _chunks(ids):
                    tx.execute(
                        f"DELETE FROM {table} WHERE tenant_id = ? AND {column} IN ({_marks(chunk)})",
                        (tx.tenant, *chunk),
                    )
            for table, column in ANONYMISED.items():
                for chunk in _chunks(ids):
                    tx.execute(
                        f"UPDATE {table} SET payload_hash = 'erased', response_json = NULL"
                        f" WHERE tenant_id = ? AND {column} IN ({_marks(chunk)})",
                        (tx.tenant, *chunk),
                    )
            erasure = Erasure("ers_" + uuid.uuid4().hex, now_ms, actor, reason, subject_digest, tuple(ids), counts)
            if ids or reason == REQUEST:  # a request is recorded even when it found nothing
                _record(tx, erasure)
        return erasure

    def records(self, *, limit: int = 100) -> list[Erasure]:
        """The erasures recorded, newest first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT erasure_id, at_ms, actor, reason, subject_digest, lead_ids, counts FROM lead_erasures"
                f" WHERE tenant_id = ? ORDER BY at_ms DESC, erasure_id DESC LIMIT {int(limit)}",
                (tx.tenant,),
            )
        return [Erasure(r[0], int(r[1]), r[2], r[3], r[4], tuple(orjson.loads(r[5])), orjson.loads(r[6])) for r in rows]


def _existing(tx: Tx, ids: Sequence[str]) -> list[str]:
    """Those of ``ids`` that are leads of the tenant, in their order."""
    found: set[str] = set()
    for chunk in _chunks(ids):
        found |= {
            str(r[0])
            for r in tx.fetchall(
                f"SELECT lead_id FROM leads WHERE tenant_id = ? AND lead_id IN ({_marks(chunk)})", (tx.tenant, *chunk)
            )
        }
    return [i for i in ids if i in found]


def _still_expired(tx: Tx, ids: Sequence[str], before_ms: int) -> list[str]:
    """Those of ``ids`` still due for erasure by retention, in their order."""
    kept: set[str] = set()
    for chunk in _chunks(ids):
        kept |= {
            str(r[0])
            for r in tx.fetchall(
                f"SELECT l.lead_id FROM leads l WHERE l.tenant_id = ? AND l.lead_id IN ({_marks(chunk)})"
                " AND l.received_ms < ? AND NOT EXISTS (SELECT 1 FROM lead_deliveries d"
                " WHERE d.tenant_id = l.tenant_id AND d.lead_id = l.lead_id"
                f" AND d.status IN ({_marks(_WAITING)}))",
                (tx.tenant, *chunk, before_ms, *_WAITING),
            )
        }
    return [i for i in ids if i in kept]


def _counts(tx: Tx, ids: Sequence[str]) -> dict[str, int]:
    counts = {table: 0 for table in (*ERASED, *ANONYMISED)}
    counts["cancelled_deliveries"] = 0
    for chunk in _chunks(ids):
        for table, column in (*ERASED.items(), *ANONYMISED.items()):
            row = tx.one(
                f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND {column} IN ({_marks(chunk)})",
                (tx.tenant, *chunk),
            )
            counts[table] += int(row[0])
        row = tx.one(
            f"SELECT COUNT(*) FROM lead_deliveries WHERE tenant_id = ? AND lead_id IN ({_marks(chunk)})"
            f" AND status IN ({_marks(_WAITING)})",
            (tx.tenant, *chunk, *_WAITING),
        )
        counts["cancelled_deliveries"] += int(row[0])
    return counts


def _record(tx: Tx, erasure: Erasure) -> None:
    tx.execute(
        "INSERT INTO lead_erasures (tenant_id, erasure_id, at_ms, actor, reason, subject_digest, lead_count,"
        " lead_ids, counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            tx.tenant,
            erasure.erasure_id,
            erasure.at_ms,
            erasure.actor,
            erasure.reason,
            erasure.subject_digest,
            len(erasure.lead_ids),
            orjson.dumps(list(erasure.lead_ids)).decode(),
            orjson.dumps(erasure.counts).decode(),
        ),
    )
    detail = {
        "erasure_id": erasure.erasure_id,
        "reason": erasure.reason,
        "leads": len(erasure.lead_ids),
        "counts": erasure.counts,
    }
    if erasure.subject_digest is not None:
        detail["subject_digest"] = erasure.subject_digest
    write_audit(tx, erasure.actor, AUDIT_ACTION, erasure.erasure_id, detail, erasure.at_ms)
