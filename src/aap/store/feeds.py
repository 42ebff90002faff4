"""Feed import history and the per-feed schedule state (with its lease).

``feed_runs``   one row per import, whatever started it (``aap import``, the
                scheduler): when, the source, the format, the counts, the
                outcome, its first problems and the lines of rejected rows.
                Inventory only: no personal data is ever stored here, so a
                staff console may list it freely.
``feed_notes``  the warnings and rejected rows of a run, one row each (line,
                the listing when the row names one, the column, value and
                message), so the console can show and download them and
                mark the listings an import warned about
``feed_state``  one row per scheduled feed (keyed by its ``[[feeds]]`` name)
                or per URL imported by hand (``url:<source>``): when it runs
                next, consecutive failures, the lease, and what the source
                looked like at the last success (ETag, Last-Modified, a
                fingerprint), so an unchanged feed is not imported again.

Every row carries its tenant and every statement is the transaction's tenant's
(:mod:`aap.store.layout`): two agents' feeds may share a name and a run id.

The lease works like the lead outbox's claim: an ``UPDATE`` that re-checks
"due and not held" takes the row, so across workers and servers on one
database only one runner imports a feed at a time, and a lease that lapses
(a killed runner) lets another take over.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from aap.store import platform_events
from aap.store.db import Database, Migrations, tenant_where

_LAYOUT = """
CREATE TABLE feed_runs (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    feed TEXT,
    trigger TEXT NOT NULL,
    source TEXT NOT NULL,
    format TEXT,
    dealer_id TEXT,
    replace_mode INTEGER NOT NULL,
    dry_run INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT,
    rows_read INTEGER NOT NULL,
    inserted INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    removed INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    warnings INTEGER NOT NULL,
    total INTEGER,
    problems_json TEXT NOT NULL,
    rejected_lines_json TEXT NOT NULL,
    details_json TEXT NOT NULL,
    unchanged INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE INDEX feed_runs_started ON feed_runs (tenant_id, started_ms);
CREATE INDEX feed_runs_feed ON feed_runs (tenant_id, feed, started_ms);
CREATE TABLE feed_state (
    tenant_id TEXT NOT NULL,
    feed TEXT NOT NULL,
    next_run_ms INTEGER NOT NULL,
    failures INTEGER NOT NULL,
    lease_token TEXT,
    lease_until_ms INTEGER,
    etag TEXT,
    last_modified TEXT,
    fingerprint TEXT,
    last_run_ms INTEGER,
    last_outcome TEXT,
    last_success_ms INTEGER,
    PRIMARY KEY (tenant_id, feed)
);
CREATE TABLE feed_notes (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    line INTEGER NOT NULL,
    listing_id TEXT,
    location TEXT,
    column_name TEXT,
    value TEXT,
    message TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);
CREATE INDEX feed_notes_kind ON feed_notes (tenant_id, run_id, kind, listing_id);
CREATE INDEX feed_notes_listing ON feed_notes (tenant_id, listing_id, run_id)
"""

# ``feed_runs.unchanged``: listings an import found exactly as published (not rewritten), apart
# from ``updated``.

MIGRATIONS = Migrations("feeds", (_LAYOUT,), tables=("feed_runs", "feed_state", "feed_notes"))

OUTCOMES = ("imported", "unchanged", "rejected", "refused", "failed", "checked")
#: The outcomes of a run that imported nothing when it should have: the platform is told
#: (``feed.failed``, docs/platform.md, "Events").
FAILED_OUTCOMES = ("rejected", "refused", "failed")
RETENTION_MS = 180 * 86_400_000
MAX_REJECTED_LINES = 1000
MAX_NOTES = 20_000  # warnings and rejected rows kept per run
NOTE_KINDS = ("warning", "rejected")

_RUN_COLUMNS = (
    "run_id, feed, trigger, source, format, dealer_id, replace_mode, dry_run, started_ms, "
    "finished_ms, outcome, message, rows_read, inserted, updated, removed, skipped, warnings, total, "
    "problems_json, rejected_lines_json, details_json, unchanged"
)


@dataclass
class FeedRun:
    """One import, as recorded.

    ``outcome``: ``imported``; ``unchanged`` (the source had not changed: nothing
    to do); ``checked`` (a dry run that would have imported); ``rejected`` (the
    feed has problems); ``refused`` (a safety rule: empty feed, too many
    removals); ``failed`` (the source could not be fetched or read).
    ``problems`` holds the first problems as ``{line, column, value, location,
    message}``.
    """

    trigger: str
    source: str
    started_ms: int
    finished_ms: int
    outcome: str
    feed: str | None = None
    format: str | None = None
    dealer_id: str | None = None
    replace: bool = False
    dry_run: bool = False
    message: str | None = None
    rows: int = 0
    inserted: int = 0
    updated: int = 0
    removed: int = 0
    skipped: int = 0
    warnings: int = 0
    total: int | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    rejected_lines: list[int] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: "run_" + uuid.uuid4().hex[:20])
    unchanged: int = 0  # listings the feed repeated exactly as published (not in ``updated``)
    #: Warnings and rejected rows, one each (:class:`FeedNote`), stored with the run (the first MAX_NOTES).
    notes: list[FeedNote] = field(default_factory=list)

    @property
    def changes(self) -> tuple[int, int, int, int, int]:
        """What the run did to the inventory, as operators read it: new, updated, unchanged,
        removed and skipped listings."""
        return self.inserted, self.updated, self.unchanged, self.removed, self.skipped

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "feed": self.feed,
            "trigger": self.trigger,
            "source": self.source,
            "format": self.format,
            "dealer_id": self.dealer_id,
            "replace": self.replace,
            "dry_run": self.dry_run,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "duration_ms": self.finished_ms - self.started_ms,
            "outcome": self.outcome,
            "message": self.message,
            "rows": self.rows,
            "inserted": self.inserted,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "skipped": self.skipped,
            "warnings": self.warnings,
            "total": self.total,
            "problems": self.problems,
            "rejected_lines": self.rejected_lines,
            "details": self.details,
        }


@dataclass(frozen=True)
class FeedNote:
    """One warning or one problem of a rejected row (``kind``: one of NOTE_KINDS)."""

    kind: str
    line: int
    message: str
    listing_id: str | None = None
    location: str | None = None
    column: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class FeedState:
    """A scheduled feed's row in ``feed_state``."""

    feed: str
    next_run_ms: int
    failures: int
    lease_token: str | None
    lease_until_ms: int | None
    etag: str | None
    last_modified: str | None
    fingerprint: str | None
    last_run_ms: int | None
    last_outcome: str | None
    last_success_ms: int | None


_STATE_COLUMNS = (
    "feed, next_run_ms, failures, lease_token, lease_until_ms, etag, last_modified, "
    "fingerprint, last_run_ms, last_outcome, last_success_ms"
)


#: The :class:`FeedRun` field of each of ``_RUN_COLUMNS``, in order.
_RUN_FIELDS = (
    "run_id",
    "feed",
    "trigger",
    "source",
    "format",
    "dealer_id",
    "replace",
    "dry_run",
    "started_ms",
    "finished_ms",
    "outcome",
    "message",
    "rows",
    "inserted",
    "updated",
    "removed",
    "skipped",
    "warnings",
    "total",
    "problems",
    "rejected_lines",
    "details",
    "unchanged",
)


def _run(row: tuple[Any, ...]) -> FeedRun:
    values = dict(zip(_RUN_FIELDS, row, strict=True))
    for name in ("replace", "dry_run"):
        values[name] = bool(values[name])
    for name in ("problems", "rejected_lines", "details"):
        values[name] = orjson.loads(values[name])
    return FeedRun(**values)


class FeedStore:
    """Import history and scheduled-feed state."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- history -----------------------------------------------------------------
    def record(self, run: FeedRun) -> str:
        """Store one import (and forget runs older than the retention)."""
        values = (
            run.run_id,
            run.feed,
            run.trigger,
            run.source,
            run.format,
            run.dealer_id,
            int(run.replace),
            int(run.dry_run),
            run.started_ms,
            run.finished_ms,
            run.outcome,
            run.message,
            run.rows,
            run.inserted,
            run.updated,
            run.removed,
            run.skipped,
            run.warnings,
            run.total,
            orjson.dumps(run.problems).decode(),
            orjson.dumps(run.rejected_lines[:MAX_REJECTED_LINES]).decode(),
            orjson.dumps(run.details).decode(),
            run.unchanged,
        )
        with self.db.transaction() as tx:
            tx.execute(
                f"INSERT INTO feed_runs (tenant_id, {_RUN_COLUMNS}) VALUES (?, {', '.join('?' * len(values))})",
                (tx.tenant, *values),
            )
            if run.notes:
                tx.executemany(
                    "INSERT INTO feed_notes (tenant_id, run_id, seq, kind, line, listing_id, location, column_name,"
                    " value, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            tx.tenant,
                            run.run_id,
                            i,
                            n.kind,
                            n.line,
                            n.listing_id,
                            n.location,
                            None if n.column is None else n.column[:200],
                            None if n.value is None else n.value[:500],
                            n.message[:1000],
                        )
                        for i, n in enumerate(run.notes[:MAX_NOTES])
                    ],
                )
            cutoff = run.started_ms - RETENTION_MS
            tx.execute(
                "DELETE FROM feed_notes WHERE tenant_id = ? AND run_id IN"
                " (SELECT run_id FROM feed_runs WHERE tenant_id = ? AND started_ms < ?)",
                (tx.tenant, tx.tenant, cutoff),
            )
            tx.execute("DELETE FROM feed_runs WHERE tenant_id = ? AND started_ms < ?", (tx.tenant, cutoff))
            if run.outcome in FAILED_OUTCOMES and not run.dry_run:
                platform_events.emit(
                    tx,
                    platform_events.FEED_FAILED,
                    {
                        "feed": run.feed,
                        "run_id": run.run_id,
                        "outcome": run.outcome,
                        "reason": platform_events.reason(run.message),
                    },
                    now_ms=run.finished_ms,
                )
        return run.run_id

    def notes(self, run_id: str, *, kind: str | None = None, limit: int = MAX_NOTES) -> list[FeedNote]:
        """A run's warnings and rejected rows, in file order."""
        extra = " AND kind = ?" if kind else ""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT kind, line, message, listing_id, location, column_name, value FROM feed_notes"
                f" WHERE tenant_id = ? AND run_id = ?{extra} ORDER BY seq LIMIT {int(limit)}",
                (tx.tenant, run_id, kind) if kind else (tx.tenant, run_id),
            )
        return [FeedNote(*r) for r in rows]

    def note_counts(self, run_ids: list[str]) -> dict[str, dict[str, int]]:
        """How many notes of each kind each run kept."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        with self.db.read() as tx:
            rows = tx.fetchall(
                f"SELECT run_id, kind, COUNT(*) FROM feed_notes WHERE tenant_id = ? AND run_id IN ({marks})"
                " GROUP BY run_id, kind",
                (tx.tenant, *run_ids),
            )
        out: dict[str, dict[str, int]] = {}
        for run_id, kind, count in rows:
            out.setdefault(run_id, {})[kind] = int(count)
        return out

    def latest_imports(self) -> list[str]:
        """The run id of the latest import of each feed (or each source imported by hand)."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT r.run_id FROM feed_runs r JOIN (SELECT tenant_id, COALESCE(feed, source) AS who,"
                " MAX(started_ms) AS at FROM feed_runs WHERE tenant_id = ? AND outcome = 'imported' AND dry_run = 0"
                " GROUP BY tenant_id, COALESCE(feed, source)) last ON r.tenant_id = last.tenant_id"
                " AND COALESCE(r.feed, r.source) = last.who AND r.started_ms = last.at"
                " WHERE r.tenant_id = ? AND r.outcome = 'imported'",
                (tx.tenant, tx.tenant),
            )
        return [r[0] for r in rows]

    def listing_notes(self, listing_id: str, *, limit: int = 50) -> list[tuple[FeedRun, FeedNote]]:
        """The warnings and rejections recorded for one listing, newest run first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                f"SELECT {', '.join('r.' + c.strip() for c in _RUN_COLUMNS.split(','))}, n.kind, n.line, n.message,"
                " n.listing_id, n.location, n.column_name, n.value FROM feed_notes n JOIN feed_runs r"
                " ON r.tenant_id = n.tenant_id AND r.run_id = n.run_id WHERE n.tenant_id = ? AND n.listing_id = ?"
                f" ORDER BY r.started_ms DESC, n.seq LIMIT {int(limit)}",
                (tx.tenant, listing_id),
            )
        width = len(_RUN_COLUMNS.split(","))
        return [(_run(r[:width]), FeedNote(*r[width:])) for r in rows]

    def runs(
        self, *, limit: int = 50, feed: str | None = None, oldest: bool = False, before_ms: int | None = None
    ) -> list[FeedRun]:
        """Newest first (``oldest``: oldest first); ``feed`` limits them to one scheduled feed;
        ``before_ms`` pages back (runs started before it, for a console's next page)."""
        order = "ASC" if oldest else "DESC"
        with self.db.read() as tx:
            where, params = tenant_where(tx.tenant, ("feed = ?", feed), ("started_ms < ?", before_ms))
            rows = tx.fetchall(
                f"SELECT {_RUN_COLUMNS} FROM feed_runs {where} ORDER BY started_ms {order}, run_id {order} LIMIT ?",
                [*params, limit],
            )
        return [_run(row) for row in rows]

    def run(self, run_id: str) -> FeedRun | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT {_RUN_COLUMNS} FROM feed_runs WHERE tenant_id = ? AND run_id = ?", (tx.tenant, run_id)
            )
        return _run(row) if row else None

    # -- schedule state and lease ----------------------------------------------------
    def ensure(self, feeds: Iterable[str], now_ms: int) -> None:
        """A state row for each scheduled feed (a new feed is due at once)."""
        with self.db.transaction() as tx:
            tx.executemany(
                "INSERT INTO feed_state (tenant_id, feed, next_run_ms, failures) VALUES (?, ?, ?, 0)"
                " ON CONFLICT (tenant_id, feed) DO NOTHING",
                [(tx.tenant, name, now_ms) for name in feeds],
            )

    def state(self, feed: str) -> FeedState | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT {_STATE_COLUMNS} FROM feed_state WHERE tenant_id = ? AND feed = ?", (tx.tenant, feed)
            )
        return FeedState(*row) if row else None

    def states(self) -> list[FeedState]:
        with self.db.read() as tx:
            return [
                FeedState(*row)
                for row in tx.fetchall(
                    f"SELECT {_STATE_COLUMNS} FROM feed_state WHERE tenant_id = ? ORDER BY feed", (tx.tenant,)
                )
            ]

    def claim(self, feed: str, now_ms: int, lease_ms: int, *, due_only: bool = True) -> str | None:
        """Take the feed's lease if it is due and nobody holds it; the lease token, or None."""
        token = uuid.uuid4().hex
        due = "AND next_run_ms <= ? " if due_only else ""
        with self.db.transaction() as tx:
            params: list[Any] = [token, now_ms + lease_ms, tx.tenant, feed]
            if due_only:
                params.append(now_ms)
            params.append(now_ms)
            if tx.fetchone("SELECT feed FROM feed_state WHERE tenant_id = ? AND feed = ?", (tx.tenant, feed)) is None:
                tx.execute(
                    "INSERT INTO feed_state (tenant_id, feed, next_run_ms, failures) VALUES (?, ?, ?, 0) "
                    "ON CONFLICT (tenant_id, feed) DO NOTHING",
                    (tx.tenant, feed, now_ms),
                )
            taken = tx.execute(
                "UPDATE feed_state SET lease_token = ?, lease_until_ms = ? WHERE tenant_id = ? AND feed = ? "
                f"{due}AND (lease_token IS NULL OR lease_until_ms < ?)",
                params,
            ).rowcount
        return token if taken == 1 else None

    def renew(self, feed: str, token: str, until_ms: int) -> bool:
        """Extend a held lease (a long import); False when it was lost."""
        with self.db.transaction() as tx:
            return (
                int(
                    tx.execute(
                        "UPDATE feed_state SET lease_until_ms = ? WHERE tenant_id = ? AND feed = ? AND lease_token = ?",
                        (until_ms, tx.tenant, feed, token),
                    ).rowcount
                )
                == 1
            )

    def release(
        self,
        feed: str,
        token: str,
        *,
        now_ms: int,
        next_run_ms: int,
        outcome: str,
        success: bool,
        failures: int,
        etag: str | None = None,
        last_modified: str | None = None,
        fingerprint: str | None = None,
    ) -> bool:
        """End a run: the next run time, the outcome, and (on success) the source's validators."""
        validators = ", etag = ?, last_modified = ?, fingerprint = ?, last_success_ms = ?" if success else ""
        params: list[Any] = [next_run_ms, failures, now_ms, outcome]
        if success:
            params += [etag, last_modified, fingerprint, now_ms]
        with self.db.transaction() as tx:
            changed = tx.execute(
                "UPDATE feed_state SET next_run_ms = ?, failures = ?, last_run_ms = ?, last_outcome = ?, "
                f"lease_token = NULL, lease_until_ms = NULL{validators} WHERE tenant_id = ? AND feed = ?"
                " AND lease_token = ?",
                [*params, tx.tenant, feed, token],
            ).rowcount
        return int(changed) == 1


def now_ms() -> int:
    return int(time.time() * 1000)
