"""The ``aap`` format: JSON Lines or CSV files of AAP ``InventoryListing`` objects.

CSV mapping (docs/feeds.md, "The aap format"): one column per scalar field,
named like the field; nested fields (``fees``, ``feature_evidence``,
``features``, ``photos``, ``other_attributes``) hold JSON; an empty cell means
the field is absent; numbers and booleans are parsed according to the
schema's type. Every row goes through :class:`~aap.inventory.listing_rules.ListingChecker`.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from aap.config.model import Settings
from aap.inventory.listing_rules import (
    BOOLEAN,
    COLUMNS,
    COMPUTED_FIELDS,
    INTEGER,
    JSON,
    MAX_REPORTED,
    NUMBER,
    STRING,
    FeedError,
    FeedProblem,
    ListingChecker,
    normalize,
)

_INT = re.compile(r"^[+-]?\d+$")
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


class _Collector:
    def __init__(self) -> None:
        self.problems: list[FeedProblem] = []
        self.total = 0

    def add(self, line: int, location: str, message: str) -> None:
        self.total += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(FeedProblem(line, location, message))


Progress = Callable[[int, int], None]  # (units done, total units) in bytes of the file


# -- reading ------------------------------------------------------------------------


def feed_format(path: str) -> str:
    """``"csv"`` or ``"jsonl"`` from the file name (``.csv`` means CSV, anything else JSON Lines)."""
    return "csv" if str(path).lower().endswith(".csv") else "jsonl"


@dataclass
class Feed:
    """The listings of an accepted feed, each with the line it started on."""

    listings: list[dict[str, Any]]
    lines: list[int]
    source: str | None = None

    def __len__(self) -> int:
        return len(self.listings)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.listings)


def read_feed(
    path: str,
    *,
    settings: Settings | None = None,
    dealer_id: str | None = None,
    format: str | None = None,
    progress: Progress | None = None,
) -> Feed:
    """Every listing of the feed at ``path``, or a :class:`FeedError` with every problem.

    ``dealer_id`` is given to listings that carry none (a listing with another
    one is a problem). With ``settings`` the listings are also checked against
    the deployment: rooftops, dealers, currencies, feature codes and scope rules.
    """
    fmt = format or feed_format(path)
    total = os.path.getsize(path)
    with open(path, "rb") as handle:
        rows = csv_rows(handle) if fmt == "csv" else jsonl_rows(handle)
        return check_rows(
            rows,
            settings=settings,
            dealer_id=dealer_id,
            source=str(path),
            progress=(lambda done: progress(done, total)) if progress else None,
        )


def check_rows(
    rows: Iterable[tuple[int, int, Any, list[tuple[str, str]]]],
    *,
    settings: Settings | None = None,
    dealer_id: str | None = None,
    source: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Feed:
    """Validate parsed rows ``(line, offset, listing | None, parse problems)``; see :func:`read_feed`."""
    collector = _Collector()
    checker = ListingChecker(settings, dealer_id)
    feed = Feed([], [], source)
    count = 0
    offset = 0
    for line, offset, row, parse_problems in rows:
        for location, message in parse_problems:
            collector.add(line, location, message)
        if row is None:
            continue
        problems = checker.check(row, line)
        for location, message in problems:
            collector.add(line, location, message)
        if not problems and not parse_problems and not collector.total:
            feed.listings.append(normalize(row))
            feed.lines.append(line)
        count += 1
        if progress is not None and count % 500 == 0:
            progress(offset)
    if progress is not None:
        progress(offset)
    if collector.total:
        raise FeedError(collector.problems, collector.total, source)
    return feed


Lines = Iterable[Any]  # str or bytes lines


def jsonl_rows(lines: Lines) -> Iterator[tuple[int, int, Any, list[tuple[str, str]]]]:
    """``(line, bytes read, listing | None, problems)`` per line of a JSON Lines feed.

    ``lines``: a binary file, or the text lines of :meth:`~aap.inventory.formats.source.FeedText.lines`
    (which bound each line and count characters instead of bytes).
    """
    offset = 0
    done = getattr(lines, "record_done", None)
    for number, raw in enumerate(lines, start=1):
        offset += len(raw)
        if done is not None:
            done()
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield number, offset, None, [("", f"not valid JSON ({exc.msg})")]
            continue
        if not isinstance(value, dict):
            yield number, offset, None, [("", "each line must be one JSON object (an InventoryListing)")]
            continue
        yield number, offset, value, []


class _Lines:
    """Decoded lines of a binary file, counting bytes read and physical lines for the CSV reader."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.offset = 0
        self.number = 0
        self.first = True

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = self.handle.readline()
        if not raw:
            raise StopIteration
        self.offset += len(raw)
        self.number += 1
        text = raw.decode("utf-8")
        if self.first:
            self.first = False
            text = text.removeprefix("\ufeff")  # a spreadsheet's byte-order mark
        return text

    def record_done(self) -> None:
        pass


