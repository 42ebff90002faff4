"""The inventory store: listings as narrow, denormalised rows plus their JSON documents.

Every filter and sort of ``inventory.search`` runs in SQL on columns prepared
at import time: casefolded term columns, exact integer odometers (millimetres,
so mi/km comparisons never round), ``updated_at`` as epoch microseconds, the
currency with its USD default, ``vehicle_type`` with its ``car`` default. The
listing JSON sits in its own table and is read only for the page returned, and
the keyword text in another, so that scans stay on narrow rows.

Features: each code of the vocabulary gets a bit, and a listing's *present*
codes are bits in four integer columns, so ``features_all``/``features_any``
and feature facet counts are arithmetic on the row, not joins. Codes beyond
the 252 bits (an unusually large vocabulary) fall back to a side table.

Facets: SQLite aggregates by sorting, so sixteen GROUP BYs over a large
matching set cost sixteen sorts. The unfiltered facets — what most agents ask
first — are therefore maintained at import time as per-value counts (per
currency and seller); filtered facets are counted in one pass over the
matching rows; both are cached per inventory version.

Counts: ``total`` is always exact or null, never an estimate. A count that
was slow to make is remembered in ``inv_count`` for its inventory version, so
the next pages of a search, and every worker, reuse it. With a count budget, a
count that outruns it answers null and finishes in the background, for the
requests after it.

Imports are atomic (one transaction). Rewriting the whole inventory on SQLite
(first load, full replace) drops and rebuilds the secondary indexes instead
of updating them row by row.

Identity: a listing's id is its ``vehicle_id``; a feed row without one gets a
stable synthesized id (hash of dealer_id + VIN, or + stock without a VIN).
Every stored document carries its id as ``vehicle_id``, so every result can be
resolved by ``inventory.vehicle`` and aggregate results always carry one.

Listings that leave the eligible statuses, or that a replace import drops, move
to a tombstone table: ``inventory.vehicle`` can then tell VEHICLE_UNAVAILABLE
(known, gone) from VEHICLE_NOT_FOUND (never known).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace as with_changes
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Iterable, Sequence

import orjson

from aap.inventory.query import (
    ELIGIBLE_STATUSES,
    MM_PER_UNIT,
    TERM_FILTERS,
    Criteria,
    Place,
    Position,
    SearchQuery,
    mm_to_unit,
)
from aap.store.db import Database, StatementTimeout, Tx, register_migrations

log = logging.getLogger("aap.inventory")

TOMBSTONE_RETENTION_SECONDS = 180 * 86_400
# Listings changed by one import beyond which table statistics (and, on PostgreSQL, the
# visibility map that index-only counts rely on) are refreshed right away.
_MAINTAIN_AFTER = 10_000
MASK_COLUMNS = 4
BITS_PER_MASK = 63  # bits 0..62 keep every mask a positive signed 64-bit integer
MASK_CAPACITY = MASK_COLUMNS * BITS_PER_MASK
_CHUNK = 1000
_ELIGIBLE = frozenset(ELIGIBLE_STATUSES)
_LISTING_TABLES = ("inv_listing", "inv_doc", "inv_text", "inv_feature_extra")
_MASKS = tuple(f"feat{i}" for i in range(MASK_COLUMNS))
_INT64 = 2**63  # SQL BIGINT holds -2**63 .. 2**63 - 1

# Listing columns, in insert order (the masks come last).
_COLUMNS: tuple[str, ...] = (
    "id", "dealer_id", "status", "condition", "vehicle_type", "currency",
    "vin", "stock", "stock_k", "make", "make_k", "model", "model_k", "trim_k",
    "transmission_k", "fuel_k", "driveline_k", "body_k", "exterior_color_k",
    "interior_color_k", "charge_port_k", "rooftop", "year", "price", "list_price",
    "msrp", "odometer_mm", "updated_us", "electric_range_mi", "dc_fast_charge",
    "displacement_cc",
) + _MASKS
_COL = {name: i for i, name in enumerate(_COLUMNS)}

# Facet field -> listing column, for the counted (term) facets.
_FACET_FIELDS: tuple[tuple[str, str], ...] = (
    ("makes", "make_k"), ("models", "model_k"), ("trims", "trim_k"), ("years", "year"),
    ("conditions", "condition"), ("transmissions", "transmission_k"), ("fuels", "fuel_k"),
    ("dc_fast_charge", "dc_fast_charge"), ("charge_ports", "charge_port_k"),
    ("drivelines", "driveline_k"), ("bodies", "body_k"), ("vehicle_types", "vehicle_type"),
    ("exterior_colors", "exterior_color_k"), ("interior_colors", "interior_color_k"),
    ("rooftops", "rooftop"), ("statuses", "status"),
)
_FACET_DISPLAY = {  # facet -> inv_term field holding display spellings
    "makes": "make", "models": "model", "trims": "trim", "transmissions": "transmission",
    "fuels": "fuel", "charge_ports": "charge_port", "drivelines": "driveline", "bodies": "body",
    "exterior_colors": "exterior_color", "interior_colors": "interior_color",
}
_RANGE_FACETS: tuple[tuple[str, str], ...] = (
    ("price_range", "price"), ("mileage_range", "odometer_mm"), ("year_range", "year"),
    ("displacement_cc_range", "displacement_cc"), ("electric_range_mi_range", "electric_range_mi"),
)
_FEATURE_FIELD = "features"
# Range fields without an index: their values are counted like term facets.
_COUNTED_RANGES: tuple[tuple[str, str], ...] = (
    ("displacement_cc_range", "displacement_cc"), ("electric_range_mi_range", "electric_range_mi"),
)
_COUNTED = tuple((facet, _COL[column]) for facet, column in _FACET_FIELDS + _COUNTED_RANGES)
_COUNTED_GETTER = itemgetter(*(index for _facet, index in _COUNTED))
_CURRENCY, _DEALER = _COL["currency"], _COL["dealer_id"]

_SCHEMA_V1 = f"""
CREATE TABLE inv_listing (
    id TEXT NOT NULL,
    dealer_id TEXT,
    status TEXT NOT NULL,
    condition TEXT,
    vehicle_type TEXT NOT NULL,
    currency TEXT NOT NULL,
    vin TEXT,
    stock TEXT,
    stock_k TEXT,
    make TEXT,
    make_k TEXT,
    model TEXT,
    model_k TEXT,
    trim_k TEXT,
    transmission_k TEXT,
    fuel_k TEXT,
    driveline_k TEXT,
    body_k TEXT,
    exterior_color_k TEXT,
    interior_color_k TEXT,
    charge_port_k TEXT,
    rooftop TEXT,
    year INTEGER,
    price BIGINT,
    list_price BIGINT,
    msrp BIGINT,
    odometer_mm BIGINT,
    updated_us BIGINT NOT NULL,
    electric_range_mi DOUBLE PRECISION,
    dc_fast_charge INTEGER,
    displacement_cc BIGINT,
    {", ".join(f"{m} BIGINT NOT NULL DEFAULT 0" for m in _MASKS)}
);
CREATE UNIQUE INDEX inv_listing_id ON inv_listing (id);
CREATE INDEX inv_listing_make ON inv_listing (make_k, currency, price);
CREATE INDEX inv_listing_price ON inv_listing (price, currency);
CREATE INDEX inv_listing_updated ON inv_listing (updated_us, currency);
CREATE INDEX inv_listing_odometer ON inv_listing (odometer_mm, currency);
CREATE INDEX inv_listing_year ON inv_listing (year, currency);
CREATE INDEX inv_listing_rooftop ON inv_listing (rooftop, currency, id);
CREATE INDEX inv_listing_vin ON inv_listing (vin);
CREATE INDEX inv_listing_stock ON inv_listing (stock);
CREATE TABLE inv_text (
    id TEXT NOT NULL,
    query TEXT NOT NULL
);
CREATE UNIQUE INDEX inv_text_id ON inv_text (id);
CREATE TABLE inv_doc (
    id TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE UNIQUE INDEX inv_doc_id ON inv_doc (id);
CREATE TABLE inv_feature_extra (
    id TEXT NOT NULL,
    code TEXT NOT NULL,
    PRIMARY KEY (id, code)
);
CREATE INDEX inv_feature_extra_code ON inv_feature_extra (code, id);
CREATE TABLE inv_tombstone (
    id TEXT PRIMARY KEY,
    dealer_id TEXT,
    vin TEXT,
    stock TEXT,
    removed_us BIGINT NOT NULL
);
CREATE INDEX inv_tombstone_vin ON inv_tombstone (vin);
CREATE INDEX inv_tombstone_stock ON inv_tombstone (stock);
CREATE INDEX inv_tombstone_removed ON inv_tombstone (removed_us);
CREATE TABLE inv_term (
    field TEXT NOT NULL,
    term TEXT NOT NULL,
    display TEXT NOT NULL,
    PRIMARY KEY (field, term)
);
CREATE TABLE inv_vocab (
    code TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    bit INTEGER
);
CREATE TABLE inv_facet_count (
    currency TEXT NOT NULL,
    dealer_key TEXT NOT NULL,
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (currency, dealer_key, field, value)
);
CREATE TABLE inv_meta (
    name TEXT PRIMARY KEY,
    num BIGINT NOT NULL
);
INSERT INTO inv_meta (name, num) VALUES ('version', 0)
"""

# Exact totals that were slow to count, per inventory version and matching set.
_SCHEMA_V2 = """
CREATE TABLE inv_count (
    version BIGINT NOT NULL,
    matching TEXT NOT NULL,
    total BIGINT NOT NULL,
    PRIMARY KEY (version, matching)
)
"""


def _keyword_index(tx: Tx) -> None:
    """PostgreSQL: a trigram index, so keyword tokens (substring ``LIKE``) need no full scan.

    ``pg_trgm`` ships with PostgreSQL; creating it needs the CREATE privilege on
    the database (it is a trusted extension). Without it, keyword search still
    works, by scanning.
    """
    if tx.db.dialect != "postgresql":
        return
    from psycopg import Error

    tx.execute("SAVEPOINT aap_trgm")
    try:
        tx.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Error as exc:
        tx.execute("ROLLBACK TO SAVEPOINT aap_trgm")
        log.warning("pg_trgm unavailable (%s): keyword search will scan", type(exc).__name__)
        return
    tx.execute("RELEASE SAVEPOINT aap_trgm")
    tx.execute("CREATE INDEX inv_text_trgm ON inv_text USING gin (query gin_trgm_ops)")


def _vacuum_often(tx: Tx) -> None:
    """PostgreSQL: autovacuum the listing tables after 1 % of their rows changed, not 20 %.

    Counts are index-only scans only on pages the visibility map marks all-visible;
    a marketplace's many small per-dealer imports would otherwise leave pages
    unmarked (and counts visiting the table) until a fifth of the table changed.
    """
    if tx.db.dialect != "postgresql":
        return
    for table in _LISTING_TABLES:
        tx.execute(f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.01, "
                   "autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01)")


register_migrations("inventory", [_SCHEMA_V1, _SCHEMA_V2, _keyword_index, _vacuum_often])
# A count that took this long is remembered for its inventory version.
REMEMBER_COUNT_MS = 20.0
# Background counts (after a count budget ran out) running at once, per process.
_BACKGROUND_COUNTS = 2


class InventoryImportError(ValueError):
    """A listing the store cannot accept; ``index`` is its 0-based position in the feed."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"listing {index}: {reason}")


@dataclass(frozen=True)
class ImportStats:
    inserted: int   # listings that became available (new, or back from a tombstone)
    updated: int    # available listings rewritten from the feed
    removed: int    # available listings that became tombstones
    total: int      # available listings after the import


@dataclass(frozen=True)
class Hit:
    """One search result: the listing document and, in a near search, its distance."""

    id: str
    listing: dict[str, Any]
    distance_mi: float | None = None
    key: tuple[Any, ...] | None = None  # sort key (None: missing value), for the next cursor

    @property
    def position(self) -> Position:
        return Position(self.key, self.id)


@dataclass(frozen=True)
class ListingRecord:
    """A listing known to the store; ``listing`` is None for a tombstone."""

    id: str
    dealer_id: str | None
    vin: str | None
    stock: str | None
    available: bool
    listing: dict[str, Any] | None


# -- row preparation ---------------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))"
)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


