"""Bounded memoisation: values made on first use, at most one maker per key, the oldest dropped.

Every derived value a process keeps (the posting index's range bitmaps and bucket prices, facet
counts per inventory version, verified token signatures, fetched client metadata, compiled
templates) is kept in a :class:`Memo` owned by the object that derives it, never in module state.

``get(key, make)`` makes a missing value once: the first caller makes it, callers wanting the
same key meanwhile wait for that one result (or its exception) instead of making it again, and a
caller wanting *another* key never waits for it — each key in the making has its own future, and
the lock is held only to look up and to store, never while a value is made. A failure is not
kept and not shared: it is raised to the caller whose ``make`` failed, and a caller that was
waiting for that value makes it itself (each caller keeps its own errors and time budget).

Past ``kept`` values the oldest is dropped: the first stored (``lru=False``), or the least
recently read (``lru=True``, for caches whose hits should keep an entry). A hit on a value
already made takes no lock when ``lru`` is off (a dict read is atomic in CPython).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING = object()


class Memo(Generic[K, V]):
    """At most ``kept`` values by key, each made once (see the module docstring)."""

    def __init__(self, kept: int, *, lru: bool = False) -> None:
        if kept < 1:
            raise ValueError("a memo keeps at least one value")
        self.kept = kept
        self.lru = lru
        self._values: OrderedDict[K, V] = OrderedDict()
        self._making: dict[K, tuple[Future[V], int]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` if no one has made it yet.

        ``make`` runs on the calling thread without the lock held; it must not ask this memo
        for the same key (that would wait for itself: it raises RuntimeError instead).
        """
        found = self._values.get(key, _MISSING)
        if found is not _MISSING and not self.lru:
            return cast(V, found)
        me = threading.get_ident()
        while True:
            with self._lock:
                found = self._values.get(key, _MISSING)
                if found is not _MISSING:
                    if self.lru:
                        self._values.move_to_end(key)
                    return cast(V, found)
                making = self._making.get(key)
                if making is None:
                    future: Future[V] = Future()
                    self._making[key] = (future, me)
                    break
            waited, maker = making
            if maker == me:
                raise RuntimeError("a memo's value asked for itself while being made")
            try:
                return waited.result()
            except BaseException:
                if waited.done():  # the maker failed: its error is its own; try again
                    continue
                raise
        try:
            value = make()
        except BaseException as exc:
            with self._lock:
                del self._making[key]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._making[key]
            self._store(key, value)
        future.set_result(value)
        return value

    def peek(self, key: K) -> V | None:
        """The value of ``key`` if it is kept (a read: under ``lru`` it counts as a use), else None."""
        with self._lock:
            found = self._values.get(key, _MISSING)
            if found is _MISSING:
                return None
            if self.lru:
                self._values.move_to_end(key)
            return cast(V, found)

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` (replacing what was kept), dropping the oldest past ``kept``."""
        with self._lock:
            self._store(key, value)

    def discard(self, key: K) -> None:
        with self._lock:
            self._values.pop(key, None)

    def _store(self, key: K, value: V) -> None:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self.kept:
            self._values.popitem(last=False)

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values
