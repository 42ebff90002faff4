"""Feed formats as data: which source column becomes which AAP field, through which transform.

A format is a TOML table (docs/feeds.md, "Mapping files"); the built-in ones
(``google-vehicle``, ``meta-vehicle``, ``dealer-csv``) ship in this package (``*.toml``)
and a dealer's ``--mapping FILE`` is read by the same :func:`parse_format`,
optionally ``extends``-ing a built-in one::

    extends = "dealer-csv"
    [columns]
    "Kilometrage" = { field = "mileage", unit = "km" }
    "Prix" = { field = "price", decimal = "," }
    "Couleur" = "exterior_color"
    [defaults]
    currency = "CAD"

Column names are matched without regard to case, spaces or punctuation
(``Stock #`` = ``stock``, ``certified_pre-owned`` = ``certified_pre_owned``);
``[*]`` in a name stands for any index (``image[*].url``). When several
columns feed one field, the one listed first that has a value wins; list
fields (``photos``, ``features``) take every column's items in order.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from aap.config.table import Problems, Table
from aap.inventory.formats.transforms import TRANSFORMS, Options, Transform
from aap.inventory.listing_rules import COLUMNS, COMPUTED_FIELDS

BUILT_IN: tuple[str, ...] = ("google-vehicle", "meta-vehicle", "dealer-csv")

#: Fields a column may feed besides the InventoryListing ones.
CERTIFIED = "certified"  # yes/no: a used vehicle becomes ``cpo``
OTHER = "other_attributes."  # prefix: ``other_attributes.final_drive``
LIST_FIELDS = frozenset({"photos", "features"})
SCALAR, LIST, FLAG, ATTRIBUTE = 0, 1, 2, 3  # what a target does with its value

#: The transform a field gets when the table names none.
DEFAULT_TRANSFORMS: dict[str, str] = {
    "vin": "vin",
    "year": "integer",
    "msrp": "money",
    "price": "money",
    "list_price": "money",
    "mileage": "mileage",
    "mileage_unit": "unit",
    "condition": "condition",
    "status": "status",
    "rooftop": "rooftop",
    "currency": "upper",
    "displacement_cc": "integer",
    "city_mpg": "integer",
    "highway_mpg": "integer",
    "electric_range_mi": "number",
    "battery_kwh": "number",
    "motor_power_hp": "number",
    "dc_fast_charge": "boolean",
    "photos": "photos",
    "features": "list",
    "fees": "json",
    "feature_evidence": "json",
    "other_attributes": "json",
    "inventory_date": "date",
    "updated_at": "datetime",
    "vdp_url": "url",
    CERTIFIED: "boolean",
}
UNKNOWN_POLICIES = ("other_attributes", "ignore", "error")
_OPTION_KEYS = ("unit", "decimal", "separator", "order", "insecure", "values", "otherwise")


def squash(name: str) -> str:
    """A column name as matched: lower case, letters and digits only."""
    return "".join(ch for ch in name.casefold() if ch.isalnum())


def attribute_key(name: str) -> str:
    """An unknown column's key in ``other_attributes``: ``Key Features`` -> ``key_features``."""
    return re.sub(r"[^0-9a-z]+", "_", name.casefold()).strip("_") or "column"


def _pattern(name: str) -> re.Pattern[str] | None:
    """``image[*].url`` -> a regex over squashed names; None for a plain name."""
    if "*" not in name:
        return None
    parts = re.split(r"\[\*\]|\*", name)
    return re.compile("(?:\\d+|.*?)".join(re.escape(squash(p)) for p in parts) + r"\Z")


@dataclass(frozen=True)
class Target:
    """One field a column feeds: the field, its transform and options, and its rank."""

    field: str
    transform: Transform
    transform_name: str
    options: Options
    rank: int
    is_list: bool = False  # photos, features: every column's items are kept
    maps_values: bool = False  # the options carry a ``values`` table
    kind: int = 0  # SCALAR, LIST, FLAG (certified) or ATTRIBUTE (other_attributes.<key>)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_list", self.field in LIST_FIELDS)
        object.__setattr__(self, "maps_values", bool(self.options.values))
        kind = (
            LIST
            if self.field in LIST_FIELDS
            else FLAG
            if self.field == CERTIFIED
            else ATTRIBUTE
            if self.field.startswith(OTHER)
            else SCALAR
        )
        object.__setattr__(self, "kind", kind)


