"""How large one AAP request may be: a cheap structural check that runs before validation.

The seed's request schemas leave most arrays and strings unbounded (``filters.make``,
``features_all``, ``Vehicle.features``...), so a body under the 1 MiB cap can carry
100,000 filter values. Explaining why each one is wrong, or searching for all of them,
costs seconds of CPU (docs/search.md, "Request bounds"). These bounds are the project's,
far beyond any real request (a search is about 30 JSON values, a lead about 80):

- every array holds at most :attr:`Bounds.items` items and every object at most as
  many members (keywords ``maxItems``, ``maxProperties``);
- every string is at most :attr:`Bounds.string` characters (``maxLength``) and every
  member name at most :attr:`Bounds.name` (``propertyNames``);
- values nest at most :attr:`Bounds.depth` deep and a request holds at most
  :attr:`Bounds.values` JSON values in all (``maxDepth``, ``maxValues``).

The walk visits at most ``values`` values and never descends into a container that is
over its bound, so it costs the same for any body: far less than the 20 ms budget of a
refusal. A request over a bound is refused with these problems only; nothing else about
it is looked at. Where the seed sets a tighter bound (``filters.query`` at 200
characters), the schema keeps reporting it. Pointers are built only for problems, and
never quote a value (a member name over the bound is reported at its object).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aap.errors import Problem, problem
from aap.util import pointer


@dataclass(frozen=True)
class Bounds:
    """The structural limits of one request (docs/search.md, "Request bounds")."""

    items: int = 100
    string: int = 10_000
    name: int = 200
    depth: int = 16
    values: int = 1_000
    #: Problems listed at most (the walk stops there; each one costs a pointer).
    problems: int = 50


REQUEST_BOUNDS = Bounds()


def _pointer(path: tuple[Any, ...]) -> str:
    # path is a linked list (parent, segment): rebuilt only for a problem
    segments: list[Any] = []
    while path:
        path, segment = path
        segments.append(segment)
    return pointer.build(reversed(segments))


def within(instance: Any, bounds: Bounds = REQUEST_BOUNDS) -> bool:
    """True exactly when :func:`bound_problems` finds nothing: the same walk, without the paths.

    Nearly every request is within its bounds, so this is what each one costs: a recursion
    that stops at the first bound exceeded (at most ``depth`` calls deep, ``values`` values).
    """
    return _left(instance, 0, bounds.values, bounds) >= 0


def _left(value: Any, depth: int, left: int, bounds: Bounds) -> int:
    """How many more values may follow ``value`` and what it holds; negative past a bound."""
    left -= 1
    if left < 0:
        return -1
    if isinstance(value, str):
        return left if len(value) <= bounds.string else -1
    if isinstance(value, dict):
        if depth >= bounds.depth or len(value) > bounds.items:
            return -1
        for key, member in value.items():
            if not isinstance(key, str) or len(key) > bounds.name:
                return -1
            left = _left(member, depth + 1, left, bounds)
            if left < 0:
                return -1
    elif isinstance(value, list):
        if depth >= bounds.depth or len(value) > bounds.items:
            return -1
        for item in value:
            left = _left(item, depth + 1, left, bounds)
            if left < 0:
                return -1
    return left


def bound_problems(instance: Any, bounds: Bounds = REQUEST_BOUNDS) -> list[Problem]:
    """Every bound ``instance`` exceeds (empty when within them), in document order."""
    return [] if within(instance, bounds) else _problems(instance, bounds)


def _problems(instance: Any, bounds: Bounds) -> list[Problem]:
    """The walk that lists the problems, each at its place (tests/test_request_bounds.py checks
    that it finds some exactly when :func:`within` says no)."""
    found: list[Problem] = []
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(instance, (), 0)]
    seen = 0
    while stack:
        value, path, depth = stack.pop()
        seen += 1
        if seen > bounds.values:
            found.append(
                problem(
                    "",
                    "maxValues",
                    f"must hold at most {bounds.values} JSON values in all (this endpoint's bound on one request)",
                )
            )
            break
        if isinstance(value, str):
            if len(value) > bounds.string:
                found.append(
                    problem(
                        _pointer(path),
                        "maxLength",
                        f"must be at most {bounds.string} characters long (this endpoint's bound)",
                    )
                )
        elif isinstance(value, (dict, list)):
            if depth >= bounds.depth:
                found.append(
                    problem(
                        _pointer(path), "maxDepth", f"nests deeper than {bounds.depth} levels (this endpoint's bound)"
                    )
                )
            elif isinstance(value, dict):
                if len(value) > bounds.items:
                    found.append(
                        problem(
                            _pointer(path),
                            "maxProperties",
                            f"must have at most {bounds.items} properties (this endpoint's bound)",
                        )
                    )
                elif any(not isinstance(k, str) or len(k) > bounds.name for k in value):
                    found.append(
                        problem(
                            _pointer(path),
                            "propertyNames",
                            f"has a property name longer than {bounds.name} characters (this endpoint's bound)",
                        )
                    )
                else:
                    members = list(value.items())
                    stack.extend((v, (path, k), depth + 1) for k, v in reversed(members))
            elif len(value) > bounds.items:
                found.append(
                    problem(
                        _pointer(path), "maxItems", f"must have at most {bounds.items} items (this endpoint's bound)"
                    )
                )
            else:
                stack.extend((v, (path, i), depth + 1) for i, v in reversed(list(enumerate(value))))
        if len(found) >= bounds.problems:
            break
    return found
