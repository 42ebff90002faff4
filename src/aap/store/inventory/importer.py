"""One import: listing rows, tombstones, vocabulary bits and facet counts, in one transaction.

Imports are atomic: readers keep seeing the previous inventory until the
commit, and any error rolls everything back. Listings that leave the eligible
statuses, or that a replace import drops, move to ``inv_tombstone``, so that
``inventory.vehicle`` can tell VEHICLE_UNAVAILABLE (known, gone) from
VEHICLE_NOT_FOUND (never known). Every import bumps the inventory version and
forgets the remembered totals of the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

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
)
from aap.store.inventory.sql import feature_masks, in_list

TOMBSTONE_RETENTION_SECONDS = 180 * 86_400
_BATCH = 1000  # listings prepared, then written together
_INSERT_LISTING = (f"INSERT INTO inv_listing ({', '.join(LISTING_COLUMNS)}) "
                   f"VALUES ({', '.join('?' * len(LISTING_COLUMNS))})")
_INSERT_TOMBSTONE = "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) VALUES (?, ?, ?, ?, ?)"

# (id, dealer_id, vin, stock): what a tombstone keeps of a listing.
Identity = tuple[str, "str | None", "str | None", "str | None"]


@dataclass(frozen=True)
class ImportStats:
    inserted: int   # listings that became available (new, or back from a tombstone)
    updated: int    # available listings rewritten from the feed
    removed: int    # available listings that became tombstones
    total: int      # available listings after the import
    before: int = 0   # available listings of the import's scope before it
    omitted: int = 0  # of ``removed``: those a replace dropped for missing from the feed


class ImportJob:
    """One import transaction.

    Two ways to write. Incremental (upserts): each listing already stored is
    subtracted from the facet counts and rewritten. Reload (where the dialect
    ``reloads_in_bulk``, when the import rewrites the whole inventory — the first
    load, or a replace without a dealer scope): the listing tables are emptied and
    their secondary indexes dropped, the feed is appended, and the indexes are
    rebuilt once; the facet counts are rebuilt from the feed.
    """

    def __init__(self, tx: Tx, dealer_id: str | None, replace: bool, *, now_us: int,
                 keep: frozenset[str] = frozenset()) -> None:
        self.tx = tx
        self.dealer_id = dealer_id
        self.replace = replace
        self.now_us = now_us
        self.keep = keep  # ids a replace leaves in place although the feed lacks them
        # Available listings stored, id -> dealer_id (kept current as the import goes).
        self.owner_of: dict[str, str | None] = dict(tx.fetchall("SELECT id, dealer_id FROM inv_listing"))
        self.before = sum(1 for owner in self.owner_of.values() if dealer_id is None or owner == dealer_id)
        self.omitted = 0
        self.tombstoned = {row[0] for row in tx.fetchall("SELECT id FROM inv_tombstone")}
        vocabulary = tx.fetchall("SELECT code, label, bit FROM inv_vocab")
        self.labels: dict[str, str] = {code: label for code, label, _ in vocabulary}
        self.bits: dict[str, int] = {code: bit for code, _, bit in vocabulary if bit is not None}
        self.new_codes: list[str] = []
        self.codes_seen: set[str] = set()
        self.term_displays: list[dict[str, str]] = [{} for _ in TERM_FILTERS]  # per field: key -> display
        self.facet_changes = FacetCountChanges()
        self.inserted = self.updated = self.removed = 0
        # Reload: the listings stored before it, by id; what the feed leaves out becomes a tombstone.
        self.reloaded: dict[str, Identity] = {}
        self.index_statements: list[str] = []
        if tx.db.dialect.reloads_in_bulk and not keep and (not self.owner_of or (replace and dealer_id is None)):
            self._begin_reload()

    def _begin_reload(self) -> None:
        tx = self.tx
        self.reloaded = {row[0]: row for row in tx.fetchall("SELECT id, dealer_id, vin, stock FROM inv_listing")}
        for table in LISTING_TABLES + ("inv_facet_count",):
            tx.execute(f"DELETE FROM {table}")
        self.owner_of = {}
        self.index_statements = tx.db.dialect.drop_indexes(tx, ("inv_listing", "inv_doc", "inv_text"))

    def run(self, listings: Iterable[dict[str, Any]], progress: Callable[[int], None] | None) -> ImportStats:
        seen: set[str] = set()
        batch: list[PreparedListing] = []
        count = 0
        for index, listing in enumerate(listings):
            prepared = PreparedListing(listing, index, self.dealer_id)
            ident = prepared.id
            if ident in seen:
                raise InventoryImportError(index, "the feed lists this listing id twice")
            owner = self.owner_of.get(ident)
            if owner is None and ident in self.reloaded:
                owner = self.reloaded[ident][1]
            if owner is not None and prepared.row.dealer_id is not None and owner != prepared.row.dealer_id:
                raise InventoryImportError(index, "vehicle_id already belongs to another dealer")
            seen.add(ident)
            batch.append(prepared)
            count += 1
            if len(batch) >= _BATCH:
                self._write(batch)
                batch = []
                if progress:
                    progress(count)
        self._write(batch)
        for statement in self.index_statements:
            self.tx.execute(statement)
        if self.reloaded:  # whatever the feed left out becomes a tombstone
            self.omitted = len(self.reloaded)
            self._entomb(list(self.reloaded.values()))
        elif self.replace:
            dropped = [ident for ident, owner in self.owner_of.items()
                       if ident not in seen and ident not in self.keep
                       and (self.dealer_id is None or owner == self.dealer_id)]
            self.omitted = len(dropped)
            if dropped:
                self.tx.executemany(
                    "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) "
                    "SELECT id, dealer_id, vin, stock, ? FROM inv_listing WHERE id = ?",
                    [(self.now_us, ident) for ident in dropped],
                )
                self._forget(dropped)
                self.removed += len(dropped)
        self._finish(full_replace=self.replace and self.dealer_id is None)
        if progress:
            progress(count)
        total = self.tx.one("SELECT COUNT(*) FROM inv_listing")[0]
        return ImportStats(self.inserted, self.updated, self.removed, total, self.before, self.omitted)

    def _entomb(self, identities: list[Identity]) -> None:
        if identities:
            self.tx.executemany(_INSERT_TOMBSTONE, [identity + (self.now_us,) for identity in identities])
            self.tombstoned.update(identity[0] for identity in identities)
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

    def _forget(self, ids: list[str]) -> None:
        """Subtract the stored listings ``ids`` from the facet counts and delete their rows."""
        tx = self.tx
        code_of_bit = {bit: code for code, bit in self.bits.items()}
        for start in range(0, len(ids), 500):
            sql, params = in_list("id", ids[start:start + 500])
            beyond_masks: dict[str, list[str]] = {}
            for ident, code in tx.fetchall(f"SELECT id, code FROM inv_feature_extra WHERE {sql}", params):
                beyond_masks.setdefault(ident, []).append(code)
            rows = tx.fetchall(f"SELECT {', '.join(LISTING_COLUMNS)} FROM inv_listing WHERE {sql}", params)
            present = [
                [code_of_bit[column * BITS_PER_MASK + shift]
                 for column, mask in enumerate(row[-MASK_COLUMNS:]) if mask
                 for shift in range(BITS_PER_MASK) if mask >> shift & 1] + beyond_masks.get(row[0], [])
                for row in rows
            ]
            self.facet_changes.add(rows, present, -1)
        keys = [(ident,) for ident in ids]
        for table in LISTING_TABLES:
            tx.executemany(f"DELETE FROM {table} WHERE id = ?", keys)
        for ident in ids:
            del self.owner_of[ident]

    def _write(self, batch: list[PreparedListing]) -> None:
        if not batch:
            return
        tx = self.tx
        stored = [p.id for p in batch if p.id in self.owner_of]
        if stored:
            self._forget(stored)
        rewritten = set(stored)
        revived = [(p.id,) for p in batch if p.id in self.tombstoned]
        if revived:
            tx.executemany("DELETE FROM inv_tombstone WHERE id = ?", revived)
            self.tombstoned.difference_update(row[0] for row in revived)
        rows, docs, texts, beyond_masks, presents, gone = [], [], [], [], [], []
        bits, reloaded, codes_seen = self.bits, self.reloaded, self.codes_seen
        for p in batch:
            row = p.row
            was_available = p.id in rewritten or reloaded.pop(p.id, None) is not None
            if not p.eligible:
                gone.append((p.id, row.dealer_id, row.vin, row.stock, self.now_us))
                self.removed += was_available
                continue
            if was_available:
                self.updated += 1
            else:
                self.inserted += 1
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
            rows.append(row + tuple(feature_masks(masked, bits)))
            docs.append((p.id, p.doc))
            texts.append((p.id, p.keywords))
            presents.append(present)
            # The display spelling of each new term key (zip stops before stock's).
            for displays, key, value in zip(self.term_displays, p.term_keys, p.term_values):
                if key is not None and key not in displays:
                    displays[key] = value.strip()
            self.owner_of[p.id] = row.dealer_id
        if gone:
            tx.executemany(_INSERT_TOMBSTONE, gone)
            self.tombstoned.update(row[0] for row in gone)
        if rows:
            self.facet_changes.add(rows, presents, 1)
            try:
                tx.executemany(_INSERT_LISTING, rows)
            except tx.db.overflow_errors:  # a number beyond BIGINT: name the listing (rolls back)
                culprit = next(p for p in batch if p.eligible and any(
                    v.__class__ is int and not -INT64 <= v < INT64 for v in p.row))
                raise InventoryImportError(culprit.index, "a number is too large to store") from None
            tx.executemany("INSERT INTO inv_doc (id, doc) VALUES (?, ?)", docs)
            tx.executemany("INSERT INTO inv_text (id, query) VALUES (?, ?)", texts)
        if beyond_masks:
            tx.executemany("INSERT INTO inv_feature_extra (id, code) VALUES (?, ?)", beyond_masks)

    def _finish(self, *, full_replace: bool) -> None:
        tx = self.tx
        terms = [(name, key, display) for name, displays in zip(TERM_FILTERS, self.term_displays)
                 for key, display in displays.items()]
        if terms:
            tx.executemany(
                "INSERT INTO inv_term (field, term, display) VALUES (?, ?, ?) "
                "ON CONFLICT (field, term) DO NOTHING",
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
            tx.executemany(
                "INSERT INTO inv_facet_count (currency, dealer_key, field, value, n) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (currency, dealer_key, field, value) DO UPDATE SET n = inv_facet_count.n + excluded.n",
                changed,
            )
            tx.execute("DELETE FROM inv_facet_count WHERE n = 0")
        tx.execute(
            "DELETE FROM inv_tombstone WHERE removed_us < ?",
            (self.now_us - TOMBSTONE_RETENTION_SECONDS * 1_000_000,),
        )
        tx.execute("DELETE FROM inv_count")  # every remembered total is of an older version
        tx.execute("UPDATE inv_meta SET num = num + 1 WHERE name = 'version'")
