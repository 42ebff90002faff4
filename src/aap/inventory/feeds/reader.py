"""Read a feed file in any format: every row through the one validator, every problem located.

:func:`read_feed_bytes` unpacks and decodes the bytes (:mod:`.source`),
finds the format (given, from a mapping file, or detected from the header or
the XML document), turns records into listings (:mod:`.convert`; the ``aap``
format is read as it always was, :mod:`aap.inventory.feed`) and checks each
with :class:`~aap.inventory.feed.ListingChecker`. The :class:`FeedReport`
holds the accepted listings, the rejected rows (each once, with its line,
columns, values and problems), warnings, and the defaults that were applied.
All-or-nothing or partial is the caller's decision: ``report.rejected`` is
empty when the feed can be imported whole.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from aap.config.model import Settings
from aap.inventory.feed import (
    COLUMNS,
    MAX_REPORTED,
    FeedError,
    FeedProblem,
    ListingChecker,
    csv_rows,
    jsonl_rows,
    normalize,
)
from aap.inventory.feeds import records, source
from aap.inventory.feeds.convert import Converted, Converter
from aap.inventory.feeds.mapping import BUILT_IN, FeedFormat, builtin_format, squash

FORMATS: tuple[str, ...] = ("aap",) + BUILT_IN
_IDENTITY = frozenset({"vin", "stock", "vehicle_id"})
SINK_BATCH = 2000
Progress = Callable[[int], None]  # rows read so far


class Sink(Protocol):
    """Takes accepted listings as they are read (a pipelined import), instead of the report."""

    def batch(self, listings: list[dict[str, Any]], lines: list[int]) -> None: ...
    def reject(self) -> None: ...  # an all-or-nothing read found its first bad row


@dataclass(frozen=True)
class ReadOptions:
    """How to read one feed (``aap import`` options, or a ``[[feeds]]`` table)."""

    format: str | None = None  # "aap" or a built-in name; None: detect
    mapping: FeedFormat | None = None  # a dealer's mapping file (wins over ``format``)
    encoding: str | None = None
    delimiter: str | None = None
    dealer_id: str | None = None
    strict: bool = False  # a wrong VIN check digit is an error, not a warning
    partial: bool = False  # keep going after a bad row (``--skip-invalid``)
    file_time: str | None = None  # the feed's own time: the default ``updated_at``
    settings: Settings | None = None


@dataclass
class RejectedRow:
    """A row left out of a partial import: its line, its problems, and what could be read of it."""

    line: int
    problems: list[FeedProblem]
    listing: dict[str, Any]


@dataclass
class FeedReport:
    """What reading a feed found."""

    source: str
    format: str = "aap"
    detected: bool = False
    kind: str = "csv"
    encoding: str = "utf-8"
    delimiter: str | None = None
    archive: str | None = None
    member: str | None = None
    rows: int = 0
    accepted: int = 0
    listings: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    rejected: list[RejectedRow] = field(default_factory=list)
    problems: list[FeedProblem] = field(default_factory=list)
    problem_total: int = 0
    warnings: list[FeedProblem] = field(default_factory=list)
    warning_total: int = 0
    defaults: dict[str, int] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # column -> what became of it
    file_time: str = ""
    #: (line, identity) of each row that drew a warning (at most MAX_WARNED): which listings the
    #: console shows as warned by this import. identity: the row's vehicle_id, vin, stock, dealer_id.
    warned: list[tuple[int, tuple[str | None, str | None, str | None, str | None]]] = field(default_factory=list)

    def problem(self, item: FeedProblem) -> None:
        self.problem_total += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(item)

    def warning(self, item: FeedProblem) -> None:
        self.warning_total += 1
        if len(self.warnings) < MAX_REPORTED:
            self.warnings.append(item)

    def error(self) -> FeedError:
        return FeedError(self.problems, self.problem_total, self.source)


MAX_WARNED = 10_000


def identity(listing: Any) -> tuple[str | None, str | None, str | None, str | None]:
    """A row's ``vehicle_id``, ``vin``, ``stock`` and ``dealer_id`` (each None when absent or not text)."""
    if not isinstance(listing, dict):
        return None, None, None, None
    values = [listing.get(k) for k in ("vehicle_id", "vin", "stock", "dealer_id")]
    ident, vin, stock, dealer = (v if isinstance(v, str) and v else None for v in values)
    return ident, vin, stock, dealer


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _fail(name: str, message: str, line: int = 1) -> FeedError:
    return FeedError([FeedProblem(line, "", message)], 1, name)


