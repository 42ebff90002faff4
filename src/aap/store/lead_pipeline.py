"""The lead pipeline: each lead's status, owner, follow-up date and notes, with their history.

A small dealer without a CRM — and a BDC next to one — works its leads here
(docs/console.md, "The lead pipeline"). Where a lead stands is a few columns on
its own ``leads`` row, so that the inbox filters and sorts on them with the same
indexes and keysets as the rest of the inbox, and every lead — stored before
this domain existed or submitted since — has a status without the submission
path knowing of it (``stage`` defaults to ``new``):

``stage``         one of :data:`STAGES`
``owner``         the console account (its e-mail) working the lead
``follow_up``     a local date of the lead's rooftop, ``YYYY-MM-DD`` (sorts as it reads)
``responded_ms``  the first status change or note: received → this is the lead's
                  time to first response (``response_ms``)
``notes``         how many notes the lead has

``lead_events`` holds the history: one row per change (status, owner,
follow-up) or note — who, when, from what to what. A change never touches
what was stored for the CRM (the request, the result, the outbox): the
pipeline is the dealership's own record, next to what was delivered.

This domain's migrations run after the ``leads`` domain's (domains are applied
by name, :mod:`aap.store.migrations`), so its columns can go on ``leads``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aap.config.notifications import NOTIFY_KIND
from aap.store.db import Database, Migrations, Tx
from aap.store.keyset import Cursor, Segment, walk
from aap.store.lead_inbox import InboxFilter, InboxRow, LeadInbox, LeadScope, conditions
from aap.store.leads import SUMMARY_COLUMNS, delivery_states, summary

#: The documented statuses, in pipeline order (docs/console.md, "The lead pipeline").
STAGES = ("new", "contacted", "appointment_set", "showed", "sold", "lost")
STAGE_LABELS = {
    "new": "New",
    "contacted": "Contacted",
    "appointment_set": "Appointment set",
    "showed": "Showed",
    "sold": "Sold",
    "lost": "Lost",
}
OPEN_STAGES = ("new", "contacted", "appointment_set", "showed")
#: What the status filter offers besides one status: every open lead.
STAGE_GROUPS = {"open": OPEN_STAGES, "closed": ("sold", "lost")}
FOLLOW_UPS = ("due", "upcoming", "none")
NOTE_LIMIT = 4000  # characters of one note
EVENT_KINDS = ("stage", "owner", "follow_up", "note")

_LAYOUT = """
ALTER TABLE leads ADD COLUMN stage TEXT NOT NULL DEFAULT 'new';
ALTER TABLE leads ADD COLUMN stage_ms INTEGER;
ALTER TABLE leads ADD COLUMN owner TEXT;
ALTER TABLE leads ADD COLUMN follow_up TEXT;
ALTER TABLE leads ADD COLUMN responded_ms INTEGER;
ALTER TABLE leads ADD COLUMN response_ms INTEGER;
ALTER TABLE leads ADD COLUMN notes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX leads_stage_received ON leads (tenant_id, stage, received_ms);
CREATE INDEX leads_owner_received ON leads (tenant_id, owner, received_ms DESC, lead_id DESC, stage);
CREATE INDEX leads_follow_up ON leads (tenant_id, follow_up, received_ms, lead_id, stage, owner);
CREATE INDEX leads_response_order ON leads (tenant_id, rooftop, response_ms, received_ms, dealer_id, status);
CREATE TABLE lead_events (
    tenant_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    old_value TEXT,
    new_value TEXT,
    note TEXT,
    PRIMARY KEY (tenant_id, event_id),
    FOREIGN KEY (tenant_id, lead_id) REFERENCES leads (tenant_id, lead_id)
);
CREATE INDEX lead_events_lead ON lead_events (tenant_id, lead_id, at_ms, seq)
"""

#: ``leads`` is the ``leads`` domain's table (listed there); this domain adds its columns.
MIGRATIONS = Migrations("pipeline", (_LAYOUT,), tables=("lead_events",))


class Unset:
    """The value of a field a change leaves alone (``None`` clears owner and follow-up)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


@dataclass(frozen=True)
class Event:
    """One entry of a lead's history."""

    at_ms: int
    actor: str
    kind: str  # one of EVENT_KINDS
    old_value: str | None
    new_value: str | None
    note: str | None = None


