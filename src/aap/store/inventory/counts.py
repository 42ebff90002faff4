"""Search totals: exact or null, never an estimate (``InventorySearchResponse.total``, seed 004).

A count that was slow to make is remembered in ``inv_count`` with the inventory
version it was made at and its split by seller, so the next pages of a search,
and every worker, reuse it. An import moves only its own sellers' versions
(``inv_seller``): a remembered total stays valid while none of its sellers
changed, and after one dealer's import only that dealer's share is counted again
(``REFRESH_SELLERS`` at most). With a count budget, a count that outruns it
answers null and finishes in the background, for the requests after it. See
docs/search.md, "Totals" and "Counting at marketplace scale".
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial

import orjson

from aap.store.db import Database, Tx
from aap.store.dialect import StatementTimeout
from aap.store.inventory.schema import read_version
from aap.store.inventory.sql import Clause, seller_clause

log = logging.getLogger("aap.inventory")

# A count that took this long is remembered for its inventory version.
REMEMBER_COUNT_MS = 20.0
# Background counts running at once, per process.
BACKGROUND_COUNTS = 2
# A remembered total is brought up to date by counting the sellers changed since, up to
# this many of them; beyond, counting everything again is about as cheap.
REFRESH_SELLERS = 64
# Per-seller shares: (dealer key, "" for none) -> matching listings.
Partials = dict[str, int]


def count_by_seller(tx: Tx, where: Clause, sellers: Sequence[str] | None = None) -> Partials:
    """The matching set's size per seller (only ``sellers`` when given), zeros left out."""
    sql, params = where
    if sellers is not None:
        restrict, restrict_params = seller_clause(sellers)
        sql, params = f"{sql} AND {restrict}", params + restrict_params
    rows = tx.fetchall(f"SELECT COALESCE(l.dealer_id, ''), COUNT(*) FROM inv_listing l WHERE {sql} GROUP BY 1", params)
    return {row[0]: row[1] for row in rows}


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


def _remember(db: Database, version: int, matching: str, total: int, partials: Partials | None) -> None:
    """Store a total counted at ``version`` (replacing older ones of the matching set), unless
    an import has moved the inventory past ``version`` since."""
    with db.transaction() as tx:
        if read_version(tx) != version:
            return
        tx.execute(
            "DELETE FROM inv_count WHERE tenant_id = ? AND matching = ? AND version < ?", (tx.tenant, matching, version)
        )
        tx.execute(
            "INSERT INTO inv_count (tenant_id, version, matching, total, partials) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant_id, version, matching) DO NOTHING",
            (tx.tenant, version, matching, total, None if partials is None else orjson.dumps(partials).decode()),
        )


class Totals:
    """Counting, remembering and background-finishing the totals of one store."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.remember_count_ms = REMEMBER_COUNT_MS
        self._running: set[Hashable] = set()
        self._lock = threading.Lock()

    @staticmethod
    def remembered(tx: Tx, version: int, matching: str, where: Clause) -> tuple[int | None, BackgroundWork | None]:
        """(the total remembered for this matching set, brought up to ``version``, or None;
        work that remembers the refreshed total, or None).

        A total counted at an older version still holds for every seller that has not
        changed since; the sellers that did are counted again (``where`` is the
        matching set's condition), within :data:`REFRESH_SELLERS`.
        """
        row = tx.fetchone(
            "SELECT version, total, partials FROM inv_count WHERE tenant_id = ? AND matching = ? AND version <= ? "
            "ORDER BY version DESC LIMIT 1",
            (tx.tenant, matching, version),
        )
        if row is None:
            return None, None
        counted_at, total, stored = row
        if counted_at == version:
            return total, None
        changed = [
            r[0]
            for r in tx.fetchall(
                "SELECT dealer_key FROM inv_seller WHERE tenant_id = ? AND version > ?", (tx.tenant, counted_at)
            )
        ]
        if not changed:
            return total, None
        if stored is None or len(changed) > REFRESH_SELLERS:
            return None, None
        partials: Partials = orjson.loads(stored)
        for seller in changed:
            partials.pop(seller, None)
        partials.update(count_by_seller(tx, where, changed))
        total = sum(partials.values())
        return total, BackgroundWork((version, matching), partial(_remember, tx.db, version, matching, total, partials))

    def count(
        self,
        tx: Tx,
        where: Clause,
        budget_ms: float,
        version: int,
        matching: str,
        started: float,
        *,
        remember: bool = True,
    ) -> tuple[int | None, BackgroundWork | None]:
        """(exact total or None, work to start once the page is read, or None).

        The work is remembering a slow count (``started`` is when the request's
        counting began, so a keyword scan made for it counts too), or finishing
        one that outran ``budget_ms`` (0: no budget). Either counts again by
        seller, off the request path. ``remember=False`` (a small inventory, counted
        again each time) asks for no work: on a busy machine a count of a few rows can
        take ``remember_count_ms`` waiting for a core, and remembering it would only add
        a write and a thread to the load.
        """
        sql = f"SELECT COUNT(*) FROM inv_listing l WHERE {where[0]}"
        params = where[1]
        later = BackgroundWork((version, matching), partial(self._count_later, version, matching, where))
        try:
            with self.db.dialect.time_limit(tx, budget_ms):
                total = tx.one(sql, params)[0]
        except StatementTimeout:
            return None, later if remember else None
        if not remember or (time.perf_counter() - started) * 1000 < self.remember_count_ms:
            return total, None
        return total, later

    def remember(self, version: int, matching: str, total: int, partials: Partials | None = None) -> None:
        """Store a total, unless an import has moved the inventory past ``version`` since."""
        _remember(self.db, version, matching, total, partials)

    def _count_later(self, version: int, matching: str, where: Clause) -> None:
        """Count by seller (to remember), if the inventory is still at ``version``."""
        with self.db.read() as tx:
            if read_version(tx) != version:
                return  # an import landed since: that total would be of another inventory
            partials = count_by_seller(tx, where)
        self.remember(version, matching, sum(partials.values()), partials)

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
