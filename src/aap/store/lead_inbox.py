"""The staff console's reads of the lead tables: the inbox, one lead in full, the CSV export.

The tables belong to :mod:`aap.store.leads` (their migrations add the inbox's
indexes and the customer search keys); this module only reads them, plus the
"handled" mark. Every query is paged by keyset — ``(received_ms, lead_id)``
descending, the order of the ``leads_*_received`` indexes — so the hundredth
page costs what the first does, and every query takes a :class:`LeadScope`:
the leads a signed-in person may see, applied in SQL, never after the fact —
within the transaction's tenant's leads, which every statement names first
(:mod:`aap.store.layout`).

Customer search uses the casefolded keys stored with each lead: a name or
e-mail matches by prefix, a phone number by its last digits (the digits are
stored reversed, so a suffix is an index range).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aap.store.db import Database, Tx, where_all
from aap.store.leads import LeadStore, delivery_states, loads

DELIVERY_FILTERS = ("pending", "delivering", "delivered", "dead", "expired_consent", "none")
LEAD_STATUSES = ("received", "rejected")


#: A rooftop as a lead names it: ``(dealer_id, rooftop)``. Rooftop names are unique only within a
#: seller (docs/configuration.md, ``[dealer]``), so a rooftop is never named without its seller.
RooftopKey = tuple[str, str]


#: A lead's delivery attempts as the console shows them: these columns, by name.
_ATTEMPT_FIELDS = ("delivery_id", "attempt", "started_ms", "finished_ms", "outcome", "error", "content_type", "payload")


@dataclass(frozen=True)
class LeadScope:
    """The leads a person may see: every lead, one seller's (``dealer_id``), some rooftops' (``rooftops``).

    ``rooftops`` is None for every rooftop, else the (seller, rooftop) pairs allowed: an empty
    set allows nothing. :func:`scope_condition` is this scope in SQL, used by every query here.
    """

    dealer_id: str | None = None
    rooftops: frozenset[RooftopKey] | None = None

    def allows(self, dealer_id: str | None, rooftop: str | None) -> bool:
        if self.dealer_id is not None and dealer_id != self.dealer_id:
            return False
        return self.rooftops is None or (dealer_id, rooftop) in self.rooftops

    @property
    def sellers(self) -> frozenset[str] | None:
        """The sellers this scope reaches (None: every seller)."""
        if self.dealer_id is not None:
            return frozenset((self.dealer_id,))
        if self.rooftops is None:
            return None
        return frozenset(dealer for dealer, _ in self.rooftops)


def scope_condition(scope: LeadScope, alias: str = "l", *, plain: str = "") -> tuple[list[str], list[Any]]:
    """``scope`` as SQL conditions on the leads table under ``alias``, and their parameters.

    The one predicate of every console read and write of leads (inbox, export, a lead, handled,
    the delivery backlog): a seller by ``dealer_id`` and rooftops by (``dealer_id``, ``rooftop``)
    pairs, never by rooftop name alone. ``plain`` (``" || ''"``) keeps SQLite from planning on
    these columns' indexes.
    """
    conditions: list[str] = []
    params: list[Any] = []
    if scope.dealer_id is not None:
        conditions.append(f"{alias}.dealer_id{plain} = ?")
        params.append(scope.dealer_id)
    if scope.rooftops is not None:
        if not scope.rooftops:
            conditions.append("1 = 0")
        else:
            pairs = sorted(scope.rooftops)
            conditions.append(
                "(" + " OR ".join(f"({alias}.dealer_id{plain} = ? AND {alias}.rooftop{plain} = ?)" for _ in pairs) + ")"
            )
            for dealer_id, rooftop in pairs:
                params.extend((dealer_id, rooftop))
    return conditions, params


@dataclass(frozen=True)
class InboxFilter:
    """What the inbox's form asks for; every field optional."""

    status: str | None = None
    dealer_id: str | None = None
    rooftop: str | None = None
    received_from_ms: int | None = None
    received_to_ms: int | None = None
    delivery: str | None = None  # one of DELIVERY_FILTERS
    handled: bool | None = None
    query: str | None = None  # a name, e-mail or phone number