def detect(kind: str, header: Iterable[str] = (), xml: records.XmlRecords | None = None) -> str | None:
    """The format a file looks like: from its kind, its header, or its XML document."""
    if kind == "jsonl":
        return "aap"
    if kind == "xml":
        if xml is None:
            return None
        if xml.google or xml.element in ("item", "entry"):
            return "google-vehicle"
        if xml.element == "listing" or xml.root == "listings":
            return "meta-vehicle"
        return None
    names = [h for h in header if h]
    if names and all(h in COLUMNS for h in names):
        return "aap"
    squashed = {squash(h) for h in names}
    # Each candidate scores the columns it knows; Google and Meta need one of their own
    # marker columns, a provider CSV an identifier. Most known columns wins; on a tie the
    # more specific format (Meta, then Google).
    scored: list[tuple[int, int, str]] = []
    for rank, name in enumerate(("dealer-csv", "google-vehicle", "meta-vehicle")):
        fmt = builtin_format(name)
        if name == "dealer-csv":
            eligible = any(t.field in _IDENTITY for h in names for t in (fmt.targets(h) or ()))
        else:
            eligible = bool(squashed & fmt.detect) or any("[" in h and fmt.targets(h) for h in names)
        known = fmt.recognises(names)
        if eligible and known >= 3:
            scored.append((known, rank, name))
    return max(scored)[2] if scored else None


class _Collector:
    """Files each checked row into the report: accepted, or rejected with located problems."""

    def __init__(self, report: FeedReport, options: ReadOptions, sink: Sink | None = None) -> None:
        self.report = report
        self.sink = sink
        self.partial = options.partial
        self.checker = ListingChecker(options.settings, options.dealer_id, remember_rejected=not options.partial)

    def add(self, converted: Converted) -> None:
        report = self.report
        line, listing, origin = converted.line, converted.listing, converted.origin
        problems: list[FeedProblem] = []
        for location, message, column, value in converted.problems:
            problems.append(FeedProblem(line, location, message, column, value))
        failed = converted.failed
        seen_locations = {p.location for p in problems}
        for location, message in self.checker.check(listing, line, rejected=bool(problems)):
            head = location[1:].split("/", 1)[0]
            if head in failed or location in seen_locations:
                continue  # reported once: the cell that could not be read, or this field already
            if location == "" and failed & _IDENTITY and "required" in message:
                continue
            seen_locations.add(location)
            parts = location[1:].split("/")
            where = origin.get("/".join(parts[:2])) or origin.get(parts[0]) if location else None
            column, value = where if where else (None, None)
            problems.append(FeedProblem(line, location, message, column, value))
        for location, message, column, value in converted.warnings:
            report.warning_total += 1
            if len(report.warnings) < MAX_REPORTED:
                report.warnings.append(FeedProblem(line, location, message, column, value))
        if converted.warnings and len(report.warned) < MAX_WARNED:
            report.warned.append((line, identity(listing)))
        self._file(line, listing, problems)

    def add_plain(self, line: int, listing: Any, parse_problems: list[tuple[str, str]]) -> None:
        """A row of the ``aap`` format: problems located by JSON pointer only."""
        problems = [FeedProblem(line, loc, msg) for loc, msg in parse_problems]
        if listing is not None:
            problems += [
                FeedProblem(line, loc, msg) for loc, msg in self.checker.check(listing, line, rejected=bool(problems))
            ]
        self._file(line, listing if isinstance(listing, dict) else {}, problems)

    def reject(self, line: int, problems: list[FeedProblem]) -> None:
        """A record that could not be read at all."""
        self._file(line, {}, problems)

    def _file(self, line: int, listing: dict[str, Any], problems: list[FeedProblem]) -> None:
        report = self.report
        report.rows += 1
        if problems:
            for problem in problems:
                report.problem(problem)
            if self.sink is not None and not self.partial and not report.rejected:
                self.sink.reject()
            report.rejected.append(RejectedRow(line, problems, listing if self.partial else {}))
        elif self.partial or not report.rejected:
            report.accepted += 1
            report.listings.append(normalize(listing))
            report.lines.append(line)
            if self.sink is not None and len(report.listings) >= SINK_BATCH:
                self.flush()

    def flush(self) -> None:
        """Hand the listings read so far to the sink."""
        report = self.report
        if self.sink is not None and report.listings and (self.partial or not report.rejected):
            self.sink.batch(report.listings, report.lines)
        if self.sink is not None:
            report.listings, report.lines = [], []


def _every(rows: Iterator[Any], progress: Progress | None) -> Iterator[Any]:
    for count, row in enumerate(rows, start=1):
        if progress is not None and count % 1000 == 0:
            progress(count)
        yield row


def read_feed_bytes(
    data: bytes,
    name: str,
    options: ReadOptions = ReadOptions(),
    *,
    progress: Progress | None = None,
    sink: Sink | None = None,
) -> FeedReport:
    """Read a whole feed; a :class:`FeedError` when the file itself cannot be read.

    With a ``sink``, accepted listings go to it in batches as they are read and
    ``report.listings`` ends empty (``report.accepted`` counts them).
    """
    collecting = gc.isenabled()
    gc.disable()  # reading allocates a listing per row, all acyclic: skip the collector's passes
    try:
        return _read(data, name, options, progress, sink)
    finally:
        if collecting:
            gc.enable()


