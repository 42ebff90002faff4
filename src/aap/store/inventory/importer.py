"""One import: listing rows, tombstones, vocabulary bits and facet counts, in one transaction.

Imports are atomic: readers keep seeing the previous inventory until the
commit, and any error rolls everything back. Listings that leave the eligible
statuses, or that a replace import drops, move to ``inv_tombstone``, so that
``inventory.vehicle`` can tell VEHICLE_UNAVAILABLE (known, gone) from
VEHICLE_NOT_FOUND (never known). Every import bumps the inventory version and
records it as the version of every seller whose listings it changed
(``inv_seller``): remembered totals and the posting index are refreshed for
those sellers only (docs/search.md, "Counting at marketplace scale").

An import reads only what its feed touches: the stored owners and tombstones of
each batch's ids, and for a replace the ids of its scope. A one-dealer replace
on a million-listing marketplace therefore costs that dealer's listings, not
the marketplace's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aap.inventory.query import TERM_FILTERS
from aap.store.db import Tx
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
_INSERT_TOMBSTONE = "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) VALUES (?, ?, ?, ?, ?)"

# (id, dealer_id, vin, stock): what a tombstone keeps of a listing.
Identity = tuple[str, "str | None", "str | None", "str | None"]


@dataclass(frozen=True)
class ImportStats:
    inserted: int  # listings that became available (new, or back from a tombstone)
    updated: int  # available listings rewritten from the feed
    removed: int  # available listings that became tombstones
    total: int  # available listings after the import
    before: int = 0  # available listings of the import's scope before it
    omitted: int = 0  # of ``removed``: those a replace dropped for missing from the feed


def serialize_imports(tx: Tx) -> None:
    """Wait for any other import to commit, then hold them off until this one does.

    Every import hands out row numbers from ``inv_meta.next_rid`` and writes the
    per-seller and change rows, so two at once on PostgreSQL would give the same
    numbers twice or deadlock on those rows. Locking the ``next_rid`` row first
    serialises them (SQLite's ``BEGIN IMMEDIATE`` already serialises writers).
    """
    tx.execute("SELECT num FROM inv_meta WHERE name = 'next_rid'" + tx.db.dialect.row_lock)


def _available(tx: Tx, dealer_id: str | None) -> int:
    """Available listings (of one seller, or all): every one has a status, so the
    maintained status counts sum to them without reading the listings."""
    sql = "SELECT COALESCE(SUM(n), 0) FROM inv_facet_count WHERE field = 'statuses'"
    if dealer_id is None:
        return int(tx.one(sql)[0])
    return int(tx.one(sql + " AND dealer_key = ?", (dealer_id,))[0])


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
        self, tx: Tx, dealer_id: str | None, replace: bool, *, now_us: int, keep: frozenset[str] = frozenset()
    ) -> None:
        self.tx = tx
        self.dealer_id = dealer_id
        self.replace = replace
        self.now_us = now_us
        self.keep = keep  # ids a replace leaves in place although the feed lacks them
        # Available listings of the scope before the import (the maintained status counts
        # hold every available listing, by seller): what a shrink guard compares with.
        self.before = _available(tx, dealer_id)
        self.omitted = 0
        vocabulary = tx.fetchall("SELECT code, label, bit FROM inv_vocab")
        self.labels: dict[str, str] = {code: label for code, label, _ in vocabulary}
        self.bits: dict[str, int] = {code: bit for code, _, bit in vocabulary if bit is not None}
        self.new_codes: list[str] = []
        self.codes_seen: set[str] = set()
        self.term_displays: list[dict[str, str]] = [{} for _ in TERM_FILTERS]  # per field: key -> display
        self.facet_changes = FacetCountChanges()
        self.inserted = self.updated = self.removed = 0
        self.next_rid: int = tx.one("SELECT num FROM inv_meta WHERE name = 'next_rid'")[0]
        #: Dealer keys ("" for none) whose available listings this import changed.
        self.sellers: set[str] = set()
        #: Row numbers of the listings this import removed or wrote (None: too many to log).
        self.changed: set[int] | None = set()
        # Reload: the listings stored before it, by id; what the feed leaves out becomes a tombstone.
        self.reloaded: dict[str, Identity] = {}
        self.index_statements: list[str] = []
        self.bulk = False
        dialect = tx.db.dialect
        if (
            dialect.reloads_in_bulk
            and not keep
            and (
                (replace and dealer_id is None and dialect.reloads_live_in_bulk)
                or tx.fetchone("SELECT 1 FROM inv_listing LIMIT 1") is None
            )
        ):
            self._begin_reload()

    def _begin_reload(self) -> None:
        tx = self.tx
        self.bulk = True
        self.reloaded = {row[0]: row for row in tx.fetchall("SELECT id, dealer_id, vin, stock FROM inv_listing")}
        self.sellers.update(identity[1] or "" for identity in self.reloaded.values())
        self.changed = None
        for table in LISTING_TABLES + ("inv_facet_count",):
            tx.execute(f"DELETE FROM {table}")
        self.index_statements = tx.db.dialect.drop_indexes(tx, ("inv_listing", "inv_doc", "inv_text"))

    def run(self, listings: Iterable[dict[str, Any]], progress: Callable[[int], None] | None) -> ImportStats:
        seen: set[str] = set()
        batch: list[PreparedListing] = []
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
                batch.append(prepared)
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
            if self.dealer_id is None:
                scope = self.tx.fetchall("SELECT id FROM inv_listing")
            else:
                scope = self.tx.fetchall("SELECT id FROM inv_listing WHERE dealer_id = ?", (self.dealer_id,))
            dropped = [row[0] for row in scope if row[0] not in seen and row[0] not in self.keep]
            self.omitted = len(dropped)
            if dropped:
                for start in range(0, len(dropped), _LOOKUP):
                    sql, params = in_list("id", dropped[start : start + _LOOKUP])
                    self.tx.execute(
                        "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) "
                        f"SELECT id, dealer_id, vin, stock, ? FROM inv_listing WHERE {sql}",
                        [self.now_us] + params,
                    )
                self._forget(dropped)
                self.removed += len(dropped)
        self._finish(full_replace=self.replace and self.dealer_id is None)
        if progress:
            progress(count)
        total = _available(self.tx, None)
        return ImportStats(self.inserted, self.updated, self.removed, total, self.before, self.omitted)

    def _entomb(self, identities: list[Identity]) -> None:
        if identities:
            self.tx.executemany(_INSERT_TOMBSTONE, [identity + (self.now_us,) for identity in identities])
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
            for ident, code in tx.fetchall(f"SELECT id, code FROM inv_feature_extra WHERE {sql}", params):
                beyond_masks.setdefault(ident, []).append(code)
            rows = tx.fetchall(f"SELECT {', '.join(LISTING_COLUMNS)} FROM inv_listing WHERE {sql}", params)
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
                tx.execute(f"DELETE FROM {table} WHERE {sql}", params)
        return rids

    def _log(self, rids: Iterable[int]) -> None:
        if self.changed is not None:
            self.changed.update(rids)
            if len(self.changed) > CHANGE_LOG_ROWS:
                self.changed = None

    def _stored(self, batch: list[PreparedListing]) -> tuple[dict[str, str | None], set[str], set[str]]:
        """(owner of each id of ``batch`` stored as available, ids of ``batch`` that are
        tombstones, ids stored exactly as ``batch`` has them)."""
        owners: dict[str, str | None] = {}
        tombstones: set[str] = set()
        unchanged: set[str] = set()
        docs = {p.id: p.doc for p in batch}
        ids = list(docs)
        for start in range(0, len(ids), _LOOKUP):
            sql, params = in_list("l.id", ids[start : start + _LOOKUP])
            # A bulk reload emptied the tables (and dropped their indexes): what they held is
            # in self.reloaded, and the feed's duplicates are caught as it is read.
            for ident, owner, doc in (
                []
                if self.bulk
                else self.tx.fetchall(
                    f"SELECT l.id, l.dealer_id, d.doc FROM inv_listing l JOIN inv_doc d ON d.id = l.id WHERE {sql}",
                    params,
                )
            ):
                owners[ident] = owner
                if doc == docs[ident]:
                    unchanged.add(ident)
            sql, params = in_list("id", ids[start : start + _LOOKUP])
            tombstones.update(row[0] for row in self.tx.fetchall(f"SELECT id FROM inv_tombstone WHERE {sql}", params))
        return owners, tombstones, unchanged

    def _write(self, batch: list[PreparedListing]) -> None:
        if not batch:
            return
        tx = self.tx
        owners, tombstones, unchanged = self._stored(batch)
        if len(self.bits) != len(self.labels):  # a code without a bit may gain one: rewrite all
            unchanged = set()
        reloaded = self.reloaded
        for p in batch:
            owner = owners.get(p.id)
            if owner is None and p.id in reloaded:
                owner = reloaded[p.id][1]
            if owner is not None and p.row.dealer_id is not None and owner != p.row.dealer_id:
                raise InventoryImportError(p.index, "vehicle_id already belongs to another dealer")
        # A listing stored exactly as the feed has it (the same document, so the same row)
        # stays as it is: a nightly feed mostly repeats itself.
        rewritten = [ident for ident in owners if ident not in unchanged]
        rids = self._forget(rewritten) if rewritten else {}
        if tombstones:
            sql, params = in_list("id", list(tombstones))
            tx.execute(f"DELETE FROM inv_tombstone WHERE {sql}", params)
        rows, docs, texts, beyond_masks, presents, gone = [], [], [], [], [], []
        written: list[int] = []
        bits, codes_seen = self.bits, self.codes_seen
        for p in batch:
            row = p.row
            was_available = p.id in owners or reloaded.pop(p.id, None) is not None
            if not p.eligible:
                gone.append((p.id, row.dealer_id, row.vin, row.stock, self.now_us))
                self.removed += was_available
                continue
            if was_available:
                self.updated += 1
            else:
                self.inserted += 1
            if p.id in unchanged:
                codes_seen.update(code for code, _label, _present in p.evidence)
                continue
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
                        beyond_masks.append((p.id, code))
                    else:
                        masked.append(code)
            rid = rids.get(p.id)
            if rid is None:
                rid = self.next_rid
                self.next_rid += 1
            rows.append(row + tuple(feature_masks(masked, bits)) + (rid,))
            written.append(rid)
            docs.append((p.id, p.doc))
            texts.append((p.id, p.keywords))
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
                insert(tx, "inv_listing", LISTING_COLUMNS, rows)
            except tx.db.overflow_errors:  # a number beyond BIGINT: name the listing (rolls back)
                culprit = next(
                    p
                    for p in batch
                    if p.eligible and any(v.__class__ is int and not -INT64 <= v < INT64 for v in p.row)
                )
                raise InventoryImportError(culprit.index, "a number is too large to store") from None
            insert(tx, "inv_doc", ("id", "doc"), docs)
            insert(tx, "inv_text", ("id", "query"), texts)
        if beyond_masks:
            tx.executemany("INSERT INTO inv_feature_extra (id, code) VALUES (?, ?)", beyond_masks)

    def _finish(self, *, full_replace: bool) -> None:
        tx = self.tx
        terms = [
            (name, key, display)
            for name, displays in zip(TERM_FILTERS, self.term_displays)
            for key, display in displays.items()
        ]
        if terms:
            tx.executemany(
                "INSERT INTO inv_term (field, term, display) VALUES (?, ?, ?) ON CONFLICT (field, term) DO NOTHING",
                terms,
            )
        if self.new_codes:
            tx.executemany(
                "INSERT INTO inv_vocab (code, label, bit) VALUES (?, ?, ?)",
                [(code, self.labels[code], self.bits.get(code)) for code in self.new_codes],
            )
        new = set(self.new_codes)
        assigned = [(bit, code) for code, bit in self.bits.items() if code not in new]
        if assigned:  # codes that were stored without a bit may have gained one
            tx.executemany("UPDATE inv_vocab SET bit = ? WHERE code = ? AND bit IS NULL", assigned)
        if full_replace:
            # Every available listing came from this feed: codes it lacks are in no row.
            retired = [(code,) for code in self.labels if code not in self.codes_seen]
            if retired:
                tx.executemany("DELETE FROM inv_vocab WHERE code = ?", retired)
        changed = self.facet_changes.changed()
        if changed:
            tx.db.dialect.insert_rows(
                tx,
                "inv_facet_count",
                ("currency", "dealer_key", "field", "value", "n"),
                changed,
                "ON CONFLICT (currency, dealer_key, field, value) DO UPDATE SET n = inv_facet_count.n + excluded.n",
            )
            tx.execute("DELETE FROM inv_facet_count WHERE n = 0")
        tx.execute(
            "DELETE FROM inv_tombstone WHERE removed_us < ?",
            (self.now_us - TOMBSTONE_RETENTION_SECONDS * 1_000_000,),
        )
        tx.execute("UPDATE inv_meta SET num = num + 1 WHERE name = 'version'")
        tx.execute("UPDATE inv_meta SET num = ? WHERE name = 'next_rid'", (self.next_rid,))
        version = read_version(tx)
        if self.changed is None:  # too many to list: a process behind this version rebuilds
            tx.execute("DELETE FROM inv_change")
            tx.execute("UPDATE inv_meta SET num = ? WHERE name = 'changes_from'", (version,))
        else:
            tx.db.dialect.insert_rows(
                tx, "inv_change", ("version", "rid"), [(version, rid) for rid in sorted(self.changed)]
            )
            oldest = version - CHANGE_VERSIONS
            tx.execute("DELETE FROM inv_change WHERE version <= ?", (oldest,))
            tx.execute("UPDATE inv_meta SET num = ? WHERE name = 'changes_from' AND num < ?", (oldest, oldest))
        if self.sellers:
            tx.executemany(
                "INSERT INTO inv_seller (dealer_key, version) VALUES (?, ?) "
                "ON CONFLICT (dealer_key) DO UPDATE SET version = excluded.version",
                [(seller, version) for seller in sorted(self.sellers)],
            )
