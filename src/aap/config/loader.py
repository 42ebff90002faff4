"""Read a deployment's TOML file into :class:`~aap.config.model.Settings`.

Every problem is collected with its TOML path (``dealer.rooftops[1].timezone``)
and reported at once in one :class:`ConfigError`, so an operator fixes a file in
one pass instead of one error per restart. Array indexes in paths count from 0.

Each top-level table is read by a parser registered in :data:`SECTIONS`. A
subsystem's section (``[mcp]``, ``[leads]``, ``[poppy]``) lives in that
subsystem's settings module: its dataclass, a ``parse_<name>_section(table,
problems)`` built on :class:`Table`, and one module-level
:func:`register_section` call; the module is listed in :data:`SECTION_MODULES`.
Tables and keys nobody registered are rejected, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import importlib
import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aap.config.model import (
    ALL_FILTERS,
    ALL_SORT_FIELDS,
    WEEKDAYS,
    AgentIdentity,
    DealerProfile,
    Feature,
    RateLimit,
    SearchCapabilities,
    Settings,
)

#: Environment variables that override one TOML key each (after the file, before ``overrides``).
ENV_OVERRIDES: dict[str, str] = {
    "AAP_DATABASE_URL": "database",
    "AAP_PUBLIC_URL": "public_url",
}

DEMO_CONFIG = "demo.toml"
TEMPLATE_CONFIG = "template.toml"

_MISSING = object()
_FEATURE_CODE = re.compile(r"^[a-z][a-z0-9_]*$")
_INDEX = re.compile(r"\[\d+\]")


class ConfigError(Exception):
    """An unusable configuration; ``problems`` holds every ``"path: message"`` found."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} configuration problem(s){where}:\n{lines}")


# -- problem collection ---------------------------------------------------------


class Problems:
    """Problems found so far, each tied to a TOML path."""

    def __init__(self, origins: Mapping[str, str] | None = None) -> None:
        self.items: list[tuple[str, str]] = []
        self.origins = dict(origins or {})  # path -> where an overriding value came from

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def has(self, path: str) -> bool:
        return any(p == path for p, _ in self.items)

    def __len__(self) -> int:
        return len(self.items)

    def render(self) -> list[str]:
        out = []
        for path, message in self.items:
            origin = self.origins.get(path)
            label = f"{path} (from {origin})" if origin else (path or "(top level)")
            out.append(f"{label}: {message}")
        return out