@dataclass(frozen=True)
class InboxRow:
    """One lead as the inbox lists it (customer values included: console and export only)."""

    lead_id: str
    received_at: str
    received_ms: int
    dealer_id: str
    rooftop: str | None
    status: str
    first_name: str
    last_name: str
    email: str
    phone: str
    vehicle: str
    source_agent: str
    appointment_status: str | None
    handled_ms: int | None
    deliveries: dict[str, int]

    @property
    def delivery_state(self) -> str:
        """One word for the row: the worst state among its deliveries."""
        for state in ("dead", "expired_consent", "delivering", "pending", "delivered"):
            if self.deliveries.get(state):
                return state
        return "none"


Keyset = tuple[int, str]


def _next_key(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix`` (code-point order)."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF or 0xD7FF <= last < 0xE000:
        return prefix + "\U0010ffff"
    return prefix[:-1] + chr(last + 1)


def search_condition(query: str) -> tuple[str, list[Any]]:
    """SQL (on alias ``l``) matching a name or e-mail prefix, or a phone number's last digits."""
    text = " ".join(query.split()).casefold()
    digits = "".join(ch for ch in text if ch.isdigit())
    if digits and len(digits) >= 3 and all(ch.isdigit() or ch in "+-(). " for ch in text):
        key = digits[::-1]
        return "(l.customer_phone_r >= ? AND l.customer_phone_r < ?)", [key, _next_key(key)]
    upper = _next_key(text)
    return (
        "((l.customer_name_k >= ? AND l.customer_name_k < ?)"
        " OR (l.customer_last_k >= ? AND l.customer_last_k < ?)"
        " OR (l.customer_email_k >= ? AND l.customer_email_k < ?))",
        [text, upper, text, upper, text, upper],
    )


#: Delivery states few leads are in: a filter on one is best served from the deliveries' index.
RARE_STATES = ("pending", "delivering", "dead", "expired_consent")


def _where(
    tenant: str, scope: LeadScope, wanted: InboxFilter, before: Keyset | None, *, unindexed: bool = False
) -> tuple[str, list[Any]]:
    # With a rare delivery state, the few leads in it are found through lead_deliveries and read
    # by primary key; "|| ''" keeps SQLite (which plans without statistics) from starting at a
    # seller or rooftop index instead and walking every lead there. PostgreSQL plans this itself.
    by_delivery = wanted.delivery in RARE_STATES and not wanted.query
    plain = " || ''" if by_delivery or unindexed else ""

    # The tenant first: an equality on the leading column of every index, so each plan below
    # walks the same index it would in a table of one tenant.
    conditions: list[str] = ["l.tenant_id = ?"]
    params: list[Any] = [tenant]
    scoped, scope_params = scope_condition(scope, plain=plain)
    conditions += scoped
    params += scope_params
    if wanted.status:
        conditions.append(f"l.status{plain} = ?")
        params.append(wanted.status)
    if wanted.dealer_id:
        conditions.append(f"l.dealer_id{plain} = ?")
        params.append(wanted.dealer_id)
    if wanted.rooftop:
        conditions.append(f"l.rooftop{plain} = ?")
        params.append(wanted.rooftop)
    if wanted.received_from_ms is not None:
        conditions.append("l.received_ms >= ?")
        params.append(wanted.received_from_ms)
    if wanted.received_to_ms is not None:
        conditions.append("l.received_ms < ?")
        params.append(wanted.received_to_ms)
    if wanted.delivery == "none":
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM lead_deliveries x WHERE x.tenant_id = l.tenant_id AND x.lead_id = l.lead_id)"
        )
    elif wanted.delivery in DELIVERY_FILTERS:
        # The state is written into the SQL (one of DELIVERY_FILTERS, never the caller's text):
        # a PostgreSQL plan prepared for "any state" would walk every lead for a rare one.
        state = f"'{wanted.delivery}'"
        if by_delivery:
            conditions.append(
                f"l.lead_id IN (SELECT x.lead_id FROM lead_deliveries x WHERE x.tenant_id = ? AND x.status = {state})"
            )
            params.append(tenant)
        else:  # most leads are delivered: walk them newest first, stop at a page
            conditions.append(
                "EXISTS (SELECT 1 FROM lead_deliveries x WHERE x.tenant_id = l.tenant_id AND x.lead_id = l.lead_id"
                f" AND x.status = {state})"
            )
    if wanted.handled is not None:
        conditions.append("l.handled_ms IS NOT NULL" if wanted.handled else "l.handled_ms IS NULL")
    if wanted.query and wanted.query.strip():
        sql, values = search_condition(wanted.query)
        conditions.append(sql)
        params.extend(values)
    if before is not None:  # a range on received_ms first, so both backends walk its index from there
        conditions.append("l.received_ms <= ? AND (l.received_ms < ? OR l.lead_id < ?)")
        params.extend((before[0], before[0], before[1]))
    return where_all(conditions), params