@lru_cache(maxsize=8192)
def _day_number(year: int, month: int, day: int) -> int:
    return date(year, month, day).toordinal() - _EPOCH_ORDINAL  # ValueError when invalid


def epoch_us(value: str) -> int:
    """RFC 3339 date-time (offset required) as exact epoch microseconds; ValueError otherwise."""
    try:  # fast path: the C parser, for the common upper-case forms
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tzinfo is not None and len(value) >= 20:
        return (parsed - _EPOCH) // _MICROSECOND
    m = _RFC3339.fullmatch(value)
    if not m:
        raise ValueError("not an RFC 3339 date-time with offset")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if hour > 23 or minute > 59 or second > 60:
        raise ValueError("time of day out of range")
    second = min(second, 59)  # a leap second collapses onto :59
    seconds = ((_day_number(year, month, day) * 24 + hour) * 60 + minute) * 60 + second
    if m.group(8):
        shift = int(m.group(9)) * 3600 + int(m.group(10)) * 60
        seconds -= shift if m.group(8) == "+" else -shift
    fraction = m.group(7)
    micros = int((fraction[1:] + "00000")[:6]) if fraction else 0
    return seconds * 1_000_000 + micros


def synthesized_id(dealer_id: str | None, vin: str | None, stock: str | None) -> str:
    """Stable id for a feed row without ``vehicle_id`` (VIN first, else stock)."""
    basis = f"vin\x1f{vin}" if vin else f"stock\x1f{stock}"
    digest = hashlib.sha256(f"{dealer_id or ''}\x1f{basis}".encode()).hexdigest()
    return "veh_" + digest[:24]


def _int(value: Any) -> int | None:
    cls = value.__class__
    if cls is int:
        return value
    if cls is float and value.is_integer():
        return int(value)
    return None