def join(path: str, key: str | int) -> str:
    """``dealer`` + ``rooftops`` -> ``dealer.rooftops``; ``dealer.rooftops`` + 1 -> ``...[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def pointer_to_path(base: str, pointer: str) -> str:
    """A JSON pointer (``/rooftops/1/timezone``) below ``base`` as a TOML path."""
    path = base
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        path = join(path, int(token)) if token.isdigit() else join(path, token)
    return path


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean", int: "an integer", float: "a float", str: "a string",
        list: "an array", dict: "a table",
    }.get(type(value), "a date/time")


class Table:
    """One TOML table being read: typed getters that record problems instead of raising.

    Call :meth:`finish` once every known key was read; the keys left over are
    reported as unknown.
    """

    def __init__(self, data: Any, path: str, problems: Problems) -> None:
        if data is None:
            data = {}
        self.present = True
        if not isinstance(data, dict):
            problems.add(path, f"must be a table, not {_type_name(data)}")
            data = {}
        self.data: dict[str, Any] = data
        self.path = path
        self.problems = problems
        self._read: set[str] = set()

    @classmethod
    def absent(cls, path: str, problems: Problems) -> "Table":
        table = cls({}, path, problems)
        table.present = False
        return table

    def at(self, key: str | int) -> str:
        return join(self.path, key)

    def problem(self, key: str | None, message: str) -> None:
        self.problems.add(self.at(key) if key is not None else self.path, message)

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self._read.add(key)
        return self.data.get(key, default)

    def has(self, key: str) -> bool:
        return key in self.data

    def string(self, key: str, default: Any = None, *, required: bool = False,
               choices: Iterable[str] | None = None) -> Any:
        value = self.raw(key)
        if value is _MISSING:
            if required:
                self.problem(key, "is required")
            return default
        if not isinstance(value, str):
            self.problem(key, f"must be a string, not {_type_name(value)}")
            return default
        if not value.strip():
            self.problem(key, "must not be empty")
            return default
        if choices is not None and value not in choices:
            self.problem(key, f"must be one of {', '.join(map(repr, choices))}")
            return default
        return value

    def integer(self, key: str, default: int, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
        value = self.raw(key)
        if value is _MISSING:
            return default
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem(key, f"must be an integer, not {_type_name(value)}")
            return default
        if not self._in_range(key, value, "an integer", minimum, maximum):
            return default
        return value

    def number(self, key: str, default: float, *, minimum: float | None = None,
               maximum: float | None = None) -> float:
        """An integer or float, returned as a float (seconds, mostly)."""
        value = self.raw(key)
        if value is _MISSING:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            self.problem(key, f"must be a number, not {_type_name(value)}")
            return default
        if not self._in_range(key, value, "a number", minimum, maximum):
            return default
        return float(value)

    def _in_range(self, key: str, value: float, kind: str, minimum: float | None,
                  maximum: float | None) -> bool:
        """Report an out-of-range value once, naming both bounds when there are two."""
        low_ok = minimum is None or value >= minimum
        high_ok = maximum is None or value <= maximum
        if low_ok and high_ok:
            return True
        if minimum is not None and maximum is not None:
            self.problem(key, f"must be {kind} between {_num(minimum)} and {_num(maximum)}")
        elif not low_ok:
            self.problem(key, f"must be at least {_num(minimum)}")
        else:
            self.problem(key, f"must be at most {_num(maximum)}")
        return False

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, not {_type_name(value)}")
            return default
        return value

    def strings(self, key: str, default: Any, *, required: bool = False,
                choices: Iterable[str] | None = None, min_items: int = 1) -> Any:
        """An array of distinct strings, each among ``choices`` when given."""
        value = self.raw(key)
        if value is _MISSING:
            if required:
                self.problem(key, "is required")
            return default
        if not isinstance(value, list):
            self.problem(key, f"must be an array of strings, not {_type_name(value)}")
            return default
        allowed = tuple(choices) if choices is not None else None
        ok = True
        seen: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.problem(key, f"item {i} must be a string, not {_type_name(item)}")
                ok = False
            elif allowed is not None and item not in allowed:
                self.problem(key, f"unknown value {item!r}; allowed: {', '.join(allowed)}")
                ok = False
            elif item in seen:
                self.problem(key, f"{item!r} is listed twice")
                ok = False
            else:
                seen.add(item)
        if len(value) < min_items:
            self.problem(key, "must be a non-empty array" if min_items == 1
                         else f"needs at least {min_items} items")
            ok = False
        return tuple(value) if ok else default

    def url(self, key: str, default: Any = None, *, required: bool = False,
            https_only: bool = False, query: bool = False) -> Any:
        """An absolute http(s) URL (see :func:`url_problem`); ``query=True`` admits ``?a=b``."""
        value = self.string(key, _MISSING, required=required)
        if value is _MISSING:
            return default
        error = url_problem(value, https_only=https_only, query=query)
        if error:
            self.problem(key, error)
            return default
        return value

    def table(self, key: str, *, required: bool = False) -> "Table":
        value = self.raw(key)
        if value is _MISSING:
            if required:
                self.problem(key, "is required")
            return Table.absent(self.at(key), self.problems)
        return Table(value, self.at(key), self.problems)

    def tables(self, key: str, *, min_items: int = 0) -> Iterator["Table"]:
        """The items of an array of tables (``[[path.key]]``), in order.

        The array itself is checked at once; an item that is not a table is
        reported when iteration reaches it (so problems stay in file order)
        and skipped.
        """
        value = self.raw(key)
        header = f"[[{_INDEX.sub('', self.at(key))}]]"
        if value is _MISSING:
            value = []
        if not isinstance(value, list):
            self.problem(key, f"must be an array of tables ({header}), not {_type_name(value)}")
            value = []
        elif len(value) < min_items:
            self.problem(key, f"must be a non-empty array of tables ({header})" if min_items == 1
                         else f"needs at least {min_items} tables ({header})")
        return self._items(self.at(key), value)

    def _items(self, path: str, items: list[Any]) -> Iterator["Table"]:
        for i, item in enumerate(items):
            if isinstance(item, dict):
                yield Table(item, join(path, i), self.problems)
            else:
                self.problems.add(join(path, i), f"must be a table, not {_type_name(item)}")

    def finish(self) -> None:
        for key in self.data:
            if key not in self._read:
                self.problem(key, "unknown key")


def _num(value: float | None) -> str:
    """``86400`` rather than ``86400.0`` or ``1e+06`` in messages."""
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


def is_loopback_host(host: str | None) -> bool:
    """``localhost``, ``127.0.0.0/8`` or ``::1`` (bracketed or not)."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_problem(value: str, *, https_only: bool = False, query: bool = False) -> str | None:
    """Why ``value`` is not an absolute http(s) URL we may publish or call, or None.

    Plain ``http://`` is accepted only on a loopback host (local development):
    the AAP discovery documents are HTTPS-only everywhere else, and customer
    data never travels in clear text. A query is refused unless ``query`` (an
    endpoint we call may need one; a URL we publish must not); credentials and
    fragments always are (secrets never go in the file).
    """
    try:
        parts = urlsplit(value)
        parts.port  # raises ValueError on a malformed port
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http(s) URL"
    if (parts.query and not query) or parts.fragment or parts.username or parts.password:
        return ("must not carry a fragment or credentials" if query
                else "must not carry a query, fragment or credentials")
    if parts.scheme == "http" and (https_only or not is_loopback_host(parts.hostname)):
        return "must use https:// (plain http:// is allowed only on a loopback host)"
    return None


