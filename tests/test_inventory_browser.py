"""The inventory browser's store on both backends: every order and filter paged through by keyset,
against a plain reference built from the listings; the warned listings of the last import, each
note's listing found as the import finds it (docs/console.md, "Inventory")."""

from __future__ import annotations

import time
from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.inventory.demo import generate_listings
from aap.store import open_stores
from aap.store.feeds import FeedNote, FeedRun
from aap.store.inventory.browse import FEW, SORTS, BrowseFilter
from aap.store.keyset import Cursor
from lead_support import lead_settings

LISTINGS = 160
EPOCH = date(1970, 1, 1).toordinal()


@pytest.fixture
def stocked(database_url):
    settings = lead_settings(database_url=database_url)
    listings = list(generate_listings(LISTINGS, settings=settings))
    for i, item in enumerate(listings):
        if i % 6 == 0:
            item.pop("price", None)
        if i % 5 == 0:
            item.pop("photos", None)
        if i % 11 == 0:
            item.pop("inventory_date", None)
        if i % 13 == 0:
            item.pop("mileage", None)
    stores = open_stores(database_url)
    stores.inventory.import_listings(listings)
    warned = [item["vehicle_id"] for item in listings[3::9]]
    now = int(time.time() * 1000)
    run = FeedRun(trigger="schedule", source="dms.csv", started_ms=now, finished_ms=now, outcome="imported", feed="dms")
    run.notes = [FeedNote("warning", i + 2, "photo over http", listing) for i, listing in enumerate(warned)]
    stores.feeds.record(run)
    yield stores, listings, set(warned)
    stores.close()


def _value(item, sort):
    if sort.startswith("price"):
        return item.get("price")
    if sort.startswith("mileage"):
        mileage = item.get("mileage")
        return (
            None if mileage is None else mileage * (1_609_344 if item.get("mileage_unit", "mi") == "mi" else 1_000_000)
        )
    day = item.get("inventory_date")
    return None if day is None else date.fromisoformat(day).toordinal() - EPOCH


def reference(listings, wanted: BrowseFilter, sort: str, warned: set[str]) -> list[str]:
    kept = [
        item
        for item in listings
        if (wanted.rooftop is None or item.get("rooftop") == wanted.rooftop)
        and (wanted.condition is None or item.get("condition") == wanted.condition)
        and (not wanted.no_photo or not item.get("photos"))
        and (not wanted.no_price or item.get("price") is None)
        and (not wanted.warned or item["vehicle_id"] in warned)
    ]
    descending = sort in ("price_desc", "mileage_desc", "in_stock_recent")
    known = sorted(
        (i for i in kept if _value(i, sort) is not None),
        key=lambda i: (_value(i, sort), i["vehicle_id"]),
        reverse=descending,
    )
    rest = sorted(i["vehicle_id"] for i in kept if _value(i, sort) is None)
    return [i["vehicle_id"] for i in known] + rest


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sort=st.sampled_from(sorted(SORTS)),
    rooftop=st.sampled_from([None, "Bay Motors Oakland"]),
    condition=st.sampled_from([None, "used", "new"]),
    no_photo=st.booleans(),
    no_price=st.booleans(),
    warned=st.booleans(),
    size=st.integers(1, 40),
    few=st.booleans(),
)
def test_every_order_and_filter_pages_through_each_listing_once(
    stocked, sort, rooftop, condition, no_photo, no_price, warned, size, few
):
    stores, listings, warned_ids = stocked
    wanted = BrowseFilter(None, None, rooftop, condition, None, no_photo, no_price, warned)
    runs = stores.feeds.latest_imports()
    expected = reference(listings, wanted, sort, warned_ids)
    # the count decides which index leads; both ways give the same pages
    matches = len(expected) if few else FEW + len(expected)
    seen, cursor = [], None
    for _ in range(LISTINGS + 2):
        rows, cursor = stores.inventory_browser.page(
            wanted, matches=max(matches, 1), sort=sort, cursor=cursor, runs=runs, limit=size
        )
        seen += [r.vehicle_id for r in rows]
        assert all(r.warned == (r.vehicle_id in warned_ids) for r in rows)
        if cursor is None:
            break
        cursor = Cursor.decode(cursor.encode(), SORTS[sort])
    assert seen == expected


def test_counts_come_from_the_summary_and_the_warned_from_the_last_import(stocked):
    stores, listings, warned_ids = stocked
    summary = stores.inventory_summaries.summary()
    assert BrowseFilter().counts(summary) == len(listings)
    assert BrowseFilter(no_photo=True).counts(summary) == sum(1 for i in listings if not i.get("photos"))
    assert BrowseFilter(no_price=True, condition="used").counts(summary) == sum(
        1 for i in listings if i.get("price") is None and i.get("condition") == "used"
    )
    runs = stores.feeds.latest_imports()
    assert stores.inventory_browser.warned_count(BrowseFilter(warned=True), runs) == len(warned_ids)
    now = int(time.time() * 1000) + 1000
    later = FeedRun(
        trigger="schedule", source="dms.csv", started_ms=now, finished_ms=now, outcome="imported", feed="dms"
    )
    stores.feeds.record(later)  # a clean import of the same feed: nothing is warned any more
    runs = stores.feeds.latest_imports()
    assert stores.inventory_browser.warned_count(BrowseFilter(warned=True), runs) == 0


def test_a_feed_row_is_found_as_the_import_finds_it(stocked):
    stores, listings, _ = stocked
    first = listings[0]
    ids = stores.inventory_browser.listing_ids(
        [
            (first["vehicle_id"], None, None, None),  # by id
            (None, first["vin"], None, first.get("dealer_id")),  # by the seller's VIN
            (None, None, first["stock"], first.get("dealer_id")),  # by the seller's stock number
            (None, "1HGCV1F30NA999999", None, None),  # never published
            (None, first["vin"], None, "another-seller"),  # another seller's VIN is not this car
        ],
        None,
    )
    assert ids == [first["vehicle_id"]] * 3 + [None, None]


def test_the_warned_filter_reads_the_notes_once_not_once_a_listing(stocked) -> None:
    """The warned listings' subquery names the tenant as a value: one that refers to the outer
    listing (``n.tenant_id = l.tenant_id``) is a subplan PostgreSQL runs again for every listing,
    where an uncorrelated one is a join or a hashed set read once."""
    stores, _listings, _warned = stocked
    db = stores.inventory_browser.db
    if db.dialect.name != "postgresql":
        pytest.skip("SQLite plans an IN subquery once whatever it refers to")
    runs = [stores.feeds.runs(limit=1)[0].run_id]
    with db.read() as tx:
        where, params = stores.inventory_browser._where(tx, BrowseFilter(warned=True), runs, many=True)
        plan = "\n".join(
            row[0] for row in tx.fetchall(f"EXPLAIN SELECT l.id FROM inv_listing l WHERE {' AND '.join(where)}", params)
        )
    assert "SubPlan" not in plan.replace("hashed SubPlan", ""), plan
