"""The demo feed generator: deterministic, realistic, and every listing valid."""

from __future__ import annotations

import collections
import re

import pytest

from aap.config.loader import load_settings
from aap.config.model import DealerProfile
from aap.inventory.demo import generate_listings, make_vin
from aap.inventory.formats.aap import check_rows
from aap.inventory.vin import expected_check_digit as vin_check_digit
from aap.spec import validate

VIN = re.compile(r"^[A-HJ-NPR-Z0-9]{17}$")
SAMPLE = 2000


@pytest.fixture(scope="module")
def demo_settings():
    return load_settings(environ={})


@pytest.fixture(scope="module")
def listings(demo_settings):
    return list(generate_listings(SAMPLE, seed=0, settings=demo_settings))


def test_every_generated_listing_is_a_valid_inventory_listing(listings):
    for item in listings:
        assert validate(item, "inventory-listing") == [], item["vehicle_id"]


def test_generated_feed_passes_every_feed_rule(listings, demo_settings):
    rows = ((i + 1, 0, dict(item), []) for i, item in enumerate(listings))
    assert len(check_rows(rows, settings=demo_settings)) == SAMPLE


def test_deterministic_and_prefix_stable(listings, demo_settings):
    assert list(generate_listings(SAMPLE, seed=0, settings=demo_settings)) == listings
    assert list(generate_listings(50, seed=0, settings=demo_settings)) == listings[:50]
    assert list(generate_listings(50, seed=1, settings=demo_settings)) != listings[:50]
    # The default settings are the demo dealer group.
    assert list(generate_listings(20)) == listings[:20]


def test_identifiers_are_unique_and_vins_valid(listings):
    for field in ("vin", "vehicle_id", "stock"):
        assert len({x[field] for x in listings}) == SAMPLE, field
    for item in listings:
        assert VIN.match(item["vin"])
        assert vin_check_digit(item["vin"]) == item["vin"][8]


def test_vin_check_digit_matches_known_vins():
    assert vin_check_digit("1HGCM82633A004352") == "3"
    assert vin_check_digit("1M8GDM9AXKP042788") == "X"
    vins = {make_vin("1HG", "CV1F3", 2024, i, 17) for i in range(5000)}
    assert len(vins) == 5000


def test_the_mix_covers_every_kind_of_unit(listings):
    kinds = collections.Counter(x.get("vehicle_type", "car") for x in listings)
    assert {"car", "motorcycle", "trailer", "rv", "other"} <= kinds.keys()
    assert kinds["car"] > kinds["motorcycle"] > kinds["trailer"]
    assert any("vehicle_type" not in x for x in listings)  # absent means car
    bikes = [x for x in listings if x.get("vehicle_type") == "motorcycle"]
    electric = [x for x in bikes if x.get("fuel") == "bev"]
    assert electric and all(
        {"electric_range_mi", "battery_kwh", "motor_power_hp", "dc_fast_charge", "charge_port"} <= x.keys()
        and "displacement_cc" not in x
        for x in electric
    )
    assert any("displacement_cc" in x for x in bikes)
    assert all("mileage" not in x for x in listings if x.get("vehicle_type") == "trailer")
    assert len({x["make"] for x in listings}) > 20
    assert len({x["body"] for x in listings}) > 10


def test_currencies_units_and_rooftops(listings, demo_settings):
    rooftops = {r["name"] for r in demo_settings.dealer.rooftops}
    assert {x["rooftop"] for x in listings} == rooftops
    canadian = [x for x in listings if x["rooftop"] == "Demo Motors Vancouver"]
    assert canadian and all(x["currency"] == "CAD" for x in canadian)
    assert all(x["mileage_unit"] == "km" for x in canadian if "mileage" in x)
    others = [x for x in listings if x["rooftop"] != "Demo Motors Vancouver"]
    assert {x.get("currency") for x in others} == {None, "USD"}
    assert {x.get("mileage_unit") for x in others if "mileage" in x} == {None, "mi"}
    oakland = [x for x in listings if x["rooftop"] == "Demo Motors Oakland Pre-Owned"]
    assert {x["condition"] for x in oakland} == {"used", "cpo"}
    san_jose = {x.get("vehicle_type", "car") for x in listings if x["rooftop"] == "Demo Powersports San Jose"}
    assert "car" not in san_jose


def test_statuses_prices_and_fees(listings):
    statuses = collections.Counter(x["status"] for x in listings)
    assert statuses.keys() == {"available", "intransit", "pending"}
    assert all(x["condition"] == "new" for x in listings if x["status"] == "intransit")
    unpriced = [x for x in listings if "price" not in x]
    assert unpriced and all("list_price" in x for x in unpriced)
    assert any("fees" not in x for x in listings)
    assert any(x.get("fees") == [] for x in listings)
    itemized = [x for x in listings if x.get("fees") and "price" in x]
    assert itemized
    for x in itemized:
        assert x["price"] >= sum(f["amount"] for f in x["fees"])  # fees are included in price


def test_feature_evidence_uses_the_vocabulary(listings, demo_settings):
    vocabulary = {f.code: f.label for f in demo_settings.features}
    statuses = collections.Counter()
    for item in listings:
        codes = [e["code"] for e in item.get("feature_evidence", ())]
        assert len(codes) == len(set(codes))
        for entry in item.get("feature_evidence", ()):
            assert vocabulary[entry["code"]] == entry["label"]
            statuses[entry["status"]] += 1
            if entry["status"] in ("present", "absent"):
                assert entry["source"] in ("inventory", "manufacturer", "dealer") and entry["text"]
            if "url" in entry:
                assert entry["url"].startswith("https://")
    assert statuses.keys() == {"present", "absent", "unknown"}
    assert any("feature_evidence" not in x for x in listings)


def test_urls_are_https_and_timestamps_rfc3339(listings):
    stamp = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
    for item in listings:
        assert item["vdp_url"].startswith("https://")
        assert all(p.startswith("https://") for p in item.get("photos", ()))
        assert stamp.match(item["updated_at"])
        assert item["inventory_date"] <= item["updated_at"][:10]


def test_rooftops_and_dealer_ids_follow_the_settings(settings_factory):
    sellers = (
        DealerProfile({"dealer_id": "north", "name": "North Motors", "rooftops": [{"name": "North Motors"}]}),
        DealerProfile(
            {
                "dealer_id": "south",
                "name": "South Moto",
                "rooftops": [{"name": "South Moto", "capabilities": ["sales", "powersports"]}],
            }
        ),
    )
    settings = settings_factory(
        scope="aggregate",
        dealers=sellers,
        filters=tuple(f for f in settings_factory().search.filters if f != "rooftops"),
    )
    items = list(generate_listings(400, seed=3, settings=settings))
    assert {(x["dealer_id"], x["rooftop"]) for x in items} == {("north", "North Motors"), ("south", "South Moto")}
    assert {x.get("vehicle_type", "car") for x in items if x["dealer_id"] == "north"} == {"car"}
    assert "car" not in {x.get("vehicle_type", "car") for x in items if x["dealer_id"] == "south"}
    rows = ((i + 1, 0, dict(x), []) for i, x in enumerate(items))
    assert len(check_rows(rows, settings=settings)) == 400
