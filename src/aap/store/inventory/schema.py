"""The inventory tables, their migrations, and the listing row as a named type.

Listings are narrow, denormalised rows (``inv_listing``) prepared at import
time so that every filter and sort runs in SQL on plain columns: casefolded
term columns (``*_k``), exact integer odometers in millimetres (mi/km
comparisons never round), ``updated_at`` as epoch microseconds, the currency
with its USD default, ``vehicle_type`` with its ``car`` default. The listing
JSON sits in its own table (``inv_doc``), read only for the page returned, and
the keyword text in another (``inv_text``), so that scans stay on narrow rows.

Features: each code of the vocabulary gets a bit, and a listing's *present*
codes are bits in four integer columns, so ``features_all``/``features_any``
and feature facet counts are arithmetic on the row, not joins. Codes beyond the
252 bits (an unusually large vocabulary) fall back to ``inv_feature_extra``.
"""

from __future__ import annotations

from datetime import date
from typing import NamedTuple

import orjson

from aap.store.db import Migrations, Tx

MASK_COLUMNS = 4
BITS_PER_MASK = 63  # bits 0..62 keep every mask a positive signed 64-bit integer
MASK_CAPACITY = MASK_COLUMNS * BITS_PER_MASK
FEATURE_MASKS: tuple[str, ...] = tuple(f"feat{i}" for i in range(MASK_COLUMNS))
INT64 = 2**63  # SQL BIGINT holds -2**63 .. 2**63 - 1
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# The tables holding one row per available listing.
LISTING_TABLES = ("inv_listing", "inv_doc", "inv_text", "inv_feature_extra")


class ListingRow(NamedTuple):
    """One ``inv_listing`` row, feature masks aside (they are known only once the import
    has given every code a bit): the insert statement appends them."""

    id: str
    dealer_id: str | None
    status: str
    condition: str | None
    vehicle_type: str  # "car" when the listing has none
    currency: str  # "USD" when the listing has none
    vin: str | None
    stock: str | None
    stock_k: str | None  # term key of stock, for the stock sort
    make: str | None  # as listed, for the make sort's tie-break
    make_k: str | None
    model: str | None
    model_k: str | None
    trim_k: str | None
    transmission_k: str | None
    fuel_k: str | None
    driveline_k: str | None
    body_k: str | None
    exterior_color_k: str | None
    interior_color_k: str | None
    charge_port_k: str | None
    rooftop: str | None
    year: int | None
    price: int | None
    list_price: int | None
    msrp: int | None
    odometer_mm: int | None  # exact: mileage times MM_PER_UNIT of its unit
    updated_us: int  # updated_at as epoch microseconds
    electric_range_mi: float | None
    dc_fast_charge: int | None  # 1, 0 or NULL
    displacement_cc: int | None
    photos: int  # how many photos the listing has (the console's "no photo" filter)
    in_stock_day: int | None  # inventory_date as a day number (1970-01-01 is 0): days in stock


#: Every ``inv_listing`` column, in insert order: the row's fields, the masks, then ``rid``
#: (the listing's row number: the posting index's member id, see :mod:`.postings`).
LISTING_COLUMNS: tuple[str, ...] = ListingRow._fields + FEATURE_MASKS + ("rid",)
COLUMN_INDEX = {name: i for i, name in enumerate(LISTING_COLUMNS)}

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
    {", ".join(f"{m} BIGINT NOT NULL DEFAULT 0" for m in FEATURE_MASKS)}
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
    """Keyword tokens are substrings: an index that serves them, where the backend has one."""
    tx.db.dialect.create_substring_index(tx, "inv_text_trgm", "inv_text", "query")


def _vacuum_often(tx: Tx) -> None:
    """Listing tables change in many small imports: keep their statistics fresh."""
    tx.db.dialect.vacuum_eagerly(tx, LISTING_TABLES)