class _Prepared:
    """A feed listing turned into its rows (everything but the feature masks)."""

    __slots__ = ("index", "id", "dealer_id", "status", "vin", "stock", "currency", "row", "query",
                 "doc", "evidence", "raw_terms", "term_keys")

    def __init__(self, listing: dict[str, Any], index: int, scope_dealer: str | None) -> None:
        if listing.__class__ is not dict:
            raise InventoryImportError(index, "a listing must be a JSON object")
        get = listing.get
        doc = listing  # copied only when the stored document must differ from the feed's
        dealer_id = get("dealer_id")
        vin = get("vin")
        vin = vin if vin.__class__ is str and vin else None
        stock = get("stock")
        stock = stock if stock.__class__ is str and stock else None
        ident = get("vehicle_id")
        if scope_dealer is not None and dealer_id != scope_dealer:
            if dealer_id is not None:
                raise InventoryImportError(index, "dealer_id differs from the import's dealer")
            doc = dict(doc, dealer_id=scope_dealer)
            dealer_id = scope_dealer
        if ident.__class__ is not str or not ident:
            if not (vin or stock):
                raise InventoryImportError(index, "a listing needs vehicle_id, vin or stock")
            ident = synthesized_id(dealer_id, vin, stock)
            doc = dict(doc, vehicle_id=ident)
        if "distance_mi" in doc:  # per-query, never stored
            doc = {k: v for k, v in doc.items() if k != "distance_mi"}
        status = get("status")
        if status.__class__ is not str:
            raise InventoryImportError(index, "status is required")
        try:
            updated_us = epoch_us(get("updated_at"))
        except (TypeError, ValueError):
            raise InventoryImportError(
                index, "updated_at must be an RFC 3339 date-time with offset"
            ) from None
        unit = get("mileage_unit", "mi")
        if unit not in MM_PER_UNIT:
            raise InventoryImportError(index, "mileage_unit must be mi or km")
        mileage = _int(get("mileage"))

        # Term values: blank counts as missing; the key is trimmed + casefolded.
        raw = [get(name) for name in TERM_FILTERS]
        keys = [v.strip().casefold() or None if v.__class__ is str else None for v in raw]
        make_k, model_k, trim_k, transmission_k, fuel_k, driveline_k, body_k, ext_k, int_k, port_k = keys
        rooftop = get("rooftop")
        dc = get("dc_fast_charge")
        erange = get("electric_range_mi")
        currency = get("currency") or "USD"

        self.index = index
        self.id = ident
        self.dealer_id = dealer_id
        self.status = status
        self.vin = vin
        self.stock = stock
        self.currency = currency
        self.raw_terms = raw
        self.term_keys = keys
        self.row = (
            ident, dealer_id, status, get("condition"), get("vehicle_type") or "car", currency,
            vin, stock, stock.strip().casefold() or None if stock else None,
            raw[0] if make_k is not None else None, make_k,
            raw[1] if model_k is not None else None, model_k, trim_k,
            transmission_k, fuel_k, driveline_k, body_k, ext_k, int_k, port_k,
            rooftop if rooftop.__class__ is str else None,
            _int(get("year")), _int(get("price")), _int(get("list_price")), _int(get("msrp")),
            mileage * MM_PER_UNIT[unit] if mileage is not None else None,
            updated_us,
            float(erange) if erange.__class__ in (int, float) else None,
            (1 if dc else 0) if dc.__class__ is bool else None,
            _int(get("displacement_cc")),
        )
        # Keyword text: make/model/trim/vin/stock/features; "\n" keeps fields apart.
        parts = [raw[0], raw[1], raw[2], vin, stock]
        features = get("features")
        if features.__class__ is list:
            parts.extend(features)
        self.query = "\n".join([p for p in parts if p.__class__ is str and p]).casefold()
        try:
            self.doc = orjson.dumps(doc).decode()
        except orjson.JSONEncodeError:
            raise InventoryImportError(
                index, "text must be valid Unicode and integers must fit in 64 bits"
            ) from None

        self.evidence: list[tuple[str, str, bool]] = []
        evidence = get("feature_evidence")
        if evidence.__class__ is list and evidence:
            for entry in evidence:
                code = entry.get("code") if entry.__class__ is dict else None
                if code.__class__ is not str:
                    continue
                label = entry.get("label")
                self.evidence.append(
                    (code, label if label.__class__ is str else code, entry.get("status") == "present")
                )
            if len({e[0] for e in self.evidence}) != len(self.evidence):
                raise InventoryImportError(index, "feature_evidence lists a code twice")

    @property
    def eligible(self) -> bool:
        return self.status in _ELIGIBLE


# -- query building ----------------------------------------------------------

_SORT_COLUMNS: dict[str, tuple[str, ...]] = {
    "price": ("price",),
    "list_price": ("list_price",),
    "msrp": ("msrp",),
    "mileage": ("odometer_mm",),
    "year": ("year",),
    "make": ("make_k", "make"),
    "model": ("model_k", "model"),
    "stock": ("stock_k", "stock"),
    "updated_at": ("updated_us",),
}
_RANGE_FILTERS: dict[str, tuple[str, str]] = {
    "year_min": ("year", ">="), "year_max": ("year", "<="),
    "price_min": ("price", ">="), "price_max": ("price", "<="),
    "displacement_cc_min": ("displacement_cc", ">="),
    "displacement_cc_max": ("displacement_cc", "<="),
    "electric_range_mi_min": ("electric_range_mi", ">="),
    "electric_range_mi_max": ("electric_range_mi", "<="),
}
_EXACT_ARRAYS: dict[str, str] = {
    "condition": "condition", "vehicle_type": "vehicle_type", "status": "status",
    "rooftops": "rooftop",
}


def _bound(column: str, op: str, value: int | float) -> tuple[str, list[Any]]:
    """``column op value`` for a bound that may exceed what a BIGINT column can hold."""
    if value >= _INT64:  # every stored value is below it
        return ("1 = 0", []) if op == ">=" else (f"l.{column} IS NOT NULL", [])
    return f"l.{column} {op} ?", [value]