def csv_rows(lines: Any, delimiter: str = ",") -> Iterator[tuple[int, int, Any, list[tuple[str, str]]]]:
    """``(line, bytes read, listing | None, problems)`` per record of an ``aap`` CSV feed.

    ``lines``: a binary file, or the text lines of :meth:`~aap.inventory.formats.source.FeedText.lines`.
    """
    if not hasattr(lines, "record_done"):
        lines = _Lines(lines)
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, UnicodeDecodeError) as exc:
        yield 1, lines.offset, None, [("", f"unreadable CSV header ({exc})")]
        return
    lines.record_done()

    def rows() -> Iterator[tuple[int, list[str]]]:
        while True:
            start = lines.number + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as exc:
                raise _Unreadable(start, f"unreadable CSV row ({exc})") from None
            lines.record_done()
            if any(cells):
                yield start, cells

    try:
        for line, _zero, row, problems in table_rows(header, 1, rows()):
            yield line, lines.offset, row, problems
    except _Unreadable as exc:
        yield exc.line, lines.offset, None, [("", exc.message)]


class _Unreadable(Exception):
    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.message = message


def table_rows(
    header: list[str], header_line: int, rows: Iterable[tuple[int, list[str]]]
) -> Iterator[tuple[int, int, Any, list[tuple[str, str]]]]:
    """``(line, 0, listing | None, problems)`` per row of an ``aap`` CSV feed already split into cells."""
    problems = _header_problems(header)
    if problems:
        yield header_line, 0, None, problems
        return
    for start, cells in rows:
        if len(cells) != len(header):
            yield start, 0, None, [("", f"has {len(cells)} cells but the header has {len(header)} columns")]
            continue
        row, row_problems = csv_cells_to_listing(header, cells)
        yield start, 0, row, row_problems


def _header_problems(header: list[str]) -> list[tuple[str, str]]:
    problems = []
    seen = set()
    for name in header:
        if name in COMPUTED_FIELDS:
            problems.append(("", f"column {name!r} is computed by the search and cannot be imported"))
        elif name not in COLUMNS:
            problems.append(
                ("", f"unknown column {name!r} (dealer-specific values go in the other_attributes JSON column)")
            )
        elif name in seen:
            problems.append(("", f"column {name!r} appears twice"))
        seen.add(name)
    return problems


def csv_cells_to_listing(header: list[str], cells: list[str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """One CSV record as a listing dict, plus the cells that could not be parsed."""
    row: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for name, cell in zip(header, cells):
        if cell == "":
            continue
        kind = COLUMNS[name]
        try:
            row[name] = _parse_cell(kind, cell)
        except ValueError as exc:
            problems.append((f"/{name}", str(exc)))
    return row, problems


def _parse_cell(kind: str, cell: str) -> Any:
    if kind == STRING:
        return cell
    text = cell.strip()
    if kind == INTEGER:
        if not _INT.match(text):
            raise ValueError("expected a whole number (digits only)")
        return int(text)
    if kind == NUMBER:
        if _INT.match(text):
            return int(text)
        try:
            value = float(text)
        except ValueError:
            raise ValueError("expected a number") from None
        if not math.isfinite(value):
            raise ValueError("expected a finite number")
        return value
    if kind == BOOLEAN:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected true or false")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"expected a JSON value ({exc.msg})") from None


# -- writing -----------------------------------------------------------------------


def write_feed(path: str, listings: Iterable[dict[str, Any]]) -> int:
    """Write listings as JSON Lines, or CSV when ``path`` ends in ``.csv``; returns the count."""
    if feed_format(path) == "csv":
        return write_csv(path, listings)
    count = 0
    with open(path, "wb") as handle:
        for listing in listings:
            handle.write(orjson.dumps(listing) + b"\n")
            count += 1
    return count


def write_csv(path: str, listings: Iterable[dict[str, Any]]) -> int:
    """CSV with every mapped column (the docs/feeds.md layout); nested values as JSON cells."""
    columns = list(COLUMNS)
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for listing in listings:
            writer.writerow(listing_to_cells(listing, columns))
            count += 1
    return count


def listing_to_cells(listing: dict[str, Any], columns: list[str]) -> list[str]:
    extra = listing.keys() - COLUMNS.keys()
    if extra:
        raise ValueError(f"fields without a CSV column: {', '.join(sorted(extra))}; use JSON Lines")
    cells = []
    for name in columns:
        value = listing.get(name)
        if value is None:
            cells.append("")
        elif COLUMNS[name] == JSON:
            cells.append(orjson.dumps(value).decode())
        elif isinstance(value, bool):
            cells.append("true" if value else "false")
        else:
            cells.append(str(value))
    return cells
