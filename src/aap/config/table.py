"""The TOML reader: one table at a time, every problem kept with its TOML path.

A section parser reads its table through :class:`Table`, whose typed getters
record a problem (``dealer.rooftops[1].timezone: unknown IANA timezone``)
instead of raising, so the loader can report every problem of a file at once
(array indexes in paths count from 0). :meth:`Table.finish` reports the keys
nobody read, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar, overload

from aap.config.urls import endpoint_url_problem, public_url_problem
from aap.spec import validate
from aap.util import pointer as json_pointer


class _Missing(enum.Enum):
    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING  # a key absent from the table (None is a default)
_T = TypeVar("_T")
_INDEX = re.compile(r"\[\d+\]")


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
    for token in json_pointer.tokens(pointer):
        path = join(path, int(token)) if json_pointer.is_index(token) else join(path, token)
    return path


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
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
    def absent(cls, path: str, problems: Problems) -> Table:
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

    def _typed(self, key: str, accepts: Callable[[Any], bool], expected: str, required: bool = False) -> Any:
        """The value at ``key`` if present and of the type ``accepts`` checks, else ``_MISSING``
        (with a problem: a wrong type always, an absent key when ``required``)."""
        value = self.raw(key)
        if value is _MISSING:
            if required:
                self.problem(key, "is required")
        elif not accepts(value):
            self.problem(key, f"must be {expected}, not {_type_name(value)}")
            return _MISSING
        return value

    @overload
    def string(self, key: str, *, required: bool = False, choices: Iterable[str] | None = None) -> str | None: ...

    @overload
    def string(
        self, key: str, default: _T, *, required: bool = False, choices: Iterable[str] | None = None
    ) -> str | _T: ...

    def string(
        self, key: str, default: object = None, *, required: bool = False, choices: Iterable[str] | None = None
    ) -> object:
        value = self._typed(key, lambda v: isinstance(v, str), "a string", required)
        if value is _MISSING:
            return default
        if not value.strip():
            self.problem(key, "must not be empty")
            return default
        if choices is not None and value not in choices:
            self.problem(key, f"must be one of {', '.join(map(repr, choices))}")
            return default
        return value

    def integer(self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._typed(key, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
        if value is _MISSING or not self._in_range(key, value, "an integer", minimum, maximum):
            return default
        return int(value)

    def number(self, key: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
        """An integer or float, returned as a float (seconds, mostly)."""
        value = self._typed(key, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number")
        if value is _MISSING or not self._in_range(key, value, "a number", minimum, maximum):
            return default
        return float(value)

    def _in_range(self, key: str, value: float, kind: str, minimum: float | None, maximum: float | None) -> bool:
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
        value = self._typed(key, lambda v: isinstance(v, bool), "true or false")
        return default if value is _MISSING else value

    def strings(
        self, key: str, default: _T, *, required: bool = False, choices: Iterable[str] | None = None, min_items: int = 1
    ) -> tuple[str, ...] | _T:
        """An array of distinct strings, each among ``choices`` when given."""
        value = self._typed(key, lambda v: isinstance(v, list), "an array of strings", required)
        if value is _MISSING:
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
            self.problem(key, "must be a non-empty array" if min_items == 1 else f"needs at least {min_items} items")
            ok = False
        return tuple(value) if ok else default

    @overload
    def url(self, key: str, *, required: bool = False, endpoint: bool = False) -> str | None: ...

    @overload
    def url(self, key: str, default: _T, *, required: bool = False, endpoint: bool = False) -> str | _T: ...

    def url(self, key: str, default: object = None, *, required: bool = False, endpoint: bool = False) -> object:
        """A URL the deployment publishes, or with ``endpoint=True`` one it calls
        (which may carry a query); see :mod:`aap.config.urls`."""
        value = self.string(key, _MISSING, required=required)
        if value is _MISSING:
            return default
        error = endpoint_url_problem(value) if endpoint else public_url_problem(value)
        if error:
            self.problem(key, error)
            return default
        return value

    def table(self, key: str, *, required: bool = False) -> Table:
        value = self.raw(key)
        if value is _MISSING:
            if required:
                self.problem(key, "is required")
            return Table.absent(self.at(key), self.problems)
        return Table(value, self.at(key), self.problems)

    def tables(self, key: str, *, min_items: int = 0) -> Iterator[Table]:
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
            self.problem(
                key,
                f"must be a non-empty array of tables ({header})"
                if min_items == 1
                else f"needs at least {min_items} tables ({header})",
            )
        return self._items(self.at(key), value)

    def _items(self, path: str, items: list[Any]) -> Iterator[Table]:
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


def schema_check(instance: Any, schema: str, base: str, problems: Problems) -> bool:
    """Check ``instance`` against a bundled AAP schema; report problems under ``base``.

    A path already reported (or one below it) is skipped: the parser's own
    message there is more precise. Returns whether the instance is valid.
    """
    already = {path for path, _ in problems.items}
    errors = validate(instance, schema)
    for error in errors:
        path = pointer_to_path(base, error.get("instanceLocation", ""))
        if path not in already and not any(p.startswith(path + ".") for p in already):
            problems.add(path, error.get("error", "is invalid"))
    return not errors