@dataclass(frozen=True)
class Standing:
    """Where a lead stands in the pipeline."""

    stage: str
    stage_ms: int | None
    owner: str | None
    follow_up: str | None
    responded_ms: int | None
    response_ms: int | None
    notes: int


@dataclass(frozen=True)
class PipelineFilter:
    """The pipeline's part of the inbox filter; every field optional."""

    stage: str | None = None  # one of STAGES, or a key of STAGE_GROUPS
    owner: str | None = None  # an e-mail; "" for "nobody"
    follow_up: str | None = None  # one of FOLLOW_UPS
    today: str | None = None  # the viewer's local date, for "due" and "upcoming"


@dataclass(frozen=True)
class PipelineRow:
    """An inbox row with its standing, and the CRM targets that received it."""

    lead: InboxRow
    standing: Standing
    in_crm: tuple[str, ...] = ()


_NEWEST = (("l.received_ms", True, int), ("l.lead_id", True, str))
#: Sort name -> its segments. Leads without a follow-up date (or an owner) come after those
#: with one, newest first; the status sort is one segment per status, in pipeline order.
SORTS: Mapping[str, tuple[Segment, ...]] = {
    "newest": (Segment(None, _NEWEST),),
    "oldest": (Segment(None, (("l.received_ms", False, int), ("l.lead_id", False, str))),),
    "follow_up": (
        Segment(
            "l.follow_up IS NOT NULL",
            (("l.follow_up", False, str), ("l.received_ms", False, int), ("l.lead_id", False, str)),
        ),
        Segment("l.follow_up IS NULL", _NEWEST),
    ),
    "status": tuple(Segment(f"l.stage = '{stage}'", _NEWEST) for stage in STAGES),
    "owner": (
        Segment("l.owner IS NOT NULL", (("l.owner", False, str), *_NEWEST)),
        Segment("l.owner IS NULL", _NEWEST),
    ),
}
SORT_LABELS = {
    "newest": "Newest first",
    "oldest": "Oldest first",
    "follow_up": "Follow-up date, soonest first",
    "status": "Status, in pipeline order",
    "owner": "Owner, A to Z",
}


def stage_condition(stage: str) -> str:
    """SQL for a status or a group of them; the values are the store's own words, never a caller's."""
    if stage in STAGE_GROUPS:
        return "l.stage IN (" + ", ".join(f"'{s}'" for s in STAGE_GROUPS[stage]) + ")"
    if stage not in STAGES:
        raise ValueError(f"unknown status {stage!r}")
    return f"l.stage = '{stage}'"


def _pipeline_conditions(wanted: PipelineFilter, sort: str) -> tuple[list[str], list[Any]]:
    """The pipeline's filter as SQL, written so that the right index leads (SQLite plans without
    statistics, from how the SQL is written): a status's ``(stage, received_ms)`` or an owner's
    ``(owner, received_ms)`` when the order is by arrival (equality, then the order itself); the
    order's own index otherwise — the follow-up date's or the owner's, which hold the status and
    owner too, so the walk reads no lead row — and never a group of statuses (most leads are
    open: sorting them all costs more than walking the order)."""
    by_arrival = sort in ("newest", "oldest")
    found: list[str] = []
    params: list[Any] = []
    if wanted.stage:
        condition = stage_condition(wanted.stage)
        if wanted.stage in STAGE_GROUPS or not by_arrival:
            condition = condition.replace("l.stage", "l.stage || ''", 1)
        found.append(condition)
    if wanted.owner is not None:
        column = "l.owner" if by_arrival or sort == "owner" else "l.owner || ''"
        if wanted.owner:
            found.append(f"{column} = ?")
            params.append(wanted.owner)
        else:
            found.append("l.owner IS NULL")
    if wanted.follow_up == "none":
        found.append("l.follow_up IS NULL")
    elif wanted.follow_up in ("due", "upcoming"):
        if wanted.today is None:
            raise ValueError("a follow-up filter needs the viewer's date")
        column = "l.follow_up" if sort == "follow_up" else "l.follow_up || ''"
        found.append(f"{column} <= ?" if wanted.follow_up == "due" else f"{column} > ?")
        params.append(wanted.today)
    return found, params


