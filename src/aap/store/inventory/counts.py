"""Search totals: exact or null, never an estimate (``InventorySearchResponse.total``, seed 004).

A count that was slow to make is remembered in ``inv_count`` for its inventory
version, so the next pages of a search, and every worker, reuse it; an import
forgets them all. With a count budget, a count that outruns it answers null and
finishes in the background, for the requests after it. See docs/search.md,
"Totals".
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Hashable

import orjson

from aap.store.db import Database, Tx
from aap.store.dialect import StatementTimeout
from aap.store.inventory.schema import read_version
from aap.store.inventory.sql import Clause

log = logging.getLogger("aap.inventory")

# A count that took this long is remembered for its inventory version.
REMEMBER_COUNT_MS = 20.0
# Background counts running at once, per process.
BACKGROUND_COUNTS = 2


def matching_key(where: Clause) -> str:
    """A remembered total's key: the matching set's SQL and parameters themselves, so a
    configuration change (rooftop coordinates, sellers) never reuses another set's total."""
    sql, params = where
    return hashlib.sha256(sql.encode() + b"\x00" + orjson.dumps(params)).hexdigest()


@dataclass(frozen=True)
class BackgroundWork:
    """Work to start once the request's read snapshot has closed; ``key`` runs once at a time."""

    key: Hashable
    run: Callable[[], None]


class Totals:
    """Counting, remembering and background-finishing the totals of one store."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.remember_count_ms = REMEMBER_COUNT_MS
        self._running: set[Hashable] = set()
        self._lock = threading.Lock()

    @staticmethod
    def remembered(tx: Tx, version: int, matching: str) -> int | None:
        """The total remembered for this version and matching set, if any."""
        row = tx.fetchone("SELECT total FROM inv_count WHERE version = ? AND matching = ?", (version, matching))
        return None if row is None else row[0]

    def count(self, tx: Tx, where: Clause, budget_ms: float, version: int, matching: str,
              started: float) -> tuple[int | None, BackgroundWork | None]:
        """(exact total or None, work to start once the page is read, or None).

        The work is remembering a slow count (``started`` is when the request's
        counting began, so a keyword scan made for it counts too), or finishing
        one that outran ``budget_ms`` (0: no budget).
        """
        sql = f"SELECT COUNT(*) FROM inv_listing l WHERE {where[0]}"
        params = where[1]
        try:
            with self.db.dialect.time_limit(tx, budget_ms):
                total = tx.one(sql, params)[0]
        except StatementTimeout:
            return None, BackgroundWork((version, matching), partial(self._count_later, version, matching, sql, params))
        if (time.perf_counter() - started) * 1000 < self.remember_count_ms:
            return total, None
        return total, BackgroundWork((version, matching), partial(self.remember, version, matching, total))

    def remember(self, version: int, matching: str, total: int) -> None:
        """Store a total, unless an import has moved the inventory past ``version`` since."""
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO inv_count (version, matching, total) "
                "SELECT ?, ?, ? FROM inv_meta WHERE name = 'version' AND num = ? "
                "ON CONFLICT (version, matching) DO NOTHING",
                (version, matching, total, version),
            )

    def _count_later(self, version: int, matching: str, sql: str, params: list[Any]) -> None:
        """Finish a count that ran out of budget, if the inventory is still at ``version``."""
        with self.db.read() as tx:
            if read_version(tx) != version:
                return  # an import landed since: that total would be of another inventory
            total = tx.one(sql, params)[0]
        self.remember(version, matching, total)

    def start(self, work: BackgroundWork) -> None:
        """Run ``work`` on a daemon thread, once per key at a time, a few at most.

        Off the request path: remembering writes, and on SQLite a writer may
        have to wait for an import to commit. Work beyond the cap is dropped —
        it is only ever a cache fill, which the next request will offer again.
        """
        with self._lock:
            if work.key in self._running or len(self._running) >= BACKGROUND_COUNTS:
                return
            self._running.add(work.key)

        def run() -> None:
            try:
                work.run()
            except Exception as exc:  # a cache fill must never take a worker down
                log.warning("background count failed: %s", type(exc).__name__)
            finally:
                with self._lock:
                    self._running.discard(work.key)

        threading.Thread(target=run, name="aap-count", daemon=True).start()

    def wait(self, rounds: int = 500) -> None:
        """Block until background counts are done (tests, orderly shutdown); bounded by count."""
        for _ in range(rounds):
            with self._lock:
                if not self._running:
                    return
            time.sleep(0.01)
