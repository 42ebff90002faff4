"""Lead tables and every SQL statement that touches them.

Six tables, all in the deployment's one database so every worker process
shares one truth:

``leads``                   the lead, the caller identity, the full request and the
                            original response (what a replay returns)
``lead_consents``           the verbatim ConsentGrant, one per lead (the audit record)
``lead_idempotency``        (dealer, caller, key) → payload hash and stored result
``appointment_seats``       one row per booked seat; the primary key is the
                            capacity guard, so no two leads take the same seat
``lead_deliveries``         the outbox: one row per lead and delivery target
``lead_delivery_attempts``  one row per delivery attempt, with what was sent

Each row carries its tenant, which leads every key (:mod:`aap.store.layout`): every
statement here reads and writes the transaction's tenant only (``tx.tenant``), so two
agents of one platform may share lead ids, idempotency keys and seats without meeting.

SQL is portable (``?`` placeholders, ``INSERT ... ON CONFLICT DO NOTHING``,
an ``UPDATE ... WHERE id IN (SELECT ...)`` claim that re-checks its condition),
so the PostgreSQL database runs it unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from aap import telemetry
from aap.store import platform_events
from aap.store.db import Database, Migrations, Tx, where_all
from aap.store.platform import DELIVERIES, hold_due, note_due, write_due

_LAYOUT = """
CREATE TABLE leads (
    tenant_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    dealer_id TEXT NOT NULL,
    rooftop TEXT,
    status TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    binding TEXT NOT NULL,
    client_id TEXT,
    source_agent TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    vehicle_id TEXT,
    vehicle_link TEXT NOT NULL,
    listing_json TEXT,
    appointment_id TEXT,
    appointment_status TEXT,
    appointment_json TEXT,
    request_json TEXT NOT NULL,
    response_json TEXT NOT NULL,
    received_at TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    handled_ms INTEGER,
    handled_by TEXT,
    customer_name_k TEXT,
    customer_last_k TEXT,
    customer_email_k TEXT,
    customer_phone_r TEXT,
    PRIMARY KEY (tenant_id, lead_id)
);
CREATE INDEX leads_received ON leads (tenant_id, received_ms);
CREATE INDEX leads_dealer_received ON leads (tenant_id, dealer_id, received_ms);
CREATE INDEX leads_rooftop_received ON leads (tenant_id, rooftop, received_ms);
CREATE INDEX leads_status_received ON leads (tenant_id, status, received_ms);
CREATE INDEX leads_customer_name ON leads (tenant_id, customer_name_k);
CREATE INDEX leads_customer_last ON leads (tenant_id, customer_last_k);
CREATE INDEX leads_customer_email ON leads (tenant_id, customer_email_k);
CREATE INDEX leads_customer_phone ON leads (tenant_id, customer_phone_r);
CREATE TABLE lead_consents (
    tenant_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    granted_at TEXT NOT NULL,
    expires_at TEXT,
    expires_ms INTEGER,
    allowed_channels TEXT NOT NULL,
    scope TEXT NOT NULL,
    consent_text TEXT NOT NULL,
    grant_json TEXT NOT NULL,
    PRIMARY KEY (tenant_id, lead_id),
    FOREIGN KEY (tenant_id, lead_id) REFERENCES leads (tenant_id, lead_id)
);
CREATE TABLE lead_idempotency (
    tenant_id TEXT NOT NULL,
    dealer_id TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    lead_id TEXT,
    response_json TEXT,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, dealer_id, caller_id, idem_key)
);
CREATE INDEX lead_idempotency_expiry ON lead_idempotency (tenant_id, expires_ms);
CREATE TABLE appointment_seats (
    tenant_id TEXT NOT NULL,
    dealer_id TEXT NOT NULL,
    rooftop TEXT NOT NULL,
    department TEXT NOT NULL,
    slot_start TEXT NOT NULL,
    seat INTEGER NOT NULL,
    appointment_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    PRIMARY KEY (tenant_id, dealer_id, rooftop, department, slot_start, seat)
);
CREATE TABLE lead_deliveries (
    tenant_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    target TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    claim_token TEXT,
    claimed_until_ms INTEGER,
    last_error TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    delivered_ms INTEGER,
    retry_base INTEGER NOT NULL DEFAULT 0,
    reached INTEGER NOT NULL DEFAULT 0,
    trace_context TEXT,
    PRIMARY KEY (tenant_id, delivery_id),
    UNIQUE (tenant_id, lead_id, target),
    FOREIGN KEY (tenant_id, lead_id) REFERENCES leads (tenant_id, lead_id)
);
CREATE INDEX lead_deliveries_due ON lead_deliveries (tenant_id, status, next_attempt_ms);
CREATE INDEX lead_deliveries_claim ON lead_deliveries (tenant_id, claim_token);
CREATE INDEX lead_deliveries_state ON lead_deliveries (tenant_id, status, lead_id);
CREATE TABLE lead_delivery_attempts (
    tenant_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    content_type TEXT,
    payload TEXT,
    PRIMARY KEY (tenant_id, attempt_id)
);
CREATE INDEX lead_delivery_attempts_lead ON lead_delivery_attempts (tenant_id, lead_id, finished_ms)
"""

# What the columns hold: ``handled_ms``/``handled_by`` the console's "handled" mark; the
# customer search keys (casefolded name, last name and e-mail, the phone's digits reversed so
# that a suffix is a prefix: :func:`customer_keys`), which the inbox's indexes serve; in the
# outbox, ``attempts`` counts every try, for ever, and ``retry_base`` is its value when an
# operator last re-queued the row (``aap leads retry``), so the retry policy (max_attempts,
# backoff) starts again while the count stays true; ``reached``: an earlier attempt may have
# reached the target (it was sent and its answer was lost or ambiguous, or a worker died
# holding the claim, or an operator re-sent a delivered row), so the next attempts are flagged
# as resends (docs/leads.md §8, the resend rule). ``lead_delivery_attempts``: one row per
# delivery attempt with what was sent.

MIGRATIONS = Migrations(
    "leads",
    (_LAYOUT,),
    tables=(
        "leads",
        "lead_consents",
        "lead_idempotency",
        "appointment_seats",
        "lead_deliveries",
        "lead_delivery_attempts",
    ),
)


def customer_keys(request: dict[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """The search keys of a lead's customer: name, last name, e-mail (casefolded), phone digits reversed."""
    customer = request.get("customer") or {}
    first = str(customer.get("first_name") or "").strip()
    last = str(customer.get("last_name") or "").strip()
    name = " ".join(part for part in (first, last) if part).casefold()
    email = str(customer.get("email") or "").strip().casefold()
    digits = "".join(ch for ch in str(customer.get("phone") or "") if ch.isdigit())
    return name or None, last.casefold() or None, email or None, digits[::-1] or None


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