# -- the section registry -------------------------------------------------------

Parsed = dict[str, Any]  # Settings field name -> parsed value


@dataclass(frozen=True)
class Section:
    """How one top-level TOML table (or array of tables) becomes one Settings field."""

    name: str
    parse: Callable[[Any, Problems], Any]  # (Table | list[Table], problems) -> value
    fields: tuple[str, ...]  # one field: the value; several: a dict keyed by field
    array: bool = False  # ``[[name]]`` rather than ``[name]``


#: Top-level tables, by TOML name.
SECTIONS: dict[str, Section] = {}
#: Rules that look at several sections at once; they may fill in derived defaults.
RULES: list[Callable[[Parsed, Problems], None]] = []
#: The settings modules of optional subsystems; each registers its section when
#: imported (on the first load).
SECTION_MODULES: list[str] = [
    "aap.bindings.mcp_settings",
    "aap.leads.settings",
    "aap.poppy.settings",
]

_SETTINGS_FIELDS = {f.name for f in dataclasses.fields(Settings)}


def register_section(name: str, parse: Callable[[Any, Problems], Any], *,
                     field: str | tuple[str, ...] | None = None, array: bool = False) -> None:
    """Declare top-level table ``[name]``: ``parse(table, problems)`` returns Settings.<field>.

    The parser receives a :class:`Table` (an empty, ``present=False`` one when
    the file omits the section, so defaults live in one place) or, for
    ``array=True``, a list of them. With a tuple of fields the parser returns a
    dict holding each of them.
    """
    fields = (field or name,) if not isinstance(field, tuple) else field
    for target in fields:
        if target not in _SETTINGS_FIELDS:
            raise ValueError(f"Settings has no field {target!r} for section [{name}]")
    SECTIONS[name] = Section(name, parse, fields, array)