@dataclass(frozen=True)
class FeedFormat:
    """A format table: columns, ignored columns, defaults, and how to read the file."""

    name: str
    title: str = ""
    columns: dict[str, tuple[Target, ...]] = field(default_factory=dict)  # squashed name ->
    patterns: tuple[tuple[re.Pattern[str], tuple[Target, ...]], ...] = ()
    ignored: frozenset[str] = frozenset()
    ignored_patterns: tuple[re.Pattern[str], ...] = ()
    unknown: str = "other_attributes"
    defaults: dict[str, Any] = field(default_factory=dict)
    rooftops: dict[str, str] = field(default_factory=dict)  # casefolded store code -> rooftop name
    detect: frozenset[str] = frozenset()  # squashed columns that point at it
    xml_item: str | None = None  # the element holding one listing
    indexed: frozenset[str] = frozenset()  # XML elements numbered like image[0]
    json_columns: frozenset[str] = frozenset()  # columns whose cells may hold JSON
    encoding: str | None = None
    delimiter: str | None = None
    source: str = "built-in"

    def targets(self, column: str) -> tuple[Target, ...] | None:
        """What ``column`` feeds: targets, ``()`` when ignored, None when unknown."""
        key = squash(column)
        found = self.columns.get(key)
        if found is not None:
            return found
        if key in self.ignored:
            return ()
        for pattern, targets in self.patterns:
            if pattern.match(key):
                return targets
        if any(p.match(key) for p in self.ignored_patterns):
            return ()
        return None

    def recognises(self, columns: Iterable[str]) -> int:
        """How many of ``columns`` this format knows, mapped or ignored (auto-detection)."""
        return sum(1 for c in columns if self.targets(c) is not None)


class MappingError(ValueError):
    """An unusable format table or mapping file; ``problems`` lists every ``path: message``."""

    def __init__(self, problems: list[str], source: str) -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(problems))


def _field_problem(name: str) -> str | None:
    if name in COMPUTED_FIELDS:
        return f"{name} is computed by the search and cannot be imported"
    if name in COLUMNS or name == CERTIFIED:
        return None
    if name.startswith(OTHER) and len(name) > len(OTHER):
        return None
    return f"{name!r} is not an InventoryListing field (nor {CERTIFIED!r} or 'other_attributes.<key>')"


def _target(raw: Any, table: Table, key: str, rank: int) -> Target | None:
    """One ``[columns]`` value: ``"field"`` or ``{ field = ..., transform = ..., <options> }``."""
    if isinstance(raw, str):
        raw = {"field": raw}
    if not isinstance(raw, dict):
        table.problem(key, "must be a field name or a table { field = ..., transform = ... }")
        return None
    spec = Table(raw, table.at(key), table.problems)
    name = spec.string("field", required=True)
    if name is None:
        spec.finish()
        return None
    problem = _field_problem(name)
    if problem:
        spec.problem("field", problem)
    base = "text" if name.startswith(OTHER) else DEFAULT_TRANSFORMS.get(name, "text")
    transform_name = spec.string("transform", base, choices=tuple(TRANSFORMS))
    values = spec.raw("values", None)
    mapped: dict[str, str] = {}
    if values is not None:
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            spec.problem("values", "must be a table of strings (cell value = replacement)")
        else:
            mapped = {str(k).strip().casefold(): v for k, v in values.items()}
    options = Options(
        unit=spec.string("unit", None, choices=("mi", "km")),
        decimal=spec.string("decimal", ".", choices=(".", ",")),
        separator=spec.raw("separator", None) if isinstance(spec.data.get("separator"), str) else None,
        order=spec.string("order", "mdy", choices=("mdy", "dmy")),
        insecure=spec.string("insecure", "upgrade", choices=("upgrade", "drop")),
        values=mapped,
        otherwise=spec.string("otherwise", None),
    )
    if "separator" in spec.data and not isinstance(spec.data["separator"], str):
        spec.problem("separator", "must be a string")
    spec.finish()
    if problem:
        return None
    return Target(name, TRANSFORMS[transform_name], transform_name, options, rank)