#: A lead's deliveries as ``aap leads show`` gives them: these columns, by name.
_DELIVERY_FIELDS = (
    "delivery_id",
    "target",
    "kind",
    "status",
    "attempts",
    "next_attempt_ms",
    "last_error",
    "delivered_ms",
    "updated_ms",
)


@dataclass(frozen=True)
class IdempotencyRecord:
    payload_hash: str
    lead_id: str | None
    response: dict[str, Any] | None


@dataclass(frozen=True)
class NewLead:
    """Everything stored for one accepted submission."""

    lead_id: str
    dealer_id: str
    rooftop: str | None
    status: str
    caller_id: str
    binding: str
    client_id: str | None
    source_agent: str
    idempotency_key: str
    vehicle_id: str | None
    vehicle_link: str
    listing: dict[str, Any] | None
    appointment_id: str | None
    appointment_status: str | None
    appointment: dict[str, Any] | None
    request: dict[str, Any]
    response: dict[str, Any]
    received_at: str
    received_ms: int
    consent_expires_ms: int | None


@dataclass(frozen=True)
class Attempt:
    """One try at a delivery, recorded with its outcome: when, and the exact body sent (if any)."""

    started_ms: int
    content_type: str | None = None
    payload: str | None = None


@dataclass(frozen=True)
class Delivery:
    """One claimed outbox row with the lead it carries."""

    delivery_id: str
    lead_id: str
    target: str
    kind: str
    attempts: int
    claim_token: str
    dealer_id: str
    rooftop: str | None
    request: dict[str, Any]
    response: dict[str, Any]
    listing: dict[str, Any] | None
    appointment: dict[str, Any] | None
    received_at: str
    consent_expires_ms: int | None
    vehicle_link: str = "none"
    vehicle_id: str | None = None
    retry_base: int = 0
    #: An earlier attempt may have reached the target: this one is a resend.
    reached: bool = False
    #: The ``traceparent`` of the request that stored the lead (aap.telemetry), or None.
    trace_context: str | None = None

    @property
    def tries(self) -> int:
        """Attempts since the row was last re-queued by an operator (what the policy limits)."""
        return self.attempts - self.retry_base