_STANDING_COLUMNS = "l.stage, l.stage_ms, l.owner, l.follow_up, l.responded_ms, l.response_ms, l.notes"


def _standing(row: Sequence[Any]) -> Standing:
    stage, stage_ms, owner, follow_up, responded, response, notes = row
    return Standing(
        stage,
        None if stage_ms is None else int(stage_ms),
        owner,
        follow_up,
        None if responded is None else int(responded),
        None if response is None else int(response),
        int(notes),
    )


@dataclass(frozen=True)
class Change:
    """What one call to :meth:`LeadPipeline.change` did."""

    events: list[Event] = field(default_factory=list)
    standing: Standing | None = None


class LeadPipeline:
    """Reads and writes of the pipeline columns and the lead history."""

    def __init__(self, db: Database, inbox: LeadInbox) -> None:
        self.db = db
        self.inbox = inbox

    # -- one lead ----------------------------------------------------------------------
    def standing(self, lead_id: str, scope: LeadScope) -> Standing | None:
        with self.db.read() as tx:
            where, params = conditions(tx.tenant, scope, InboxFilter())
            row = tx.fetchone(
                f"SELECT {_STANDING_COLUMNS} FROM leads l WHERE {' AND '.join(where)} AND l.lead_id = ?",
                (*params, lead_id),
            )
        return _standing(row) if row else None

    def history(self, lead_id: str, *, limit: int = 500) -> list[Event]:
        """The lead's changes and notes, oldest first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT at_ms, actor, kind, old_value, new_value, note FROM lead_events"
                f" WHERE tenant_id = ? AND lead_id = ? ORDER BY at_ms, seq LIMIT {int(limit)}",
                (tx.tenant, lead_id),
            )
        return [Event(int(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def change(
        self,
        lead_id: str,
        scope: LeadScope,
        actor: str,
        now_ms: int,
        *,
        stage: Any = UNSET,
        owner: Any = UNSET,
        follow_up: Any = UNSET,
        note: str | None = None,
    ) -> Change | None:
        """Apply what is given (a field left :data:`UNSET` stays as it is) and record each change
        that changes something, with ``note``, in one transaction. None when the lead does not
        exist or ``scope`` does not include it.

        The first status change or note sets the lead's first-response time.
        """
        if stage is not UNSET and stage not in STAGES:
            raise ValueError(f"unknown status {stage!r}")
        if note is not None and (not note.strip() or len(note) > NOTE_LIMIT):
            raise ValueError("a note is 1 to 4000 characters")
        with self.db.transaction() as tx:
            where, params = conditions(tx.tenant, scope, InboxFilter())
            # A write to the row first: on PostgreSQL it locks the row against a concurrent change
            # (SQLite's write transaction is exclusive already), so what is read below stays true.
            locked = tx.execute(
                "UPDATE leads SET stage = stage WHERE tenant_id = ? AND lead_id = ? AND lead_id IN"
                f" (SELECT l.lead_id FROM leads l WHERE {' AND '.join(where)} AND l.lead_id = ?)",
                (tx.tenant, lead_id, *params, lead_id),
            ).rowcount
            if locked != 1:
                return None
            row = tx.one(
                f"SELECT {_STANDING_COLUMNS}, l.received_ms FROM leads l WHERE l.tenant_id = ? AND l.lead_id = ?",
                (tx.tenant, lead_id),
            )
            before, received_ms = _standing(row[:-1]), int(row[-1])
            events: list[Event] = []
            sets: list[str] = []
            values: list[Any] = []
            if stage is not UNSET and stage != before.stage:
                events.append(Event(now_ms, actor, "stage", before.stage, stage))
                sets += ["stage = ?", "stage_ms = ?"]
                values += [stage, now_ms]
            if owner is not UNSET and owner != before.owner:
                events.append(Event(now_ms, actor, "owner", before.owner, owner))
                sets.append("owner = ?")
                values.append(owner)
            if follow_up is not UNSET and follow_up != before.follow_up:
                events.append(Event(now_ms, actor, "follow_up", before.follow_up, follow_up))
                sets.append("follow_up = ?")
                values.append(follow_up)
            if note is not None:
                events.append(Event(now_ms, actor, "note", None, None, note))
                sets.append("notes = notes + 1")
            responded = any(e.kind in ("stage", "note") for e in events)
            if responded and before.responded_ms is None:
                sets += ["responded_ms = ?", "response_ms = ?"]
                values += [now_ms, max(0, now_ms - received_ms)]
            if sets:
                tx.execute(
                    f"UPDATE leads SET {', '.join(sets)} WHERE tenant_id = ? AND lead_id = ?",
                    (*values, tx.tenant, lead_id),
                )
                tx.executemany(
                    "INSERT INTO lead_events (tenant_id, event_id, lead_id, at_ms, seq, actor, kind, old_value,"
                    " new_value, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            tx.tenant,
                            "evt_" + uuid.uuid4().hex,
                            lead_id,
                            e.at_ms,
                            i,
                            e.actor,
                            e.kind,
                            e.old_value,
                            e.new_value,
                            e.note,
                        )
                        for i, e in enumerate(events)
                    ],
                )
            after = _standing(
                tx.one(
                    f"SELECT {_STANDING_COLUMNS} FROM leads l WHERE l.tenant_id = ? AND l.lead_id = ?",
                    (tx.tenant, lead_id),
                )
            )
        return Change(events, after)

    # -- the inbox, by any sort --------------------------------------------------------
    def page(
        self,
        scope: LeadScope,
        wanted: InboxFilter,
        pipeline: PipelineFilter,
        *,
        sort: str = "newest",
        cursor: Cursor | None = None,
        limit: int = 50,
    ) -> tuple[list[PipelineRow], Cursor | None]:
        """One page of the inbox in ``sort`` order, and the cursor of the next page (None: the last).

        Each segment of the sort is one keyset query on an index; a page that ends a segment
        goes on with the next, so a page costs what the first does wherever it starts.
        """
        more, more_params = _pipeline_conditions(pipeline, sort)
        wanted_stages = STAGE_GROUPS.get(pipeline.stage or "", (pipeline.stage,))
        with self.db.read() as tx:
            base, params = conditions(tx.tenant, scope, wanted, unindexed=sort not in ("newest", "oldest"))

            def segment_rows(segment: Segment, start: tuple[str, list[Any]] | None, need: int) -> list[Any]:
                if pipeline.stage and segment.where and segment.where.startswith("l.stage = "):
                    if segment.where[len("l.stage = '") : -1] not in wanted_stages:
                        return []  # a status the filter leaves out
                where = [*base, *more]
                values = [*params, *more_params]
                if segment.where:
                    where.append(segment.where)
                if start is not None:
                    where.append(start[0])
                    values += start[1]
                # The limit is written in: a PostgreSQL plan made for "any limit" may walk every lead.
                return tx.fetchall(
                    f"SELECT l.lead_id, {segment.columns} FROM leads l"
                    f" WHERE {' AND '.join(where)} ORDER BY {segment.order} LIMIT {int(need)}",
                    values,
                )

            lead_ids, next_cursor = walk(SORTS[sort], cursor, limit, segment_rows)
            return self._rows(tx, lead_ids), next_cursor

    def _rows(self, tx: Tx, lead_ids: list[str]) -> list[PipelineRow]:
        leads = self.inbox.rows(tx, lead_ids)
        if not leads:
            return []
        marks = ", ".join("?" for _ in lead_ids)
        standings = {
            r[0]: _standing(r[1:])
            for r in tx.fetchall(
                f"SELECT l.lead_id, {_STANDING_COLUMNS} FROM leads l WHERE l.tenant_id = ? AND l.lead_id IN ({marks})",
                (tx.tenant, *lead_ids),
            )
        }
        crm: dict[str, list[str]] = {}
        for lead_id, target in tx.fetchall(
            f"SELECT lead_id, target FROM lead_deliveries WHERE tenant_id = ? AND lead_id IN ({marks})"
            f" AND status = 'delivered' AND kind <> '{NOTIFY_KIND}' ORDER BY target",
            (tx.tenant, *lead_ids),
        ):
            crm.setdefault(lead_id, []).append(target)
        return [PipelineRow(lead, standings[lead.lead_id], tuple(crm.get(lead.lead_id, ()))) for lead in leads]

    def summaries(self, lead_ids: Sequence[str]) -> list[dict[str, Any]]:
        """``aap leads list``'s rows of ``lead_ids`` (in that order): ids, routing, states and the
        pipeline, never a customer value."""
        if not lead_ids:
            return []
        marks = ", ".join("?" for _ in lead_ids)
        with self.db.read() as tx:
            rows = tx.fetchall(
                f"SELECT {SUMMARY_COLUMNS}, {_STANDING_COLUMNS} FROM leads l"
                f" WHERE l.tenant_id = ? AND l.lead_id IN ({marks})",
                (tx.tenant, *lead_ids),
            )
            counts = delivery_states(tx, list(lead_ids))
        out = {}
        for r in rows:
            standing = _standing(r[9:])
            out[r[0]] = {
                **summary(r[:9], counts[r[0]]),
                "stage": standing.stage,
                "owner": standing.owner,
                "follow_up": standing.follow_up,
                "response_ms": standing.response_ms,
                "notes": standing.notes,
            }
        return [out[i] for i in lead_ids if i in out]

    def export(
        self,
        scope: LeadScope,
        wanted: InboxFilter,
        pipeline: PipelineFilter,
        *,
        sort: str = "newest",
        batch: int = 1000,
    ) -> Iterator[PipelineRow]:
        """Every matching lead in ``sort`` order, one page (one short transaction) at a time."""
        cursor: Cursor | None = None
        while True:
            rows, cursor = self.page(scope, wanted, pipeline, sort=sort, cursor=cursor, limit=batch)
            yield from rows
            if cursor is None:
                return

    # -- the health page ------------------------------------------------------------------
    def first_response(self, scope: LeadScope, since_ms: int) -> dict[str | None, dict[str, Any]]:
        """Per rooftop, over the leads received since ``since_ms``: the median time to first
        response of those answered, how many were answered, and how many still wait.

        Both read ``leads_response_order``, which holds every column asked, never a lead row. Where
        the SQL has a median aggregate (PostgreSQL), one grouped query; elsewhere one grouped
        count, then each rooftop's middle value found by walking its answered leads in response
        order to the middle."""
        out: dict[str | None, dict[str, Any]] = {}
        with self.db.read() as tx:
            where, params = conditions(tx.tenant, scope, InboxFilter(received_from_ms=since_ms))
            clause = " AND ".join([*where, "l.status = 'received'"])
            # "|| ''": the status's own index would read every lead row; the response index holds the columns
            window = " AND ".join([*where, "l.status || '' = 'received'"])
            median_of = self.db.dialect.median("l.response_ms")
            if median_of is not None:  # the middle value of an even count is the mean of the two, rounded down
                # Planned for its window each time: a generic plan reads the whole index (5x slower).
                for rooftop, total, answered, middle in tx.fetchall_planned(
                    f"SELECT l.rooftop, COUNT(*), COUNT(l.response_ms), {median_of} FROM leads l"
                    f" WHERE {window} GROUP BY l.rooftop",
                    params,
                ):
                    out[rooftop] = {
                        "median_ms": None if middle is None else math.floor(middle),
                        "answered": int(answered),
                        "waiting": int(total) - int(answered),
                    }
                return out
            counts = tx.fetchall(
                f"SELECT l.rooftop, COUNT(*), COUNT(l.response_ms) FROM leads l WHERE {window} GROUP BY l.rooftop",
                params,
            )
            for rooftop, total, answered in counts:
                answered = int(answered)
                median = None
                if answered:
                    place = "l.rooftop IS NULL" if rooftop is None else "l.rooftop = ?"
                    values = [*params] if rooftop is None else [*params, rooftop]
                    middle = (answered - 1) // 2
                    pair = [
                        int(r[0])
                        for r in tx.fetchall(
                            f"SELECT l.response_ms FROM leads l WHERE {clause} AND {place}"
                            f" AND l.response_ms IS NOT NULL ORDER BY l.response_ms"
                            f" LIMIT {2 if answered % 2 == 0 else 1} OFFSET {int(middle)}",
                            values,
                        )
                    ]
                    median = pair[0] if len(pair) == 1 else (pair[0] + pair[1]) // 2
                out[rooftop] = {"median_ms": median, "answered": answered, "waiting": int(total) - answered}
        return out