def _in(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return f"{column} IN ({', '.join('?' * len(values))})", list(values)


def _like_pattern(token: str) -> str:
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _masks(codes: Iterable[str], bits: dict[str, int]) -> list[int]:
    out = [0] * MASK_COLUMNS
    for code in codes:
        bit = bits[code]
        out[bit // BITS_PER_MASK] |= 1 << (bit % BITS_PER_MASK)
    return out


def _feature_condition(codes: Sequence[str], bits: dict[str, int], *, every: bool) -> tuple[str, list[Any]]:
    """Present-evidence test for ``codes``: all of them (``every``) or at least one."""
    parts: list[str] = []
    params: list[Any] = []
    with_bits = [c for c in codes if c in bits]
    extra = [c for c in codes if c not in bits]
    for column, mask in zip(_MASKS, _masks(with_bits, bits)):
        if mask:
            parts.append(f"(l.{column} & ?) = ?" if every else f"(l.{column} & ?) <> 0")
            params += [mask, mask] if every else [mask]
    if every:  # overflow codes (no bit): one probe of the side table each
        for code in extra:
            parts.append("EXISTS (SELECT 1 FROM inv_feature_extra x WHERE x.id = l.id AND x.code = ?)")
            params.append(code)
    elif extra:
        sql, p = _in("x.code", extra)
        parts.append(f"EXISTS (SELECT 1 FROM inv_feature_extra x WHERE x.id = l.id AND {sql})")
        params += p
    return "(" + (" AND " if every else " OR ").join(parts) + ")", params


def _place_condition(place: Place) -> tuple[str, list[Any]]:
    sql = "(l.rooftop = ? OR l.rooftop IS NULL)" if place.match_null else "l.rooftop = ?"
    params: list[Any] = [place.rooftop]
    if place.dealer_id is not None:
        sql = f"({sql} AND l.dealer_id = ?)"
        params.append(place.dealer_id)
    return sql, params


def _distance_case(places: Sequence[Place]) -> tuple[str, list[Any]]:
    parts, params = [], []
    for place in places:
        cond, p = _place_condition(place)
        parts.append(f"WHEN {cond} THEN ?")
        params += p
        params.append(place.distance_mi)
    return "CASE " + " ".join(parts) + " END", params


# A JSON array parameter as a one-column row set: no portable spelling exists.
_JSON_IDS = {
    "sqlite": "SELECT value FROM json_each(?)",
    "postgresql": "SELECT json_array_elements_text(CAST(? AS json))",
}


def token_clause(tokens: Sequence[str]) -> tuple[str, list[Any]]:
    """Ids of listings whose keyword text contains every token (casefolded substrings)."""
    likes = " AND ".join("t.query LIKE ? ESCAPE '\\'" for _ in tokens)
    return f"SELECT t.id FROM inv_text t WHERE {likes}", [_like_pattern(t.casefold()) for t in tokens]


def where_clause(c: Criteria, bits: dict[str, int], token_ids: str | None = None,
                 dialect: str = "sqlite", *, correlated: bool = False) -> tuple[str, list[Any]]:
    """SQL condition (on alias ``l``) selecting the matching set of ``c``.

    ``token_ids`` is the JSON array of ids matching ``c.tokens``, computed once
    per request (the keyword scan is the costliest filter); without it the
    token test is an IN-subquery, or with ``correlated`` a test of each row's
    own keyword text (cheap when a sort-index walk visits few rows).
    """
    clauses: list[str] = ["l.currency = ?"]
    params: list[Any] = [c.currency]
    if c.dealer_ids is not None:
        sql, p = _in("l.dealer_id", c.dealer_ids) if c.dealer_ids else ("1 = 0", [])
        clauses.append(sql)
        params += p
    f = c.applied
    for key, keys in c.terms.items():
        sql, p = _in(f"l.{key}_k", keys)
        clauses.append(sql)
        params += p
    for key, column in _EXACT_ARRAYS.items():
        if key in f:
            sql, p = _in(f"l.{column}", f[key])
            clauses.append(sql)
            params += p
    for key, (column, op) in _RANGE_FILTERS.items():
        if key in f:
            sql, p = _bound(column, op, f[key])
            clauses.append(sql)
            params += p
    if "mileage_max" in f:
        sql, p = _bound("odometer_mm", "<=", f["mileage_max"] * MM_PER_UNIT[c.mileage_unit])
        clauses.append(sql)
        params += p
    if "dc_fast_charge" in f:
        clauses.append("l.dc_fast_charge = ?")
        params.append(1 if f["dc_fast_charge"] else 0)
    if "vin" in f:
        clauses.append("l.vin = ?")
        params.append(f["vin"])
    if "stock" in f:
        clauses.append("l.stock = ?")
        params.append(f["stock"])
    for key, every in (("features_all", True), ("features_any", False)):
        if key in f:
            sql, p = _feature_condition(f[key], bits, every=every)
            clauses.append(sql)
            params += p
    if c.tokens and token_ids is not None:
        clauses.append(f"l.id IN ({_JSON_IDS[dialect]})")
        params.append(token_ids)
    elif c.tokens and correlated:
        sql, p = token_clause(c.tokens)
        clauses.append(f"EXISTS ({sql.replace(' WHERE ', ' WHERE t.id = l.id AND ', 1)})")
        params += p
    elif c.tokens:
        sql, p = token_clause(c.tokens)
        clauses.append(f"l.id IN ({sql})")
        params += p
    if c.places is not None:
        parts = []
        for place in c.places:
            sql, p = _place_condition(place)
            parts.append(sql)
            params += p
        clauses.append("(" + " OR ".join(parts) + ")" if parts else "1 = 0")
    return " AND ".join(clauses), params


_NUMERIC_KEYS = frozenset({"price", "list_price", "msrp", "odometer_mm", "year", "updated_us"})
# Walking a sort index to find ``want`` matches visits about want * N / total rows, each a
# random lookup worth ~10 sequential row reads; a scan reads N. So walk only when
# total >= 10 * want.
_WALK_FACTOR = 10


def _ref(column: str, scan: bool) -> str:
    """A sort column as SQL; with ``scan``, as an expression no index can serve.

    When the matching set is sparse, walking a sort index means a table
    lookup per skipped row; scanning and sorting the few matches is cheaper.
    Wrapping the column (``+ 0``, ``|| ''``) is the portable way to tell
    both SQLite and PostgreSQL's planners not to use an index for it.
    """
    if not scan:
        return f"l.{column}"
    return f"(l.{column} + 0)" if column in _NUMERIC_KEYS else f"(l.{column} || '')"


def _after(columns: Sequence[str], values: Sequence[Any], desc: bool, last_id: str,
           scan: bool) -> tuple[str, list[Any]]:
    """Keyset condition: strictly after (values, last_id) in (columns dir..., id asc) order.

    Spelled ``c1 >= v1 AND (c1 > v1 OR (c1 = v1 AND ...))`` so that the leading
    bound is an index range the planner can start from.
    """
    op = "<" if desc else ">"
    sql = f"{_ref('id', scan)} > ?"
    params: list[Any] = [last_id]
    for column, value in reversed(list(zip(columns, values))):
        ref = _ref(column, scan)
        sql = f"({ref} {op} ? OR ({ref} = ? AND {sql}))"
        params = [value, value] + params
    return f"{_ref(columns[0], scan)} {op}= ? AND {sql}", [values[0]] + params


@dataclass(frozen=True)
class _Segment:
    """One index-friendly slice of the ordering; the slices are walked in sequence."""

    where: str
    params: list[Any]
    order: str
    columns: tuple[str, ...]            # key columns selected (empty: the key is fixed)
    fixed_key: tuple[Any, ...] | None   # key of every row of a fixed slice


def _segments(q: SearchQuery, scan: bool = False) -> list[_Segment]:
    """The ordering as slices, resuming after ``q.after``.

    A field sort is (rows with a value, by value then id) then (rows without,
    by id): missing values last in both directions, each slice able to use an
    index (unless ``scan``, see :func:`_ref`). A distance sort is one slice per
    distinct rooftop distance, by id.
    """
    desc = q.sort_order == "desc"
    after = q.after
    segments: list[_Segment] = []
    if q.sort_field == "distance_mi":
        groups: dict[float, list[Place]] = {}
        for place in q.criteria.places or ():
            groups.setdefault(place.distance_mi, []).append(place)
        last = after.key[0] if after is not None and after.key is not None else None
        for distance in sorted(groups, reverse=desc):
            if last is not None and (distance > last if desc else distance < last):
                continue
            parts, params = [], []
            for place in groups[distance]:
                sql, p = _place_condition(place)
                parts.append(sql)
                params += p
            where = "(" + " OR ".join(parts) + ")"
            if last is not None and distance == last:
                where += " AND l.id > ?"
                params.append(after.id)
            segments.append(_Segment(where, params, "l.id ASC", (), (distance,)))
        return segments

    columns = _SORT_COLUMNS[q.sort_field]
    direction = "DESC" if desc else "ASC"
    lead = _ref(columns[0], scan)
    ident = _ref("id", scan)
    if after is None or after.key is not None:
        where = f"{lead} IS NOT NULL"
        params: list[Any] = []
        if after is not None:
            sql, params = _after(columns, after.key, desc, after.id, scan)
            where += " AND " + sql
        order = ", ".join(f"{_ref(c, scan)} {direction}" for c in columns) + f", {ident} ASC"
        segments.append(_Segment(where, params, order, columns, None))
    tail_where, tail_params = f"{lead} IS NULL", []
    if after is not None and after.key is None:
        tail_where += f" AND {ident} > ?"
        tail_params.append(after.id)
    segments.append(_Segment(tail_where, tail_params, f"{ident} ASC", (), None))
    return segments


def _full_order(q: SearchQuery) -> tuple[str, list[Any], str, list[Any]]:
    """(key select, params, ORDER BY, params) of the whole ordering, for a skip entry."""
    desc = "DESC" if q.sort_order == "desc" else "ASC"
    if q.sort_field == "distance_mi":
        if not q.criteria.places:  # nothing within the radius: the WHERE matches nothing
            return "NULL", [], "l.id ASC", []
        case, params = _distance_case(q.criteria.places)
        return case, params, f"{case} {desc}, l.id ASC", list(params)
    columns = _SORT_COLUMNS[q.sort_field]
    order = f"CASE WHEN l.{columns[0]} IS NULL THEN 1 ELSE 0 END, " + ", ".join(
        f"l.{c} {desc}" for c in columns
    ) + ", l.id ASC"
    return ", ".join(f"l.{c}" for c in columns), [], order, []


# -- facet values ------------------------------------------------------------

def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _facet_value(facet: str, stored: Any) -> Any:
    """A counted value as the Facets object shows it."""
    if facet == "years":
        return int(stored)
    if facet == "dc_fast_charge":
        return bool(int(stored))
    return stored


def _facet_entries(counts: dict[Any, int], facet: str, displays: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    field = _FACET_DISPLAY.get(facet)
    entries = [
        {"value": displays.get((field, v), v) if field else _facet_value(facet, v), "count": n}
        for v, n in counts.items() if n > 0
    ]
    entries.sort(key=lambda e: (-e["count"], str(e["value"])))
    return entries


class _Deltas:
    """Changes to the maintained unfiltered facet counts during one import.

    Counted per (currency, seller): every term facet value, every present
    feature code, and the values of the two range fields without an index
    (displacement and electric range have few distinct values).
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str, str]] = Counter()

    def add(self, rows: Sequence[Sequence[Any]], present: Sequence[Sequence[str]], sign: int) -> None:
        groups: dict[tuple[str, str], list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault((row[_CURRENCY], row[_DEALER] or ""), []).append(i)
        counts = self.counts
        for (currency, dealer_key), members in groups.items():
            columns = zip(*map(_COUNTED_GETTER, [rows[i] for i in members]))
            for (facet, _index), column in zip(_COUNTED, columns):
                for value, n in Counter(column).items():
                    if value is not None:
                        counts[(currency, dealer_key, facet, str(value))] += sign * n
            codes = Counter(chain.from_iterable(present[i] for i in members))
            for code, n in codes.items():
                counts[(currency, dealer_key, _FEATURE_FIELD, code)] += sign * n


# -- the store ---------------------------------------------------------------

class InventoryStore:
    """Listings of one deployment (every seller's, on an aggregate endpoint)."""

    def __init__(self, db: Database, *, facet_cache_size: int = 256) -> None:
        self.db = db
        self._facet_cache: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._facet_cache_size = facet_cache_size
        self._vocab: tuple[int, list[tuple[str, str, int | None]]] | None = None
        self._seller_cache: tuple[tuple[int, str], frozenset[str]] | None = None
        self._lock = threading.Lock()
        self._background: set[Any] = set()
        self.remember_count_ms = REMEMBER_COUNT_MS

    # -- import ---------------------------------------------------------------
    def import_listings(
        self,
        listings: Iterable[dict[str, Any]],
        *,
        dealer_id: str | None = None,
        replace: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ImportStats:
        """Load feed listings in one transaction: all of them, or (on any error) none.

        Upsert by listing id; with ``replace=True`` every available listing of
        the scope (``dealer_id``'s listings, or the whole inventory) missing
        from the feed becomes a tombstone. A listing whose status is outside
        available/intransit/pending becomes a tombstone too. ``progress`` is
        called with the number of listings processed so far. Raises
        :class:`InventoryImportError` for a listing the store cannot hold
        (duplicate id in the feed, id owned by another dealer, ...); the
        feed reader is expected to have validated listings already.
        """
        collecting = gc.isenabled()
        gc.disable()  # a bulk load allocates millions of acyclic objects; skip the GC passes
        try:
            with self.db.transaction() as tx:
                restore = self._grow_cache(tx)
                try:
                    job = _Import(self, tx, dealer_id, replace, now_us=int(time.time() * 1_000_000))
                    stats = job.run(listings, progress)
                finally:
                    if restore is not None:
                        tx.execute(f"PRAGMA cache_size = {int(restore)}")
            if stats.inserted + stats.updated + stats.removed >= _MAINTAIN_AFTER:
                self.db.maintain(_LISTING_TABLES)
            return stats
        finally:
            if collecting:
                gc.enable()

    def _grow_cache(self, tx: Tx) -> int | None:
        """SQLite: a large page cache for the import (index inserts), restored afterwards."""
        if self.db.dialect != "sqlite":
            return None
        previous = tx.fetchone("PRAGMA cache_size")[0]
        tx.execute("PRAGMA cache_size = -131072")
        return previous

    # -- small reads ----------------------------------------------------------
    def count(self) -> int:
        """Available listings (tombstones excluded)."""
        with self.db.read() as tx:
            return tx.fetchone("SELECT COUNT(*) FROM inv_listing")[0]

    def inventory_version(self) -> int:
        """Bumped by every import; derived data (facet caches) is keyed by it."""
        with self.db.read() as tx:
            return _version(tx)

    def feature_vocabulary(self) -> list[tuple[str, str]]:
        """(code, label) of every evidence code the inventory carries, by code."""
        with self.db.read() as tx:
            return [(code, label) for code, label, _bit in self._vocabulary(tx)]

    def _vocabulary(self, tx: Tx, version: int | None = None) -> list[tuple[str, str, int | None]]:
        version = _version(tx) if version is None else version
        cached = self._vocab
        if cached is not None and cached[0] == version:
            return cached[1]
        vocab = [(r[0], r[1], r[2]) for r in tx.fetchall("SELECT code, label, bit FROM inv_vocab ORDER BY code")]
        self._vocab = (version, vocab)
        return vocab

    def _sellers(self, tx: Tx, currency: str, version: int | None = None) -> frozenset[str]:
        """Dealer keys (``""``: none) holding listings in ``currency``, from the import-time counts."""
        key = (_version(tx) if version is None else version, currency)
        cached = self._seller_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        sellers = frozenset(r[0] for r in tx.fetchall(
            "SELECT DISTINCT dealer_key FROM inv_facet_count WHERE currency = ? AND field = 'statuses'",
            (currency,)))
        self._seller_cache = (key, sellers)
        return sellers

    def _bits(self, tx: Tx, version: int | None = None) -> dict[str, int]:
        return {code: bit for code, _label, bit in self._vocabulary(tx, version) if bit is not None}

    def _effective(self, tx: Tx, c: Criteria, version: int | None = None) -> Criteria:
        """``c`` without a seller restriction that restricts nothing.

        On an aggregate endpoint the seller restriction is dropped when every
        seller holding listings in this currency is a configured one (the usual
        case): a thousand-id ``IN`` list on every row is then pure cost.
        """
        if c.dealer_ids and self._sellers(tx, c.currency, version) <= set(c.dealer_ids):
            return with_changes(c, dealer_ids=None)
        return c

    def _where(self, tx: Tx, c: Criteria, bits: dict[str, int]) -> tuple[str, list[Any]]:
        """``where_clause`` with the keyword scan run once, up front, in this snapshot."""
        c = self._effective(tx, c)
        if self._scans_tokens(c):
            return self._scanned_where(tx, c, bits)
        return where_clause(c, bits, None, self.db.dialect)

    def _scans_tokens(self, c: Criteria) -> bool:
        """SQLite runs the keyword scan once and reuses its ids in the count and page queries;
        PostgreSQL plans the token subquery itself, served by the trigram index."""
        return bool(c.tokens) and self.db.dialect == "sqlite"

    def _scanned_where(self, tx: Tx, c: Criteria, bits: dict[str, int]) -> tuple[str, list[Any]]:
        sql, params = token_clause(c.tokens)
        token_ids = orjson.dumps([row[0] for row in tx.fetchall(sql, params)]).decode()
        return where_clause(c, bits, token_ids, self.db.dialect)

    # -- search ---------------------------------------------------------------
    def search(self, q: SearchQuery, *, count_timeout_ms: float = 0) -> tuple[list[Hit], int | None]:
        """One page of ``q`` (after ``q.after``, or from ``q.skip``) and the exact total.

        Returns up to ``q.limit + 1`` hits; a hit beyond ``q.limit`` means the
        set is not exhausted. Count and page come from one read snapshot. The
        total is None when counting would take longer than ``count_timeout_ms``
        (0: never give up); the count then finishes in the background.
        """
        want = q.limit + 1
        places = q.criteria.places
        dist_sql, dist_params = _distance_case(places) if places else ("NULL", [])
        later = None
        with self.db.read() as tx:
            version = _version(tx)
            bits = self._bits(tx, version)
            c = self._effective(tx, q.criteria, version)
            started = time.perf_counter()
            # The canonical form (tokens as a subquery) keys remembered totals; it is also
            # what runs, unless SQLite has keyword tokens to resolve.
            where, params = where_clause(c, bits, None, self.db.dialect)
            matching = _matching_key(where, params)
            row = tx.fetchone("SELECT total FROM inv_count WHERE version = ? AND matching = ?",
                              (version, matching))
            total = None if row is None else row[0]
            if self._scans_tokens(c):
                if total is not None and q.skip is None and total >= _WALK_FACTOR * want:
                    # Dense keyword matches of a known total: walk the sort index and test each
                    # row's own text, instead of scanning every listing's text for the ids.
                    where, params = where_clause(c, bits, None, self.db.dialect, correlated=True)
                else:
                    where, params = self._scanned_where(tx, c, bits)
            if row is None:
                total, later = self._count(tx, where, params, count_timeout_ms, version, matching, started)
            found: list[tuple[str, float | None, tuple[Any, ...] | None]] = []
            if total == 0 or (q.skip is not None and total is not None and q.skip >= total):
                pass
            elif q.skip is not None:
                select, sparams, order, oparams = _full_order(q)
                rows = tx.fetchall(
                    f"SELECT l.id, {dist_sql}, {select} FROM inv_listing l WHERE {where} "
                    f"ORDER BY {order} LIMIT ? OFFSET ?",
                    dist_params + sparams + params + oparams + [want, q.skip],
                )
                for row in rows:
                    key = tuple(row[2:])
                    found.append((row[0], row[1], None if key[0] is None else key))
            else:
                # Sparse: scan and sort beat an index walk. No total: the count outran its budget,
                # so the set is large.
                scan = total is not None and total < _WALK_FACTOR * want
                for seg in _segments(q, scan):
                    cols = "".join(f", l.{c}" for c in seg.columns)
                    rows = tx.fetchall(
                        f"SELECT l.id, {dist_sql}{cols} FROM inv_listing l "
                        f"WHERE {where} AND {seg.where} ORDER BY {seg.order} LIMIT ?",
                        dist_params + params + seg.params + [want - len(found)],
                    )
                    for row in rows:
                        found.append((row[0], row[1], tuple(row[2:]) if seg.columns else seg.fixed_key))
                    if len(found) >= want:
                        break
            docs = _docs(tx, [f[0] for f in found])
        if later is not None:  # only now: a background count must not slow this page down
            self._in_background(*later)
        return [Hit(ident, docs[ident], dist, key) for ident, dist, key in found], total

    # -- counting ---------------------------------------------------------------
    def _count(self, tx: Tx, where: str, params: list[Any], timeout_ms: float, version: int,
               matching: str, started: float) -> tuple[int | None, tuple[Any, ...] | None]:
        """(exact total or None, background work to start once the page is read, or None).

        The work is remembering a slow count (``started`` is when the request's
        counting began, so on SQLite the keyword scan counts too), or finishing
        one that outran its budget.
        """
        sql = f"SELECT COUNT(*) FROM inv_listing l WHERE {where}"
        try:
            with self.db.time_limit(tx, timeout_ms):
                total = tx.fetchone(sql, params)[0]
        except StatementTimeout:
            return None, ((version, matching), self._count_later, version, matching, sql, params)
        slow = (time.perf_counter() - started) * 1000 >= self.remember_count_ms
        return total, (((version, matching), self._remember, version, matching, total) if slow else None)

    def _remember(self, version: int, matching: str, total: int) -> None:
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
            if _version(tx) != version:
                return  # an import landed since: that total would be of another inventory
            total = tx.fetchone(sql, params)[0]
        self._remember(version, matching, total)

    def _in_background(self, key: Any, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on a daemon thread, once per ``key`` at a time, a few at most.

        Off the request path: remembering writes, and on SQLite a writer may
        have to wait for an import to commit. Work beyond the cap is dropped —
        it is only ever a cache fill, which the next request will offer again.
        """
        with self._lock:
            if key in self._background or len(self._background) >= _BACKGROUND_COUNTS:
                return
            self._background.add(key)

        def run() -> None:
            try:
                fn(*args)
            except Exception as exc:  # a cache fill must never take a worker down
                log.warning("background count failed: %s", type(exc).__name__)
            finally:
                with self._lock:
                    self._background.discard(key)

        threading.Thread(target=run, name="aap-count", daemon=True).start()

    def wait_for_background(self, rounds: int = 500) -> None:
        """Block until background counts are done (tests, orderly shutdown); bounded by count."""
        for _ in range(rounds):
            with self._lock:
                if not self._background:
                    return
            time.sleep(0.01)

    def find(
        self, vehicle_id: str | None = None, vin: str | None = None, stock: str | None = None
    ) -> list[ListingRecord]:
        """Every listing or tombstone matching at least one of the given identifiers."""
        conds, params = [], []
        for column, value in (("id", vehicle_id), ("vin", vin), ("stock", stock)):
            if value is not None:
                conds.append(f"{column} = ?")
                params.append(value)
        if not conds:
            return []
        where = " OR ".join(conds)
        with self.db.read() as tx:
            live = tx.fetchall(f"SELECT id, dealer_id, vin, stock FROM inv_listing WHERE {where}", params)
            dead = tx.fetchall(f"SELECT id, dealer_id, vin, stock FROM inv_tombstone WHERE {where}", params)
            docs = _docs(tx, [r[0] for r in live])
        records = [ListingRecord(r[0], r[1], r[2], r[3], True, docs[r[0]]) for r in live]
        records += [ListingRecord(r[0], r[1], r[2], r[3], False, None) for r in dead]
        return records

    # -- facets ---------------------------------------------------------------
    def facets(self, c: Criteria, vocabulary: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """The Facets object of ``c``'s matching set; ``vocabulary`` lists (code, label)."""
        vocabulary = tuple((code, label) for code, label in vocabulary)
        with self.db.read() as tx:
            key = (_version(tx), c.digest, vocabulary)
            with self._lock:
                cached = self._facet_cache.get(key)
                if cached is not None:
                    self._facet_cache.move_to_end(key)
            if cached is None:
                cached = self._compute_facets(tx, c, vocabulary)
                with self._lock:
                    self._facet_cache[key] = cached
                    while len(self._facet_cache) > self._facet_cache_size:
                        self._facet_cache.popitem(last=False)
        return orjson.loads(orjson.dumps(cached))

    def _compute_facets(self, tx: Tx, c: Criteria, vocabulary: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        bits = self._bits(tx)
        if c.applied:
            counts, bounds = self._aggregated(tx, c, bits, vocabulary)
        else:
            counts = self._counted(tx, c)
            bounds = self._probed(tx, c, bits, counts)
        displays = {(r[0], r[1]): r[2] for r in tx.fetchall("SELECT field, term, display FROM inv_term")}
        out: dict[str, Any] = {"currency": c.currency, "mileage_unit": c.mileage_unit}
        for facet, _column in _FACET_FIELDS:
            if facet == "rooftops" and c.aggregate:
                continue  # rooftop names are only unambiguous within one dealer
            out[facet] = _facet_entries(counts.get(facet, {}), facet, displays)
        for facet, _column in _RANGE_FACETS:
            if facet not in bounds:
                continue  # no matching vehicle has the value: the range is left out
            low, high = bounds[facet]
            if facet == "mileage_range":
                out[facet] = {"min": mm_to_unit(low, c.mileage_unit), "max": mm_to_unit(high, c.mileage_unit)}
            else:
                out[facet] = {"min": _plain(low), "max": _plain(high)}
        present = counts.get(_FEATURE_FIELD, {})
        out["features"] = [
            {"code": code, "label": label, "count": present.get(code, 0)} for code, label in vocabulary
        ]
        return out

    def _counted(self, tx: Tx, c: Criteria) -> dict[str, dict[Any, int]]:
        """Unfiltered: the counts maintained by imports."""
        sql, params = "currency = ?", [c.currency]
        if c.dealer_ids is not None:
            dealer_sql, dealer_params = _in("dealer_key", c.dealer_ids) if c.dealer_ids else ("1 = 0", [])
            sql += " AND " + dealer_sql
            params += dealer_params
        out: dict[str, dict[Any, int]] = {}
        for field, value, n in tx.fetchall(
            f"SELECT field, value, SUM(n) FROM inv_facet_count WHERE {sql} GROUP BY field, value", params
        ):
            out.setdefault(field, {})[value] = n
        return out

    def _probed(self, tx: Tx, c: Criteria, bits: dict[str, int],
                counts: dict[str, dict[Any, int]]) -> dict[str, tuple[Any, Any]]:
        """Unfiltered range bounds: an index probe per indexed bound, counted values otherwise."""
        where, params = self._where(tx, c, bits)
        counted = dict(_COUNTED_RANGES)
        bounds: dict[str, tuple[Any, Any]] = {}
        for facet, column in _RANGE_FACETS:
            if facet in counted:
                values = [float(v) for v, n in counts.get(facet, {}).items() if n > 0]
                if values:
                    bounds[facet] = (min(values), max(values))
                continue
            probe = (f"SELECT l.{column} FROM inv_listing l WHERE {where} "
                     f"AND l.{column} IS NOT NULL ORDER BY l.{column} {{}} LIMIT 1")
            low = tx.fetchone(probe.format("ASC"), params)
            if low is not None:
                bounds[facet] = (low[0], tx.fetchone(probe.format("DESC"), params)[0])
        return bounds

    def _aggregated(self, tx: Tx, c: Criteria, bits: dict[str, int], vocabulary: tuple[tuple[str, str], ...],
                    ) -> tuple[dict[str, dict[Any, int]], dict[str, tuple[Any, Any]]]:
        """Filtered: one pass over the matching set, counted here.

        SQLite aggregates by sorting; one fetch of the narrow columns and a
        hash count per column is cheaper than a GROUP BY (a sort) per facet.
        PostgreSQL hash-aggregates every facet in one scan (grouping sets), so
        there the counting stays in the database.
        """
        where, params = self._where(tx, c, bits)
        if self.db.dialect == "postgresql":
            counts, bounds, present = self._aggregated_in_database(tx, where, params, bits, vocabulary)
        else:
            counts, bounds, present = self._aggregated_here(tx, where, params, bits, vocabulary)
        extra = [code for code, _ in vocabulary if code not in bits]
        if extra:
            code_sql, code_params = _in("x.code", extra)
            present.update(tx.fetchall(
                f"SELECT x.code, COUNT(*) FROM inv_feature_extra x WHERE {code_sql} "
                f"AND x.id IN (SELECT l.id FROM inv_listing l WHERE {where}) GROUP BY x.code",
                code_params + params,
            ))
        counts[_FEATURE_FIELD] = present
        return counts, bounds

    @staticmethod
    def _aggregated_in_database(tx: Tx, where: str, params: list[Any], bits: dict[str, int],
                                vocabulary: tuple[tuple[str, str], ...]) -> tuple[dict, dict, dict]:
        columns = [column for _, column in _FACET_FIELDS]
        # GROUPING(c1, ..., cn) has a bit set for every column a row is not grouped by:
        # the one clear bit names the facet (a NULL value is a missing one, and skipped).
        rows = tx.fetchall(
            f"SELECT GROUPING({', '.join(f'l.{c}' for c in columns)}), "
            f"{', '.join(f'l.{c}' for c in columns)}, COUNT(*) FROM inv_listing l WHERE {where} "
            f"GROUP BY GROUPING SETS ({', '.join(f'(l.{c})' for c in columns)})",
            params,
        )
        width = len(columns)
        counts: dict[str, dict[Any, int]] = {facet: {} for facet, _ in _FACET_FIELDS}
        for row in rows:
            position = next(i for i in range(width) if not row[0] >> (width - 1 - i) & 1)
            value = row[1 + position]
            if value is not None:
                counts[_FACET_FIELDS[position][0]][str(value)] = row[-1]
        coded = [(code, *divmod(bits[code], BITS_PER_MASK)) for code, _ in vocabulary if code in bits]
        aggregates = [f"MIN(l.{column}), MAX(l.{column})" for _, column in _RANGE_FACETS]
        aggregates += [f"SUM((l.{_MASKS[mask]} >> {shift}) & 1)" for _code, mask, shift in coded]
        row = tx.fetchone(f"SELECT {', '.join(aggregates)} FROM inv_listing l WHERE {where}", params)
        bounds: dict[str, tuple[Any, Any]] = {}
        for i, (facet, _column) in enumerate(_RANGE_FACETS):
            if row[2 * i] is not None:
                bounds[facet] = (row[2 * i], row[2 * i + 1])
        offset = 2 * len(_RANGE_FACETS)
        present = {code: row[offset + i] or 0 for i, (code, _mask, _shift) in enumerate(coded)}
        return counts, bounds, present

    @staticmethod
    def _aggregated_here(tx: Tx, where: str, params: list[Any], bits: dict[str, int],
                         vocabulary: tuple[tuple[str, str], ...]) -> tuple[dict, dict, dict]:
        wanted = [column for _, column in _FACET_FIELDS] + [column for _, column in _RANGE_FACETS]
        select = ", ".join(f"l.{column}" for column in wanted + list(_MASKS))
        rows = tx.fetchall(f"SELECT {select} FROM inv_listing l WHERE {where}", params)
        columns = dict(zip(wanted + list(_MASKS), zip(*rows))) if rows else {}
        counts: dict[str, dict[Any, int]] = {}
        for facet, column in _FACET_FIELDS:
            tally = Counter(columns.get(column, ()))
            tally.pop(None, None)
            counts[facet] = {str(value): n for value, n in tally.items()}
        bounds: dict[str, tuple[Any, Any]] = {}
        for facet, column in _RANGE_FACETS:
            values = [v for v in columns.get(column, ()) if v is not None]
            if values:
                bounds[facet] = (min(values), max(values))
        present: dict[str, int] = {}
        masks = [Counter(columns.get(m, ())) for m in _MASKS]
        for code, _label in vocabulary:
            bit = bits.get(code)
            if bit is not None:
                column, shift = divmod(bit, BITS_PER_MASK)
                present[code] = sum(n for mask, n in masks[column].items() if mask >> shift & 1)
        return counts, bounds, present


def _matching_key(where: str, params: list[Any]) -> str:
    """A remembered total's key: the matching set's SQL and parameters themselves, so a
    configuration change (rooftop coordinates, sellers) never reuses another set's total."""
    return hashlib.sha256(where.encode() + b"\x00" + orjson.dumps(params)).hexdigest()


def _version(tx: Tx) -> int:
    return tx.fetchone("SELECT num FROM inv_meta WHERE name = 'version'")[0]


def _docs(tx: Tx, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    sql, params = _in("id", ids)
    return {row[0]: orjson.loads(row[1]) for row in tx.fetchall(f"SELECT id, doc FROM inv_doc WHERE {sql}", params)}


class _Import:
    """One import transaction: rows, tombstones, vocabulary bits and facet counts.

    Two ways to write. Incremental (upserts): each listing already stored is
    subtracted from the facet counts and rewritten. Bulk (SQLite, when the
    import rewrites the whole inventory — the first load, or a replace without
    a dealer scope): the listing tables are emptied and their secondary
    indexes dropped, the feed is appended, and the indexes are rebuilt once
    (a sort per index instead of a B-tree insert per row); the facet counts
    are rebuilt from the feed. Both run inside the one import transaction, so
    readers keep seeing the previous inventory until the commit.
    """

    def __init__(self, store: InventoryStore, tx: Tx, dealer_id: str | None, replace: bool, *,
                 now_us: int) -> None:
        self.tx = tx
        self.dealer_id = dealer_id
        self.replace = replace
        self.now_us = now_us
        self.owners: dict[str, str | None] = dict(tx.fetchall("SELECT id, dealer_id FROM inv_listing"))
        self.tombstones = {row[0] for row in tx.fetchall("SELECT id FROM inv_tombstone")}
        vocab = tx.fetchall("SELECT code, label, bit FROM inv_vocab")
        self.labels: dict[str, str] = {code: label for code, label, _ in vocab}
        self.bits: dict[str, int] = {code: bit for code, _, bit in vocab if bit is not None}
        self.new_codes: list[str] = []
        self.codes_seen: set[str] = set()
        self.terms: list[dict[str, str]] = [{} for _ in TERM_FILTERS]  # key -> display, per field
        self.deltas = _Deltas()
        self.inserted = self.updated = self.removed = 0
        # Bulk mode: listings stored before the import, as (dealer_id, vin, stock) by id.
        self.previous: dict[str, tuple[str | None, str | None, str | None]] = {}
        self.indexes: list[tuple[str, str]] = []
        if store.db.dialect == "sqlite" and (not self.owners or (replace and dealer_id is None)):
            self._begin_bulk()

    def _begin_bulk(self) -> None:
        tx = self.tx
        self.previous = {r[0]: (r[1], r[2], r[3]) for r in tx.fetchall(
            "SELECT id, dealer_id, vin, stock FROM inv_listing")}
        for table in _LISTING_TABLES + ("inv_facet_count",):
            tx.execute(f"DELETE FROM {table}")
        self.owners = {}
        self.indexes = [(r[0], r[1]) for r in tx.fetchall(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            "AND tbl_name IN ('inv_listing', 'inv_doc', 'inv_text')")]
        for name, _sql in self.indexes:
            tx.execute(f"DROP INDEX {name}")

    def run(self, listings: Iterable[dict[str, Any]], progress: Callable[[int], None] | None) -> ImportStats:
        seen: set[str] = set()
        batch: list[_Prepared] = []
        count = 0
        for index, listing in enumerate(listings):
            prepared = _Prepared(listing, index, self.dealer_id)
            if prepared.id in seen:
                raise InventoryImportError(index, "the feed lists this listing id twice")
            owner = self.owners.get(prepared.id)
            if owner is None and prepared.id in self.previous:
                owner = self.previous[prepared.id][0]
            if owner is not None and prepared.dealer_id is not None and owner != prepared.dealer_id:
                raise InventoryImportError(index, "vehicle_id already belongs to another dealer")
            seen.add(prepared.id)
            batch.append(prepared)
            count += 1
            if len(batch) >= _CHUNK:
                self._flush(batch)
                batch = []
                if progress:
                    progress(count)
        self._flush(batch)
        for name, sql in self.indexes:
            self.tx.execute(sql)
        if self.previous:  # bulk replace: whatever the feed left out becomes a tombstone
            self._entomb([(ident, *rest) for ident, rest in self.previous.items()])
        elif self.replace:
            dropped = [ident for ident, owner in self.owners.items()
                       if ident not in seen and (self.dealer_id is None or owner == self.dealer_id)]
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
        total = self.tx.fetchone("SELECT COUNT(*) FROM inv_listing")[0]
        return ImportStats(self.inserted, self.updated, self.removed, total)

    def _entomb(self, rows: list[tuple[str, str | None, str | None, str | None]]) -> None:
        if rows:
            self.tx.executemany(
                "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) VALUES (?, ?, ?, ?, ?)",
                [row + (self.now_us,) for row in rows],
            )
            self.tombstones.update(row[0] for row in rows)
            self.removed += len(rows)

    def _bit_for(self, code: str, label: str) -> int | None:
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
        reverse = {bit: code for code, bit in self.bits.items()}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            sql, params = _in("id", chunk)
            extra: dict[str, list[str]] = {}
            for ident, code in tx.fetchall(f"SELECT id, code FROM inv_feature_extra WHERE {sql}", params):
                extra.setdefault(ident, []).append(code)
            rows = tx.fetchall(f"SELECT {', '.join(_COLUMNS)} FROM inv_listing WHERE {sql}", params)
            present = [
                [reverse[m * BITS_PER_MASK + b]
                 for m, mask in enumerate(row[-MASK_COLUMNS:]) if mask
                 for b in range(BITS_PER_MASK) if mask >> b & 1] + extra.get(row[0], [])
                for row in rows
            ]
            self.deltas.add(rows, present, -1)
        keys = [(i,) for i in ids]
        for table in _LISTING_TABLES:
            tx.executemany(f"DELETE FROM {table} WHERE id = ?", keys)
        for ident in ids:
            del self.owners[ident]

    def _flush(self, batch: list[_Prepared]) -> None:
        if not batch:
            return
        tx = self.tx
        known = [p.id for p in batch if p.id in self.owners]
        if known:
            self._forget(known)
            known_set = set(known)
        else:
            known_set = set()
        previous = self.previous
        revived = [(p.id,) for p in batch if p.id in self.tombstones]
        if revived:
            tx.executemany("DELETE FROM inv_tombstone WHERE id = ?", revived)
            self.tombstones.difference_update(row[0] for row in revived)
        rows, docs, texts, extras, presents, gone = [], [], [], [], [], []
        bits = self.bits
        for p in batch:
            was_live = p.id in known_set or previous.pop(p.id, None) is not None
            if not p.eligible:
                gone.append((p.id, p.dealer_id, p.vin, p.stock, self.now_us))
                self.removed += was_live
                continue
            if was_live:
                self.updated += 1
            else:
                self.inserted += 1
            present: list[str] = []
            masked: list[str] = []
            for code, label, is_present in p.evidence:
                bit = bits.get(code)
                if bit is None:
                    bit = self._bit_for(code, label)
                self.codes_seen.add(code)
                if is_present:
                    present.append(code)
                    if bit is None:
                        extras.append((p.id, code))
                    else:
                        masked.append(code)
            rows.append(p.row + tuple(_masks(masked, bits)))
            docs.append((p.id, p.doc))
            texts.append((p.id, p.query))
            presents.append(present)
            for displays, key, value in zip(self.terms, p.term_keys, p.raw_terms):
                if key is not None and key not in displays:
                    displays[key] = value.strip()
            self.owners[p.id] = p.dealer_id
        if gone:
            tx.executemany(
                "INSERT INTO inv_tombstone (id, dealer_id, vin, stock, removed_us) VALUES (?, ?, ?, ?, ?)",
                gone,
            )
            self.tombstones.update(row[0] for row in gone)
        if rows:
            self.deltas.add(rows, presents, 1)
            try:
                tx.executemany(
                    f"INSERT INTO inv_listing ({', '.join(_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                    rows,
                )
            except self.tx.db.overflow_errors:  # a number beyond BIGINT: name the listing (rolls back)
                culprit = next(p for p in batch if p.eligible and any(
                    v.__class__ is int and not -_INT64 <= v < _INT64 for v in p.row))
                raise InventoryImportError(culprit.index, "a number is too large to store") from None
            tx.executemany("INSERT INTO inv_doc (id, doc) VALUES (?, ?)", docs)
            tx.executemany("INSERT INTO inv_text (id, query) VALUES (?, ?)", texts)
        if extras:
            tx.executemany("INSERT INTO inv_feature_extra (id, code) VALUES (?, ?)", extras)

    def _finish(self, *, full_replace: bool) -> None:
        tx = self.tx
        terms = [(name, key, display) for name, displays in zip(TERM_FILTERS, self.terms)
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
        changed = [(k[0], k[1], k[2], k[3], n) for k, n in self.deltas.counts.items() if n]
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
