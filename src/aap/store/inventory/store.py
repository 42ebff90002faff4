"""The inventory store: imports write, snapshots read.

Reads go through :meth:`InventoryStore.snapshot` (one read transaction, one
inventory version); the one-call methods (:meth:`~InventoryStore.search`,
:meth:`~InventoryStore.facets`, ...) each open a snapshot of their own.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from aap.inventory.query import Criteria, SearchQuery
from aap.store.db import Database, Tx
from aap.store.inventory.counts import Totals
from aap.store.inventory.importer import (
    GUARDED_FIELDS,
    Carried,
    ContentGuard,
    ImportJob,
    ImportStats,
    serialize_imports,
)
from aap.store.inventory.postings import PostingCache
from aap.store.inventory.schema import LISTING_TABLES
from aap.store.inventory.search import Hit, documents
from aap.store.inventory.snapshot import InventorySnapshot, VersionCaches
from aap.store.inventory.sql import in_list
from aap.store.replicas import ReadRouter

T = TypeVar("T")

log = logging.getLogger("aap.import")

# Listings changed by one import beyond which table statistics (and, on PostgreSQL, the
# visibility map that index-only counts rely on) are refreshed right away.
_MAINTAIN_AFTER = 10_000


@dataclass(frozen=True)
class ListingRecord:
    """A listing known to the store; ``listing`` is None for a tombstone."""

    id: str
    dealer_id: str | None
    vin: str | None
    stock: str | None
    available: bool
    listing: dict[str, Any] | None


class ShrinkRefused(Exception):
    """A replace that would remove more of the inventory than allowed; nothing was changed."""

    def __init__(self, stats: ImportStats, share: float) -> None:
        self.stats = stats
        self.share = share
        super().__init__(f"the import would remove {stats.omitted} of {stats.before} listings (more than {share:.0%})")


class FieldLossRefused(Exception):
    """An import that would strip many published listings of a guarded field (or move their
    prices far); nothing was changed. ``over``: what exceeded the guard, with counts."""

    def __init__(self, stats: ImportStats, guard: ContentGuard, over: dict[str, int]) -> None:
        self.stats = stats
        self.guard = guard
        self.over = over
        super().__init__(self.describe())

    def describe(self) -> str:
        parts = [
            f"{n} without {GUARDED_FIELDS[name]}"
            if name in GUARDED_FIELDS
            else f"{n} with a price moved more than {self.guard.max_price_factor:g}x"
            for name, n in self.over.items()
        ]
        return (
            f"of the {self.stats.compared} published listings the feed updates, it would leave "
            + ", ".join(parts)
            + f" (more than {self.guard.max_share:.0%})"
        )


class _RolledBack(Exception):
    """Carries a dry run's counts out of its transaction (which it rolls back)."""

    def __init__(self, stats: ImportStats) -> None:
        self.stats = stats


def _kept_ids(tx: Tx, listings: Iterable[dict[str, Any]], dealer_id: str | None) -> frozenset[str]:
    """The stored ids a replace keeps for (possibly invalid) feed rows: by listing id, VIN or stock.

    A row whose VIN could not be read is still found by its stock number, so its
    stored listing survives the replace; only the import's dealer's listings count.
    """
    ids: set[str] = set()
    vins: set[str] = set()
    stocks: set[str] = set()
    for listing in listings:
        for key, found in (("vehicle_id", ids), ("vin", vins), ("stock", stocks)):
            value = listing.get(key)
            if isinstance(value, str) and value:
                found.add(value.strip().upper() if key == "vin" else value)
    for column, values in (("vin", sorted(vins)), ("stock", sorted(stocks))):
        for start in range(0, len(values), 500):
            sql, params = in_list(column, values[start : start + 500])
            if dealer_id is not None:
                sql, params = f"{sql} AND dealer_id = ?", [*params, dealer_id]
            ids.update(
                row[0]
                for row in tx.fetchall(
                    f"SELECT id FROM inv_listing WHERE tenant_id = ? AND {sql}", [tx.tenant, *params]
                )
            )
    return frozenset(ids)


