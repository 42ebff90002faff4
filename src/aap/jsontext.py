"""JSON kept as the text it was stored as, until the wire or a reader needs it.

A listing document is stored as JSON text and answered as JSON text: decoding 25 of
them per search page only to encode them again is most of a search's own CPU
(docs/benchmarks.md, "The HTTP path"). A skill therefore puts :class:`StoredJson`
values in its response where it hands over a stored document as it is, and the two
sides of the seam decide what to do with them:

- the wire side writes the answer with :func:`encode`, which copies each stored text
  into the output unchanged (``orjson.Fragment``);
- a reader that wants plain values (the public page, the MCP SDK's path, tests) calls
  :func:`decoded`, which turns each one into the dicts and lists it holds.

The stored text is trusted to be one valid JSON value: the store wrote it with orjson.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

__all__ = ["StoredJson", "decoded", "encode"]


class StoredJson:
    """One JSON value as stored text (``str`` or UTF-8 ``bytes``)."""

    __slots__ = ("text",)

    def __init__(self, text: str | bytes) -> None:
        self.text = text

    def value(self) -> Any:
        """The value the text holds, decoded (a fresh object each time: the caller may change it)."""
        return orjson.loads(self.text)

    def __repr__(self) -> str:
        return f"StoredJson({len(self.text)} characters)"


def _fragment(value: Any) -> Any:
    if isinstance(value, StoredJson):
        return orjson.Fragment(value.text)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def encode(value: Any, *, option: int | None = None) -> bytes:
    """``value`` as JSON bytes, stored texts copied in unchanged (what ``orjson.dumps`` raises otherwise)."""
    if option is None:
        return orjson.dumps(value, default=_fragment)
    return orjson.dumps(value, default=_fragment, option=option)


def decoded(value: Any) -> Any:
    """``value`` with every :class:`StoredJson` inside replaced by what it holds.

    Containers without stored texts are returned as they are (no copy); only the dicts and
    lists on the way to a stored text are rebuilt.
    """
    if isinstance(value, StoredJson):
        return value.value()
    if isinstance(value, dict):
        return _rebuilt(value, value.items(), dict)
    if isinstance(value, list):
        return _rebuilt(value, enumerate(value), list)
    return value


def _rebuilt(container: Any, entries: Iterable[tuple[Any, Any]], copy: Callable[[Any], Any]) -> Any:
    """``container`` (a dict or list) with its ``(key or index, item)`` entries decoded: itself
    when none changed, else a ``copy`` with the changed ones replaced."""
    out = None
    for key, item in entries:
        plain = decoded(item)
        if plain is not item:
            if out is None:
                out = copy(container)
            out[key] = plain
    return container if out is None else out
