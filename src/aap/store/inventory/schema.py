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

_LAYOUT = f"""
CREATE TABLE inv_listing (
    tenant_id TEXT NOT NULL,
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
    {", ".join(f"{m} BIGINT NOT NULL DEFAULT 0" for m in FEATURE_MASKS)},
    rid BIGINT,
    photos INTEGER NOT NULL DEFAULT 0,
    in_stock_day INTEGER,
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX inv_listing_rid ON inv_listing (tenant_id, rid);
CREATE INDEX inv_listing_make ON inv_listing (tenant_id, make_k, currency, price);
CREATE INDEX inv_listing_price ON inv_listing (tenant_id, price, currency);
CREATE INDEX inv_listing_updated ON inv_listing (tenant_id, updated_us, currency);
CREATE INDEX inv_listing_odometer ON inv_listing (tenant_id, odometer_mm, currency);
CREATE INDEX inv_listing_year ON inv_listing (tenant_id, year, currency);
CREATE INDEX inv_listing_rooftop ON inv_listing (tenant_id, rooftop, currency, id);
CREATE INDEX inv_listing_vin ON inv_listing (tenant_id, vin);
CREATE INDEX inv_listing_stock ON inv_listing (tenant_id, stock);
CREATE INDEX inv_listing_dealer ON inv_listing (tenant_id, dealer_id);
CREATE INDEX inv_listing_browse_price ON inv_listing (tenant_id, price, id);
CREATE INDEX inv_listing_browse_odometer ON inv_listing (tenant_id, odometer_mm, id);
CREATE INDEX inv_listing_browse_stock_day ON inv_listing (tenant_id, in_stock_day, id);
CREATE INDEX inv_listing_no_photo ON inv_listing (tenant_id, id) WHERE photos = 0;
CREATE TABLE inv_text (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    query TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE inv_doc (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE inv_feature_extra (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    code TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id, code)
);
CREATE INDEX inv_feature_extra_code ON inv_feature_extra (tenant_id, code, id);
CREATE TABLE inv_tombstone (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    dealer_id TEXT,
    vin TEXT,
    stock TEXT,
    removed_us BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX inv_tombstone_vin ON inv_tombstone (tenant_id, vin);
CREATE INDEX inv_tombstone_stock ON inv_tombstone (tenant_id, stock);
CREATE INDEX inv_tombstone_removed ON inv_tombstone (tenant_id, removed_us);
CREATE TABLE inv_term (
    tenant_id TEXT NOT NULL,
    field TEXT NOT NULL,
    term TEXT NOT NULL,
    display TEXT NOT NULL,
    PRIMARY KEY (tenant_id, field, term)
);
CREATE TABLE inv_vocab (
    tenant_id TEXT NOT NULL,
    code TEXT NOT NULL,
    label TEXT NOT NULL,
    bit INTEGER,
    PRIMARY KEY (tenant_id, code)
);
CREATE TABLE inv_facet_count (
    tenant_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    dealer_key TEXT NOT NULL,
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, currency, dealer_key, field, value)
);
CREATE TABLE inv_meta (
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    num BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE inv_count (
    tenant_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    matching TEXT NOT NULL,
    total BIGINT NOT NULL,
    partials TEXT,
    PRIMARY KEY (tenant_id, version, matching)
);
CREATE INDEX inv_count_matching ON inv_count (tenant_id, matching, version);
CREATE TABLE inv_seller (
    tenant_id TEXT NOT NULL,
    dealer_key TEXT NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, dealer_key)
);
CREATE TABLE inv_change (
    tenant_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    rid BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, version, rid)
)
"""


def _vacuum_often(tx: Tx) -> None:
    """Listing tables change in many small imports: keep their statistics fresh."""
    tx.db.dialect.vacuum_eagerly(tx, LISTING_TABLES)


MIGRATIONS = Migrations(
    "inventory",
    (_LAYOUT, _vacuum_often),
    tables=(
        "inv_listing",
        "inv_text",
        "inv_doc",
        "inv_feature_extra",
        "inv_tombstone",
        "inv_term",
        "inv_vocab",
        "inv_facet_count",
        "inv_meta",
        "inv_count",
        "inv_seller",
        "inv_change",
    ),
)

#: ``inv_meta`` counters of a tenant whose inventory was never imported (its rows are written
#: by its first import: :func:`ensure_meta`).
META_DEFAULTS = {"version": 0, "next_rid": 1, "changes_from": 0}


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


def read_meta(tx: Tx, name: str) -> int:
    """The tenant's ``inv_meta`` counter ``name`` (its default before the first import)."""
    row = tx.fetchone("SELECT num FROM inv_meta WHERE tenant_id = ? AND name = ?", (tx.tenant, name))
    return META_DEFAULTS[name] if row is None else int(row[0])


def read_version(tx: Tx) -> int:
    """The inventory version: bumped by every import, it keys every derived cache and total."""
    return read_meta(tx, "version")


def read_version_and_rows(tx: Tx) -> tuple[int, int]:
    """(the inventory version, the next row number) in one read: what a snapshot starts with,
    and how a posting index tells a small inventory, which a new runtime asks at once."""
    found = {
        name: int(num)
        for name, num in tx.fetchall(
            "SELECT name, num FROM inv_meta WHERE tenant_id = ? AND name IN ('version', 'next_rid')", (tx.tenant,)
        )
    }
    return found.get("version", META_DEFAULTS["version"]), found.get("next_rid", META_DEFAULTS["next_rid"])


def ensure_meta(tx: Tx) -> None:
    """Write the tenant's ``inv_meta`` counters where its first import finds none."""
    tx.executemany(
        "INSERT INTO inv_meta (tenant_id, name, num) VALUES (?, ?, ?) ON CONFLICT (tenant_id, name) DO NOTHING",
        [(tx.tenant, name, num) for name, num in META_DEFAULTS.items()],
    )