def conditions(
    tenant: str, scope: LeadScope, wanted: InboxFilter, *, unindexed: bool = False
) -> tuple[list[str], list[Any]]:
    """The inbox's filter on ``tenant``'s leads (its scope included) as SQL conditions on alias ``l``
    (never empty: the tenant's is the first): for the stores that page the same leads in another
    order (:mod:`aap.store.lead_pipeline`). ``unindexed`` writes the seller, rooftop and status
    terms so that no index of theirs leads (the order's does)."""
    where, params = _where(tenant, scope, wanted, None, unindexed=unindexed)
    return [where[len("WHERE ") :]], params


_ROW_COLUMNS = (
    "l.lead_id, l.received_at, l.received_ms, l.dealer_id, l.rooftop, l.status, l.request_json,"
    " l.listing_json, l.source_agent, l.appointment_status, l.handled_ms"
)


def vehicle_label(listing: dict[str, Any] | None, request: dict[str, Any]) -> str:
    """``2024 Honda CR-V EX-L`` from the linked listing, else what the buyer described."""
    source = listing or request.get("vehicle_of_interest") or {}
    words = [str(source[k]) for k in ("year", "make", "model", "trim") if source.get(k)]
    if words:
        return " ".join(words)
    return str(source.get("vin") or source.get("stock") or "")


def _rows(tx: Tx, raw: list[tuple[Any, ...]]) -> list[InboxRow]:
    counts = delivery_states(tx, [r[0] for r in raw])
    out = []
    for (
        lead_id,
        received_at,
        received_ms,
        dealer_id,
        rooftop,
        status,
        request_json,
        listing_json,
        source_agent,
        appointment_status,
        handled_ms,
    ) in raw:
        request = loads(request_json) or {}
        customer = request.get("customer") or {}
        out.append(
            InboxRow(
                lead_id,
                received_at,
                int(received_ms),
                dealer_id,
                rooftop,
                status,
                str(customer.get("first_name") or ""),
                str(customer.get("last_name") or ""),
                str(customer.get("email") or ""),
                str(customer.get("phone") or ""),
                vehicle_label(loads(listing_json), request),
                source_agent,
                appointment_status,
                None if handled_ms is None else int(handled_ms),
                counts[lead_id],
            )
        )
    return out