def _read(data: bytes, name: str, options: ReadOptions, progress: Progress | None, sink: Sink | None) -> FeedReport:
    fmt = options.mapping
    encoding = options.encoding or (fmt.encoding if fmt else None)
    try:
        text = source.open_text(data, name, encoding=encoding)
    except source.SourceError as exc:
        raise _fail(name, f"the file {exc}") from None
    kind = source.kind_of(text.text, text.name)
    report = FeedReport(
        source=name,
        kind=kind,
        encoding=text.encoding,
        archive=text.archive,
        member=text.name if text.archive == "zip" else None,
        file_time=options.file_time or _now(),
    )
    if not text.text.strip():  # an empty file: no listings, whatever its format (the caller refuses it)
        report.format = fmt.name if fmt else (options.format or "unknown")
        return report
    collector = _Collector(report, options, sink)
    xml: records.XmlRecords | None = None
    table: records.Delimited | None = None
    chosen = "mapping" if fmt else options.format
    try:
        if kind == "xml":
            item = fmt.xml_item if fmt else (builtin_format(chosen).xml_item if chosen in BUILT_IN else None)
            indexed = (
                fmt.indexed
                if fmt
                else (builtin_format(chosen).indexed if chosen in BUILT_IN else frozenset({"image", "tag"}))
            )
            xml = records.xml_records(text.text, item=item, indexed=indexed)
        elif kind == "delimited":
            delimiter = options.delimiter or (fmt.delimiter if fmt else None) or source.sniff_delimiter(text.text)
            report.delimiter = delimiter
            report.kind = "tsv" if delimiter == "\t" else "csv"
            table = records.delimited(text.text, delimiter)
    except records.RecordError as exc:
        raise _fail(name, f"the file {exc}", exc.line) from None
    if chosen is None:
        chosen = detect(kind, table.header if table else (), xml)
        report.detected = True
        if chosen is None:
            raise _fail(
                name,
                "cannot tell the feed's format from its "
                + ("document" if kind == "xml" else "header")
                + f"; give --format ({', '.join(FORMATS)}) or --mapping FILE",
            )
    report.format = fmt.name if fmt else chosen
    if chosen == "aap":
        if kind == "xml":
            raise _fail(name, "the aap format is JSON Lines or CSV, not XML")
        _read_plain(text.text, kind, report.delimiter or ",", collector, progress)
        collector.flush()
        return report
    if fmt is None:
        fmt = builtin_format(chosen)
    rooftops = [r["name"] for p in options.settings.all_profiles() for r in p.rooftops] if options.settings else []
    converter = Converter(fmt, file_time=report.file_time, strict=options.strict, rooftop_names=rooftops)
    try:
        if xml is not None:
            for line, pairs in _every(iter(xml.records), progress):
                collector.add(converter.record(pairs, line))
        elif table is not None:
            _read_delimited(table, converter, collector, name, progress)
        elif kind == "jsonl":
            raise _fail(name, f"JSON Lines feeds are in the aap format, not {fmt.name}")
    except records.RecordError as exc:
        collector.reject(exc.line, [FeedProblem(exc.line, "", f"the file {exc}")])
    collector.flush()
    report.defaults = dict(converter.defaults_used)
    report.columns = dict(converter.unknown_columns)
    return report


def _read_delimited(
    table: records.Delimited, converter: Converter, collector: _Collector, name: str, progress: Progress | None
) -> None:
    header = table.header
    plan = converter.plan(header)
    if plan.refused:
        raise FeedError(
            [
                FeedProblem(table.header_line, "", f'unknown column "{c}" (the mapping refuses unknown columns)', c)
                for c in plan.refused
            ],
            len(plan.refused),
            name,
        )
    width = len(header)
    expand = bool(converter.format.json_columns & {squash(h) for h in header})
    for line, cells in _every(table.rows, progress):
        if len(cells) != width:
            problem = FeedProblem(line, "", f"has {len(cells)} cells but the header has {width} columns")
            collector.reject(line, [problem])
            continue
        if expand:
            collector.add(converter.record(list(zip(header, cells)), line))
        else:
            collector.add(converter.convert(plan, cells, line))


def _read_plain(text: str, kind: str, delimiter: str, collector: _Collector, progress: Progress | None) -> None:
    handle = io.BytesIO(text.encode("utf-8"))
    rows = jsonl_rows(handle) if kind == "jsonl" else csv_rows(handle, delimiter)
    for line, _offset, listing, problems in _every(rows, progress):
        collector.add_plain(line, listing, problems)
