"""Inventory feeds: JSON Lines or CSV files of AAP ``InventoryListing`` objects.

A feed is read whole and checked before anything is stored: every row against
the 3.1 ``InventoryListing`` schema, then against the deployment (known rooftops,
dealers, currencies and feature codes) and against the other rows (no duplicate
``vehicle_id``, or VIN / stock number within one dealer). Any problem rejects
the whole feed with a :class:`FeedError` listing every problem with its line
number, so the previous inventory stays untouched.

CSV mapping (docs/feeds.md): one column per scalar field, named like the field;
nested fields (``fees``, ``feature_evidence``, ``features``, ``photos``,
``other_attributes``) hold JSON; an empty cell means the field is absent;
numbers and booleans are parsed according to the schema's type.
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

MAX_REPORTED = 100  # problems kept in a FeedError (all are counted)

# Column kinds of the CSV mapping, from the Vehicle schema's property types.
STRING, INTEGER, NUMBER, BOOLEAN, JSON = "string", "integer", "number", "boolean", "json"

COLUMNS: dict[str, str] = {
    "vehicle_id": STRING,
    "dealer_id": STRING,
    "vin": STRING,
    "stock": STRING,
    "vehicle_type": STRING,
    "year": INTEGER,
    "make": STRING,
    "model": STRING,
    "trim": STRING,
    "condition": STRING,
    "status": STRING,
    "rooftop": STRING,
    "currency": STRING,
    "msrp": INTEGER,
    "list_price": INTEGER,
    "price": INTEGER,
    "fees": JSON,
    "mileage": INTEGER,
    "mileage_unit": STRING,
    "body": STRING,
    "transmission": STRING,
    "driveline": STRING,
    "engine": STRING,
    "displacement_cc": INTEGER,
    "fuel": STRING,
    "city_mpg": INTEGER,
    "highway_mpg": INTEGER,
    "electric_range_mi": NUMBER,
    "battery_kwh": NUMBER,
    "motor_power_hp": NUMBER,
    "dc_fast_charge": BOOLEAN,
    "charge_port": STRING,
    "exterior_color": STRING,
    "interior_color": STRING,
    "features": JSON,
    "feature_evidence": JSON,
    "photos": JSON,
    "vdp_url": STRING,
    "description": STRING,
    "notes": STRING,
    "other_attributes": JSON,
    "inventory_date": STRING,
    "updated_at": STRING,
}
#: Fields a feed must not carry: the search computes them.
COMPUTED_FIELDS = frozenset({"distance_mi"})

_INT = re.compile(r"^[+-]?\d+$")
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


@dataclass(frozen=True)
class FeedProblem:
    """One problem of a feed: its line, where in the listing (JSON pointer), and what.

    A feed read through a format table also names the source ``column`` and the
    cell's ``value`` as written (inventory values are not personal data), so the
    operator can find it in the file: ``line 7, column "VIN": "1HG…X" has a wrong
    check digit (expected 7)``.
    """

    line: int
    location: str
    message: str
    column: str | None = None
    value: str | None = None

    def __str__(self) -> str:
        if self.column is not None:
            shown = f" {_quoted(self.value)}" if self.value is not None else ""
            return f'line {self.line}, column "{self.column}":{shown} {self.message}'
        where = f" {self.location}" if self.location else ""
        return f"line {self.line}:{where}: {self.message}"


def _quoted(value: str, limit: int = 80) -> str:
    text = value if len(value) <= limit else value[: limit - 1] + "\u2026"
    return '"' + text.replace('"', '\\"') + '"'


class FeedError(Exception):
    """A rejected feed. ``problems`` holds the first :data:`MAX_REPORTED`; ``total`` counts all."""

    def __init__(self, problems: list[FeedProblem], total: int, source: str | None = None) -> None:
        self.problems = problems[:MAX_REPORTED]
        self.total = total
        self.source = source
        more = f"\n  ... and {total - len(self.problems)} more" if total > len(self.problems) else ""
        lines = "\n".join(f"  {p}" for p in self.problems)
        where = f" {source}" if source else ""
        super().__init__(f"feed{where} rejected: {total} problem(s)\n{lines}{more}")


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


class ListingChecker:
    """The AAP rules for one listing at a time, in feed order: the one validator of every format.

    :meth:`check` gives ``dealer_id`` to a listing without one (when the import
    names a dealer) and returns every problem as ``(JSON pointer, message)``:
    the ``InventoryListing`` schema, the rules its prose states, the
    deployment's rules and duplicates of earlier rows. With
    ``remember_rejected=False`` (a partial import) the identities of rejected
    rows are not remembered, so a later valid row is not called their duplicate.
    """

    def __init__(
        self, settings: Settings | None = None, dealer_id: str | None = None, *, remember_rejected: bool = True
    ) -> None:
        self.dealer_id = dealer_id
        self.rules = _DeploymentRules(settings, dealer_id)
        self.seen = _Duplicates()
        self.remember_rejected = remember_rejected

    def check(self, row: dict[str, Any], line: int, *, rejected: bool = False) -> list[tuple[str, str]]:
        """Every problem of ``row``; ``rejected``: the caller already refuses it for another reason."""
        from aap.spec import validate

        if self.dealer_id is not None and "dealer_id" not in row:
            row["dealer_id"] = self.dealer_id
        problems = [(e["instanceLocation"], e["error"]) for e in validate(row, "inventory-listing")]
        problems += _listing_rules(row)
        problems += self.rules.check(row)
        if self.remember_rejected or not (problems or rejected):
            problems += self.seen.check(row, line)
        return problems


def jsonl_rows(handle: BinaryIO) -> Iterator[tuple[int, int, Any, list[tuple[str, str]]]]:
    """``(line, bytes read, listing | None, problems)`` per line of a JSON Lines feed."""
    offset = 0
    for number, raw in enumerate(handle, start=1):
        offset += len(raw)
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
        self.line = 0
        self.first = True

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = self.handle.readline()
        if not raw:
            raise StopIteration
        self.offset += len(raw)
        self.line += 1
        text = raw.decode("utf-8")
        if self.first:
            self.first = False
            text = text.removeprefix("\ufeff")  # a spreadsheet's byte-order mark
        return text


def csv_rows(handle: BinaryIO, delimiter: str = ",") -> Iterator[tuple[int, int, Any, list[tuple[str, str]]]]:
    """``(line, bytes read, listing | None, problems)`` per record of an ``aap`` CSV feed."""
    lines = _Lines(handle)
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, UnicodeDecodeError) as exc:
        yield 1, lines.offset, None, [("", f"unreadable CSV header ({exc})")]
        return
    problems = _header_problems(header)
    if problems:
        yield 1, lines.offset, None, problems
        return
    while True:
        start = lines.line + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            yield start, lines.offset, None, [("", f"unreadable CSV row ({exc})")]
            return
        if not any(cells):
            continue
        if len(cells) != len(header):
            yield start, lines.offset, None, [("", f"has {len(cells)} cells but the header has {len(header)} columns")]
            continue
        row, row_problems = csv_cells_to_listing(header, cells)
        yield start, lines.offset, row, row_problems


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


_INTEGER_FIELDS = tuple(name for name, kind in COLUMNS.items() if kind == INTEGER)


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Integral floats in integer fields (``25000.0``) become ints, as stored and served."""
    for name in _INTEGER_FIELDS:
        value = row.get(name)
        if value.__class__ is float:
            row[name] = int(value)
    fees = row.get("fees")
    if isinstance(fees, list):
        for fee in fees:
            if isinstance(fee.get("amount"), float):
                fee["amount"] = int(fee["amount"])
    return row


