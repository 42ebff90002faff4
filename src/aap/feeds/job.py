"""One import, whoever asks for it (``aap import``, the scheduler): fetch, read, check, store, record.

The safety rules live here, so that every way in obeys them (docs/feeds.md,
"Safety"):

- all or nothing, unless the request is partial (``--skip-invalid``): then
  the valid rows are imported and a replace keeps the stored version of every
  rejected row it can identify;
- a feed without listings (an empty or header-only file, as a truncated
  transfer gives) never imports anything;
- a replace never removes more than ``max_removed_share`` of the scope's
  listings for missing from the feed;
- the content guard: an import never strips many published listings of a
  price, mileage, photos, condition or stock number, nor moves their prices
  far (``guard``), unless ``allow_field_loss``; a table that feeds no
  identifier, make, model, year or price is refused before any row is read;
- one car, one listing: a listing is matched with the published car of its VIN
  or stock number, whatever feed published it;
- a dry run checks and counts everything and writes nothing (not even the
  history).

Every other run is recorded in the import history (:mod:`aap.store.feeds`)
with its counts, outcome, first problems and the lines of rejected rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aap.config.model import Settings
from aap.feeds import pipeline
from aap.feeds.fetch import Credentials, Fetched, FetchError, FetchRules, Validators, display_source, fetch
from aap.inventory.formats import FeedFormat, FeedReport, Formats, ReadOptions, RejectedRow, read_feed_bytes
from aap.inventory.formats.reader import identity
from aap.inventory.listing_rules import FeedError, FeedProblem
from aap.store import Stores
from aap.store.feeds import MAX_NOTES, FeedNote, FeedRun
from aap.store.inventory import (
    Carried,
    ContentGuard,
    FieldLossRefused,
    ImportStats,
    InventoryImportError,
    ShrinkRefused,
)
from aap.work import Work

FIRST_PROBLEMS = 20  # problems kept with a run in the history

Progress = Callable[[str, int], None]  # (stage: "reading" | "importing", count)


@dataclass(frozen=True)
class ImportRequest:
    """What to import and how."""

    source: str  # a path, or an https:// or sftp:// URL
    trigger: str = "cli"  # "cli" or "schedule"
    feed: str | None = None  # the [[feeds]] name
    format: str | None = None
    mapping: FeedFormat | None = None
    encoding: str | None = None
    delimiter: str | None = None
    dealer_id: str | None = None
    replace: bool = False
    partial: bool = False
    strict: bool = False
    dry_run: bool = False
    max_removed_share: float | None = 0.5  # None: --allow-shrink
    credentials: Credentials = Credentials()
    rules: FetchRules = FetchRules()  # deadline, minimum rate, private network
    formats: Formats = field(default_factory=Formats)  # the built-in tables, owned by the caller
    rooftop: str | None = None  # the rooftop of rows that name none
    allow_field_loss: bool = False  # lift the content guard (and the coverage check)
    guard: ContentGuard = ContentGuard()
    #: The feed's bytes as they were uploaded (the provisioning API): nothing is fetched, and
    #: ``source`` is the name the history shows for them.
    body: bytes | None = field(default=None, repr=False)


@dataclass
class ImportResult:
    """The recorded run, with what reading and storing found."""

    run: FeedRun
    report: FeedReport | None = None
    stats: ImportStats | None = None
    fetched: Fetched | None = None
    file_problems: list[FeedProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.run.outcome in ("imported", "unchanged", "checked")


def _problem_json(problem: FeedProblem) -> dict[str, Any]:
    return {
        "line": problem.line,
        "column": problem.column,
        "value": problem.value,
        "location": problem.location,
        "message": problem.message,
        "text": str(problem),
    }


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_options(request: ImportRequest, settings: Settings, file_time: str | None) -> ReadOptions:
    return ReadOptions(
        format=request.format,
        mapping=request.mapping,
        encoding=request.encoding,
        delimiter=request.delimiter,
        dealer_id=request.dealer_id,
        strict=request.strict,
        partial=request.partial,
        file_time=file_time,
        settings=settings,
        formats=request.formats,
        rooftop=request.rooftop,
        allow_field_loss=request.allow_field_loss,
    )


async def run_import(
    stores: Stores,
    settings: Settings,
    request: ImportRequest,
    *,
    work: Work,
    previous: Validators | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Fetch (unless unchanged since ``previous``), read, check and import one feed; record the
    run. The reading and the import run on ``work``'s executor of long calls."""
    started = _now_ms()
    run = FeedRun(
        trigger=request.trigger,
        source=display_source(request.source),
        started_ms=started,
        finished_ms=started,
        outcome="failed",
        feed=request.feed,
        format=request.format,
        dealer_id=request.dealer_id,
        replace=request.replace,
        dry_run=request.dry_run,
    )
    result = ImportResult(run)
    if request.body is not None:
        fetched = Fetched(request.body, request.source, Validators())
    else:
        try:
            fetched = await fetch(
                request.source, previous or Validators(), request.credentials, request.rules, work=work
            )
        except FetchError as exc:
            return _finish(stores, result, "failed", str(exc))
    result.fetched = fetched
    if fetched.data is None:
        return _finish(stores, result, "unchanged", "the source has not changed since the last import")
    options = read_options(request, settings, fetched.file_time)
    import_kwargs: dict[str, Any] = {
        "dealer_id": request.dealer_id,
        "replace": request.replace,
        "dry_run": request.dry_run,
        "max_removed_share": request.max_removed_share if request.replace else None,
        "guard": None if request.allow_field_loss else request.guard,
        "match_cars": True,
    }
    importing = (lambda n: progress("importing", n)) if progress else None
    outcome = None
    if _pipelined(request, fetched.data):
        try:
            outcome = await work.long(
                pipeline.read_and_import, stores, fetched.data, fetched.name, options, import_kwargs, importing
            )
        except pipeline.Unavailable:
            outcome = None  # read here instead
    if outcome is not None:
        if outcome.file_error is not None:
            return _file_rejected(stores, result, outcome.file_error)
        assert outcome.report is not None
        result.report = report = outcome.report
        _describe(run, report)
        error = outcome.error
        if isinstance(error, pipeline.Rejected) or (report.rejected_total and not request.partial):
            return _rejected(stores, result, report)
        run.skipped = report.rejected_total
        if isinstance(error, pipeline.Empty) or not report.accepted:
            return _empty(stores, result, report)
        if error is not None:
            return _store_error(stores, result, error, outcome.lines or [])
        assert outcome.stats is not None
        return _imported(stores, result, outcome.stats, request)
    try:
        report = await work.long(
            partial(
                read_feed_bytes,
                fetched.data,
                fetched.name,
                options,
                progress=(lambda n: progress("reading", n)) if progress else None,
            )
        )
    except FeedError as exc:
        return _file_rejected(stores, result, exc)
    result.report = report
    _describe(run, report)
    if report.rejected_total and not request.partial:
        return _rejected(stores, result, report)
    run.skipped = report.rejected_total
    if not report.listings:
        return _empty(stores, result, report)
    try:
        stats = await work.long(
            partial(
                stores.inventory.import_listings,
                report.listings,
                keep=[r.listing for r in report.rejected] if request.replace else (),
                progress=importing,
                carried=Carried(report.carried),
                partial=request.partial,
                **import_kwargs,
            )
        )
    except (ShrinkRefused, FieldLossRefused, InventoryImportError) as exc:
        return _store_error(stores, result, exc, report.lines)
    _conflicts(run, report, stats)
    return _imported(stores, result, stats, request)


