"""Read a feed file in any format: every row through the one validator, every problem located.

:func:`read_feed_bytes` unpacks and decodes the bytes (:mod:`.source`),
finds the format (given, from a mapping file, or detected from the header or
the XML document), turns records into listings (:mod:`.convert`; the ``aap``
format is read as it always was, :mod:`aap.inventory.formats.aap`) and checks each
with :class:`~aap.inventory.listing_rules.ListingChecker`. The :class:`FeedReport`
holds the accepted listings, the rejected rows (each once, with its line,
columns, values and problems), warnings, and the defaults that were applied.
All-or-nothing or partial is the caller's decision: ``report.rejected`` is
empty when the feed can be imported whole.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aap.config.model import Settings
from aap.inventory.formats import records, source
from aap.inventory.formats.aap import jsonl_rows, table_rows
from aap.inventory.formats.convert import Converted, Converter, target_fields
from aap.inventory.formats.mapping import BUILT_IN, FeedFormat, Formats, squash
from aap.inventory.listing_rules import (
    COLUMNS,
    MAX_REPORTED,
    FeedError,
    FeedProblem,
    ListingChecker,
    Warning,
    normalize,
)
from aap.util.rfc3339 import now_utc_z

FORMATS: tuple[str, ...] = ("aap",) + BUILT_IN
_IDENTITY = frozenset({"vin", "stock", "vehicle_id"})
SINK_BATCH = 2000
#: Rejected rows an all-or-nothing read keeps (it counts them all; the history keeps 1,000 lines).
MAX_REJECTED_KEPT = 1000
Progress = Callable[[int], None]  # rows read so far

#: What a feed read through a format table must feed from its columns (or the table's defaults):
#: (what it is called in messages, the fields any of which feeds it). A table that feeds none
#: of a group's fields reads the wrong columns (docs/feeds.md, "Wrong format").
REQUIRED: tuple[tuple[str, frozenset[str]], ...] = (
    ("an identifier (VIN, stock number or vehicle_id)", frozenset({"vin", "stock", "vehicle_id"})),
    ("make", frozenset({"make"})),
    ("model", frozenset({"model"})),
    ("year", frozenset({"year"})),
    ("a price", frozenset({"price", "msrp", "list_price"})),
)
#: Beyond the required ones, what a given ``--format`` is compared on with the detected one.
EXPECTED: tuple[tuple[str, frozenset[str]], ...] = REQUIRED + (
    ("a stock number", frozenset({"stock"})),
    ("mileage", frozenset({"mileage"})),
    ("condition", frozenset({"condition"})),
    ("photos", frozenset({"photos"})),
)


class Sink(Protocol):
    """Takes accepted listings as they are read (a pipelined import), instead of the report."""

    def batch(self, listings: list[dict[str, Any]], lines: list[int], carried: list[str] | None) -> None: ...
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
    formats: Formats = field(default_factory=Formats)  # the built-in tables, parsed once per owner
    rooftop: str | None = None  # the rooftop of rows that name none (a feed's ``rooftop``)
    allow_field_loss: bool = False  # read a table that feeds none of a required field anyway
    max_expanded_bytes: int = source.MAX_EXPANDED_BYTES


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
    #: The fields the feed carries (its columns and defaults), or None for every field (JSON
    #: Lines, whose rows are whole listings): what an import takes from this feed.
    carried: set[str] | None = None
    rejected_total: int = 0  # rejected rows, all counted (``rejected`` keeps what it needs)
    size: int = 0  # bytes of the feed text, inflated
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


def _fail(name: str, message: str, line: int = 1) -> FeedError:
    return FeedError([FeedProblem(line, "", message)], 1, name)


def detect(
    kind: str, header: Iterable[str] = (), xml: records.XmlRecords | None = None, formats: Formats | None = None
) -> str | None:
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
    formats = formats if formats is not None else Formats()
    # Each candidate scores the columns it knows; Google and Meta need one of their own
    # marker columns, a provider CSV an identifier. Most known columns wins; on a tie the
    # more specific format (Meta, then Google).
    scored: list[tuple[int, int, str]] = []
    for rank, name in enumerate(("dealer-csv", "google-vehicle", "meta-vehicle")):
        fmt = formats.get(name)
        if name == "dealer-csv":
            eligible = any(t.field in _IDENTITY for h in names for t in (fmt.targets(h) or ()))
        else:
            eligible = bool(squashed & fmt.detect) or any("[" in h and fmt.targets(h) for h in names)
        known = fmt.recognises(names)
        if eligible and known >= 3:
            scored.append((known, rank, name))
    return max(scored)[2] if scored else None


def fed_fields(fmt: FeedFormat, columns: Iterable[str]) -> set[str]:
    """The listing fields a format table feeds from these columns (or its defaults)."""
    fields = set(fmt.defaults)
    for column in columns:
        for target in fmt.targets(column) or ():
            fields.update(target_fields(target))
    return fields


def _unfed(groups: Sequence[tuple[str, frozenset[str]]], fields: set[str]) -> list[str]:
    return [label for label, names in groups if not names & fields]


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def coverage_problem(
    fmt: FeedFormat,
    columns: Sequence[str],
    *,
    given: bool,
    kind: str,
    xml: records.XmlRecords | None,
    formats: Formats,
) -> str | None:
    """Why a table must not read a file with these columns (before any row is read), or None.

    Refused: a table that feeds none of a required field (the wrong format or
    mapping strips every listing of it), and a format given by ``--format``
    when the format detected from the same columns feeds expected fields that
    it does not ("did you mean ...?").
    """
    fields = fed_fields(fmt, columns)
    missing = _unfed(REQUIRED, fields)
    suggestion = detect(kind, columns, xml, formats)
    better: list[str] = []
    if suggestion is not None and suggestion != fmt.name and suggestion in BUILT_IN:
        theirs = fed_fields(formats.get(suggestion), columns)
        better = [label for label in _unfed(EXPECTED, fields) if label not in _unfed(EXPECTED, theirs)]
    if not missing and not (given and better):
        return None
    unknown = [c for c in dict.fromkeys(columns) if c and fmt.targets(c) is None]
    what = f"--format {fmt.name}" if fmt.source == "built-in" else f"the mapping {fmt.source}"
    lacks = _listed(missing + [label for label in better if label not in missing])
    message = f"{what} reads no column for {lacks} from this file"
    if unknown:
        shown = ", ".join(f'"{c}"' for c in unknown[:12]) + (
            f" and {len(unknown) - 12} more" if len(unknown) > 12 else ""
        )
        message += f" (columns it does not recognise: {shown})"
    if suggestion is not None and suggestion != fmt.name:
        message += f"; did you mean --format {suggestion}?"
    else:
        message += "; give the right --format, or a --mapping file"
    return message + " (--allow-field-loss reads it anyway)"


class _Collector:
    """Files each checked row into the report: accepted, or rejected with located problems.

    A partial read rejects every row of an identity (VIN or stock number within
    a dealer, ``vehicle_id``) that several rows share, once all rows are read
    (:meth:`finish`): which of them describes the car cannot be told, so none
    is published. An all-or-nothing read names the earlier line as it goes.
    """

    def __init__(self, report: FeedReport, options: ReadOptions, sink: Sink | None = None) -> None:
        self.report = report
        self.sink = sink
        self.partial = options.partial
        self.rooftop = options.rooftop
        self.deferred = options.partial and sink is None
        self.checker = ListingChecker(
            options.settings,
            options.dealer_id,
            remember_rejected=not options.partial,
            duplicates=not self.deferred,
            strict=options.strict,
        )
        #: For the duplicate pass: per accepted listing, the columns of its identity fields.
        self.origins: list[dict[str, tuple[str, str]]] = []

    def _warn(self, line: int, location: str, message: str, column: str | None, value: str | None) -> None:
        report = self.report
        report.warning_total += 1
        if len(report.warnings) < MAX_REPORTED:
            report.warnings.append(FeedProblem(line, location, message, column, value))

    def _warned(self, line: int, listing: Any, before: int) -> None:
        """Remember the row by its identity when it drew a warning (``before``: the count until it)."""
        report = self.report
        if report.warning_total > before and len(report.warned) < MAX_WARNED:
            report.warned.append((line, identity(listing)))

    def add(self, converted: Converted) -> None:
        line, listing, origin = converted.line, converted.listing, converted.origin
        warned_before = self.report.warning_total
        problems: list[FeedProblem] = []
        for location, message, column, value in converted.problems:
            problems.append(FeedProblem(line, location, message, column, value))
        failed = converted.failed
        seen_locations = {p.location for p in problems}
        warnings: list[Warning] = []

        def where(location: str) -> tuple[str | None, str | None]:
            parts = location[1:].split("/")
            found = origin.get("/".join(parts[:2])) or origin.get(parts[0]) if location else None
            return found if found else (None, None)

        for location, message in self.checker.check(listing, line, rejected=bool(problems), warnings=warnings):
            head = location[1:].split("/", 1)[0]
            if head in failed or location in seen_locations:
                continue  # reported once: the cell that could not be read, or this field already
            if location == "" and failed & _IDENTITY and "required" in message:
                continue
            seen_locations.add(location)
            problems.append(FeedProblem(line, location, message, *where(location)))
        for location, message, column, value in converted.warnings:
            self._warn(line, location, message, column, value)
        for location, message in warnings:
            self._warn(line, location, message, *where(location))
        self._warned(line, listing, warned_before)
        self._file(line, listing, problems, origin)

    def add_plain(self, line: int, listing: Any, parse_problems: list[tuple[str, str]]) -> None:
        """A row of the ``aap`` format: problems located by JSON pointer only."""
        problems = [FeedProblem(line, loc, msg) for loc, msg in parse_problems]
        warned_before = self.report.warning_total
        if isinstance(listing, dict):
            if self.rooftop is not None and "rooftop" not in listing:
                listing["rooftop"] = self.rooftop
                self.report.defaults["rooftop"] = self.report.defaults.get("rooftop", 0) + 1
            warnings: list[Warning] = []
            problems += [
                FeedProblem(line, loc, msg)
                for loc, msg in self.checker.check(listing, line, rejected=bool(problems), warnings=warnings)
            ]
            for location, message in warnings:
                self._warn(line, location, message, None, None)
            self._warned(line, listing, warned_before)
        self._file(line, listing if isinstance(listing, dict) else {}, problems, {})

    def reject(self, line: int, problems: list[FeedProblem]) -> None:
        """A record that could not be read at all."""
        self._file(line, {}, problems, {})

    def _reject(self, line: int, listing: dict[str, Any], problems: list[FeedProblem]) -> None:
        report = self.report
        report.rejected_total += 1
        if self.partial or len(report.rejected) < MAX_REJECTED_KEPT:
            report.rejected.append(RejectedRow(line, problems, listing if self.partial else {}))

    def _file(
        self, line: int, listing: dict[str, Any], problems: list[FeedProblem], origin: dict[str, tuple[str, str]]
    ) -> None:
        report = self.report
        report.rows += 1
        if problems:
            for problem in problems:
                report.problem(problem)
            if self.sink is not None and not self.partial and not report.rejected_total:
                self.sink.reject()
            self._reject(line, listing, problems)
        elif self.partial or not report.rejected_total:
            report.accepted += 1
            report.listings.append(normalize(listing))
            report.lines.append(line)
            if self.deferred:
                self.origins.append({k: origin[k] for k in _IDENTITY if k in origin})
            if self.sink is not None and len(report.listings) >= SINK_BATCH:
                self.flush()

    def finish(self) -> None:
        """The end of the rows: a partial read rejects every row of a shared identity."""
        if self.deferred:
            self._reject_shared_identities()
        self.flush()

    def _reject_shared_identities(self) -> None:
        report = self.report
        groups: dict[tuple[str, Any, str], list[int]] = {}  # index >= 0: accepted, < 0: rejected row
        rows = [(i, listing, line) for i, (listing, line) in enumerate(zip(report.listings, report.lines))]
        rows += [(-1 - i, r.listing, r.line) for i, r in enumerate(report.rejected)]
        for index, listing, _line in rows:
            dealer = listing.get("dealer_id")
            for key in ("vehicle_id", "vin", "stock"):
                value = listing.get(key)
                if isinstance(value, str):
                    groups.setdefault((key, None if key == "vehicle_id" else dealer, value), []).append(index)
        line_of = {index: line for index, _listing, line in rows}
        shared: dict[int, list[FeedProblem]] = {}
        for (key, _dealer, _value), members in groups.items():
            if len(members) < 2:
                continue
            what = {"vin": "VIN", "stock": "stock number", "vehicle_id": "vehicle_id"}[key]
            for i in members:
                if i < 0:
                    continue  # rejected already: its own problems say why
                others = ", ".join(str(line_of[j]) for j in members if j != i)
                column, cell = self.origins[i].get(key, (None, None))
                shared.setdefault(i, []).append(
                    FeedProblem(
                        report.lines[i],
                        f"/{key}",
                        f"is also the {what} of line {others}: rows that share a {what} are all left out",
                        column,
                        cell if column is not None else None,
                    )
                )
        if not shared:
            return
        kept_listings, kept_lines = [], []
        for i, (listing, line) in enumerate(zip(report.listings, report.lines)):
            problems = shared.get(i)
            if problems is None:
                kept_listings.append(listing)
                kept_lines.append(line)
                continue
            report.accepted -= 1
            for problem in problems:
                report.problem(problem)
            self._reject(line, listing, problems)
        report.listings, report.lines = kept_listings, kept_lines
        report.rejected.sort(key=lambda row: row.line)

    def flush(self) -> None:
        """Hand the listings read so far to the sink."""
        report = self.report
        if self.sink is not None and report.listings and (self.partial or not report.rejected_total):
            carried = sorted(report.carried) if report.carried is not None else None
            self.sink.batch(report.listings, report.lines, carried)
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
        text = source.open_text(data, name, encoding=encoding, max_expanded_bytes=options.max_expanded_bytes)
    except source.SourceError as exc:
        raise _fail(name, f"the file {exc}") from None
    kind = source.kind_of(text.head, text.name)
    report = FeedReport(
        source=name,
        kind=kind,
        encoding=text.encoding,
        archive=text.archive,
        member=text.name if text.layers and text.layers[-1] == "zip" else None,
        file_time=options.file_time or now_utc_z(),
        size=text.size,
    )
    if text.size <= source.HEAD_BYTES and not text.head.strip():
        # An empty file: no listings, whatever its format (the caller refuses it).
        report.format = fmt.name if fmt else (options.format or "unknown")
        return report
    collector = _Collector(report, options, sink)
    chosen = "mapping" if fmt else options.format
    try:
        if kind == "xml":
            with text.chunks() as chunks:
                _read_xml(chunks, fmt, chosen, report, collector, options, progress)
        else:
            delimiter = options.delimiter or (fmt.delimiter if fmt else None) or source.sniff_delimiter(text.head)
            if kind == "delimited":
                report.delimiter = delimiter
                report.kind = "tsv" if delimiter == "\t" else "csv"
            with text.lines() as lines:
                _read_lines(lines, kind, delimiter, fmt, chosen, report, collector, options, progress)
    except source.SourceError as exc:  # not expected after the first pass, but never a traceback
        raise _fail(name, f"the file {exc}") from None
    collector.finish()
    return report


def _choose(
    chosen: str | None,
    kind: str,
    header: Sequence[str],
    xml: records.XmlRecords | None,
    report: FeedReport,
    options: ReadOptions,
) -> str:
    if chosen is not None:
        return chosen
    found = detect(kind, header, xml, options.formats)
    report.detected = True
    if found is None:
        raise _fail(
            report.source,
            "cannot tell the feed's format from its "
            + ("document" if kind == "xml" else "header")
            + f"; give --format ({', '.join(FORMATS)}) or --mapping FILE",
        )
    return found


def _converter(fmt: FeedFormat, report: FeedReport, options: ReadOptions) -> Converter:
    settings = options.settings
    rooftops = [r["name"] for p in settings.all_profiles() for r in p.rooftops] if settings else []
    return Converter(
        fmt,
        file_time=report.file_time,
        strict=options.strict,
        rooftop_names=rooftops,
        store_codes=store_codes(settings, options.dealer_id) if settings else None,
        default_rooftop=options.rooftop,
    )


def _covered(
    fmt: FeedFormat,
    columns: Sequence[str],
    given: bool,
    kind: str,
    xml: records.XmlRecords | None,
    report: FeedReport,
    options: ReadOptions,
    line: int,
) -> None:
    """Refuse the file before any row when the table cannot feed what a listing needs."""
    if options.allow_field_loss:
        return
    problem = coverage_problem(fmt, columns, given=given, kind=kind, xml=xml, formats=options.formats)
    if problem is not None:
        raise _fail(report.source, problem, line)


def _finish_table(converter: Converter, report: FeedReport) -> None:
    report.defaults.update(converter.defaults_used)
    report.columns = dict(converter.unknown_columns)
    report.carried = converter.carried


def _read_xml(
    chunks: Iterator[str],
    fmt: FeedFormat | None,
    chosen: str | None,
    report: FeedReport,
    collector: _Collector,
    options: ReadOptions,
    progress: Progress | None,
) -> None:
    name = report.source
    table = fmt if fmt else (options.formats.get(chosen) if chosen in BUILT_IN else None)
    item = table.xml_item if table else None
    indexed = table.indexed if table else frozenset({"image", "tag"})
    try:
        xml = records.xml_records(chunks, item=item, indexed=indexed)
        given = chosen is not None
        chosen = _choose(chosen, "xml", (), xml, report, options)
        report.format = fmt.name if fmt else chosen
        if chosen == "aap":
            raise _fail(name, "the aap format is JSON Lines or CSV, not XML")
        if fmt is None:
            fmt = options.formats.get(chosen)
        converter = _converter(fmt, report, options)
        report.carried = converter.carried  # grows as layouts are met
        first = xml.pending[0] if xml.pending else None
        if first is not None:
            columns = [column for column, _ in converter.expand(first[1], first[0])[0]]
            _covered(fmt, columns, given, "xml", xml, report, options, first[0])
    except records.RecordError as exc:
        raise _fail(name, f"the file {exc}", exc.line) from None
    try:
        for line, pairs in _every(iter(xml), progress):
            collector.add(converter.record(pairs, line))
    except records.RecordError as exc:
        collector.reject(exc.line, [FeedProblem(exc.line, "", f"the file {exc}")])
    _finish_table(converter, report)


def _read_lines(
    lines: source.Lines,
    kind: str,
    delimiter: str,
    fmt: FeedFormat | None,
    chosen: str | None,
    report: FeedReport,
    collector: _Collector,
    options: ReadOptions,
    progress: Progress | None,
) -> None:
    name = report.source
    table: records.Delimited | None = None
    given = chosen is not None
    if kind == "delimited":
        try:
            table = records.delimited(lines, delimiter)
        except records.RecordError as exc:
            raise _fail(name, f"the file {exc}", exc.line) from None
        if table is None:
            report.format = fmt.name if fmt else (chosen or "unknown")
            return
    chosen = _choose(chosen, kind, table.header if table else (), None, report, options)
    report.format = fmt.name if fmt else chosen
    if chosen == "aap":
        if table is not None:
            _aap_header(table, given, report, options)
            report.carried = {h for h in table.header if h}
            rows = table_rows(table.header, table.header_line, table.rows)
        else:
            rows = jsonl_rows(lines)
        try:
            for line, _offset, listing, problems in _every(rows, progress):
                collector.add_plain(line, listing, problems)
        except records.RecordError as exc:
            collector.reject(exc.line, [FeedProblem(exc.line, "", f"the file {exc}")])
        return
    if table is None:
        raise _fail(name, f"JSON Lines feeds are in the aap format, not {fmt.name if fmt else chosen}")
    if fmt is None:
        fmt = options.formats.get(chosen)
    converter = _converter(fmt, report, options)
    _covered(fmt, table.header, given, "delimited", None, report, options, table.header_line)
    report.carried = converter.carried
    converter.plan(table.header)
    try:
        _read_delimited(table, converter, collector, name, progress)
    except records.RecordError as exc:
        collector.reject(exc.line, [FeedProblem(exc.line, "", f"the file {exc}")])
    _finish_table(converter, report)


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


def store_codes(settings: Settings, dealer_id: str | None) -> dict[str, str]:
    """Store codes (casefolded) -> rooftop names, from the ``store_codes`` of the configured rooftops.

    With a dealer (``--dealer-id`` on an aggregate endpoint) only that seller's
    codes; without one, a code two sellers use names no rooftop.
    """
    profiles = settings.all_profiles()
    if dealer_id is not None and settings.scope == "aggregate":
        profiles = [p for p in profiles if p.dealer_id == dealer_id]
    found: dict[str, str] = {}
    ambiguous: set[str] = set()
    for profile in profiles:
        for code, rooftop in profile.store_codes.items():
            if found.setdefault(code, rooftop) != rooftop:
                ambiguous.add(code)
    return {code: rooftop for code, rooftop in found.items() if code not in ambiguous}


def _aap_header(table: records.Delimited, given: bool, report: FeedReport, options: ReadOptions) -> None:
    """A file given as ``--format aap`` whose header is another format's: say which."""
    if not given or all(h in COLUMNS for h in table.header if h):
        return
    other = detect("delimited", [h for h in table.header if h not in COLUMNS] or table.header, None, options.formats)
    if other is not None and other != "aap":
        raise _fail(
            report.source,
            "the aap format's columns are InventoryListing field names, and this header's are not; "
            f"did you mean --format {other}?",
            table.header_line,
        )