# -- rules beyond the schema ---------------------------------------------------------


def _listing_rules(row: dict[str, Any]) -> list[tuple[str, str]]:
    """What the InventoryListing description requires but its JSON Schema cannot say."""
    problems = []
    for name in COMPUTED_FIELDS & row.keys():
        problems.append((f"/{name}", "is computed by the search and cannot be imported"))
    evidence = row.get("feature_evidence")
    if isinstance(evidence, list):
        codes: dict[str, int] = {}
        for i, entry in enumerate(evidence):
            code = entry.get("code") if isinstance(entry, dict) else None
            if isinstance(code, str):
                if code in codes:
                    problems.append(
                        (
                            f"/feature_evidence/{i}/code",
                            f"duplicates feature_evidence/{codes[code]} (at most one entry per code)",
                        )
                    )
                else:
                    codes[code] = i
    fees = row.get("fees")
    if isinstance(fees, list):
        names: dict[str, int] = {}
        for i, fee in enumerate(fees):
            fee_name = fee.get("name") if isinstance(fee, dict) else None
            if isinstance(fee_name, str):
                if fee_name in names:
                    problems.append(
                        (
                            f"/fees/{i}/name",
                            f"duplicates fees/{names[fee_name]} (fee names are unique within a listing)",
                        )
                    )
                else:
                    names[fee_name] = i
    return problems


