"""InventoryStore: atomic imports, identity, tombstones, vocabulary and derived counts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext
from aap.config.model import Feature
from aap.store import open_stores
from aap.store.inventory import InventoryImportError, ListingRow, epoch_us, synthesized_id
from aap.store.inventory.rows import PreparedListing
from conftest import assert_valid
from inventory_reference import (
    EVIDENCE,
    listing,
    listing_id,
    listings,
    normalise_facets,
    reference_facets,
    reference_search,
)

CTX = CallContext(binding="test")


@pytest.fixture
def store(database_url):
    stores = open_stores(database_url)
    yield stores.inventory
    stores.close()


def test_import_counts(store):
    stats = store.import_listings([listing("a"), listing("b"), listing("c")])
    assert (stats.inserted, stats.updated, stats.removed, stats.total) == (3, 0, 0, 3)
    stats = store.import_listings([listing("a", price=1), listing("d"), listing("b", status="sold")])
    assert (stats.inserted, stats.updated, stats.removed, stats.total) == (1, 1, 1, 3)
    stats = store.import_listings([listing("a")], replace=True)
    assert (stats.inserted, stats.updated, stats.removed, stats.total) == (0, 1, 2, 1)
    stats = store.import_listings([listing("a")])
    assert (stats.inserted, stats.updated, stats.unchanged, stats.total) == (0, 0, 1, 1)  # repeated as published
    assert store.count() == 1


def test_a_listing_row_holds_each_field_in_its_column():
    feed_listing = listing(
        "v1",
        dealer_id="d1",
        status="pending",
        condition="used",
        currency="CAD",
        vin="1HGCV1F30NA123456",
        stock=" St-9 ",
        make=" Honda ",
        model="CR-V",
        trim="EX-L",
        transmission="Automatic",
        fuel="Gas",
        driveline="AWD",
        body="SUV",
        exterior_color="Crystal Black",
        interior_color="Gray",
        charge_port="NACS",
        rooftop="Bay Motors Oakland",
        year=2024,
        price=35500,
        list_price=36000.0,
        msrp=37000,
        mileage=12,
        mileage_unit="km",
        updated_at="2026-04-30T08:00:00.5+02:00",
        electric_range_mi=40,
        dc_fast_charge=True,
        displacement_cc=1998,
        photos=["https://cdn.example/1.jpg", "https://cdn.example/2.jpg"],
        inventory_date="2026-04-21",
    )
    row = PreparedListing(feed_listing, 0, None).row
    assert isinstance(row, ListingRow)
    assert row._asdict() == {
        "id": "v1",
        "dealer_id": "d1",
        "status": "pending",
        "condition": "used",
        "vehicle_type": "car",
        "currency": "CAD",
        "vin": "1HGCV1F30NA123456",
        "stock": " St-9 ",
        "stock_k": "st-9",
        "make": " Honda ",
        "make_k": "honda",
        "model": "CR-V",
        "model_k": "cr-v",
        "trim_k": "ex-l",
        "transmission_k": "automatic",
        "fuel_k": "gas",
        "driveline_k": "awd",
        "body_k": "suv",
        "exterior_color_k": "crystal black",
        "interior_color_k": "gray",
        "charge_port_k": "nacs",
        "rooftop": "Bay Motors Oakland",
        "year": 2024,
        "price": 35500,
        "list_price": 36000,
        "msrp": 37000,
        "odometer_mm": 12_000_000,
        "updated_us": epoch_us("2026-04-30T06:00:00.5Z"),
        "electric_range_mi": 40.0,
        "dc_fast_charge": 1,
        "displacement_cc": 1998,
        "photos": 2,
        "in_stock_day": 20564,  # 2026-04-21
    }
    bare = PreparedListing(listing("v2", make="  "), 1, None).row
    assert (bare.make, bare.make_k, bare.vehicle_type, bare.currency, bare.dc_fast_charge) == (
        None,
        None,
        "car",
        "USD",
        None,
    )
    assert (bare.photos, bare.in_stock_day) == (0, None)


def test_import_is_atomic(store):
    store.import_listings([listing("keep", price=1)])
    version = store.inventory_version()

    def feed():
        yield listing("keep", price=2)
        yield from (listing(f"n{i}") for i in range(2500))  # several flushed chunks
        raise ValueError("the feed reader found a bad row")

    with pytest.raises(ValueError):
        store.import_listings(feed(), replace=True)
    assert store.count() == 1
    assert store.find(vehicle_id="keep")[0].listing["price"] == 1
    assert store.inventory_version() == version


@pytest.mark.parametrize(
    "bad, reason",
    [
        ([listing("x"), listing("x")], "twice"),
        ([listing("x", updated_at="yesterday")], "updated_at"),
        ([listing("x", updated_at="2026-04-30T08:00:00")], "updated_at"),
        ([{"status": "available", "updated_at": "2026-04-30T08:00:00Z"}], "vehicle_id, vin or stock"),
        ([listing("x", feature_evidence=[EVIDENCE["present"], EVIDENCE["absent"]])], "twice"),
        ([listing("x", price=2**63)], "too large"),
        ([listing("x", mileage=2**62)], "too large"),
        ([listing("x", make="\ud800")], "Unicode"),
    ],
)
def test_import_rejects_what_it_cannot_store(store, bad, reason):
    store.import_listings([listing("before")])
    with pytest.raises(InventoryImportError) as err:
        store.import_listings([listing("ok")] + bad)
    assert reason in err.value.reason
    assert err.value.index == len(bad)  # 0-based position in the feed
    assert [r.id for r in store.find(vehicle_id="ok")] == []


def test_synthesized_ids_are_stable_and_exposed(store):
    item = {"vin": "1HGCV1F30NA123456", "stock": "S1", "status": "available", "updated_at": "2026-04-30T08:00:00Z"}
    store.import_listings([item])
    expected = synthesized_id(None, "1HGCV1F30NA123456", "S1")
    (record,) = store.find(vin="1HGCV1F30NA123456")
    assert record.id == expected and record.listing["vehicle_id"] == expected
    stats = store.import_listings([dict(item, price=5)])
    assert (stats.inserted, stats.updated) == (0, 1)
    assert synthesized_id("d1", "1HGCV1F30NA123456", None) != expected


def test_dealer_scoped_import_and_replace(store):
    store.import_listings([listing("a1"), listing("a2")], dealer_id="a")
    store.import_listings([listing("b1")], dealer_id="b")
    assert store.find(vehicle_id="a1")[0].listing["dealer_id"] == "a"
    stats = store.import_listings([listing("a1")], dealer_id="a", replace=True)
    assert (stats.removed, stats.total) == (1, 2)  # b's listing is outside the scope
    with pytest.raises(InventoryImportError):
        store.import_listings([listing("b1", dealer_id="b")], dealer_id="a")
    with pytest.raises(InventoryImportError):
        store.import_listings([listing("b1")], dealer_id="a")  # b owns that vehicle_id
    with pytest.raises(InventoryImportError):  # a full replace checks ownership too
        store.import_listings([listing("a1", dealer_id="a"), listing("b1", dealer_id="a")], replace=True)
    assert store.count() == 2


def test_tombstones_and_relisting(store):
    store.import_listings([listing("a", vin="1HGCV1F30NA123456", stock="S1")])
    store.import_listings([], replace=True)
    (gone,) = store.find(stock="S1")
    assert (gone.available, gone.listing, gone.vin) == (False, None, "1HGCV1F30NA123456")
    store.import_listings([listing("a", vin="1HGCV1F30NA123456", stock="S1")])
    (back,) = store.find(vin="1HGCV1F30NA123456")
    assert back.available and back.listing["stock"] == "S1"


def test_distance_is_never_stored(store):
    store.import_listings([listing("a", distance_mi=3.5)])
    assert "distance_mi" not in store.find(vehicle_id="a")[0].listing


def test_version_and_vocabulary(store):
    start = store.inventory_version()
    store.import_listings([listing("a", feature_evidence=[EVIDENCE["absent"]])])
    assert store.inventory_version() == start + 1
    assert store.feature_vocabulary() == [("sunroof", "Sunroof")]
    store.import_listings([listing("b")])  # upserts only add to the vocabulary
    assert store.feature_vocabulary() == [("sunroof", "Sunroof")]
    store.import_listings([listing("b")], replace=True)  # a full replace retires unused codes
    assert store.feature_vocabulary() == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00.5Z", 500_000),
        ("1970-01-01t01:00:00+01:00", 0),
        ("1969-12-31T23:00:00.000001-01:00", 1),
        ("2016-12-31T23:59:59.9999999Z", 1_483_228_799_999_999),  # a longer fraction is cut
    ],
)
def test_epoch_us(text, expected):
    assert epoch_us(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2026-04-30",
        "2026-04-30T25:00:00Z",
        "2026-02-30T00:00:00Z",
        "soon",
        # The seed's date-time grammar, as the request validator reads it (docs/seeds.md, "Timestamps"):
        "2016-12-31T23:59:60Z",  # no leap second
        "2026-04-30 06:00:00Z",  # "T", not a space
        "2026-04-30T06:00Z",  # seconds are not optional
        "2026-04-30T06:00:00+0100",  # the offset has its colon
        "20260430T060000Z",  # no basic format
    ],
)
def test_epoch_us_rejects(text):
    with pytest.raises(ValueError):
        epoch_us(text)


def test_vocabulary_beyond_the_bitmask_capacity(agent_factory, settings_factory):
    """More codes than mask bits: the overflow codes live in the side table."""
    codes = [f"code_{i:03d}" for i in range(260)]
    vocabulary = tuple(Feature(c, c.replace("_", " ")) for c in codes)

    def evidence(code: str, status: str = "present") -> dict[str, Any]:
        return {"code": code, "label": code, "status": status, "source": "dealer", "text": "Checked."}

    agent = agent_factory(
        settings_factory(features=vocabulary),
        [
            listing("all", feature_evidence=[evidence(c) for c in codes]),
            listing("late", feature_evidence=[evidence("code_259"), evidence("code_001", "absent")]),
            listing("early", feature_evidence=[evidence("code_001")]),
        ],
    )

    def hits(**f: Any) -> list[str]:
        data = agent.handle({"type": "inventory.search.request", "filters": f}, CTX)["data"]
        return sorted(v["vehicle_id"] for v in data["vehicles"])

    assert hits(features_all=["code_259"]) == ["all", "late"]
    assert hits(features_all=["code_001", "code_259"]) == ["all"]
    assert hits(features_any=["code_001", "code_258"]) == ["all", "early"]
    assert hits(features_any=["code_258", "code_259"]) == ["all", "late"]
    for block in ({}, {"status": ["available"]}):
        data = agent.handle(
            {"type": "inventory.facets.request", "filters": block} if block else {"type": "inventory.facets.request"},
            CTX,
        )["data"]
        counts = {f["code"]: f["count"] for f in data["features"]}
        assert (counts["code_001"], counts["code_259"], counts["code_100"]) == (2, 2, 1)
    agent.stores.inventory.import_listings([listing("all", status="sold")])
    data = agent.handle({"type": "inventory.facets.request"}, CTX)["data"]
    assert {f["code"]: f["count"] for f in data["features"]}["code_259"] == 1


# -- derived data stays exact across import sequences -----------------------------


def _mutate(draw: Any, inventory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A later feed: some listings kept, some changed, some sold, some new."""
    out = []
    for item in inventory:
        fate = draw(st.sampled_from(["keep", "change", "sell", "drop"]))
        if fate == "keep":
            out.append(item)
        elif fate == "change":
            changed = dict(item)
            changed.update(
                draw(
                    st.sampled_from(
                        [
                            {"price": 1},
                            {"currency": "CAD"},
                            {"make": "Ford"},
                            {"status": "pending"},
                            {"feature_evidence": [dict(EVIDENCE["present"])]},
                            {"rooftop": "Bay Motors Oakland"},
                        ]
                    )
                )
            )
            out.append(changed)
        elif fate == "sell":
            out.append(dict(item, status="sold"))
    return out


