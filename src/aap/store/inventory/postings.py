"""The posting index: exact counts without visiting the matching rows.

For every value of every low-cardinality listing column (term keys, condition,
status, rooftop, year, ...), every present feature code and every keyword part
(the casefolded make, model, trim and ``features`` entries), the index keeps
the set of listings that have it, as a compressed bitmap of row numbers
(``inv_listing.rid``; Roaring bitmaps, ``pyroaring``). A matching set is then
unions and intersections of bitmaps, and its size — the exact total
(``InventorySearchResponse.total``, seed 004), never an estimate — is known
without reading a row. Facet counts are intersection sizes.

Keyword tokens match substrings (``filters.query``): a token selects every
dictionary part containing it, plus the listings whose VIN or stock number
contains it. VINs and stock numbers are unique per listing, so they are not in
the dictionary; instead each character of them has a bitmap. A one-character
token is exact from those; for a longer one, the listings holding all of its
characters are candidates, checked against their keyword text in SQL (few,
unless the token looks like part of a VIN: then the index declines and the
count runs in SQL). Price ranges are answered from value buckets (each
$1,000 of price has a bitmap): whole buckets inside the range match, and only
the listings of the buckets a bound cuts through are checked against their
prices (read once per bucket and index version). Filters on
the other high-cardinality columns (mileage, VIN, stock) are not indexed; a query
using one is counted in SQL.

The index lives in each process, is built from the database (in the
background once the inventory is large) and is brought up to a newer inventory
version by re-reading only the rows the imports since changed (``inv_change``),
or else only the sellers whose ``inv_seller.version`` moved: one dealer's import
costs at most that dealer's rows. An index object never changes once
built; a refresh makes a new one that shares every untouched bitmap. See
docs/search.md, "Counting at marketplace scale", for the measurements behind it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pyroaring import BitMap, FrozenBitMap

from aap.inventory.query import Criteria
from aap.memory import return_free_memory
from aap.store.db import Database, Tx
from aap.store.inventory.schema import BITS_PER_MASK, FEATURE_MASKS, read_meta, read_version
from aap.store.inventory.sql import Clause, rows_in, seller_clause
from aap.util.memo import Memo

if TYPE_CHECKING:
    from aap.store.inventory.snapshot import InventorySnapshot

log = logging.getLogger("aap.inventory")

EMPTY = FrozenBitMap()
#: Indexed columns: every value gets a bitmap (``rooftop``: the missing value too).
COLUMNS: tuple[str, ...] = (
    "currency",
    "status",
    "condition",
    "vehicle_type",
    "rooftop",
    "make_k",
    "model_k",
    "trim_k",
    "transmission_k",
    "fuel_k",
    "driveline_k",
    "body_k",
    "exterior_color_k",
    "interior_color_k",
    "charge_port_k",
    "year",
    "dc_fast_charge",
    "displacement_cc",
    "electric_range_mi",
)
#: High-cardinality columns whose facet ranges are wanted: bitmaps per bucket of values, so that
#: a bound is looked for among the matching listings of one bucket only.
BUCKETS: dict[str, int] = {"price": 1000, "odometer_mm": 1000 * 1_609_344}  # $1,000; 1,000 mi
#: The lists kept per bucket: ``column`` (every value of the bucket) and ``column=`` (only the value
#: the bucket starts at: a round bound such as ``price_max: 40000`` then needs no SQL check).
BUCKET_LISTS: tuple[str, ...] = (*BUCKETS, *(f"{c}=" for c in BUCKETS))
#: What the index reads of each listing, by name: ``(name, SQL on l = inv_listing, t = inv_text)``.
#: A column in :data:`COLUMNS` or :data:`BUCKETS` is read from here by its own name, so indexing
#: another column is one edit of those tables.
_ROW: tuple[tuple[str, str], ...] = (
    ("rid", "l.rid"),
    ("seller", "COALESCE(l.dealer_id, '')"),
    *((column, f"l.{column}") for column in COLUMNS),
    *((mask, f"l.{mask}") for mask in FEATURE_MASKS),
    ("vin", "l.vin"),
    ("stock", "l.stock"),
    ("keywords", "t.query"),
    *((column, f"l.{column}") for column in BUCKETS),
)
_SELECT = ", ".join(sql for _name, sql in _ROW)
if len({name for name, _sql in _ROW}) != len(_ROW):  # a name read twice would read the wrong values
    raise RuntimeError("the posting index reads two columns under one name")
# Filters answered by the index: (filter name, column).
_EXACT = {"condition": "condition", "vehicle_type": "vehicle_type", "status": "status", "rooftops": "rooftop"}
_RANGES = {
    "year": ("year_min", "year_max"),
    "displacement_cc": ("displacement_cc_min", "displacement_cc_max"),
    "electric_range_mi": ("electric_range_mi_min", "electric_range_mi_max"),
}
#: Range filters on a :data:`BUCKETS` column: whole buckets from the index, the listings of a
#: bucket the bound cuts through checked in SQL (by row number).
_BUCKETED = {"price": ("price_min", "price_max")}
_UNINDEXED = frozenset({"mileage_max", "vin", "stock"})
#: Candidates of a long keyword token checked in SQL at most; beyond, the count runs in SQL.
CHECK_CANDIDATES = 20_000
#: Rows of changed sellers read to refresh an index in a request at most; beyond, it is
#: rebuilt in the background (and counts run in SQL meanwhile).
REFRESH_ROWS = 100_000
#: A set of up to this many listings goes to SQL as its row numbers; a larger one by its condition.
ROW_LIST = 2000
#: Row numbers read at a time by a build: at 100k listings, 50,000 at a time peaked at +108 MiB
#: of RSS, 5,000 at +17.8 MiB and 1,000 at +11.9 MiB (+8.9 with growing bitmaps freed as they
#: are frozen), all in about 1 s (docs/benchmarks.md, "Memory").
BUILD_CHUNK = 1_000
#: Range-encoded bitmaps (:meth:`Postings._below`) one index keeps at most: each is at most
#: one bit per listing (12.5 KB per 100k listings).
BELOW_KEPT = 64
#: Buckets whose listings' values (:meth:`Postings._values`) one index keeps at most: about 5,000
#: listings a bucket at a million listings.
VALUES_KEPT = 16
#: Inventories up to this many row numbers are indexed at once, in the request.
BUILD_NOW_ROWS = 50_000

Bitmaps = dict[Any, FrozenBitMap]


class Postings:
    """One inventory version's posting lists (immutable)."""

    def __init__(
        self,
        version: int,
        sellers: dict[str, FrozenBitMap],
        columns: dict[str, Bitmaps],
        features: Bitmaps,
        parts: Bitmaps,
        chars: Bitmaps,
        buckets: dict[str, Bitmaps],
    ) -> None:
        self.version = version
        self.buckets = buckets  # BUCKET_LISTS name -> value // width -> listings
        self.sellers = sellers  # dealer key -> its listings
        self.columns = columns  # column -> value -> listings
        self.features = features  # present feature code -> listings
        self.parts = parts  # keyword part (casefolded) -> listings
        self.chars = chars  # character of a casefolded VIN or stock number -> listings
        self._ranges: Memo[tuple[str, int | None], FrozenBitMap] = Memo(BELOW_KEPT)  # see _below
        self._bucket_values: Memo[tuple[str, int], dict[int, int]] = Memo(VALUES_KEPT)  # see _values

    # -- building ---------------------------------------------------------------
    @classmethod
    def build(cls, tx: Tx) -> Postings:
        """The index of the inventory ``tx`` sees, read :data:`BUILD_CHUNK` row numbers at a
        time: the rows read are the memory a build needs (the index itself is small), and each
        chunk's lists are added in place to the growing ones."""
        upper = read_meta(tx, "next_rid")
        growing = _Growing()
        for start in range(0, upper, BUILD_CHUNK):
            growing.add(_Builder.read(tx, "l.rid >= ? AND l.rid < ?", [start, start + BUILD_CHUNK]))
        return growing.frozen(read_version(tx))

    def refreshed(self, tx: Tx, sellers: Sequence[str]) -> Postings:
        """This index with ``sellers`` re-read from ``tx``'s snapshot."""
        gone = BitMap()
        for seller in sellers:
            gone |= self.sellers.get(seller, EMPTY)
        where, params = seller_clause(sellers)
        return self._merged(tx, gone, _Builder.read(tx, where, params))

    def with_rows(self, tx: Tx, rids: BitMap) -> Postings:
        """This index with the listings ``rids`` (removed or written since) re-read from ``tx``."""
        where, params = tx.db.dialect.integers_in("l.rid", list(rids))
        return self._merged(tx, rids, _Builder.read(tx, where, params))

    def _merged(self, tx: Tx, gone: BitMap, fresh: _Builder) -> Postings:
        return Postings(
            read_version(tx),
            _merge(self.sellers, fresh.sellers, gone),
            {column: _merge(self.columns[column], fresh.columns[column], gone) for column in COLUMNS},
            _merge(self.features, fresh.features, gone),
            _merge(self.parts, fresh.parts, gone),
            _merge(self.chars, fresh.chars, gone),
            {column: _merge(self.buckets[column], fresh.buckets[column], gone) for column in BUCKET_LISTS},
        )

    # -- matching -----------------------------------------------------------------
    def indexes(self, criteria: Criteria) -> bool:
        """Whether the index can answer ``criteria`` (no filter on an unindexed column)."""
        return not (_UNINDEXED & criteria.applied.keys())

    def match(self, tx: Tx, criteria: Criteria) -> FrozenBitMap | None:
        """The row numbers of ``criteria``'s matching set, or None when the index declines."""
        if not self.indexes(criteria):
            return None
        column = self.columns
        sets: list[FrozenBitMap | BitMap] = [column["currency"].get(criteria.currency, EMPTY)]
        if criteria.dealer_ids is not None:
            sets.append(_union(self.sellers.get(d, EMPTY) for d in criteria.dealer_ids))
        filters = criteria.applied
        for name, keys in criteria.terms.items():
            values = column[f"{name}_k"]
            sets.append(_union(values.get(k, EMPTY) for k in keys))
        for name, field in _EXACT.items():
            if name in filters:
                values = column[field]
                sets.append(_union(values.get(v, EMPTY) for v in filters[name]))
        for field, (low_name, high_name) in _RANGES.items():
            if low_name in filters or high_name in filters:
                low, high = filters.get(low_name), filters.get(high_name)
                sets.append(
                    _union(
                        b
                        for v, b in column[field].items()
                        if v is not None and (low is None or v >= low) and (high is None or v <= high)
                    )
                )
        if "dc_fast_charge" in filters:
            sets.append(column["dc_fast_charge"].get(1 if filters["dc_fast_charge"] else 0, EMPTY))
        if "features_all" in filters:
            sets.extend(self.features.get(code, EMPTY) for code in filters["features_all"])
        if "features_any" in filters:
            sets.append(_union(self.features.get(code, EMPTY) for code in filters["features_any"]))
        if criteria.places is not None:
            rooftops = column["rooftop"]
            found = BitMap()
            for place in criteria.places:
                here = rooftops.get(place.rooftop, EMPTY)
                if place.match_null:
                    here = here | rooftops.get(None, EMPTY)
                if place.dealer_id is not None:
                    here = here & self.sellers.get(place.dealer_id, EMPTY)
                found |= here
            sets.append(found)
        sets.sort(key=len)
        matched = BitMap(sets[0])
        for other in sets[1:]:
            if not matched:
                break
            matched &= other
        for bucketed, (low_name, high_name) in _BUCKETED.items():
            if matched and (low_name in filters or high_name in filters):
                matched = self._within(tx, bucketed, matched, filters.get(low_name), filters.get(high_name))
        for token in sorted((t.casefold() for t in criteria.tokens), key=len, reverse=True):
            if not matched:
                break
            narrowed = self._token(tx, token, matched)
            if narrowed is None:
                return None
            matched = narrowed
        return FrozenBitMap(matched)

    def _within(self, tx: Tx, column: str, among: BitMap, low: int | None, high: int | None) -> BitMap:
        """The listings of ``among`` whose ``column`` lies in ``[low, high]`` (None: unbounded;
        a listing without the value never matches).

        A bucket holds the integer values ``[key * width, (key + 1) * width)`` (the columns
        are BIGINT). The buckets wholly inside the range match whole: the listings below
        the first bucket past the range minus those below the first bucket in it
        (:meth:`_below`). Of the bucket a round high bound starts (``price_max: 40000``),
        the listings at exactly that value match. The listings of the (at most two) other
        buckets a bound cuts through are checked against their values (:meth:`_values`).
        """
        width = BUCKETS[column]
        first = None if low is None else -(-low // width)  # first bucket starting at or after low
        past = None if high is None else (high + 1) // width  # first bucket not wholly at or below high
        found = among & self._below(column, past)
        if first is not None:
            found -= self._below(column, first)
        cut = set()  # the buckets a bound falls inside of (one, when both fall in the same)
        if low is not None and low % width:
            cut.add(low // width)
        if high is not None and (high + 1) % width:
            if high % width == 0:
                # A round high bound: of its bucket, only the value it starts at is in range (and
                # low is at most that value, so nothing of the bucket is below it).
                found |= among & self.buckets[f"{column}="].get(high // width, EMPTY)
            else:
                cut.add(high // width)
        lowest = -math.inf if low is None else low
        highest = math.inf if high is None else high
        for key in cut:
            values = self._values(tx, column, key)
            found |= BitMap(
                rid for rid in among & self.buckets[column].get(key, EMPTY) if lowest <= values[rid] <= highest
            )
        return found

    def _values(self, tx: Tx, column: str, key: int) -> dict[int, int]:
        """``column``'s value of each listing in bucket ``key`` (by row number), read from ``tx``
        (a snapshot of this index's version) on first use and kept (at most :data:`VALUES_KEPT`
        buckets): a bound that cuts a bucket is then checked without a query per request."""

        def read() -> dict[int, int]:
            rows, params = rows_in(tx.db.dialect, tx.tenant, self.buckets[column].get(key, EMPTY))
            return {
                row[0]: row[1]
                for row in tx.fetchall(f"SELECT l.rid, l.{column} FROM inv_listing l WHERE {rows}", params)
            }

        return self._bucket_values.get((column, key), read)

    def _below(self, column: str, key: int | None) -> FrozenBitMap:
        """The listings in ``column``'s buckets before bucket ``key`` (None: every bucket).

        A range-encoded bitmap, made on first use and kept for this index's life (at most
        :data:`BELOW_KEPT` of them): a range then costs one or two intersections instead of
        a union of every bucket in it (at 100k listings, 47 µs for a $40,000 range).
        """
        buckets = self.buckets[column]
        return self._ranges.get(
            (column, key), lambda: FrozenBitMap(_union(b for k, b in buckets.items() if key is None or k < key))
        )

    def _token(self, tx: Tx, token: str, within: BitMap) -> BitMap | None:
        """The listings of ``within`` whose keyword text contains ``token`` (casefolded)."""
        found = within & _union(b for part, b in self.parts.items() if token in part)
        candidates = within - found
        for char in set(token):
            if not candidates:
                break
            candidates &= self.chars.get(char, EMPTY)
        if not candidates:
            return found
        if len(token) == 1:  # the character bitmap is the answer
            return found | candidates
        if len(candidates) > CHECK_CANDIDATES:
            return None
        pattern = "%" + token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        among, params = rows_in(tx.db.dialect, tx.tenant, candidates)
        checked = tx.fetchall(
            f"SELECT l.rid FROM inv_listing l JOIN inv_text t ON t.tenant_id = l.tenant_id AND t.id = l.id "
            f"WHERE {among} AND t.query LIKE ? ESCAPE '\\'",
            params + [pattern],
        )
        return found | BitMap(row[0] for row in checked)

    # -- counting -------------------------------------------------------------------
    def value_counts(self, column: str, matched: FrozenBitMap) -> dict[str, int]:
        """Matching listings per value of ``column`` (values as text, zeros left out)."""
        out: dict[str, int] = {}
        for value, listings in self.columns[column].items():
            if value is not None:
                n = matched.intersection_cardinality(listings)
                if n:
                    out[str(value)] = n
        return out

    def bounds(self, tx: Tx, column: str, matched: FrozenBitMap, where: Clause) -> tuple[Any, Any] | None:
        """(lowest, highest) value of ``column`` (a :data:`BUCKETS` one) among ``matched``
        (``where`` selects them): the first and last buckets holding a match, then the extreme
        value of those matches in SQL — by row number when they are few, else within the
        bucket's range, where matches are dense enough for an index walk to meet one soon."""
        buckets = self.buckets[column]
        keys = sorted(buckets)
        low = next((k for k in keys if matched.intersect(buckets[k])), None)
        if low is None:
            return None
        high = next(k for k in reversed(keys) if matched.intersect(buckets[k]))
        width = BUCKETS[column]
        found = []
        for key, extreme in ((low, "MIN"), (high, "MAX")):
            members = matched & buckets[key]
            if len(members) <= ROW_LIST:
                among, params = rows_in(tx.db.dialect, tx.tenant, members)
            else:
                among = f"{where[0]} AND l.{column} >= ? AND l.{column} < ?"
                params = where[1] + [key * width, (key + 1) * width]
            found.append(tx.one(f"SELECT {extreme}(l.{column}) FROM inv_listing l WHERE {among}", params)[0])
        return found[0], found[1]

    def feature_counts(self, matched: FrozenBitMap) -> dict[str, int]:
        return {code: matched.intersection_cardinality(b) for code, b in self.features.items()}


def _union(bitmaps: Iterable[FrozenBitMap | BitMap]) -> BitMap:
    return BitMap.union(BitMap(), *bitmaps)


def _merge(old: Bitmaps, fresh: Bitmaps, gone: BitMap) -> Bitmaps:
    """``old`` without the rows in ``gone``, plus ``fresh``; untouched bitmaps are shared."""
    if not gone:
        merged = dict(old)
    else:
        merged = {}
        for key, listings in old.items():
            if listings.intersect(gone):
                kept = listings - gone
                if kept:
                    merged[key] = FrozenBitMap(kept)
            else:
                merged[key] = listings
    for key, added in fresh.items():
        merged[key] = FrozenBitMap(merged[key] | added) if key in merged else FrozenBitMap(added)
    return merged


class _Builder:
    """Posting lists of a batch of listing rows (:data:`_ROW`, by name)."""

    @classmethod
    def read(cls, tx: Tx, where: str, params: list[Any]) -> _Builder:
        """The posting lists of the listings ``where`` selects (on ``l``) among ``tx``'s tenant's,
        in ``tx``'s snapshot."""
        bits = {
            bit: code
            for code, bit in tx.fetchall(
                "SELECT code, bit FROM inv_vocab WHERE tenant_id = ? AND bit IS NOT NULL", (tx.tenant,)
            )
        }
        scoped = [tx.tenant, *params]
        rows = tx.fetchall(
            f"SELECT {_SELECT} FROM inv_listing l JOIN inv_text t ON t.tenant_id = l.tenant_id AND t.id = l.id"
            f" WHERE l.tenant_id = ? AND {where}",
            scoped,
        )
        extra = tx.fetchall(
            "SELECT l.rid, x.code FROM inv_feature_extra x JOIN inv_listing l ON l.tenant_id = x.tenant_id"
            f" AND l.id = x.id WHERE l.tenant_id = ? AND {where}",
            scoped,
        )
        return cls(rows, extra, bits)

    def __init__(self, rows: list[tuple[Any, ...]], extra: list[tuple[Any, ...]], bits: dict[int, str]) -> None:
        """``rows`` as :data:`_ROW` reads them; ``extra``: (rid, feature code) beyond the masks."""
        self.sellers: dict[str, FrozenBitMap] = {}
        self.columns: dict[str, Bitmaps] = {}
        self.features: Bitmaps = {}
        self.parts: Bitmaps = {}
        self.chars: Bitmaps = {}
        self.buckets: dict[str, Bitmaps] = {c: {} for c in BUCKET_LISTS}
        if not rows:
            self.columns = {c: {} for c in COLUMNS}
            return
        row: dict[str, tuple[Any, ...]] = {name: values for (name, _sql), values in zip(_ROW, zip(*rows))}
        rids = row["rid"]
        self.sellers = {k: FrozenBitMap(v) for k, v in _group(rids, row["seller"]).items()}
        for column in COLUMNS:
            groups = _group(rids, row[column])
            if column != "rooftop":
                groups.pop(None, None)
            self.columns[column] = {k: FrozenBitMap(v) for k, v in groups.items()}
        features: defaultdict[str, BitMap] = defaultdict(BitMap)
        for m, mask_column in enumerate(FEATURE_MASKS):
            for mask, members in _group(rids, row[mask_column]).items():
                shift = 0
                while mask:
                    if mask & 1:
                        code = bits.get(m * BITS_PER_MASK + shift)
                        if code is not None:
                            features[code].update(members)
                    mask >>= 1
                    shift += 1
        for rid, code in extra:
            features[code].add(rid)
        self.features = {k: FrozenBitMap(v) for k, v in features.items()}
        parts: defaultdict[str, list[int]] = defaultdict(list)
        chars: defaultdict[str, list[int]] = defaultdict(list)
        for rid, vin, stock, text in zip(rids, row["vin"], row["stock"], row["keywords"]):
            codes = ((vin or "") + (stock or "")).casefold()
            own = {vin.casefold() if vin else None, stock.casefold() if stock else None}
            for part in set(text.split("\n")):
                if part not in own:
                    parts[part].append(rid)
            for char in set(codes):
                chars[char].append(rid)
        self.parts = {k: FrozenBitMap(v) for k, v in parts.items()}
        self.chars = {k: FrozenBitMap(v) for k, v in chars.items()}
        for column, width in BUCKETS.items():
            keyed: defaultdict[int, list[int]] = defaultdict(list)
            starts: defaultdict[int, list[int]] = defaultdict(list)
            for rid, value in zip(rids, row[column]):
                if value is not None:
                    keyed[value // width].append(rid)
                    if value % width == 0:
                        starts[value // width].append(rid)
            self.buckets[column] = {k: FrozenBitMap(v) for k, v in keyed.items()}
            self.buckets[f"{column}="] = {k: FrozenBitMap(v) for k, v in starts.items()}


class _Growing:
    """The posting lists of a build so far, as mutable bitmaps that each chunk is added to."""

    def __init__(self) -> None:
        self.sellers: defaultdict[str, BitMap] = defaultdict(BitMap)
        self.columns: dict[str, defaultdict[Any, BitMap]] = {c: defaultdict(BitMap) for c in COLUMNS}
        self.features: defaultdict[Any, BitMap] = defaultdict(BitMap)
        self.parts: defaultdict[Any, BitMap] = defaultdict(BitMap)
        self.chars: defaultdict[Any, BitMap] = defaultdict(BitMap)
        self.buckets: dict[str, defaultdict[Any, BitMap]] = {c: defaultdict(BitMap) for c in BUCKET_LISTS}

    def add(self, chunk: _Builder) -> None:
        pairs = [
            (self.sellers, chunk.sellers),
            (self.features, chunk.features),
            (self.parts, chunk.parts),
            (self.chars, chunk.chars),
        ]
        pairs += [(self.columns[c], chunk.columns[c]) for c in COLUMNS]
        pairs += [(self.buckets[c], chunk.buckets[c]) for c in BUCKET_LISTS]
        for into, fresh in pairs:
            for key, members in fresh.items():
                into[key] |= members

    def frozen(self, version: int) -> Postings:
        """The index these lists make; they are emptied on the way, so that each growing bitmap
        is freed as soon as its frozen copy exists (never the whole index twice at once)."""

        def freeze(lists: dict[Any, BitMap]) -> Bitmaps:
            return {key: FrozenBitMap(lists.pop(key)) for key in list(lists)}  # same order

        return Postings(
            version,
            freeze(self.sellers),
            {c: freeze(self.columns[c]) for c in COLUMNS},
            freeze(self.features),
            freeze(self.parts),
            freeze(self.chars),
            {c: freeze(self.buckets[c]) for c in BUCKET_LISTS},
        )


def _group(rids: Sequence[int], values: Sequence[Any]) -> dict[Any, list[int]]:
    groups: defaultdict[Any, list[int]] = defaultdict(list)
    for rid, value in zip(rids, values):
        groups[value].append(rid)
    return groups


class PostingCache:
    """The posting index of one store in this process: the newest two versions built.

    ``for_snapshot`` hands a snapshot the index of exactly its inventory version,
    refreshing the newest one for the sellers changed since when that is cheap,
    or None (the snapshot then counts in SQL) while a rebuild runs in the background.
    """

    def __init__(self, db: Database, *, enabled: bool = True, min_rows: int = 0) -> None:
        self.db = db
        self.enabled = enabled
        #: An inventory of fewer row numbers is counted in SQL, where it is cheap, and never
        #: indexed: a platform's thousands of small tenants then hold no index each.
        self.min_rows = min_rows
        self._small_version: int | None = None  # the last version seen below min_rows
        self._kept: list[Postings] = []
        self._lock = threading.Lock()
        self._building = False

    def small(self, version: int) -> bool:
        """Whether the inventory was found below ``min_rows`` at ``version`` (counted in SQL)."""
        return self.min_rows > 0 and version == self._small_version

    def for_snapshot(self, snapshot: InventorySnapshot) -> Postings | None:
        if not self.enabled:
            return None
        version = snapshot.version
        for kept in self._kept:
            if kept.version == version:
                return kept
        with self._lock:
            for kept in self._kept:
                if kept.version == version:
                    return kept
            newest = self._kept[0] if self._kept else None
            if newest is not None and newest.version > version:
                return None  # an older snapshot (a replica behind this process's newest index)
            tx = snapshot.tx
            if newest is None:
                if version == self._small_version:
                    return None  # small at this version: no read to ask again
                upper = snapshot.next_rid
                if upper < self.min_rows:
                    self._small_version = version
                    return None
                if upper > BUILD_NOW_ROWS:
                    self._build_later()
                    return None
                return self._keep(Postings.build(tx))
            if newest.version >= read_meta(tx, "changes_from"):
                # The rows written or removed since, as the imports listed them.
                rids = BitMap(
                    r[0]
                    for r in tx.fetchall(
                        "SELECT rid FROM inv_change WHERE tenant_id = ? AND version > ?", (tx.tenant, newest.version)
                    )
                )
                if len(rids) <= REFRESH_ROWS:
                    return self._keep(newest.with_rows(tx, rids))
            changed = [
                r[0]
                for r in tx.fetchall(
                    "SELECT dealer_key FROM inv_seller WHERE tenant_id = ? AND version > ?", (tx.tenant, newest.version)
                )
            ]
            before = sum(len(newest.sellers.get(s, EMPTY)) for s in changed)
            if before > REFRESH_ROWS:
                self._build_later()
                return None
            return self._keep(newest.refreshed(tx, changed))

    def _keep(self, postings: Postings) -> Postings:
        others = [kept for kept in self._kept if kept.version != postings.version]
        self._kept = sorted([postings] + others, key=lambda p: -p.version)[:2]
        return postings

    def warm(self) -> None:
        """Start building the index in the background, if this process has none (start-up)."""
        if self.enabled and not self._kept:
            with self._lock:
                if not self._kept:
                    self._build_later()

    def build_now(self) -> Postings | None:
        """Build the index of the current inventory (the benchmark's warm-up, start-up)."""
        if not self.enabled:
            return None
        with self.db.read() as tx:
            postings = Postings.build(tx)
        with self._lock:
            return self._keep(postings)

    def _build_later(self) -> None:
        if self._building:
            return
        self._building = True

        def run() -> None:
            started = time.perf_counter()
            try:
                postings = self.build_now()
                self.db.close_thread_connection()  # its page cache holds every row just read
                return_free_memory()  # the rows read and the bitmaps grown (aap.memory)
                log.info(
                    "posting index built",
                    extra={
                        "fields": {
                            "version": postings.version if postings else None,
                            "duration_ms": int((time.perf_counter() - started) * 1000),
                        }
                    },
                )
            except Exception as exc:  # counts fall back to SQL; never take a worker down
                log.warning("posting index build failed: %s", type(exc).__name__)
            finally:
                self._building = False

        threading.Thread(target=run, name="aap-postings", daemon=True).start()