class LeadInbox:
    """The console's view of the leads (reads, and the "handled" mark)."""

    def __init__(self, db: Database, leads: LeadStore) -> None:
        self.db = db
        self.leads = leads

    def page(
        self, scope: LeadScope, wanted: InboxFilter, *, before: Keyset | None = None, limit: int = 50
    ) -> tuple[list[InboxRow], Keyset | None]:
        """Newest first; the keyset of the next (older) page, or None on the last page."""
        with self.db.read() as tx:  # the limit is written in too: a plan for "any limit" walks every lead
            where, params = _where(tx.tenant, scope, wanted, before)
            raw = tx.fetchall(
                f"SELECT {_ROW_COLUMNS} FROM leads l {where}"
                f" ORDER BY l.received_ms DESC, l.lead_id DESC LIMIT {int(limit) + 1}",
                params,
            )
            rows = _rows(tx, raw[:limit])
        more = len(raw) > limit
        return rows, ((rows[-1].received_ms, rows[-1].lead_id) if more and rows else None)

    def rows(self, tx: Tx, lead_ids: Sequence[str]) -> list[InboxRow]:
        """The inbox rows of ``lead_ids``, in that order (ids it does not find are left out)."""
        if not lead_ids:
            return []
        marks = ", ".join("?" for _ in lead_ids)
        raw = tx.fetchall(
            f"SELECT {_ROW_COLUMNS} FROM leads l WHERE l.tenant_id = ? AND l.lead_id IN ({marks})",
            (tx.tenant, *lead_ids),
        )
        place = {lead_id: i for i, lead_id in enumerate(lead_ids)}
        raw.sort(key=lambda r: place[r[0]])
        return _rows(tx, raw)

    def export(self, scope: LeadScope, wanted: InboxFilter, *, batch: int = 1000) -> Iterator[InboxRow]:
        """Every matching lead, newest first, read one keyset page (one short transaction) at a time."""
        before: Keyset | None = None
        while True:
            rows, before = self.page(scope, wanted, before=before, limit=batch)
            yield from rows
            if before is None:
                return

    def lead(self, lead_id: str, scope: LeadScope) -> dict[str, Any] | None:
        """The whole record (as ``aap leads show``), its handled mark and every delivery attempt;
        None when there is no such lead or ``scope`` does not include it."""
        if not self.in_scope(lead_id, scope):
            return None
        lead = self.leads.get_lead(lead_id)
        if lead is None:
            return None
        with self.db.read() as tx:
            mark = tx.fetchone(
                "SELECT handled_ms, handled_by FROM leads WHERE tenant_id = ? AND lead_id = ?", (tx.tenant, lead_id)
            )
            attempts = tx.fetchall(
                f"SELECT {', '.join(_ATTEMPT_FIELDS)} FROM lead_delivery_attempts"
                " WHERE tenant_id = ? AND lead_id = ? ORDER BY finished_ms, attempt_id",
                (tx.tenant, lead_id),
            )
        lead["handled_ms"], lead["handled_by"] = mark if mark else (None, None)
        lead["attempts"] = [dict(zip(_ATTEMPT_FIELDS, a, strict=True)) for a in attempts]
        return lead

    def in_scope(self, lead_id: str, scope: LeadScope) -> bool:
        """Whether the lead exists and ``scope`` includes it (before a retry, say)."""
        conditions, params = scope_condition(scope)
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT 1 FROM leads l {where_all(['l.tenant_id = ?', 'l.lead_id = ?', *conditions])}",
                (tx.tenant, lead_id, *params),
            )
        return row is not None

    def mark_handled(self, lead_id: str, scope: LeadScope, by: str | None, now_ms: int) -> bool:
        """Set (``by`` a person) or clear (``by`` None) the handled mark; False when out of scope or absent."""
        conditions, params = scope_condition(scope)
        with self.db.transaction() as tx:
            return (
                tx.execute(
                    "UPDATE leads SET handled_ms = ?, handled_by = ? WHERE tenant_id = ? AND lead_id = ? AND lead_id IN"
                    f" (SELECT l.lead_id FROM leads l {where_all(['l.tenant_id = ?', 'l.lead_id = ?', *conditions])})",
                    (None if by is None else now_ms, by, tx.tenant, lead_id, tx.tenant, lead_id, *params),
                ).rowcount
                == 1
            )

    def backlog(self, now_ms: int, scope: LeadScope | None = None) -> dict[str, Any]:
        """Deliveries by state, and how long the oldest due one has waited (the delivery backlog),
        of the leads in ``scope`` (every lead by default)."""
        conditions, params = scope_condition(scope or LeadScope())
        join = " JOIN leads l ON l.tenant_id = d.tenant_id AND l.lead_id = d.lead_id" if conditions else ""
        more = " AND " + " AND ".join(conditions) if conditions else ""
        with self.db.read() as tx:
            counts = {
                row[0]: int(row[1])
                for row in tx.fetchall(
                    f"SELECT d.status, COUNT(*) FROM lead_deliveries d{join} WHERE d.tenant_id = ?{more}"
                    " GROUP BY d.status",
                    (tx.tenant, *params),
                )
            }
            oldest = tx.one(
                f"SELECT MIN(d.next_attempt_ms) FROM lead_deliveries d{join}"
                f" WHERE d.tenant_id = ? AND d.status = 'pending' AND d.next_attempt_ms <= ?{more}",
                (tx.tenant, now_ms, *params),
            )[0]
        return {"counts": counts, "oldest_due_ms": None if oldest is None else now_ms - int(oldest)}