def _conflicts(run: FeedRun, report: FeedReport, stats: ImportStats) -> None:
    """Rows a partial import left out for naming another published car: rejected rows like any other."""
    if not stats.conflicts:
        return
    for conflict in stats.conflicts:
        line = report.lines[conflict.index] if 0 <= conflict.index < len(report.lines) else 0
        problem = FeedProblem(line, "", conflict.reason)
        report.problem(problem)
        report.rejected.append(RejectedRow(line, [problem], report.listings[conflict.index]))
        report.rejected_total += 1
        report.accepted -= 1
    report.rejected.sort(key=lambda row: row.line)
    run.skipped = report.rejected_total
    run.rejected_lines = [r.line for r in report.rejected]
    run.problems = [_problem_json(p) for p in report.problems[:FIRST_PROBLEMS]]


def _pipelined(request: ImportRequest, data: bytes) -> bool:
    """Large feeds are read in a child process, unless partial: a partial read knows which rows
    to leave out (every row of a shared VIN, say) only once it has read them all."""
    return len(data) >= pipeline.PIPELINE_MIN_BYTES and pipeline.available() and not request.partial


def _describe(run: FeedRun, report: FeedReport) -> None:
    run.format = report.format
    run.rows = report.rows
    run.warnings = report.warning_total
    run.problems = [_problem_json(p) for p in report.problems[:FIRST_PROBLEMS]]
    run.rejected_lines = [r.line for r in report.rejected]
    run.details = {
        "carried": sorted(report.carried) if report.carried is not None else None,
        "encoding": report.encoding,
        "delimiter": report.delimiter,
        "archive": report.archive,
        "detected": report.detected,
        "defaults": report.defaults,
        "columns": report.columns,
        "file_time": report.file_time,
        "problem_total": report.problem_total,
    }