def register_rule(rule: Callable[[Parsed, Problems], None]) -> None:
    """Add a cross-section rule, run after every section was parsed."""
    RULES.append(rule)


def _import_section_modules() -> None:
    """Import the modules whose import registers their section."""
    for module in SECTION_MODULES:
        importlib.import_module(module)


# -- top-level keys -------------------------------------------------------------


def _parse_root(root: Table, parsed: Parsed) -> None:
    deployment_id = root.string("id", required=True)
    if deployment_id is not None and len(deployment_id) > 200:
        root.problem("id", "must be at most 200 characters")
    parsed["deployment_id"] = deployment_id
    parsed["public_url"] = root.url("public_url", required=True)
    database = root.string("database", "sqlite:///aap.db")
    if not database.startswith(("sqlite://", "postgresql://", "postgres://")):
        root.problem("database", "must be a sqlite:///path or postgresql:// URL")
    parsed["database_url"] = database
    parsed["tenant"] = root.string("tenant")


# -- [agent] ----------------------------------------------------------------------


def parse_agent(table: Table, problems: Problems) -> dict[str, Any]:
    """The agent's self-description; name and description default from the dealer (see rules)."""
    values: dict[str, Any] = {
        "name": table.string("name"),
        "description": table.string("description"),
        "version": table.string("version", "1.0.0"),
        "documentation_url": table.url("documentation_url"),
        "icon_url": table.url("icon_url"),
    }
    provider = table.table("provider")
    if provider.present:
        values["provider_organization"] = provider.string("organization", required=True)
        values["provider_url"] = provider.url("url", required=True)
        provider.finish()
    table.finish()
    return values


def _agent_defaults(parsed: Parsed, problems: Problems) -> None:
    values = parsed.get("agent") or {}
    dealer = parsed.get("dealer")
    dealer_name = dealer.name if dealer is not None else "AAP dealer"
    parsed["agent"] = AgentIdentity(
        name=values.get("name") or dealer_name,
        description=values.get("description") or (
            f"Auto Agent Protocol 3.1 agent of {dealer_name}: live vehicle inventory search, "
            "vehicle details and dealership information."
        ),
        version=values.get("version") or "1.0.0",
        provider_organization=values.get("provider_organization"),
        provider_url=values.get("provider_url"),
        documentation_url=values.get("documentation_url"),
        icon_url=values.get("icon_url"),
    )


# -- [search] ---------------------------------------------------------------------


def parse_search(table: Table, problems: Problems) -> SearchCapabilities:
    base = SearchCapabilities()
    scope = table.string("scope", base.scope, choices=("dealer", "aggregate"))
    currencies = table.strings("currencies", base.currencies, choices=("USD", "CAD"))
    default_currency = table.string("default_currency", base.default_currency,
                                    choices=("USD", "CAD"))
    unit = table.string("default_mileage_unit", base.default_mileage_unit, choices=("mi", "km"))
    default_limit = table.integer("default_limit", base.default_limit, minimum=1, maximum=100)
    max_limit = table.integer("max_limit", base.max_limit, minimum=1, maximum=100)
    offset = table.boolean("offset", base.offset)
    sort_fields = table.strings("sort_fields", base.sort_fields, choices=ALL_SORT_FIELDS)
    # The default honours every filter, except rooftop names on an aggregate endpoint
    # (ambiguous across sellers, so AAP requires rejecting them there).
    default_filters = tuple(f for f in base.filters if scope != "aggregate" or f != "rooftops")
    filters = table.strings("filters", default_filters, choices=ALL_FILTERS, min_items=0)
    default_sort = base.default_sort
    sort = table.table("default_sort")
    if sort.present:
        default_sort = (
            sort.string("field", base.default_sort[0], required=True, choices=ALL_SORT_FIELDS),
            sort.string("order", base.default_sort[1], required=True, choices=("asc", "desc")),
        )
        sort.finish()
    table.finish()

    if default_limit > max_limit:
        table.problem("default_limit", f"must not exceed max_limit ({max_limit})")
    if default_currency not in currencies:
        table.problem("default_currency", "must be one of search.currencies")
    if scope == "aggregate" and "rooftops" in filters:
        table.problem("filters", "'rooftops' is not allowed with scope = \"aggregate\" "
                                 "(rooftop names are ambiguous across dealers)")
    if "distance_mi" in sort_fields and "near" not in filters:
        table.problem("sort_fields", "'distance_mi' needs the 'near' filter in search.filters")
    if default_sort[0] == "distance_mi":
        table.problem("default_sort.field", "must not be 'distance_mi' "
                                            "(an unfiltered search has no origin)")
    elif default_sort[0] not in sort_fields:
        table.problem("default_sort.field", "must be one of search.sort_fields")

    capabilities = SearchCapabilities(
        scope=scope, filters=filters, sort_fields=sort_fields, default_sort=default_sort,
        default_limit=default_limit, max_limit=max_limit, offset=offset,
        currencies=currencies, default_currency=default_currency, default_mileage_unit=unit,
    )
    _schema_check(capabilities.to_json(), "inventory-capabilities", "search", problems)
    return capabilities