@st.composite
def histories(draw: Any) -> list[tuple[list[dict[str, Any]], bool]]:
    first = draw(listings(max_size=10))
    steps = [(first, draw(st.booleans()))]
    current = first
    for _ in range(draw(st.integers(1, 3))):
        later = _mutate(draw, current)
        extra = [item for item in draw(listings(max_size=4)) if listing_id(item) not in {listing_id(x) for x in later}]
        current = later + extra
        steps.append((current, draw(st.booleans())))
    return steps


def _apply(state: dict[str, dict[str, Any]], feed: list[dict[str, Any]], replace: bool) -> None:
    if replace:
        keep = {listing_id(item) for item in feed}
        for key in [k for k in state if k not in keep]:
            del state[key]
    for item in feed:
        key = listing_id(item)
        if item["status"] in ("available", "intransit", "pending"):
            state[key] = item
        else:
            state.pop(key, None)


@pytest.mark.slow
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(history=histories(), currency=st.sampled_from(["USD", "CAD"]))
def test_counts_and_search_stay_exact_across_imports(history, currency, settings_factory, memory_agent):
    settings_ = settings_factory()
    state: dict[str, dict[str, Any]] = {}
    with memory_agent(settings_) as agent:
        for feed, replace in history:
            agent.stores.inventory.import_listings(feed, replace=replace)
            _apply(state, feed, replace)
        live = list(state.values())
        assert agent.stores.inventory.count() == len(live)
        for request in (
            {"currency": currency},
            {"currency": currency, "filters": {"status": ["available", "intransit", "pending"]}},
        ):
            data = agent.handle({"type": "inventory.facets.request", **request}, CTX)["data"]
            assert normalise_facets(
                assert_valid({"type": "inventory.facets.response", "data": data}, "inventory-facets-response")["data"]
            ) == reference_facets(live, request, settings_)
        search = {"type": "inventory.search.request", "currency": currency, "pagination": {"limit": 100}}
        data = agent.handle(search, CTX)["data"]
        assert [v["vehicle_id"] for v in data["vehicles"]] == reference_search(live, search, settings_)
        for key, item in state.items():
            (record,) = agent.stores.inventory.find(vehicle_id=key)
            assert record.available and record.listing == dict(item, vehicle_id=key)