def _file_rejected(stores: Stores, result: ImportResult, exc: FeedError) -> ImportResult:
    result.file_problems = list(exc.problems)
    result.run.problems = [_problem_json(p) for p in exc.problems[:FIRST_PROBLEMS]]
    return _finish(stores, result, "rejected", str(exc.problems[0]) if exc.problems else "unreadable")


def _rejected(stores: Stores, result: ImportResult, report: FeedReport) -> ImportResult:
    return _finish(
        stores,
        result,
        "rejected",
        f"{report.problem_total} problem(s) in {report.rejected_total} row(s); nothing was imported",
    )


def _empty(stores: Stores, result: ImportResult, report: FeedReport) -> ImportResult:
    why = (
        "the feed has no listings (an empty or header-only file, as a truncated transfer gives)"
        if not report.rows
        else "no row of the feed is valid"
    )
    return _finish(stores, result, "refused", f"{why}; nothing was imported")


def _store_error(stores: Stores, result: ImportResult, exc: BaseException, lines: list[int]) -> ImportResult:
    if isinstance(exc, ShrinkRefused):
        result.stats = exc.stats
        return _finish(
            stores,
            result,
            "refused",
            f"the replace would remove {exc.stats.omitted} of {exc.stats.before} listings, more "
            f"than {exc.share:.0%}; nothing was imported (--allow-shrink to accept it)",
        )
    if isinstance(exc, FieldLossRefused):
        result.stats = exc.stats
        result.run.details["guard"] = {"compared": exc.stats.compared, "over": exc.over}
        return _finish(
            stores,
            result,
            "refused",
            f"{exc.describe()}; nothing was imported (--allow-field-loss to accept it)",
        )
    if isinstance(exc, InventoryImportError):
        line = lines[exc.index] if 0 <= exc.index < len(lines) else 0
        problem = FeedProblem(line, "", exc.reason)
        result.run.problems = [_problem_json(problem)]
        result.file_problems = [problem]
        return _finish(stores, result, "rejected", f"line {line}: {exc.reason}; nothing was imported")
    raise exc


def _imported(stores: Stores, result: ImportResult, stats: ImportStats, request: ImportRequest) -> ImportResult:
    run = result.run
    result.stats = stats
    run.inserted, run.updated, run.removed, run.total = stats.inserted, stats.updated, stats.removed, stats.total
    run.unchanged = stats.unchanged
    run.details["matched"] = stats.matched  # cars found by VIN or stock number under another id
    run.details["kept_fields"] = stats.kept_fields  # fields the feed lacks, kept as published
    run.details["guard"] = {"compared": stats.compared, "lost": stats.lost, "price_moved": stats.price_moved}
    return _finish(stores, result, "checked" if request.dry_run else "imported", None)


def _finish(stores: Stores, result: ImportResult, outcome: str, message: str | None) -> ImportResult:
    run = result.run
    run.outcome = outcome
    run.message = message
    run.finished_ms = _now_ms()
    if not run.dry_run:
        if result.report is not None:
            run.notes = feed_notes(stores, result.report, run.dealer_id)
        stores.feeds.record(run)
    return result


def feed_notes(stores: Stores, report: FeedReport, dealer_id: str | None) -> list[FeedNote]:
    """The run's warnings and rejected rows as the history keeps them (docs/feeds.md, "Import history"):
    each warning the report kept, each problem of each rejected row, and every warned row, each
    with the listing it is about where the store has one (found as the import found it: by
    ``vehicle_id``, else by the seller's VIN or stock number), so the console can show the
    listings an import warned about."""
    rows = [(line, ident) for line, ident in report.warned]
    rows += [(row.line, identity(row.listing)) for row in report.rejected]
    ids = stores.inventory_browser.listing_ids([ident for _, ident in rows], dealer_id)
    warned = {line: ids[i] for i, (line, _) in enumerate(rows[: len(report.warned)])}
    notes = [
        FeedNote("warning", w.line, w.message, warned.get(w.line), w.location or None, w.column, w.value)
        for w in report.warnings
    ]
    described = {w.line for w in report.warnings}
    notes += [FeedNote("warning", line, "", listing_id) for line, listing_id in warned.items() if line not in described]
    for offset, row in enumerate(report.rejected):
        listing_id = ids[len(report.warned) + offset]
        notes += [
            FeedNote("rejected", p.line, p.message, listing_id, p.location or None, p.column, p.value)
            for p in row.problems
        ]
    notes.sort(key=lambda n: (n.line, n.kind))
    return notes[:MAX_NOTES]
