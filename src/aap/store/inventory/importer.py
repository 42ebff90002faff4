"""One import: listing rows, tombstones, vocabulary bits and facet counts, in one transaction.

Imports are atomic: readers keep seeing the previous inventory until the
commit, and any error rolls everything back. Listings that leave the eligible
statuses, or that a replace import drops, move to ``inv_tombstone``, so that
``inventory.vehicle`` can tell VEHICLE_UNAVAILABLE (known, gone) from
VEHICLE_NOT_FOUND (never known). Every import bumps the inventory version and
records it as the version of every seller whose listings it changed
(``inv_seller``): remembered totals and the posting index are refreshed for
those sellers only (docs/search.md, "Counting at marketplace scale").

An import reads only what its feed touches: the stored listings with each
batch's ids, VINs and stock numbers, the tombstones of its ids, and for a
replace the ids of its scope. A one-dealer replace on a million-listing
marketplace therefore costs that dealer's listings, not the marketplace's.

**One car, one listing** (docs/feeds.md, "One car, one listing"; ``match_cars``,
what every feed import asks for): within a
seller, a VIN and a stock number each identify one listing, whatever feed or
import it came from. A listing arriving under another ``vehicle_id`` than the
published car with its VIN (a second feed of the same cars) updates that car,
which keeps the id it was first published with; fields the feed does not carry
(it has no column for them) keep their published values. A listing that would
give a VIN or stock number to a second listing, or take another car's
listing, is a conflict: the import is refused, or (a partial import) the row
is left out and the cars it names stay as published.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from aap.inventory.query import TERM_FILTERS
from aap.store.db import DEPLOYMENT_TENANT, Tx
from aap.store.inventory.facets import FacetCountChanges
from aap.store.inventory.rows import InventoryImportError, PreparedListing
from aap.store.inventory.schema import (
    BITS_PER_MASK,
    INT64,
    LISTING_COLUMNS,
    LISTING_TABLES,
    MASK_CAPACITY,
    MASK_COLUMNS,
    ListingRow,
    ensure_meta,
    read_meta,
    read_version,
)
from aap.store.inventory.sql import feature_masks, in_list

TOMBSTONE_RETENTION_SECONDS = 180 * 86_400
_LOOKUP = 500  # ids per IN list
# An import that removes or writes more rows than this is not logged row by row (processes
# rebuild their posting index instead), nor are changes more than CHANGE_VERSIONS imports old.
CHANGE_LOG_ROWS = 50_000
CHANGE_VERSIONS = 1000
_DEALER = LISTING_COLUMNS.index("dealer_id")
_INSERT_TOMBSTONE = (
    "INSERT INTO inv_tombstone (tenant_id, id, dealer_id, vin, stock, removed_us) VALUES (?, ?, ?, ?, ?, ?)"
)

# (id, dealer_id, vin, stock): what a tombstone keeps of a listing.
Identity = tuple[str, "str | None", "str | None", "str | None"]


#: The listing fields whose loss the content guard counts (and how it names them).
GUARDED_FIELDS: dict[str, str] = {
    "price": "a price",
    "mileage": "mileage",
    "photos": "photos",
    "condition": "a condition",
    "stock": "a stock number",
}
_IDENTITY_FIELDS = ("vehicle_id", "dealer_id")
_OTHER = "other_attributes"


@dataclass(frozen=True)
class ContentGuard:
    """When an import may not publish what it would (docs/feeds.md, "Safety").

    Among the published listings an import updates, more than ``max_share``
    losing one of :data:`GUARDED_FIELDS`, or having their price multiplied or
    divided by more than ``max_price_factor``, refuses the import (with at least
    ``min_listings`` such listings, so one car's change is never a refusal).
    """

    max_share: float = 0.2
    max_price_factor: float = 2.0
    min_listings: int = 3


class Carried:
    """What a feed carries, as far as it has been read: field names, or every field (``None``).

    An import keeps the published value of a field its feed does not carry. A
    feed read while it is imported (a pipelined import) adds to it as its
    layouts become known.
    """

    def __init__(self, fields: Iterable[str] | None = ()) -> None:
        self.fields: set[str] | None = set(fields) if fields is not None else None

    def update(self, fields: Iterable[str] | None) -> None:
        if fields is None:
            self.fields = None
        elif self.fields is not None:
            self.fields.update(fields)


@dataclass(frozen=True)
class Conflict:
    """A row a partial import left out because it would give one car's identity to two listings."""

    index: int
    reason: str


@dataclass(frozen=True)
class ImportStats:
    inserted: int  # listings that became available (new, or back from a tombstone)
    updated: int  # available listings rewritten from the feed
    removed: int  # available listings that became tombstones
    total: int  # available listings after the import
    before: int = 0  # available listings of the import's scope before it
    omitted: int = 0  # of ``removed``: those a replace dropped for missing from the feed
    unchanged: int = 0  # listings the feed repeats exactly as published (not rewritten)
    compared: int = 0  # published listings the feed updated or repeated: the guard's base
    lost: dict[str, int] = field(default_factory=dict)  # guarded field -> listings that lose it
    price_moved: int = 0  # listings whose price moves by more than the guard's factor
    kept_fields: dict[str, int] = field(default_factory=dict)  # field the feed lacks -> listings keeping it
    matched: int = 0  # listings found by VIN or stock number under another vehicle_id
    conflicts: tuple[Conflict, ...] = ()  # rows a partial import left out

    def guard_refusal(self, guard: ContentGuard) -> dict[str, int] | None:
        """What exceeds the guard (``{"price": 200, "price_moved": 12}``), or None."""
        limit = max(guard.min_listings - 1, guard.max_share * self.compared)
        over = {name: n for name, n in self.lost.items() if n > limit}
        if self.price_moved > limit:
            over["price_moved"] = self.price_moved
        return over or None


class _Stored(NamedTuple):
    """A published listing as an import finds it (before this import changed it)."""

    id: str
    dealer_id: str | None
    vin: str | None
    stock: str | None
    doc: str | None  # its document (read for listings the batch resolves to)


def serialize_imports(tx: Tx) -> None:
    """Wait for any other import of this tenant to commit, then hold them off until this one does.

    Every import hands out row numbers from ``inv_meta.next_rid`` and writes the
    per-seller and change rows, so two at once on PostgreSQL would give the same
    numbers twice or deadlock on those rows. Locking the tenant's ``next_rid`` row first
    serialises them (SQLite's ``BEGIN IMMEDIATE`` already serialises writers); other
    tenants' imports go on meanwhile.
    """
    ensure_meta(tx)
    tx.execute(
        "SELECT num FROM inv_meta WHERE tenant_id = ? AND name = 'next_rid'" + tx.db.dialect.row_lock, (tx.tenant,)
    )


def _available(tx: Tx, dealer_id: str | None) -> int:
    """Available listings (of one seller, or all): every one has a status, so the
    maintained status counts sum to them without reading the listings."""
    sql = "SELECT COALESCE(SUM(n), 0) FROM inv_facet_count WHERE tenant_id = ? AND field = 'statuses'"
    if dealer_id is None:
        return int(tx.one(sql, (tx.tenant,))[0])
    return int(tx.one(sql + " AND dealer_key = ?", (tx.tenant, dealer_id))[0])


def _alone(tx: Tx) -> bool:
    """True when the listing table holds no other tenant's rows: only then may an import drop
    and rebuild its indexes (a single deployment's first load).

    Never for a platform tenant: the tables and their indexes are every tenant's, so dropping
    them would lock every tenant out and rebuild indexes over all their rows; and under
    row-level security the other tenants' rows are invisible to this transaction, so it could
    not tell that it is not alone (docs/architecture.md, "Storage")."""
    if tx.tenant != DEPLOYMENT_TENANT:
        return False
    for comparison in ("<", ">"):
        if tx.fetchone(f"SELECT 1 FROM inv_listing WHERE tenant_id {comparison} ? LIMIT 1", (tx.tenant,)):
            return False
    return True


class ImportJob:
    """One import transaction.

    Two ways to write. Incremental (upserts): each listing already stored is
    subtracted from the facet counts and rewritten (one the feed repeats unchanged
    is left alone). Reload (where the dialect ``reloads_in_bulk``: the first load;
    where it ``reloads_live_in_bulk``, also a replace without a dealer scope): the
    listing tables are emptied and their indexes dropped, the feed is appended, and
    the indexes are rebuilt once; the facet counts are rebuilt from the feed.
    """

    def __init__(
        self,
        tx: Tx,
        dealer_id: str | None,
        replace: bool,
        *,
        now_us: int,
        keep: frozenset[str] = frozenset(),
        carried: Carried | None = None,
        partial: bool = False,
        guard: ContentGuard | None = None,
        match_cars: bool = False,
    ) -> None:
        self.tx = tx
        self.dealer_id = dealer_id
        self.replace = replace
        self.now_us = now_us
        self.keep = set(keep)  # ids a replace leaves in place although the feed lacks them
        self.protected = frozenset(keep)  # the cars of rows a partial import rejected: never rewritten
        self.carried = carried or Carried(None)  # what the feed carries (default: every field)
        self.partial = partial
        self.match_cars = match_cars  # one car, one listing: match by VIN and stock number too
        self.price_factor = (guard or ContentGuard()).max_price_factor
        self.unchanged = self.compared = self.price_moved = self.matched = 0
        self.lost: dict[str, int] = {}
        self.kept_fields: dict[str, int] = {}
        self.conflicts: list[Conflict] = []
        self.claimed: dict[str, int] = {}  # stored id -> index of the row that took it
        #: (row index, holder id, dealer, stock): a stock number the row took from another listing,
        #: which this import must rewrite or remove by its end.
        self.borrowed: list[tuple[int, str, str | None, str]] = []
        self.upcoming: set[tuple[str | None, str]] | None = None  # (dealer, VIN) of the feed, when known
        self.prev_table: str | None = None  # where published listings are looked up
        self.present: set[str] = set()  # ids this import wrote or found unchanged
        # Available listings of the scope before the import (the maintained status counts
        # hold every available listing, by seller): what a shrink guard compares with.
        self.before = _available(tx, dealer_id)
        self.omitted = 0
        vocabulary = tx.fetchall("SELECT code, label, bit FROM inv_vocab WHERE tenant_id = ?", (tx.tenant,))
        self.labels: dict[str, str] = {code: label for code, label, _ in vocabulary}
        self.bits: dict[str, int] = {code: bit for code, _, bit in vocabulary if bit is not None}
        self.new_codes: list[str] = []
        self.codes_seen: set[str] = set()
        self.term_displays: list[dict[str, str]] = [{} for _ in TERM_FILTERS]  # per field: key -> display
        self.facet_changes = FacetCountChanges()
        self.inserted = self.updated = self.removed = 0
        self.next_rid: int = read_meta(tx, "next_rid")
        #: Dealer keys ("" for none) whose available listings this import changed.
        self.sellers: set[str] = set()
        #: Row numbers of the listings this import removed or wrote (None: too many to log).
        self.changed: set[int] | None = set()
        # Reload: the listings stored before it, by id; what the feed leaves out becomes a tombstone.
        self.reloaded: dict[str, Identity] = {}
        self.index_statements: list[str] = []
        self.bulk = False
        dialect = tx.db.dialect
        empty = tx.fetchone("SELECT 1 FROM inv_listing WHERE tenant_id = ? LIMIT 1", (tx.tenant,)) is None
        if (
            dialect.reloads_in_bulk
            and not keep
            and not partial
            and ((replace and dealer_id is None and dialect.reloads_live_in_bulk) or empty)
            and _alone(tx)
        ):
            self._begin_reload(empty)
        elif not empty:
            self.prev_table = "live"

    def _begin_reload(self, empty: bool) -> None:
        tx = self.tx
        self.bulk = True
        if not empty:
            # The published listings, kept for this transaction: what the feed's cars are
            # matched with, merged with and compared to once the tables are emptied.
            tx.execute("DROP TABLE IF EXISTS temp.inv_prev")
            tx.execute(
                "CREATE TEMP TABLE inv_prev AS SELECT l.id, l.dealer_id, l.vin, l.stock, d.doc "
                "FROM inv_listing l JOIN inv_doc d ON d.tenant_id = l.tenant_id AND d.id = l.id WHERE l.tenant_id = ?",
                (tx.tenant,),
            )
            for column in ("id", "vin", "stock"):
                tx.execute(f"CREATE INDEX temp.inv_prev_{column} ON inv_prev ({column})")
            self.prev_table = "inv_prev"
        self.reloaded = {
            row[0]: row
            for row in tx.fetchall(
                "SELECT id, dealer_id, vin, stock FROM inv_listing WHERE tenant_id = ?", (tx.tenant,)
            )
        }
        self.sellers.update(identity[1] or "" for identity in self.reloaded.values())
        self.changed = None
        for table in LISTING_TABLES + ("inv_facet_count",):
            tx.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tx.tenant,))
        self.index_statements = tx.db.dialect.drop_indexes(tx, ("inv_listing", "inv_doc", "inv_text"))

    def run(self, listings: Iterable[dict[str, Any]], progress: Callable[[int], None] | None) -> ImportStats:
        if isinstance(listings, list) and self.prev_table is not None and self.match_cars:
            # The whole feed is at hand: a stock number taken from a car the feed lists too
            # (with another stock number) is no conflict, and that is known before writing.
            self.upcoming = {
                (listing.get("dealer_id") or self.dealer_id, listing["vin"])
                for listing in listings
                if isinstance(listing, dict) and isinstance(listing.get("vin"), str)
            }
        seen: set[str] = set()
        batch: list[tuple[dict[str, Any], PreparedListing]] = []
        count = 0
        size = self.tx.db.dialect.import_batch
        # Where the dialect says so, a batch is written on a second thread while this one
        # prepares the next: the database works while Python does (the driver releases the
        # GIL while it waits). One batch in flight at most; its error is raised first, so the
        # first bad listing of the feed is the one reported.
        writer = ThreadPoolExecutor(1, "aap-import") if self.tx.db.dialect.pipelines_imports else None
        pending: Future[None] | None = None
        try:
            for index, listing in enumerate(listings):
                try:
                    prepared = PreparedListing(listing, index, self.dealer_id)
                except InventoryImportError:
                    if pending is not None:
                        pending.result()
                    raise
                if prepared.id in seen:
                    if pending is not None:
                        pending.result()
                    raise InventoryImportError(index, "the feed lists this listing id twice")
                seen.add(prepared.id)
                batch.append((listing, prepared))
                count += 1
                if len(batch) >= size:
                    if pending is not None:
                        pending.result()
                    if writer is None:
                        self._write(batch)
                    else:
                        pending = writer.submit(self._write, batch)
                    batch = []
                    if progress:
                        progress(count)
            if pending is not None:
                pending.result()
        finally:
            if writer is not None:
                writer.shutdown(wait=True)
        self._write(batch)
        for statement in self.index_statements:
            self.tx.execute(statement)
        if self.reloaded:  # whatever the feed left out becomes a tombstone
            self.omitted = len(self.reloaded)
            self._entomb(list(self.reloaded.values()))
        elif self.replace:
            tenant = self.tx.tenant
            if self.dealer_id is None:
                scope = self.tx.fetchall("SELECT id FROM inv_listing WHERE tenant_id = ?", (tenant,))
            else:
                scope = self.tx.fetchall(
                    "SELECT id FROM inv_listing WHERE tenant_id = ? AND dealer_id = ?", (tenant, self.dealer_id)
                )
            dropped = [row[0] for row in scope if row[0] not in self.present and row[0] not in self.keep]
            self.omitted = len(dropped)
            if dropped:
                for start in range(0, len(dropped), _LOOKUP):
                    sql, params = in_list("id", dropped[start : start + _LOOKUP])
                    self.tx.execute(
                        "INSERT INTO inv_tombstone (tenant_id, id, dealer_id, vin, stock, removed_us) "
                        f"SELECT tenant_id, id, dealer_id, vin, stock, ? FROM inv_listing WHERE tenant_id = ? AND {sql}",
                        [self.now_us, tenant] + params,
                    )
                self._forget(dropped)
                self.removed += len(dropped)
        self._check_borrowed()
        self._finish(full_replace=self.replace and self.dealer_id is None)
        if self.prev_table == "inv_prev":
            self.tx.execute("DROP TABLE temp.inv_prev")
        if progress:
            progress(count)
        total = _available(self.tx, None)
        return ImportStats(
            self.inserted,
            self.updated,
            self.removed,
            total,
            self.before,
            self.omitted,
            unchanged=self.unchanged,
            compared=self.compared,
            lost=dict(self.lost),
            price_moved=self.price_moved,
            kept_fields=dict(self.kept_fields),
            matched=self.matched,
            conflicts=tuple(self.conflicts),
        )

    def _entomb(self, identities: list[Identity]) -> None:
        if identities:
            tenant = self.tx.tenant
            self.tx.executemany(_INSERT_TOMBSTONE, [(tenant, *identity, self.now_us) for identity in identities])
            self.removed += len(identities)

    def _bit_for(self, code: str, label: str) -> int | None:
        """The bit of ``code``, given one now if it is new and a bit is free (else None)."""
        if code not in self.labels:
            self.labels[code] = label
            self.new_codes.append(code)
        bit = self.bits.get(code)
        if bit is None and len(self.bits) < MASK_CAPACITY:
            used = set(self.bits.values())
            bit = next(b for b in range(MASK_CAPACITY) if b not in used)
            self.bits[code] = bit
        return bit

    def _forget(self, ids: list[str]) -> dict[str, int]:
        """Subtract the stored listings ``ids`` from the facet counts and delete their rows;
        returns their row numbers, by id (a rewritten listing keeps its number)."""
        tx = self.tx
        code_of_bit = {bit: code for code, bit in self.bits.items()}
        rids: dict[str, int] = {}
        masks = slice(len(ListingRow._fields), len(ListingRow._fields) + MASK_COLUMNS)
        for start in range(0, len(ids), _LOOKUP):
            sql, params = in_list("id", ids[start : start + _LOOKUP])
            beyond_masks: dict[str, list[str]] = {}
            scoped = [tx.tenant, *params]
            for ident, code in tx.fetchall(
                f"SELECT id, code FROM inv_feature_extra WHERE tenant_id = ? AND {sql}", scoped
            ):
                beyond_masks.setdefault(ident, []).append(code)
            rows = tx.fetchall(
                f"SELECT {', '.join(LISTING_COLUMNS)} FROM inv_listing WHERE tenant_id = ? AND {sql}", scoped
            )
            present = [
                [
                    code_of_bit[column * BITS_PER_MASK + shift]
                    for column, mask in enumerate(row[masks])
                    if mask
                    for shift in range(BITS_PER_MASK)
                    if mask >> shift & 1
                ]
                + beyond_masks.get(row[0], [])
                for row in rows
            ]
            self.facet_changes.add(rows, present, -1)
            for row in rows:
                rids[row[0]] = row[-1]
                self.sellers.add(row[_DEALER] or "")
            self._log(rids.values())
            for table in LISTING_TABLES:
                tx.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND {sql}", scoped)
        return rids

    def _log(self, rids: Iterable[int]) -> None:
        if self.changed is not None:
            self.changed.update(rids)
            if len(self.changed) > CHANGE_LOG_ROWS:
                self.changed = None

    # -- finding the published cars --------------------------------------------------

    def _lookup(self, column: str, values: list[str]) -> list[_Stored]:
        """Published listings whose ``column`` is one of ``values`` (identity columns; no document)."""
        live = self.prev_table == "live"
        source = "inv_listing WHERE tenant_id = ? AND" if live else "inv_prev WHERE"  # inv_prev: this tenant's
        found: list[_Stored] = []
        for start in range(0, len(values), _LOOKUP):
            sql, params = in_list(column, values[start : start + _LOOKUP])
            rows = self.tx.fetchall(
                f"SELECT id, dealer_id, vin, stock FROM {source} {sql}", [self.tx.tenant, *params] if live else params
            )
            found.extend(_Stored(row[0], row[1], row[2], row[3], None) for row in rows)
        return found

    def _documents(self, ids: list[str]) -> dict[str, str]:
        live = self.prev_table == "live"
        source = "inv_doc WHERE tenant_id = ? AND" if live else "inv_prev WHERE"
        docs: dict[str, str] = {}
        for start in range(0, len(ids), _LOOKUP):
            sql, params = in_list("id", ids[start : start + _LOOKUP])
            docs.update(
                self.tx.fetchall(f"SELECT id, doc FROM {source} {sql}", [self.tx.tenant, *params] if live else params)
            )
        return docs

    def _published(
        self, batch: list[tuple[dict[str, Any], PreparedListing]]
    ) -> tuple[dict[str, _Stored], dict[tuple[str | None, str], _Stored], dict[tuple[str | None, str], _Stored]]:
        """The published listings the batch may be about: by id, by (dealer, VIN), by (dealer, stock)."""
        if self.prev_table is None:
            return {}, {}, {}
        by_id = {r.id: r for r in self._lookup("id", [p.id for _, p in batch])}
        if not self.match_cars:
            return by_id, {}, {}
        vins = sorted({p.row.vin for _, p in batch if p.row.vin})
        stocks = sorted({p.row.stock for _, p in batch if p.row.stock})
        by_vin: dict[tuple[str | None, str], _Stored] = {}
        by_stock: dict[tuple[str | None, str], _Stored] = {}
        for record in self._lookup("vin", vins) if vins else ():
            assert record.vin is not None
            # Two published listings with one VIN (stored before this rule): the lower id answers.
            key = (record.dealer_id, record.vin)
            if key not in by_vin or record.id < by_vin[key].id:
                by_vin[key] = record
        for record in self._lookup("stock", stocks) if stocks else ():
            assert record.stock is not None
            key = (record.dealer_id, record.stock)
            if key not in by_stock or record.id < by_stock[key].id:
                by_stock[key] = record
        return by_id, by_vin, by_stock

    def _resolve(
        self,
        p: PreparedListing,
        by_id: dict[str, _Stored],
        by_vin: dict[tuple[str | None, str], _Stored],
        by_stock: dict[tuple[str | None, str], _Stored],
    ) -> tuple[_Stored | None, str | None, tuple[str, ...]]:
        """(the published car this listing updates or None, why it conflicts or None, the ids it names)."""
        row = p.row
        dealer = row.dealer_id
        own = by_id.get(p.id)
        if own is not None and dealer is not None and own.dealer_id is not None and own.dealer_id != dealer:
            return None, "vehicle_id already belongs to another dealer", ()
        car = by_vin.get((dealer, row.vin)) if row.vin else None
        held = by_stock.get((dealer, row.stock)) if row.stock else None
        named = tuple(r.id for r in (own, car, held) if r is not None)
        if car is not None and own is not None and car.id != own.id:
            return None, (f"its VIN is published as another listing ({car.id}) than its vehicle_id ({own.id})"), named
        target = car or own
        if target is None and held is not None and (held.vin is None or row.vin is None):
            target = held  # the stock number names the car, and no VIN says otherwise
        if target is not None:
            if target.id in self.claimed:
                return None, f"is the same published listing ({target.id}) as an earlier row", named
            if target.id in self.protected:
                return None, f"is the published listing ({target.id}) of a rejected row, which stays as it was", named
        if held is not None and (target is None or held.id != target.id) and held.id not in self.claimed:
            # The stock number is another published car's: no conflict if this import rewrites
            # that car (the feed lists its VIN too) or removes it (a replace of its scope).
            if self.upcoming is not None:
                coming = held.vin is not None and (dealer, held.vin) in self.upcoming
                leaving = self.replace and held.id not in self.keep and self.dealer_id in (None, held.dealer_id)
                if not coming and not leaving:
                    return None, f"its stock number is another published listing's ({held.id})", named
            assert row.stock is not None
            self.borrowed.append((p.index, held.id, dealer, row.stock))  # checked at the end
        return target, None, named

    def _check_borrowed(self) -> None:
        """A stock number taken from another listing must have left it by the end of the import."""
        if not self.borrowed:
            return
        holders = sorted({holder for _, holder, _, _ in self.borrowed})
        still: dict[str, str | None] = {}
        for start in range(0, len(holders), _LOOKUP):
            sql, params = in_list("id", holders[start : start + _LOOKUP])
            still.update(
                self.tx.fetchall(
                    f"SELECT id, stock FROM inv_listing WHERE tenant_id = ? AND {sql}", [self.tx.tenant, *params]
                )
            )
        for index, holder, _dealer, stock in self.borrowed:
            if holder in still and still[holder] == stock:
                raise InventoryImportError(index, f"its stock number is another published listing's ({holder})")

    def _merged(self, listing: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
        """``listing`` with the published fields its feed does not carry (the later import wins
        for what it carries, docs/feeds.md)."""
        carried = self.carried.fields
        if carried is None:
            return listing
        merged = dict(listing)
        kept = self.kept_fields
        for name, value in old.items():
            if name in merged or name in _IDENTITY_FIELDS or name == _OTHER or name in carried:
                continue
            merged[name] = value
            kept[name] = kept.get(name, 0) + 1
        attributes = old.get(_OTHER)
        if isinstance(attributes, dict) and _OTHER not in carried:
            mine = merged.get(_OTHER)
            extra = {k: v for k, v in attributes.items() if f"{_OTHER}.{k}" not in carried}
            if extra and (mine is None or isinstance(mine, dict)):
                combined = dict(extra)
                combined.update(mine or {})
                merged[_OTHER] = combined
                kept[_OTHER] = kept.get(_OTHER, 0) + 1
        return merged

    def _compare(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Count what the content guard watches: guarded fields lost, prices moved far."""
        lost = self.lost
        for name in GUARDED_FIELDS:
            before, after = old.get(name), new.get(name)
            if before not in (None, [], "") and after in (None, [], ""):
                lost[name] = lost.get(name, 0) + 1
        before, after = old.get("price"), new.get("price")
        if (
            isinstance(before, int)
            and isinstance(after, int)
            and before > 0
            and after > 0
            and old.get("currency", "USD") == new.get("currency", "USD")
            and max(before, after) > self.price_factor * min(before, after)
        ):
            self.price_moved += 1

    def _write(self, batch: list[tuple[dict[str, Any], PreparedListing]]) -> None:
        if not batch:
            return
        by_id, by_vin, by_stock = self._published(batch)
        targets: list[tuple[dict[str, Any], PreparedListing, _Stored | None]] = []
        for listing, p in batch:
            target, conflict, named = self._resolve(p, by_id, by_vin, by_stock)
            if conflict is not None:
                if not self.partial or conflict.startswith("vehicle_id already"):
                    raise InventoryImportError(p.index, conflict)
                self.conflicts.append(Conflict(p.index, conflict))
                self.keep.update(named)  # the cars it names stay as they are
                continue
            if target is not None:
                self.claimed[target.id] = p.index
            targets.append((listing, p, target))
        docs = self._documents([t.id for _, _, t in targets if t is not None]) if by_id or by_vin or by_stock else {}
        owners: dict[str, str | None] = {}
        unchanged: set[str] = set()
        prepared: list[PreparedListing] = []
        for listing, p, target in targets:
            if target is not None:
                owners[target.id] = target.dealer_id
                old_doc = docs.get(target.id)
                if target.id != p.id:
                    self.matched += 1
                if old_doc is not None and old_doc == p.doc and target.id == p.id:
                    unchanged.add(target.id)
                    self.compared += 1
                elif old_doc is not None:
                    old = orjson.loads(old_doc)
                    merged = self._merged(listing, old)
                    if target.id != p.id or merged is not listing:
                        merged = dict(merged, vehicle_id=target.id)
                        p = PreparedListing(merged, p.index, self.dealer_id)
                    self.compared += 1
                    if orjson.loads(p.doc) == old:
                        unchanged.add(target.id)
                    else:
                        self._compare(old, merged)
                elif target.id != p.id:
                    p = PreparedListing(dict(listing, vehicle_id=target.id), p.index, self.dealer_id)
            prepared.append(p)
            self.present.add(p.id)
        self._store(prepared, owners, unchanged)

    def _store(self, batch: list[PreparedListing], owners: dict[str, str | None], unchanged: set[str]) -> None:
        tx = self.tx
        if not batch:
            return
        tombstones: set[str] = set()
        ids = [p.id for p in batch]
        for start in range(0, len(ids), _LOOKUP):
            sql, params = in_list("id", ids[start : start + _LOOKUP])
            tombstones.update(
                row[0]
                for row in tx.fetchall(
                    f"SELECT id FROM inv_tombstone WHERE tenant_id = ? AND {sql}", [tx.tenant, *params]
                )
            )
        if len(self.bits) != len(self.labels):  # a code without a bit may gain one: rewrite all
            unchanged = set()
        reloaded = self.reloaded
        if self.bulk:
            owners = {}  # the tables are empty: what was published is in ``reloaded``
        # A listing stored exactly as the feed has it (the same document, so the same row)
        # stays as it is: a nightly feed mostly repeats itself.
        rewritten = [ident for ident in owners if ident not in unchanged]
        rids = self._forget(rewritten) if rewritten else {}
        if tombstones:
            sql, params = in_list("id", list(tombstones))
            tx.execute(f"DELETE FROM inv_tombstone WHERE tenant_id = ? AND {sql}", [tx.tenant, *params])
        rows, docs, texts, beyond_masks, presents, gone = [], [], [], [], [], []
        written: list[int] = []
        tenant = tx.tenant
        bits, codes_seen = self.bits, self.codes_seen
        for p in batch:
            row = p.row
            was_available = p.id in owners or reloaded.pop(p.id, None) is not None
            if not p.eligible:
                gone.append((tenant, p.id, row.dealer_id, row.vin, row.stock, self.now_us))
                self.removed += was_available
                continue
            if p.id in unchanged and not self.bulk:
                self.unchanged += 1
                codes_seen.update(code for code, _label, _present in p.evidence)
                continue
            if not was_available:
                self.inserted += 1
            elif p.id in unchanged:
                self.unchanged += 1  # rewritten only because the bulk load emptied the tables
            else:
                self.updated += 1
            present: list[str] = []
            masked: list[str] = []
            for code, label, is_present in p.evidence:
                bit = bits.get(code)
                if bit is None:
                    bit = self._bit_for(code, label)
                codes_seen.add(code)
                if is_present:
                    present.append(code)
                    if bit is None:
                        beyond_masks.append((tenant, p.id, code))
                    else:
                        masked.append(code)
            rid = rids.get(p.id)
            if rid is None:
                rid = self.next_rid
                self.next_rid += 1
            rows.append(row + tuple(feature_masks(masked, bits)) + (rid,))
            written.append(rid)
            docs.append((tenant, p.id, p.doc))
            texts.append((tenant, p.id, p.keywords))
            presents.append(present)
            # The display spelling of each new term key (zip stops before stock's).
            for displays, key, value in zip(self.term_displays, p.term_keys, p.term_values):
                if key is not None and key not in displays:
                    displays[key] = value.strip()
        if gone:
            tx.executemany(_INSERT_TOMBSTONE, gone)
        if rows:
            self.sellers.update(str(row[_DEALER] or "") for row in rows)
            self._log(written)
            self.facet_changes.add(rows, presents, 1)
            insert = tx.db.dialect.insert_rows
            try:
                insert(tx, "inv_listing", ("tenant_id", *LISTING_COLUMNS), [(tenant, *row) for row in rows])
            except tx.db.overflow_errors:  # a number beyond BIGINT: name the listing (rolls back)
                culprit = next(
                    p
                    for p in batch
                    if p.eligible and any(v.__class__ is int and not -INT64 <= v < INT64 for v in p.row)
                )
                raise InventoryImportError(culprit.index, "a number is too large to store") from None
            insert(tx, "inv_doc", ("tenant_id", "id", "doc"), docs)
            insert(tx, "inv_text", ("tenant_id", "id", "query"), texts)
        if beyond_masks:
            tx.executemany("INSERT INTO inv_feature_extra (tenant_id, id, code) VALUES (?, ?, ?)", beyond_masks)

    def _finish(self, *, full_replace: bool) -> None:
        tx = self.tx
        tenant = tx.tenant
        terms = [
            (tenant, name, key, display)
            for name, displays in zip(TERM_FILTERS, self.term_displays)
            for key, display in displays.items()
        ]
        if terms:
            tx.executemany(
                "INSERT INTO inv_term (tenant_id, field, term, display) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, field, term) DO NOTHING",
                terms,
            )
        if self.new_codes:
            tx.executemany(
                "INSERT INTO inv_vocab (tenant_id, code, label, bit) VALUES (?, ?, ?, ?)",
                [(tenant, code, self.labels[code], self.bits.get(code)) for code in self.new_codes],
            )
        new = set(self.new_codes)
        assigned = [(bit, tenant, code) for code, bit in self.bits.items() if code not in new]
        if assigned:  # codes that were stored without a bit may have gained one
            tx.executemany("UPDATE inv_vocab SET bit = ? WHERE tenant_id = ? AND code = ? AND bit IS NULL", assigned)
        if full_replace:
            # Every available listing came from this feed: codes it lacks are in no row.
            retired = [(tenant, code) for code in self.labels if code not in self.codes_seen]
            if retired:
                tx.executemany("DELETE FROM inv_vocab WHERE tenant_id = ? AND code = ?", retired)
        changed = self.facet_changes.changed()
        if changed:
            tx.db.dialect.insert_rows(
                tx,
                "inv_facet_count",
                ("tenant_id", "currency", "dealer_key", "field", "value", "n"),
                [(tenant, *row) for row in changed],
                "ON CONFLICT (tenant_id, currency, dealer_key, field, value)"
                " DO UPDATE SET n = inv_facet_count.n + excluded.n",
            )
            tx.execute("DELETE FROM inv_facet_count WHERE tenant_id = ? AND n = 0", (tenant,))
        tx.execute(
            "DELETE FROM inv_tombstone WHERE tenant_id = ? AND removed_us < ?",
            (tenant, self.now_us - TOMBSTONE_RETENTION_SECONDS * 1_000_000),
        )
        tx.execute("UPDATE inv_meta SET num = num + 1 WHERE tenant_id = ? AND name = 'version'", (tenant,))
        tx.execute("UPDATE inv_meta SET num = ? WHERE tenant_id = ? AND name = 'next_rid'", (self.next_rid, tenant))
        version = read_version(tx)
        if self.changed is None:  # too many to list: a process behind this version rebuilds
            tx.execute("DELETE FROM inv_change WHERE tenant_id = ?", (tenant,))
            tx.execute("UPDATE inv_meta SET num = ? WHERE tenant_id = ? AND name = 'changes_from'", (version, tenant))
        else:
            tx.db.dialect.insert_rows(
                tx,
                "inv_change",
                ("tenant_id", "version", "rid"),
                [(tenant, version, rid) for rid in sorted(self.changed)],
            )
            oldest = version - CHANGE_VERSIONS
            tx.execute("DELETE FROM inv_change WHERE tenant_id = ? AND version <= ?", (tenant, oldest))
            tx.execute(
                "UPDATE inv_meta SET num = ? WHERE tenant_id = ? AND name = 'changes_from' AND num < ?",
                (oldest, tenant, oldest),
            )
        if self.sellers:
            tx.executemany(
                "INSERT INTO inv_seller (tenant_id, dealer_key, version) VALUES (?, ?, ?) "
                "ON CONFLICT (tenant_id, dealer_key) DO UPDATE SET version = excluded.version",
                [(tenant, seller, version) for seller in sorted(self.sellers)],
            )