class InventoryStore:
    """Listings of one deployment (every seller's, on an aggregate endpoint)."""

    def __init__(
        self,
        db: Database,
        *,
        facet_cache_size: int = 256,
        postings: bool = True,
        index_min_rows: int = 0,
        reads: ReadRouter | None = None,
    ) -> None:
        self.db = db
        #: Where reads go: fit read replicas first, the primary last (docs/deployment.md).
        self.reads = reads or ReadRouter(db)
        self.totals = Totals(db)
        self.postings = PostingCache(db, enabled=postings, min_rows=index_min_rows)
        self._caches = VersionCaches(facet_cache_size, self.postings)

    # -- import -----------------------------------------------------------------
    def import_listings(
        self,
        listings: Iterable[dict[str, Any]],
        *,
        dealer_id: str | None = None,
        replace: bool = False,
        progress: Callable[[int], None] | None = None,
        keep: Iterable[dict[str, Any]] = (),
        max_removed_share: float | None = None,
        dry_run: bool = False,
        carried: Carried | None = None,
        guard: ContentGuard | None = None,
        partial: bool = False,
        match_cars: bool = False,
    ) -> ImportStats:
        """Load feed listings in one transaction: all of them, or (on any error) none.

        Upsert by listing id; with ``replace=True`` every available listing of
        the scope (``dealer_id``'s listings, or the whole inventory) missing
        from the feed becomes a tombstone. A listing whose status is outside
        available/intransit/pending becomes a tombstone too. ``progress`` is
        called with the number of listings processed so far. Raises
        :class:`~aap.store.inventory.rows.InventoryImportError` for a listing the
        store cannot hold (duplicate id in the feed, id owned by another dealer,
        ...); the feed reader is expected to have validated listings already.

        Safety of a replace: ``keep`` names listings (rows a partial import
        rejected) whose stored version stays although the feed lacks them; with
        ``max_removed_share`` a replace that would drop more than that share of
        the scope's listings for missing from the feed raises
        :class:`ShrinkRefused` and changes nothing. ``dry_run`` runs the whole
        import and rolls it back: the returned counts are what it would do.

        One car, one listing (:mod:`.importer`; ``match_cars``, what feed imports
        ask for): a listing is matched with the published one of its VIN or stock
        number, not only its id; ``carried`` names the fields
        the feed carries (None: every field), the others keep their published
        values. With a ``guard``, an import that would strip too many published
        listings of a price, mileage, photos, condition or stock number raises
        :class:`FieldLossRefused` and changes nothing. ``partial``: a row that
        conflicts with another car is left out (``ImportStats.conflicts``) instead
        of refusing the import.
        """
        started = time.perf_counter()
        keep = list(keep)
        collecting = gc.isenabled()
        gc.disable()  # a bulk load allocates millions of acyclic objects; skip the GC passes
        try:
            try:
                with self.db.transaction() as tx, self.db.dialect.large_write(tx):
                    serialize_imports(tx)
                    kept = _kept_ids(tx, keep, dealer_id) if keep and replace else frozenset()
                    job = ImportJob(
                        tx,
                        dealer_id,
                        replace,
                        now_us=int(time.time() * 1_000_000),
                        keep=kept,
                        carried=carried,
                        partial=partial,
                        guard=guard,
                        match_cars=match_cars,
                    )
                    stats = job.run(listings, progress)
                    if guard is not None:
                        over = stats.guard_refusal(guard)
                        if over:
                            raise FieldLossRefused(stats, guard, over)
                    if (
                        max_removed_share is not None
                        and stats.before
                        and stats.omitted > max_removed_share * stats.before
                    ):
                        raise ShrinkRefused(stats, max_removed_share)
                    if dry_run:
                        raise _RolledBack(stats)
            except _RolledBack as rolled_back:
                return rolled_back.stats
            if stats.inserted + stats.updated + stats.removed >= _MAINTAIN_AFTER:
                self.db.maintain(LISTING_TABLES)
            log.info(
                "inventory imported",
                extra={
                    "fields": {
                        "dealer_id": dealer_id,
                        "replace": replace,
                        "inserted": stats.inserted,
                        "updated": stats.updated,
                        "removed": stats.removed,
                        "total": stats.total,
                        "duration_ms": int((time.perf_counter() - started) * 1000),
                    }
                },
            )
            return stats
        finally:
            if collecting:
                gc.enable()

    # -- reads --------------------------------------------------------------------
    @contextmanager
    def snapshot(self, db: Database | None = None) -> Iterator[InventorySnapshot]:
        """A read snapshot (on the primary, or ``db``): everything read through it is of one
        inventory version.

        Background counts a search asked for start once the snapshot has closed.
        """
        with (db or self.db).read() as tx:
            snapshot = InventorySnapshot(tx, self._caches, self.totals)
            yield snapshot
        for work in snapshot.deferred:
            self.totals.start(work)

    def read(self, answer: Callable[[InventorySnapshot], T], *, min_version: int = 0, primary: bool = False) -> T:
        """``answer`` of a snapshot at inventory version ``min_version`` or later, read from a
        fit replica where there is one, else from the primary.

        A replica that fails mid-read, or is behind ``min_version`` (a cursor issued by a
        newer one), passes the read on to the next; ``answer`` must only read. ``primary``:
        a read that decides a write (a lead's vehicle and seller) is read on the primary,
        which has every commit (docs/deployment.md, "Read replicas").
        """
        for db in () if primary else self.reads.candidates():
            if db is self.db:
                break
            try:
                with self.snapshot(db) as snapshot:
                    if snapshot.version >= min_version:
                        return answer(snapshot)
            except db.unavailable_errors:
                self.reads.failed(db)
        with self.snapshot() as snapshot:
            return answer(snapshot)

    def search(self, query: SearchQuery, *, count_timeout_ms: float = 0) -> tuple[list[Hit], int | None]:
        """:meth:`InventorySnapshot.search` in a snapshot of its own."""
        with self.snapshot() as snapshot:
            return snapshot.search(query, count_timeout_ms=count_timeout_ms)

    def facets(self, criteria: Criteria, vocabulary: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """:meth:`InventorySnapshot.facets` in a snapshot of its own."""
        with self.snapshot() as snapshot:
            return snapshot.facets(criteria, vocabulary)

    def feature_vocabulary(self) -> list[tuple[str, str]]:
        """(code, label) of every evidence code the inventory carries, by code."""
        with self.snapshot() as snapshot:
            return snapshot.feature_vocabulary()

    def inventory_version(self) -> int:
        """Bumped by every import; derived data (facet caches, remembered totals) is keyed by it."""
        with self.snapshot() as snapshot:
            return snapshot.version

    def count(self) -> int:
        """Available listings (tombstones excluded)."""
        with self.db.read() as tx:
            count: int = tx.one("SELECT COUNT(*) FROM inv_listing WHERE tenant_id = ?", (tx.tenant,))[0]
        return count

    def find(
        self,
        vehicle_id: str | None = None,
        vin: str | None = None,
        stock: str | None = None,
        *,
        primary: bool = False,
    ) -> list[ListingRecord]:
        """Every listing or tombstone matching at least one of the given identifiers
        (``primary``: read on the primary, see :meth:`read`)."""
        conditions, params = [], []
        for column, value in (("id", vehicle_id), ("vin", vin), ("stock", stock)):
            if value is not None:
                conditions.append(f"{column} = ?")
                params.append(value)
        if not conditions:
            return []
        where = "tenant_id = ? AND (" + " OR ".join(conditions) + ")"

        def found(snapshot: InventorySnapshot) -> tuple[list[Any], list[Any], dict[str, dict[str, Any]]]:
            tx = snapshot.tx
            scoped = [tx.tenant, *params]
            available = tx.fetchall(f"SELECT id, dealer_id, vin, stock FROM inv_listing WHERE {where}", scoped)
            gone = tx.fetchall(f"SELECT id, dealer_id, vin, stock FROM inv_tombstone WHERE {where}", scoped)
            return available, gone, documents(tx, [r[0] for r in available])

        available, gone, docs = self.read(found, primary=primary)
        records = [ListingRecord(r[0], r[1], r[2], r[3], True, docs[r[0]]) for r in available]
        records += [ListingRecord(r[0], r[1], r[2], r[3], False, None) for r in gone]
        return records

    def build_index(self) -> None:
        """Build this process's posting index now (start-up, benchmarks), instead of on first use."""
        self.postings.build_now()

    def wait_for_background(self, rounds: int = 500) -> None:
        """Block until background counts are done (tests, orderly shutdown); bounded by count."""
        self.totals.wait(rounds)