def _schema_check(instance: Any, schema: str, base: str, problems: Problems) -> None:
    """Report schema problems under ``base``, skipping paths already reported more precisely."""
    from aap.spec import validate

    already = {path for path, _ in problems.items}
    for error in validate(instance, schema):
        path = pointer_to_path(base, error.get("instanceLocation", ""))
        if path not in already and not any(p.startswith(path + ".") for p in already):
            problems.add(path, error.get("error", "is invalid"))


# -- [[features]] -----------------------------------------------------------------


def parse_features(tables: list[Table], problems: Problems) -> tuple[Feature, ...]:
    features: list[Feature] = []
    seen: dict[str, int] = {}
    for i, table in enumerate(tables):
        code = table.string("code", required=True)
        label = table.string("label", required=True)
        table.finish()
        if code is not None:
            if len(code) > 80 or not _FEATURE_CODE.match(code):
                table.problem("code", "must match ^[a-z][a-z0-9_]*$ (at most 80 characters)")
                code = None
            elif code in seen:
                table.problem("code", f"duplicates features[{seen[code]}].code")
                code = None
            else:
                seen[code] = i
        if label is not None and len(label) > 200:
            table.problem("label", "must be at most 200 characters")
            label = None
        if code is not None and label is not None:
            features.append(Feature(code, label))
    return tuple(features)


# -- [rate_limit] and [server] ----------------------------------------------------


def parse_rate_limit(table: Table, problems: Problems) -> RateLimit:
    base = RateLimit()
    limit = RateLimit(
        enabled=table.boolean("enabled", base.enabled),
        per_minute=table.integer("per_minute", base.per_minute, minimum=1),
        burst=table.integer("burst", base.burst, minimum=1),
    )
    table.finish()
    return limit


def parse_server(table: Table, problems: Problems) -> dict[str, int]:
    values = {
        "max_body_bytes": table.integer("max_body_bytes", 1_048_576, minimum=1024,
                                        maximum=64 * 1024 * 1024),
        "cursor_ttl_seconds": table.integer("cursor_ttl_seconds", 86_400, minimum=60),
        "count_timeout_ms": table.integer("count_timeout_ms", 0, minimum=0, maximum=60_000),
    }
    table.finish()
    return values


# -- [dealer] and [[dealers]] -----------------------------------------------------


