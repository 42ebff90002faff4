"""Keyset paging in any order: a sort as segments, each one indexed query, and the cursor between pages.

The console pages leads and listings in several orders (newest, follow-up date,
status; price, mileage, days in stock). A page never skips rows by offset — an
offset sorts and throws away every row before the page — but starts after the
keys of the last row shown, so the hundredth page costs what the first does.

A sort is a sequence of :class:`Segment`\\ s: rows meeting the segment's
condition, in the order of its keys (the last key unique, so the order is
total). Values a key may lack come in a segment of their own after the others
(listings without a price after those with one, in both orders): SQLite and
PostgreSQL disagree on where ``NULL`` sorts, and a keyset cannot step over it.
A page that ends a segment goes on with the next.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

MAX_CURSOR = 1000  # characters of a cursor a link may carry


@dataclass(frozen=True)
class Segment:
    """The rows meeting ``where`` (SQL of the store's own words, never a caller's), in the order of
    ``keys``: (column, descending, type of its values: ``int`` or ``str``)."""

    where: str | None
    keys: tuple[tuple[str, bool, type], ...]

    @property
    def order(self) -> str:
        return ", ".join(f"{c} {'DESC' if d else 'ASC'}" for c, d, _ in self.keys)

    @property
    def columns(self) -> str:
        return ", ".join(c for c, _, _ in self.keys)


class BadCursor(ValueError):
    """A page cursor that was not made for this sort (edited, truncated, or from another page)."""


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: the segment, and the keys of the last row shown."""

    segment: int
    values: tuple[Any, ...]

    def encode(self) -> str:
        raw = orjson.dumps([self.segment, *self.values])
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, segments: Sequence[Segment]) -> Cursor:
        """The cursor ``text`` encodes for a sort of ``segments``; :class:`BadCursor` when it is not one."""
        if len(text) > MAX_CURSOR:
            raise BadCursor("too long")
        try:
            data = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError) as exc:
            raise BadCursor("unreadable") from exc
        if not isinstance(data, list) or not data or type(data[0]) is not int or not 0 <= data[0] < len(segments):
            raise BadCursor("no such segment")
        keys = segments[data[0]].keys
        values = tuple(data[1:])
        if len(values) != len(keys) or any(type(v) is not kind for (_, _, kind), v in zip(keys, values)):
            raise BadCursor("not this sort's keys")
        if any(type(v) is int and not -(2**63) <= v < 2**63 for v in values):
            raise BadCursor("a key out of range")
        return cls(data[0], values)


def after(segment: Segment, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The condition "after ``values``" in the segment's order, led by a range on its first key so
    that both backends walk that key's index from there."""
    tail, params = "", []
    for (column, descending, _), value in reversed(list(zip(segment.keys, values))):
        step = f"{column} {'<' if descending else '>'} ?"
        if not tail:
            tail, params = step, [value]
        else:
            tail, params = f"({step} OR ({column} = ? AND {tail}))", [value, value, *params]
    first, descending, _ = segment.keys[0]
    return f"{first} {'<=' if descending else '>='} ? AND {tail}", [values[0], *params]


#: A segment's keyset query (:func:`walk`): its rows ``(id, *keys)`` in its order, at most ``need``
#: of them, starting after a condition (SQL and its values; None: at the segment's first row).
SegmentRows = Callable[[Segment, tuple[str, list[Any]] | None, int], Sequence[Sequence[Any]]]


def walk(
    segments: Sequence[Segment], cursor: Cursor | None, limit: int, rows: SegmentRows
) -> tuple[list[Any], Cursor | None]:
    """The ids of one page (at most ``limit``) and the cursor of the next (None: the last page).

    The page starts in the cursor's segment, after its keys, and goes on with the next segments
    until it is full; one row more than the page tells whether another page follows. A segment a
    filter leaves out answers no rows."""
    picked: list[tuple[Any, Sequence[Any], int]] = []  # (id, keys, segment)
    for index in range(cursor.segment if cursor else 0, len(segments)):
        segment = segments[index]
        start = after(segment, cursor.values) if cursor is not None and index == cursor.segment else None
        picked += [(r[0], r[1:], index) for r in rows(segment, start, limit + 1 - len(picked))]
        if len(picked) > limit:
            break
    shown = picked[:limit]
    next_cursor = Cursor(shown[-1][2], tuple(shown[-1][1])) if len(picked) > limit and shown else None
    return [p[0] for p in shown], next_cursor