class _DeploymentRules:
    """Checks that need the configuration: rooftops, dealers, currencies, vocabulary."""

    def __init__(self, settings: Settings | None, dealer_id: str | None) -> None:
        self.settings = settings
        self.dealer_id = dealer_id
        if settings is None:
            return
        self.aggregate = settings.scope == "aggregate"
        self.rooftops = {
            profile.dealer_id: {r["name"] for r in profile.rooftops} for profile in settings.all_profiles()
        }
        self.currencies = set(settings.search.currencies)
        self.codes = {f.code for f in settings.features}

    def check(self, row: dict[str, Any]) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.dealer_id is not None and row.get("dealer_id") != self.dealer_id:
            problems.append(("/dealer_id", "differs from the dealer id given for this import"))
        settings = self.settings
        if settings is None:
            return problems
        dealer_id = row.get("dealer_id")
        if self.aggregate:
            if dealer_id is None:
                problems.append(("", "needs a dealer_id in aggregate scope (a dealer_id field/column or --dealer-id)"))
            elif dealer_id not in self.rooftops:
                problems.append(("/dealer_id", "is not a dealer_id of any [[dealers]] table"))
            if "vehicle_id" not in row:
                problems.append(("", "needs a vehicle_id in aggregate scope"))
            rooftops = self.rooftops.get(dealer_id, set())
        else:
            if dealer_id is not None and dealer_id != settings.dealer.dealer_id:
                problems.append(("/dealer_id", "does not match dealer.dealer_id of the configuration"))
            rooftops = self.rooftops[settings.dealer.dealer_id]
        rooftop = row.get("rooftop")
        if isinstance(rooftop, str) and rooftop not in rooftops and (not self.aggregate or dealer_id in self.rooftops):
            problems.append(("/rooftop", "is not the name of a rooftop of this dealer"))
        currency = row.get("currency", "USD")
        if isinstance(currency, str) and currency not in self.currencies:
            problems.append(
                (
                    "/currency" if "currency" in row else "",
                    f"{currency} listings cannot be searched: search.currencies is {sorted(self.currencies)}",
                )
            )
        for i, entry in enumerate(row.get("feature_evidence") or ()):
            code = entry.get("code") if isinstance(entry, dict) else None
            if isinstance(code, str) and code not in self.codes:
                problems.append((f"/feature_evidence/{i}/code", "is not in the configured [[features]] vocabulary"))
        return problems


class _Duplicates:
    """Listing identities seen so far: vehicle_id per feed, VIN and stock per dealer."""

    def __init__(self) -> None:
        self.vehicle_ids: dict[str, int] = {}
        self.vins: dict[tuple[Any, str], int] = {}
        self.stocks: dict[tuple[Any, str], int] = {}

    def check(self, row: dict[str, Any], line: int) -> list[tuple[str, str]]:
        dealer = row.get("dealer_id")
        vehicle_id, vin, stock = row.get("vehicle_id"), row.get("vin"), row.get("stock")
        first: list[tuple[str, int]] = []  # (field, line that first had the value)
        if isinstance(vehicle_id, str):
            first.append(("vehicle_id", self.vehicle_ids.setdefault(vehicle_id, line)))
        if isinstance(vin, str):
            first.append(("vin", self.vins.setdefault((dealer, vin), line)))
        if isinstance(stock, str):
            first.append(("stock", self.stocks.setdefault((dealer, stock), line)))
        return [
            (f"/{field}", f"duplicates the {field} of line {earlier}") for field, earlier in first if earlier != line
        ]


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