def dealer_json(value: Any, path: str, problems: Problems) -> Any:
    """TOML → the JSON shape of DealerInformation: a day written ``"closed"`` becomes null."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key] = dealer_json(item, join(path, key), problems)
        return out
    if isinstance(value, list):
        return [dealer_json(item, join(path, i), problems) for i, item in enumerate(value)]
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        problems.add(path, "TOML dates and times are not allowed here; quote the value")
        return str(value)
    return value


def _close_days(info: dict[str, Any]) -> None:
    for rooftop in info.get("rooftops") or []:
        if not isinstance(rooftop, dict):
            continue
        for schedule in rooftop.get("schedules") or []:
            week = schedule.get("value") if isinstance(schedule, dict) else None
            if isinstance(week, dict):
                for day in WEEKDAYS:
                    if week.get(day) == "closed":
                        week[day] = None


def parse_dealer_profile(table: Table, problems: Problems, *, require_id: bool = False) -> DealerProfile | None:
    """One DealerInformation object, validated by the AAP schema plus the rules it cannot express."""
    path = table.path
    if not table.present:
        problems.add(path, "is required (the dealer profile: name and at least one rooftop)")
        return None
    before = len(problems)
    info = dealer_json(table.data, path, problems)
    _close_days(info)
    _schema_check(info, "dealer-information", path, problems)
    if require_id and "dealer_id" not in info:
        problems.add(join(path, "dealer_id"), "is required for every [[dealers]] entry")
    _check_rooftops(info, path, problems)
    return DealerProfile(info) if len(problems) == before else None


def _check_rooftops(info: dict[str, Any], path: str, problems: Problems) -> None:
    rooftops = info.get("rooftops")
    if not isinstance(rooftops, list):
        return
    names: dict[str, int] = {}
    for i, rooftop in enumerate(rooftops):
        if not isinstance(rooftop, dict):
            continue
        at = join(join(path, "rooftops"), i)
        name = rooftop.get("name")
        if isinstance(name, str):
            if name in names:
                problems.add(join(at, "name"), f"duplicates rooftops[{names[name]}].name "
                                               "(listings refer to rooftops by name)")
            else:
                names[name] = i
        tz = rooftop.get("timezone")
        if isinstance(tz, str) and not _valid_timezone(tz):
            problems.add(join(at, "timezone"), "unknown IANA timezone")
        _unique_names(rooftop.get("fees"), join(at, "fees"), "fee", problems)
        _unique_names(rooftop.get("schedules"), join(at, "schedules"), "schedule", problems)
        for j, schedule in enumerate(rooftop.get("schedules") or []):
            week = schedule.get("value") if isinstance(schedule, dict) else None
            if not isinstance(week, dict):
                continue
            for day in WEEKDAYS:
                hours = week.get(day)
                if (isinstance(hours, dict) and isinstance(hours.get("open"), str)
                        and isinstance(hours.get("close"), str)
                        and hours["open"] >= hours["close"]):
                    problems.add(join(join(join(join(at, "schedules"), j), "value"), day),
                                 "close must be later than open")


def _unique_names(items: Any, path: str, what: str, problems: Problems) -> None:
    if not isinstance(items, list):
        return
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            problems.add(join(join(path, i), "name"), f"duplicates {what} [{seen[name]}]; "
                                                      f"{what} names must be unique")
        else:
            seen[name] = i


def _valid_timezone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def parse_dealer(table: Table, problems: Problems) -> DealerProfile | None:
    return parse_dealer_profile(table, problems)


def parse_dealers(tables: list[Table], problems: Problems) -> tuple[DealerProfile, ...]:
    """The sellers of an aggregate endpoint, each with a distinct dealer_id."""
    profiles = []
    seen: dict[str, int] = {}
    for i, table in enumerate(tables):
        profile = parse_dealer_profile(table, problems, require_id=True)
        dealer_id = table.data.get("dealer_id")
        if isinstance(dealer_id, str):
            if dealer_id in seen:
                table.problem("dealer_id", f"duplicates dealers[{seen[dealer_id]}].dealer_id")
                continue
            seen[dealer_id] = i
        if profile is not None:
            profiles.append(profile)
    return tuple(profiles)


def _scope_rules(parsed: Parsed, problems: Problems) -> None:
    """Aggregate scope needs sellers with distinct ids; dealer scope has none."""
    search: SearchCapabilities = parsed["search"]
    dealers: tuple[DealerProfile, ...] = parsed["dealers"]
    dealers_reported = any(p == "dealers" or p.startswith("dealers[") for p, _ in problems.items)
    if search.scope != "aggregate":
        if dealers or dealers_reported:
            problems.add("dealers", "[[dealers]] is only allowed with search.scope = \"aggregate\"")
        return
    if not dealers and not dealers_reported:
        problems.add("dealers", "scope = \"aggregate\" needs at least one [[dealers]] "
                                "table (the sellers behind this endpoint)")
    dealer = parsed.get("dealer")
    if dealer is not None and dealer.dealer_id and any(
            p.dealer_id == dealer.dealer_id for p in dealers):
        problems.add("dealer.dealer_id", "must differ from every [[dealers]] dealer_id "
                                         "(the operator is not one of the sellers)")


# -- registration of the built-in sections ----------------------------------------

register_section("agent", parse_agent)
register_section("search", parse_search)
register_section("features", parse_features, array=True)
register_section("rate_limit", parse_rate_limit)
register_section("server", parse_server, field=("max_body_bytes", "cursor_ttl_seconds", "count_timeout_ms"))
register_section("dealer", parse_dealer)
register_section("dealers", parse_dealers, array=True)
register_rule(_agent_defaults)
register_rule(_scope_rules)


# -- loading ----------------------------------------------------------------------


def _apply_override(doc: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def parse_settings(doc: dict[str, Any], *, source: str | None = None,
                   overrides: Mapping[str, Any] | None = None,
                   environ: Mapping[str, str] | None = None) -> Settings:
    """Validate a parsed TOML document (plus env and explicit overrides) into Settings.

    ``overrides`` maps dotted TOML keys (``"database"``, ``"public_url"``,
    ``"search.max_limit"``) to values; they win over the environment, which wins
    over the file. ``None`` values are ignored.
    """
    _import_section_modules()
    doc = copy.deepcopy(doc)
    origins: dict[str, str] = {}
    env = os.environ if environ is None else environ
    for variable, key in ENV_OVERRIDES.items():
        value = env.get(variable)
        if value:
            _apply_override(doc, key, value)
            origins[key] = variable
    for key, value in (overrides or {}).items():
        if value is not None:
            _apply_override(doc, key, value)
            origins[key] = "override"

    problems = Problems(origins)
    root = Table(doc, "", problems)
    parsed: Parsed = {}
    _parse_root(root, parsed)
    for section in SECTIONS.values():
        if section.array:
            result = section.parse(list(root.tables(section.name)), problems)
        else:
            result = section.parse(root.table(section.name), problems)
        if len(section.fields) == 1:
            parsed[section.fields[0]] = result
        else:
            parsed.update({name: result[name] for name in section.fields})
    root.finish()
    for rule in RULES:
        rule(parsed, problems)
    if problems:
        raise ConfigError(problems.render(), source)
    return Settings(**parsed, source_path=source)


def read_toml(path: str) -> dict[str, Any]:
    """Parse a TOML file; unreadable or malformed files become a ConfigError."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(["(file): not found"], path) from None
    except OSError as exc:
        raise ConfigError([f"(file): cannot be read ({exc.strerror})"], path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"(syntax): {exc}"], path) from None


def packaged_toml(name: str) -> str:
    """Text of a TOML file shipped inside the ``aap.config`` package."""
    return resources.files("aap.config").joinpath(name).read_text(encoding="utf-8")


def load_settings(path: str | None = None, *, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Load ``path``, or the built-in demo dealer group when ``path`` is None."""
    if path is None:
        doc = tomllib.loads(packaged_toml(DEMO_CONFIG))
        return parse_settings(doc, source=None, overrides=overrides, environ=environ)
    doc = read_toml(path)
    return parse_settings(doc, source=str(path), overrides=overrides, environ=environ)
