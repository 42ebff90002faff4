"""One source record to one listing, through a format table, remembering where each value came from.

:class:`Converter` plans once per column layout (a delimited file has one;
XML records share plans by shape) which cell feeds which field, then turns
each record into an ``InventoryListing`` dict plus its *provenance*: for each
field, the source column and the cell as written, so a problem the AAP rules
find later (``/price: must be at least 0``) is reported against the column
and value the operator can find in the file.

Besides the table's columns: ``certified`` makes a used (or unstated)
condition ``cpo``; unknown columns go to ``other_attributes`` (or are ignored,
or refused, as the table says); the table's ``[defaults]`` fill absent fields;
``status`` defaults to ``available`` and ``updated_at`` to the feed's own time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.inventory.formats.mapping import (
    FLAG,
    LIST,
    OTHER,
    SCALAR,
    FeedFormat,
    Target,
    attribute_key,
    squash,
)
from aap.inventory.formats.transforms import TransformError, show

Problem = tuple[str, str, str | None, str | None]  # (JSON pointer, message, column, value)
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:")
_NO_ROOFTOPS: dict[str, str] = {}


class Converted:
    """A record turned into a listing (still to be checked against the AAP rules).

    It is also what a transform writes to besides its value (the ``Row``
    protocol of :mod:`.transforms`): warnings, and side values such as the
    currency of ``33995 USD``. ``origin`` maps a field (or ``photos/2``) to the
    source column and cell it came from.
    """

    __slots__ = (
        "line",
        "listing",
        "origin",
        "problems",
        "warnings",
        "failed",
        "defaulted",
        "strict",
        "rooftops",
        "column",
        "cell",
        "field",
    )

    def __init__(self, line: int, strict: bool = False, rooftops: Mapping[str, str] = _NO_ROOFTOPS) -> None:
        self.line = line
        self.listing: dict[str, Any] = {}
        self.origin: dict[str, tuple[str, str]] = {}
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.failed: set[str] = set()  # fields whose cell could not be read
        self.defaulted: list[str] = []
        self.strict = strict
        self.rooftops = rooftops
        self.column = ""  # the cell being transformed, for warnings
        self.cell = ""
        self.field = ""

    def warn(self, message: str) -> None:
        self.warnings.append(("/" + self.field, message, self.column, self.cell))

    def side(self, name: str, value: Any) -> None:
        listing = self.listing
        existing = listing.get(name)
        if existing is None:
            listing[name] = value
            self.origin[name] = (self.column, self.cell)
        elif existing != value:
            other = self.origin.get(name, ("", ""))[0]
            self.problems.append(
                ("/" + name, f'gives {name} {value}, but column "{other}" gives {existing}', self.column, self.cell)
            )


@dataclass(frozen=True)
class _Plan:
    """For one column layout: (position, column, targets) in rank order, and what is unknown."""

    entries: tuple[tuple[int, str, Target], ...]  # one per (column, target), in rank order
    unknown: tuple[tuple[int, str, str], ...]  # (position, column, other_attributes key)
    refused: tuple[str, ...]  # unknown columns when the table says "error"
    fields: frozenset[str] = frozenset()  # what the layout carries (see :func:`carried_fields`)


#: Fields a transform may set besides its own (the currency of ``33995 USD``, the unit of ``28,411 mi``).
SIDE_FIELDS: dict[str, tuple[str, ...]] = {"money": ("currency",), "mileage": ("mileage_unit",)}


def target_fields(target: Target) -> tuple[str, ...]:
    """The listing fields one target may set: its own (``certified`` sets the condition), and side fields."""
    own = "condition" if target.kind == FLAG else target.field
    return (own, *SIDE_FIELDS.get(target.transform_name, ()))


def carried_fields(fmt: FeedFormat, columns: Sequence[str]) -> frozenset[str]:
    """What a feed with these columns carries: the fields its columns (and the table's defaults) may set.

    ``other_attributes.<key>`` names one key of ``other_attributes``; ``status``
    and ``updated_at`` are always carried (they have defaults).
    """
    out = {"status", "updated_at", *fmt.defaults}
    for column in columns:
        targets = fmt.targets(column)
        if targets is None:
            if fmt.unknown == "other_attributes":
                out.add(OTHER + attribute_key(column))
            continue
        for target in targets:
            out.update(target_fields(target))
    return frozenset(out)


def _lenient_json(text: str) -> Any:
    """A JSON cell; also the unquoted-key objects some catalog exports write (``{city: "X"}``)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return orjson.loads(_BARE_KEY.sub(r'\1"\2":', text.replace("'", '"')))


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flatten(f"{prefix}[{index}]", item, out)
    elif value is not None:
        out.append((prefix, value if isinstance(value, str) else orjson.dumps(value).decode()))


class Converter:
    """Records to listings for one format; ``file_time`` is the default ``updated_at``."""

    def __init__(
        self,
        fmt: FeedFormat,
        *,
        file_time: str,
        strict: bool = False,
        rooftop_names: Sequence[str] = (),
        store_codes: Mapping[str, str] | None = None,
        default_rooftop: str | None = None,
    ) -> None:
        self.format = fmt
        self.file_time = file_time
        self.strict = strict
        names = {name.casefold(): name for name in rooftop_names}
        names.update(store_codes or {})  # the configuration's store codes (casefolded)
        names.update(fmt.rooftops)  # a mapping's [rooftops] win: the file is the more specific
        self.rooftops = names
        self.defaults = dict(fmt.defaults)
        if default_rooftop is not None:  # the feed's own default wins over the mapping's
            self.defaults["rooftop"] = default_rooftop
        self._plans: dict[tuple[str, ...], _Plan] = {}
        self.unknown_columns: dict[str, str] = {}  # column -> what happened to it
        self.defaults_used: dict[str, int] = {}
        #: What the feed carries (the union over its layouts): fields a later import leaves alone
        #: when its feed does not carry them (docs/feeds.md, "One car, one listing").
        self.carried: set[str] = set()

    def plan(self, columns: Sequence[str]) -> _Plan:
        key = tuple(columns)
        found = self._plans.get(key)
        if found is not None:
            return found
        entries: list[tuple[int, int, str, tuple[Target, ...]]] = []
        unknown: list[tuple[int, str, str]] = []
        refused: list[str] = []
        for position, column in enumerate(columns):
            targets = self.format.targets(column)
            if targets is None:
                if self.format.unknown == "other_attributes":
                    unknown.append((position, column, attribute_key(column)))
                    self.unknown_columns.setdefault(column, f"kept in other_attributes.{attribute_key(column)}")
                elif self.format.unknown == "error":
                    refused.append(column)
                else:
                    self.unknown_columns.setdefault(column, "ignored")
            elif targets:
                entries.append((min(t.rank for t in targets), position, column, targets))
        entries.sort(key=lambda e: (e[0], e[1]))
        flat = tuple((p, c, target) for _, p, c, targets in entries for target in targets)
        fields = carried_fields(self.format, columns) | self.defaults.keys()
        plan = _Plan(flat, tuple(unknown), tuple(refused), frozenset(fields))
        self._plans[key] = plan
        self.carried.update(fields)
        return plan

    def expand(self, pairs: list[tuple[str, str]], line: int) -> tuple[list[tuple[str, str]], list[Problem]]:
        """JSON cells of the table's ``json_columns`` as JSON-path columns (``image`` -> ``image[0].url``)."""
        if not self.format.json_columns:
            return pairs, []
        out: list[tuple[str, str]] = []
        problems: list[Problem] = []
        for column, value in pairs:
            stripped = value.strip()
            if stripped[:1] in ("[", "{") and squash(column) in self.format.json_columns:
                try:
                    _flatten(column, _lenient_json(stripped), out)
                except orjson.JSONDecodeError:
                    problems.append(("", "is not a JSON value", column, value))
                continue
            out.append((column, value))
        return out, problems

    def convert(self, plan: _Plan, cells: Sequence[str], line: int) -> Converted:
        """One record (cells in the plan's column order) as a listing."""
        out = Converted(line, self.strict, self.rooftops)
        listing = out.listing
        origin = out.origin
        certified = False
        for position, column, target in plan.entries:
            cell = cells[position]
            if not cell or cell.isspace():
                continue
            name = target.field
            kind = target.kind
            if kind == SCALAR and name in listing:
                continue  # a column listed earlier gave this field already
            out.column = column
            out.cell = cell
            out.field = name
            options = target.options
            try:
                value = target.transform(options.replace(cell) if target.maps_values else cell, options, out)
            except TransformError as exc:
                out.problems.append(("/" + name, str(exc), column, cell))
                out.failed.add(name)
                continue
            if value is None:
                continue
            if kind == SCALAR:
                listing[name] = value
                origin[name] = (column, cell)
            elif kind == LIST:
                items = listing.setdefault(name, [])
                for item in value:
                    if item not in items:
                        origin[f"{name}/{len(items)}"] = (column, cell)
                        items.append(item)
                origin.setdefault(name, (column, cell))
            elif kind == FLAG:
                certified = certified or bool(value)
            else:
                listing.setdefault("other_attributes", {})[name[len(OTHER) :]] = value
                origin.setdefault("other_attributes", (column, cell))
        if certified and listing.get("condition", "used") == "used":
            listing["condition"] = "cpo"
        for position, column, key in plan.unknown:
            cell = cells[position].strip()
            if cell:
                attributes = listing.setdefault("other_attributes", {})
                attributes.setdefault(key, cell)
                origin.setdefault(f"other_attributes/{key}", (column, cell))
        for name, value in self.defaults.items():
            if name not in listing and name not in out.failed:
                listing[name] = value
                out.defaulted.append(name)
        if "status" not in listing and "status" not in out.failed:
            listing["status"] = "available"
            out.defaulted.append("status")
        if "updated_at" not in listing and "updated_at" not in out.failed:
            listing["updated_at"] = self.file_time
            out.defaulted.append("updated_at")
        for name in out.defaulted:
            self.defaults_used[name] = self.defaults_used.get(name, 0) + 1
        return out

    def record(self, pairs: list[tuple[str, str]], line: int) -> Converted:
        """An XML (or JSON-expanded) record given as ``(column, value)`` pairs."""
        pairs, problems = self.expand(pairs, line)
        plan = self.plan([column for column, _ in pairs])
        out = self.convert(plan, [value for _, value in pairs], line)
        out.problems[:0] = problems
        return out


def describe(problem: Problem) -> str:
    """A problem as one line of text without its line number (for logs and rejects files)."""
    location, message, column, value = problem
    if column is None:
        return f"{location}: {message}" if location else message
    return f'column "{column}": {show(value or "")} {message}'