_LEAD_COLUMNS = (
    "lead_id, dealer_id, rooftop, status, caller_id, binding, client_id, source_agent, "
    "idempotency_key, vehicle_id, vehicle_link, listing_json, appointment_id, appointment_status, "
    "appointment_json, request_json, response_json, received_at, received_ms"
)
_SEARCH_COLUMNS = "customer_name_k, customer_last_k, customer_email_k, customer_phone_r"


#: The columns of a lead's summary (``aap leads list``): ids, routing and states, no customer value.
SUMMARY_COLUMNS = (
    "l.lead_id, l.received_at, l.dealer_id, l.rooftop, l.status, l.appointment_status,"
    " l.source_agent, l.caller_id, l.vehicle_link"
)
_SUMMARY_KEYS = (
    "lead_id", "received_at", "dealer_id", "rooftop", "status", "appointment_status", "source_agent", "caller_id",
    "vehicle_link",
)  # fmt: skip


def summary(row: Sequence[Any], deliveries: dict[str, int]) -> dict[str, Any]:
    """The summary of a row that starts with :data:`SUMMARY_COLUMNS`, with its delivery states."""
    return {**dict(zip(_SUMMARY_KEYS, row, strict=False)), "deliveries": deliveries}


def delivery_states(tx: Tx, lead_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """How many deliveries of each lead are in each state (every id has an entry)."""
    counts: dict[str, dict[str, int]] = {i: {} for i in lead_ids}
    if lead_ids:
        marks = ", ".join("?" for _ in lead_ids)
        for lead_id, state, count in tx.fetchall(
            f"SELECT lead_id, status, COUNT(*) FROM lead_deliveries WHERE tenant_id = ? AND lead_id IN ({marks})"
            " GROUP BY lead_id, status",
            (tx.tenant, *lead_ids),
        ):
            counts[lead_id][state] = int(count)
    return counts


def next_due_in(tx: Tx) -> int | None:
    """When ``tx``'s tenant's next delivery is due (a pending row's attempt, a claim that
    lapses), read in ``tx``, or None."""
    row = tx.one(
        "SELECT MIN(CASE WHEN status = 'pending' THEN next_attempt_ms ELSE claimed_until_ms END)"
        " FROM lead_deliveries WHERE tenant_id = ? AND status IN ('pending', 'delivering')",
        (tx.tenant,),
    )
    return None if row[0] is None else int(row[0])


def note_outbox_due(tx: Tx) -> None:
    """Note ``tx``'s tenant's deliveries as due when its outbox, read in ``tx``, says so: for
    rows that arrived in bulk (a restore, a move into the shared tables), in their own
    transaction (:func:`~aap.store.platform.note_due`)."""
    following = next_due_in(tx)
    if following is not None:
        note_due(tx, DELIVERIES, following)


class LeadStore:
    """Leads, consent records, idempotency keys, appointment seats and the outbox."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.db.transaction() as tx:
            yield tx

    # -- idempotency ---------------------------------------------------------------
    def claim_key(
        self, tx: Tx, dealer_id: str, caller_id: str, key: str, payload_hash: str, now_ms: int, expires_ms: int
    ) -> IdempotencyRecord | None:
        """Claim (dealer, caller, key) for a new lead; or return the live record holding it.

        The insert is the lock: a concurrent identical submission blocks on it (or,
        on SQLite, waits for the write lock) and then finds the committed record.
        An expired record is taken over as if it did not exist.
        """
        for _ in range(3):
            inserted = tx.execute(
                "INSERT INTO lead_idempotency (tenant_id, dealer_id, caller_id, idem_key, payload_hash, created_ms,"
                " expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, dealer_id, caller_id, idem_key) DO NOTHING",
                (tx.tenant, dealer_id, caller_id, key, payload_hash, now_ms, expires_ms),
            ).rowcount
            if inserted == 1:
                return None
            taken_over = tx.execute(
                "UPDATE lead_idempotency SET payload_hash = ?, lead_id = NULL, response_json = NULL,"
                " created_ms = ?, expires_ms = ? WHERE tenant_id = ? AND dealer_id = ? AND caller_id = ?"
                " AND idem_key = ? AND expires_ms <= ?",
                (payload_hash, now_ms, expires_ms, tx.tenant, dealer_id, caller_id, key, now_ms),
            ).rowcount
            if taken_over == 1:
                return None
            row = tx.fetchone(
                "SELECT payload_hash, lead_id, response_json FROM lead_idempotency"
                " WHERE tenant_id = ? AND dealer_id = ? AND caller_id = ? AND idem_key = ?",
                (tx.tenant, dealer_id, caller_id, key),
            )
            if row is not None:
                return IdempotencyRecord(row[0], row[1], loads(row[2]))
            # swept between our statements (another backend): claim it again
        raise RuntimeError("idempotency record kept changing under a concurrent sweep")

    def complete_key(
        self, tx: Tx, dealer_id: str, caller_id: str, key: str, lead_id: str, response: dict[str, Any]
    ) -> None:
        tx.execute(
            "UPDATE lead_idempotency SET lead_id = ?, response_json = ?"
            " WHERE tenant_id = ? AND dealer_id = ? AND caller_id = ? AND idem_key = ?",
            (lead_id, dumps(response), tx.tenant, dealer_id, caller_id, key),
        )

    def sweep_idempotency(self, now_ms: int) -> int:
        """Forget expired keys (the lead rows themselves are kept)."""
        with self.db.transaction() as tx:
            return tx.execute(
                "DELETE FROM lead_idempotency WHERE tenant_id = ? AND expires_ms <= ?", (tx.tenant, now_ms)
            ).rowcount

    # -- appointment seats ---------------------------------------------------------
    def seat_usage(
        self, tx: Tx, dealer_id: str, rooftop: str, department: str, first: str, last: str
    ) -> dict[str, int]:
        rows = tx.fetchall(
            "SELECT slot_start, COUNT(*) FROM appointment_seats WHERE tenant_id = ? AND dealer_id = ? AND rooftop = ?"
            " AND department = ? AND slot_start >= ? AND slot_start <= ? GROUP BY slot_start",
            (tx.tenant, dealer_id, rooftop, department, first, last),
        )
        return {row[0]: int(row[1]) for row in rows}

    def take_seats(
        self,
        tx: Tx,
        dealer_id: str,
        rooftop: str,
        department: str,
        slot_starts: Sequence[str],
        capacity: int,
        appointment_id: str,
        lead_id: str,
    ) -> bool:
        """One seat in every slot, or none: False when a slot is already full."""
        for slot_start in slot_starts:
            for seat in range(capacity):
                if (
                    tx.execute(
                        "INSERT INTO appointment_seats (tenant_id, dealer_id, rooftop, department, slot_start, seat,"
                        " appointment_id, lead_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (tenant_id, dealer_id, rooftop, department, slot_start, seat) DO NOTHING",
                        (tx.tenant, dealer_id, rooftop, department, slot_start, seat, appointment_id, lead_id),
                    ).rowcount
                    == 1
                ):
                    break
            else:
                tx.execute(
                    "DELETE FROM appointment_seats WHERE tenant_id = ? AND appointment_id = ?",
                    (tx.tenant, appointment_id),
                )
                return False
        return True

    # -- leads -----------------------------------------------------------------------
    def insert_lead(
        self, tx: Tx, lead: NewLead, consent: dict[str, Any], targets: Sequence[tuple[str, str]], now_ms: int
    ) -> None:
        """The lead, its consent record and one pending outbox row per (target name, kind)."""
        tx.execute(
            f"INSERT INTO leads (tenant_id, {_LEAD_COLUMNS}, {_SEARCH_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tx.tenant,
                lead.lead_id,
                lead.dealer_id,
                lead.rooftop,
                lead.status,
                lead.caller_id,
                lead.binding,
                lead.client_id,
                lead.source_agent,
                lead.idempotency_key,
                lead.vehicle_id,
                lead.vehicle_link,
                dumps(lead.listing) if lead.listing is not None else None,
                lead.appointment_id,
                lead.appointment_status,
                dumps(lead.appointment) if lead.appointment is not None else None,
                dumps(lead.request),
                dumps(lead.response),
                lead.received_at,
                lead.received_ms,
                *customer_keys(lead.request),
            ),
        )
        tx.execute(
            "INSERT INTO lead_consents (tenant_id, lead_id, granted_at, expires_at, expires_ms, allowed_channels,"
            " scope, consent_text, grant_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tx.tenant,
                lead.lead_id,
                consent["granted_at"],
                consent.get("expires_at"),
                lead.consent_expires_ms,
                dumps(consent["allowed_channels"]),
                dumps(consent["scope"]),
                consent["consent_text"],
                dumps(consent),
            ),
        )
        if targets:
            tracing = telemetry.active
            trace_context = tracing.traceparent() if tracing is not None else None
            tx.executemany(
                "INSERT INTO lead_deliveries (tenant_id, delivery_id, lead_id, target, kind, status, attempts,"
                " next_attempt_ms, created_ms, updated_ms, trace_context)"
                " VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)",
                [
                    (
                        tx.tenant,
                        "dlv_" + uuid.uuid4().hex,
                        lead.lead_id,
                        name,
                        kind,
                        now_ms,
                        now_ms,
                        now_ms,
                        trace_context,
                    )
                    for name, kind in targets
                ],
            )
            note_due(tx, DELIVERIES, now_ms)

    def list_leads(
        self, *, limit: int = 50, status: str | None = None, delivery_status: str | None = None
    ) -> list[dict[str, Any]]:
        """Newest first, without any customer value (for ``aap leads list``)."""
        with self.db.read() as tx:
            where: list[str] = ["l.tenant_id = ?"]
            params: list[Any] = [tx.tenant]
            if status:
                where.append("l.status = ?")
                params.append(status)
            if delivery_status:
                where.append(
                    "EXISTS (SELECT 1 FROM lead_deliveries x WHERE x.tenant_id = l.tenant_id AND x.lead_id = l.lead_id"
                    " AND x.status = ?)"
                )
                params.append(delivery_status)
            clause = where_all(where)
            rows = tx.fetchall(
                f"SELECT {SUMMARY_COLUMNS} FROM leads l {clause} ORDER BY l.received_ms DESC, l.lead_id DESC LIMIT ?",
                (*params, limit),
            )
            counts = delivery_states(tx, [row[0] for row in rows])
        return [summary(r, counts[r[0]]) for r in rows]

    def get_lead(self, lead_id: str) -> dict[str, Any] | None:
        """The whole record, customer data included (for ``aap leads show`` only)."""
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT {_LEAD_COLUMNS} FROM leads WHERE tenant_id = ? AND lead_id = ?", (tx.tenant, lead_id)
            )
            if row is None:
                return None
            consent = tx.fetchone(
                "SELECT granted_at, expires_at, allowed_channels, scope, consent_text, grant_json"
                " FROM lead_consents WHERE tenant_id = ? AND lead_id = ?",
                (tx.tenant, lead_id),
            )
            deliveries = tx.fetchall(
                f"SELECT {', '.join(_DELIVERY_FIELDS)} FROM lead_deliveries"
                " WHERE tenant_id = ? AND lead_id = ? ORDER BY target",
                (tx.tenant, lead_id),
            )
        names = [c.strip() for c in _LEAD_COLUMNS.split(",")]
        lead = dict(zip(names, row))
        for column in ("listing_json", "appointment_json", "request_json", "response_json"):
            lead[column[: -len("_json")]] = loads(lead.pop(column))
        lead["consent"] = (
            None
            if consent is None
            else {
                "granted_at": consent[0],
                "expires_at": consent[1],
                "allowed_channels": loads(consent[2]),
                "scope": loads(consent[3]),
                "consent_text": consent[4],
                "grant": loads(consent[5]),
            }
        )
        lead["deliveries"] = [dict(zip(_DELIVERY_FIELDS, d, strict=True)) for d in deliveries]
        return lead

    def count_leads(self) -> int:
        with self.db.read() as tx:
            row = tx.fetchone("SELECT COUNT(*) FROM leads WHERE tenant_id = ?", (tx.tenant,))
        return int(row[0]) if row else 0

    # -- the outbox ------------------------------------------------------------------
    def next_due_ms(self) -> int | None:
        """When the next delivery is due (a pending row's attempt, a claim that lapses), or None."""
        with self.db.read() as tx:
            return next_due_in(tx)

    def settle_due(self) -> int | None:
        """A platform runner's last step for this tenant: note when its next delivery is due
        (None: the outbox has nothing left to send), and return it. The note's row is held
        before the outbox is read, so a lead stored meanwhile notes itself after this write,
        not under it (:func:`~aap.store.platform.hold_due`)."""
        with self.db.transaction() as tx:
            hold_due(tx, DELIVERIES)
            following = next_due_in(tx)
            write_due(tx, DELIVERIES, following)
        return following

    def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[Delivery]:
        """Atomically claim up to ``limit`` due rows (pending and due, or with a lapsed claim).

        The outer ``WHERE`` repeats the due condition, so on PostgreSQL a row that
        another worker claimed between the sub-select and the update is skipped
        (the update re-checks the newest row version); on SQLite the write lock
        serialises claims. Claiming counts as an attempt, so a row that keeps
        killing its worker still ends up dead. Taking over a lapsed claim marks the
        row ``reached``: the worker that held it may have sent it before it died.
        """
        token = "clm_" + uuid.uuid4().hex
        due = "((status = 'pending' AND next_attempt_ms <= ?) OR (status = 'delivering' AND claimed_until_ms <= ?))"
        with self.db.transaction() as tx:
            tx.execute(  # SET sees the row as it was: status is still the old one in the CASE
                "UPDATE lead_deliveries SET status = 'delivering', claim_token = ?, claimed_until_ms = ?,"
                " attempts = attempts + 1, updated_ms = ?,"
                " reached = CASE WHEN status = 'delivering' THEN 1 ELSE reached END"
                f" WHERE tenant_id = ? AND delivery_id IN (SELECT delivery_id FROM lead_deliveries"
                f" WHERE tenant_id = ? AND {due} ORDER BY next_attempt_ms LIMIT ?) AND {due}",
                (token, now_ms + lease_ms, now_ms, tx.tenant, tx.tenant, now_ms, now_ms, limit, now_ms, now_ms),
            )
            rows = tx.fetchall(
                "SELECT d.delivery_id, d.lead_id, d.target, d.kind, d.attempts, l.dealer_id, l.rooftop,"
                " l.request_json, l.response_json, l.listing_json, l.appointment_json, l.received_at,"
                " c.expires_ms, l.vehicle_link, l.vehicle_id, d.retry_base, d.reached, d.trace_context"
                " FROM lead_deliveries d JOIN leads l ON l.tenant_id = d.tenant_id AND l.lead_id = d.lead_id"
                " JOIN lead_consents c ON c.tenant_id = d.tenant_id AND c.lead_id = d.lead_id"
                " WHERE d.tenant_id = ? AND d.claim_token = ? ORDER BY d.next_attempt_ms",
                (tx.tenant, token),
            )
        return [
            Delivery(
                r[0],
                r[1],
                r[2],
                r[3],
                int(r[4]),
                token,
                r[5],
                r[6],
                loads(r[7]),
                loads(r[8]),
                loads(r[9]),
                loads(r[10]),
                r[11],
                r[12],
                r[13],
                r[14],
                int(r[15]),
                bool(r[16]),
                r[17],
            )
            for r in rows
        ]

    def renew(self, token: str, until_ms: int) -> int:
        """Extend the claim ``token`` on the rows it still holds (the sending worker's heartbeat)."""
        with self.db.transaction() as tx:
            return tx.execute(
                "UPDATE lead_deliveries SET claimed_until_ms = ?"
                " WHERE tenant_id = ? AND claim_token = ? AND status = 'delivering'",
                (until_ms, tx.tenant, token),
            ).rowcount

    def release(self, token: str, now_ms: int, started: Sequence[str] = ()) -> int:
        """Hand back the rows the claim ``token`` still holds, due now (a worker stopping): a row
        whose send had ``started`` may have reached its target (``reached``, sent as a resend);
        one never tried gives its attempt back."""
        tried = f"delivery_id IN ({', '.join('?' * len(started))})" if started else "1 = 0"
        with self.db.transaction() as tx:
            released = tx.execute(
                "UPDATE lead_deliveries SET status = 'pending', claim_token = NULL, claimed_until_ms = NULL,"
                f" next_attempt_ms = ?, updated_ms = ?, reached = CASE WHEN {tried} THEN 1 ELSE reached END,"
                f" attempts = CASE WHEN {tried} THEN attempts ELSE attempts - 1 END"
                " WHERE tenant_id = ? AND claim_token = ? AND status = 'delivering'",
                (now_ms, now_ms, *started, *started, tx.tenant, token),
            ).rowcount
            if released:
                note_due(tx, DELIVERIES, now_ms)
        return released

    def _finish(
        self,
        delivery: Delivery,
        sql: str,
        params: Sequence[Any],
        *,
        outcome: str,
        now_ms: int,
        error: str | None,
        attempt: Attempt | None,
    ) -> bool:
        """Apply an outcome only while our claim still holds (False: the claim was lost).

        ``attempt`` is recorded either way, in the same transaction: it says what
        was sent, which stays true even when another worker took the row over.
        """
        with self.db.transaction() as tx:
            held = (
                tx.execute(
                    f"{sql} WHERE tenant_id = ? AND delivery_id = ? AND claim_token = ? AND status = 'delivering'",
                    (*params, tx.tenant, delivery.delivery_id, delivery.claim_token),
                ).rowcount
                == 1
            )
            # A row erased while it was being sent (aap.store.erasure) stays erased: no attempt,
            # with the body that was sent, is recorded for it.
            if attempt is not None and (
                held
                or tx.fetchone(
                    "SELECT 1 FROM lead_deliveries WHERE tenant_id = ? AND delivery_id = ?",
                    (tx.tenant, delivery.delivery_id),
                )
                is not None
            ):
                tx.execute(
                    "INSERT INTO lead_delivery_attempts (tenant_id, attempt_id, delivery_id, lead_id, attempt,"
                    " started_ms, finished_ms, outcome, error, content_type, payload)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        tx.tenant,
                        "att_" + uuid.uuid4().hex,
                        delivery.delivery_id,
                        delivery.lead_id,
                        delivery.attempts,
                        attempt.started_ms,
                        now_ms,
                        outcome,
                        None if error is None else error[:500],
                        attempt.content_type,
                        attempt.payload,
                    ),
                )
            if held and outcome == "dead":
                platform_events.emit(
                    tx,
                    platform_events.DELIVERY_DEAD,
                    {
                        "lead_id": delivery.lead_id,
                        "delivery_id": delivery.delivery_id,
                        "target": delivery.target,
                        "attempts": delivery.attempts,
                        "reason": platform_events.reason(error),
                    },
                    now_ms=now_ms,
                )
            return held

    def mark_delivered(self, delivery: Delivery, now_ms: int, attempt: Attempt | None = None) -> bool:
        return self._finish(
            delivery,
            "UPDATE lead_deliveries SET status = 'delivered', delivered_ms = ?, updated_ms = ?,"
            " claim_token = NULL, claimed_until_ms = NULL, last_error = NULL",
            (now_ms, now_ms),
            outcome="delivered",
            now_ms=now_ms,
            error=None,
            attempt=attempt,
        )

    def mark_retry(
        self,
        delivery: Delivery,
        now_ms: int,
        next_ms: int,
        error: str,
        attempt: Attempt | None = None,
        *,
        reached: bool = True,
    ) -> bool:
        """Due again at ``next_ms``; ``reached``: this attempt may have reached the target."""
        return self._finish(
            delivery,
            "UPDATE lead_deliveries SET status = 'pending', next_attempt_ms = ?, updated_ms = ?,"
            " claim_token = NULL, claimed_until_ms = NULL, last_error = ?,"
            " reached = CASE WHEN ? = 1 THEN 1 ELSE reached END",
            (next_ms, now_ms, error[:500], int(reached)),
            outcome="pending",
            now_ms=now_ms,
            error=error,
            attempt=attempt,
        )

    def mark_dead(
        self, delivery: Delivery, now_ms: int, error: str, attempt: Attempt | None = None, *, reached: bool = False
    ) -> bool:
        return self._finish(
            delivery,
            "UPDATE lead_deliveries SET status = 'dead', updated_ms = ?, claim_token = NULL,"
            " claimed_until_ms = NULL, last_error = ?, reached = CASE WHEN ? = 1 THEN 1 ELSE reached END",
            (now_ms, error[:500], int(reached)),
            outcome="dead",
            now_ms=now_ms,
            error=error,
            attempt=attempt,
        )

    def mark_expired_consent(self, delivery: Delivery, now_ms: int, attempt: Attempt | None = None) -> bool:
        error = "consent expired before delivery; not sent"
        return self._finish(
            delivery,
            "UPDATE lead_deliveries SET status = 'expired_consent', updated_ms = ?, claim_token = NULL,"
            " claimed_until_ms = NULL, last_error = ?",
            (now_ms, error),
            outcome="expired_consent",
            now_ms=now_ms,
            error=error,
            attempt=attempt,
        )

    def retry(self, lead_id: str, now_ms: int, *, include_delivered: bool = False) -> int:
        """Make a lead's dead (and pending) rows due now; ``include_delivered`` re-sends the rest.

        The attempt count is kept (it is the row's history); the retry policy
        counts from here (``retry_base``).
        """
        states = ["dead", "pending"] + (["delivered"] if include_delivered else [])
        marks = ", ".join("?" for _ in states)
        with self.db.transaction() as tx:
            made_due = tx.execute(
                "UPDATE lead_deliveries SET status = 'pending', retry_base = attempts, next_attempt_ms = ?,"
                " updated_ms = ?, claim_token = NULL, claimed_until_ms = NULL, last_error = NULL,"
                " reached = CASE WHEN status = 'delivered' THEN 1 ELSE reached END"
                f" WHERE tenant_id = ? AND lead_id = ? AND status IN ({marks})",
                (now_ms, now_ms, tx.tenant, lead_id, *states),
            ).rowcount
            if made_due:
                note_due(tx, DELIVERIES, now_ms)
        return made_due

    def delivery_counts(self) -> dict[str, int]:
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT status, COUNT(*) FROM lead_deliveries WHERE tenant_id = ? GROUP BY status", (tx.tenant,)
            )
        return {row[0]: int(row[1]) for row in rows}