def parse_format(
    doc: dict[str, Any], source: str, *, built_in: bool = False, formats: Formats | None = None
) -> FeedFormat:
    """A format table (a parsed TOML document), or a :class:`MappingError` listing every problem.

    ``formats`` gives the built-in table an ``extends`` names (else it is parsed here).
    """
    problems = Problems()
    root = Table(doc, "", problems)
    base: FeedFormat | None = None
    extends = root.string("extends", None, choices=BUILT_IN)
    if extends is not None:
        base = formats.get(extends) if formats is not None else builtin_format(extends)
    name = root.string("name", None) if built_in else None
    title = root.string("title", "") if built_in else ""
    unknown = root.string("unknown", base.unknown if base else "other_attributes", choices=UNKNOWN_POLICIES)
    encoding = root.string("encoding", base.encoding if base else None)
    if encoding is not None:
        try:
            "".encode(encoding)
        except LookupError:
            root.problem("encoding", f"unknown encoding {encoding!r}")
            encoding = None
    delimiter = root.raw("delimiter", None)
    if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
        root.problem("delimiter", "must be one character")
        delimiter = None
    delimiter = delimiter if delimiter is not None else (base.delimiter if base else None)

    columns: dict[str, tuple[Target, ...]] = {}
    patterns: list[tuple[re.Pattern[str], tuple[Target, ...]]] = []
    table = root.table("columns")
    for rank, (column, raw) in enumerate(list(table.data.items())):
        table.raw(column)
        items = raw if isinstance(raw, list) else [raw]
        targets = tuple(t for t in (_target(item, table, column, rank) for item in items) if t)
        if len(targets) != len(items):
            continue
        pattern = _pattern(column)
        if pattern is not None:
            patterns.append((pattern, targets))
        else:
            columns[squash(column)] = targets
    table.finish()
    ignored_names = root.strings("ignore", (), min_items=0)
    defaults = dict(base.defaults) if base else {}
    default_table = root.table("defaults")
    for key, value in list(default_table.data.items()):
        default_table.raw(key)
        problem = _field_problem(key)
        if problem or key == CERTIFIED or key.startswith(OTHER):
            default_table.problem(key, problem or "cannot have a default")
        elif not isinstance(value, (str, int, float, bool)):
            default_table.problem(key, "must be a string, number or boolean")
        else:
            defaults[key] = value
    default_table.finish()
    rooftops = dict(base.rooftops) if base else {}
    rooftop_table = root.table("rooftops")
    for code, value in list(rooftop_table.data.items()):
        rooftop_table.raw(code)
        if isinstance(value, str) and value.strip():
            rooftops[code.strip().casefold()] = value
        else:
            rooftop_table.problem(code, "must be a rooftop name")
    rooftop_table.finish()
    detect = frozenset(squash(c) for c in root.strings("detect", (), min_items=0)) if built_in else frozenset()
    xml = root.table("xml")
    xml_item = xml.string("item", base.xml_item if base else None)
    indexed = frozenset(xml.strings("indexed", (), min_items=0)) | (base.indexed if base else frozenset())
    json_columns = frozenset(squash(c) for c in xml.strings("json_columns", (), min_items=0))
    xml.finish()
    root.finish()
    if problems:
        raise MappingError(problems.render(), source)

    if base is not None:  # the file's own columns rank before the base format's
        shift = len(columns) + len(patterns)
        merged = {k: tuple(replace(t, rank=t.rank + shift) for t in v) for k, v in base.columns.items()}
        merged.update(columns)
        columns = merged
        patterns += [(p, tuple(replace(t, rank=t.rank + shift) for t in ts)) for p, ts in base.patterns]
    ignored = {squash(n) for n in ignored_names if "*" not in n}
    ignored_patterns = tuple(p for p in (_pattern(n) for n in ignored_names) if p is not None)
    return FeedFormat(
        name=name or (f"mapping ({extends})" if extends else "mapping"),
        title=title,
        columns=columns,
        patterns=tuple(patterns),
        ignored=frozenset(ignored) | (base.ignored if base else frozenset()),
        ignored_patterns=ignored_patterns + (base.ignored_patterns if base else ()),
        unknown=unknown,
        defaults=defaults,
        rooftops=rooftops,
        detect=detect,
        xml_item=xml_item,
        indexed=indexed,
        json_columns=json_columns | (base.json_columns if base else frozenset()),
        encoding=encoding,
        delimiter=delimiter,
        source=source if not built_in else "built-in",
    )


def builtin_format(name: str) -> FeedFormat:
    """The built-in format ``name``, parsed from its packaged table (a few hundred microseconds)."""
    if name not in BUILT_IN:
        raise KeyError(name)
    text = resources.files("aap.inventory.formats").joinpath(f"{name}.toml").read_text("utf-8")
    return parse_format(tomllib.loads(text), f"formats/{name}.toml", built_in=True)


class Formats:
    """The built-in formats, each parsed when first asked for and kept by this object's owner.

    Whoever reads feeds makes one and passes it down (an import's
    :class:`~aap.inventory.formats.reader.ReadOptions`, a scheduler); there is no
    module-level cache, so nothing is shared between two agents in one process.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, FeedFormat] = {}

    def get(self, name: str) -> FeedFormat:
        """The built-in format ``name`` (a :class:`KeyError` for an unknown one)."""
        found = self._parsed.get(name)
        if found is None:
            found = self._parsed[name] = builtin_format(name)
        return found


#: A mapping file larger than this is refused before it is parsed.
MAX_MAPPING_BYTES = 1 << 20
#: Tables and arrays nested deeper than this are refused (a mapping needs three levels).
MAX_MAPPING_DEPTH = 8


def _depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (stops counting past ``limit``)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def read_mapping(path: str, formats: Formats | None = None) -> FeedFormat:
    """A dealer's mapping file, or a :class:`MappingError` listing its problems (docs/feeds.md,
    "Mapping files"): unreadable, too large, not UTF-8, not TOML, nested too deep, or the table's."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_MAPPING_BYTES + 1)
    except OSError as exc:
        raise MappingError([f"cannot be read ({exc.strerror})"], path) from None
    if len(raw) > MAX_MAPPING_BYTES:
        raise MappingError([f"is larger than {MAX_MAPPING_BYTES >> 20} MiB"], path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MappingError([f"is not UTF-8 text (byte {exc.start} is not valid)"], path) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError([f"(syntax): {exc}"], path) from None
    except RecursionError:
        raise MappingError([f"nests tables or arrays more than {MAX_MAPPING_DEPTH} deep"], path) from None
    if _depth(doc, MAX_MAPPING_DEPTH) > MAX_MAPPING_DEPTH:
        raise MappingError([f"nests tables or arrays more than {MAX_MAPPING_DEPTH} deep"], path)
    return parse_format(doc, path, formats=formats)