def _row_numbers_and_sellers(tx: Tx) -> None:
    """Per-seller versions and row numbers (docs/search.md, "Counting at marketplace scale").

    ``rid`` numbers available listings for the posting index; a listing keeps its
    number while it stays available, and a number is never given twice
    (``next_rid``), so a seller's old numbers can be taken out of the index without
    touching another seller's. ``inv_seller.version`` is the inventory version of
    the seller's last change: what a remembered count of that seller depends on.
    """
    tx.script("""
ALTER TABLE inv_listing ADD COLUMN rid BIGINT;
UPDATE inv_listing SET rid = n.rn FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM inv_listing) n
    WHERE inv_listing.id = n.id;
CREATE UNIQUE INDEX inv_listing_rid ON inv_listing (rid);
CREATE INDEX inv_listing_dealer ON inv_listing (dealer_id);
CREATE TABLE inv_seller (
    dealer_key TEXT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO inv_seller (dealer_key, version)
    SELECT DISTINCT COALESCE(l.dealer_id, ''), m.num FROM inv_listing l, inv_meta m WHERE m.name = 'version';
INSERT INTO inv_meta (name, num) SELECT 'next_rid', COALESCE(MAX(rid), 0) + 1 FROM inv_listing;
CREATE TABLE inv_change (
    version BIGINT NOT NULL,
    rid BIGINT NOT NULL
);
CREATE INDEX inv_change_version ON inv_change (version);
INSERT INTO inv_meta (name, num) SELECT 'changes_from', num FROM inv_meta WHERE name = 'version';
ALTER TABLE inv_count ADD COLUMN partials TEXT;
CREATE INDEX inv_count_matching ON inv_count (matching, version)
""")


# The posting index (:mod:`.postings`) answers keyword tokens now; the trigram index cost
# imports half their speed on PostgreSQL (docs/search.md, "Counting at marketplace scale").
_NO_KEYWORD_INDEX = "DROP INDEX IF EXISTS inv_text_trgm"


def photo_count(photos: object) -> int:
    return len(photos) if isinstance(photos, list) else 0


def day_number(value: object) -> int | None:
    """A ``YYYY-MM-DD`` date (``inventory_date``, seed 004) as days since 1970-01-01; None when it is not one."""
    if not isinstance(value, str) or len(value) != 10:
        return None
    try:
        return date.fromisoformat(value).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


def _browse_columns(tx: Tx) -> None:
    """What the console's inventory browser filters and sorts on (docs/console.md, "Inventory"): the
    photo count and the day the vehicle came into stock, on the narrow row, and the indexes its
    keyset pages walk (price, mileage, days in stock, each with the id that breaks ties). Listings
    stored before this step get theirs from their documents, in one pass."""
    tx.script("""
ALTER TABLE inv_listing ADD COLUMN photos INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inv_listing ADD COLUMN in_stock_day INTEGER;
CREATE INDEX inv_listing_browse_price ON inv_listing (price, id);
CREATE INDEX inv_listing_browse_odometer ON inv_listing (odometer_mm, id);
CREATE INDEX inv_listing_browse_stock_day ON inv_listing (in_stock_day, id);
CREATE INDEX inv_listing_no_photo ON inv_listing (id) WHERE photos = 0
""")
    updates = []
    for ident, doc in tx.fetchall("SELECT id, doc FROM inv_doc"):
        listing = orjson.loads(doc)
        photos, day = photo_count(listing.get("photos")), day_number(listing.get("inventory_date"))
        if photos or day is not None:
            updates.append((photos, day, ident))
    if updates:
        tx.executemany("UPDATE inv_listing SET photos = ?, in_stock_day = ? WHERE id = ?", updates)


MIGRATIONS = Migrations(
    "inventory",
    (
        _SCHEMA_V1,
        _SCHEMA_V2,
        _keyword_index,
        _vacuum_often,
        _row_numbers_and_sellers,
        _NO_KEYWORD_INDEX,
        _browse_columns,
    ),
)


def read_version(tx: Tx) -> int:
    """The inventory version: bumped by every import, it keys every derived cache and total."""
    version: int = tx.one("SELECT num FROM inv_meta WHERE name = 'version'")[0]
    return version
