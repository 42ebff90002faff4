"""Inventory feeds: JSON Lines and CSV reading, every problem with its line, atomic import."""

from __future__ import annotations

import csv
import dataclasses

import orjson
import pytest

from aap.config.loader import load_settings
from aap.inventory.demo import generate_listings
from aap.inventory.formats.aap import read_feed, write_feed
from aap.inventory.listing_rules import COLUMNS, MAX_REPORTED, FeedError
from aap.store import open_stores
from aap.store.inventory import InventoryImportError
from factories import feed_listing as listing

SF = "Demo Motors San Francisco"


@pytest.fixture(scope="module")
def demo_settings():
    return load_settings(environ={})


@pytest.fixture(scope="module")
def sample(demo_settings):
    return list(generate_listings(300, seed=7, settings=demo_settings))


def write_jsonl(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return str(path)


def feed_problems(path, **kw) -> FeedError:
    with pytest.raises(FeedError) as info:
        read_feed(path, **kw)
    return info.value


# -- round trips --------------------------------------------------------------------


def test_jsonl_round_trip(tmp_path, sample, demo_settings):
    path = str(tmp_path / "feed.jsonl")
    assert write_feed(path, sample) == len(sample)
    feed = read_feed(path, settings=demo_settings)
    assert feed.listings == sample
    assert feed.lines == list(range(1, len(sample) + 1))


def test_csv_round_trip_with_nested_json_cells(tmp_path, sample, demo_settings):
    path = str(tmp_path / "feed.csv")
    assert write_feed(path, sample) == len(sample)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == list(COLUMNS)
    feed = read_feed(path, settings=demo_settings)
    assert feed.listings == sample
    nested = next(x for x in feed.listings if x.get("fees") and x.get("feature_evidence"))
    assert isinstance(nested["fees"][0]["amount"], int)
    assert {"code", "label", "status"} <= nested["feature_evidence"][0].keys()
    assert any(x.get("fees") == [] for x in feed.listings)  # "[]" cell is not an empty cell
    ev = next(x for x in feed.listings if x.get("fuel") == "bev")
    assert isinstance(ev["dc_fast_charge"], bool) and isinstance(ev["battery_kwh"], (int, float))


def test_csv_cells_are_parsed_per_schema_type(tmp_path):
    path = tmp_path / "feed.csv"
    path.write_text(
        "\ufeffvehicle_id,stock,year,make,model,condition,status,price,battery_kwh,"
        "electric_range_mi,dc_fast_charge,other_attributes,rooftop,updated_at\n"
        'veh_9,S9,2024,Zero,SR/F,new,available,20295,17.3,171,TRUE,"{""abs"": true}",,'
        "2026-04-30T08:42:00Z\n",
        encoding="utf-8",
    )
    (row,) = read_feed(str(path)).listings
    assert row == {
        "vehicle_id": "veh_9",
        "stock": "S9",
        "year": 2024,
        "make": "Zero",
        "model": "SR/F",
        "condition": "new",
        "status": "available",
        "price": 20295,
        "battery_kwh": 17.3,
        "electric_range_mi": 171,
        "dc_fast_charge": True,
        "other_attributes": {"abs": True},
        "updated_at": "2026-04-30T08:42:00Z",
    }


def test_integral_floats_in_integer_fields_become_ints(tmp_path):
    path = write_jsonl(tmp_path / "f.jsonl", [listing(price=35500.0, fees=[{"name": "Doc", "amount": 85.0}])])
    (row,) = read_feed(path).listings
    assert type(row["price"]) is int and type(row["fees"][0]["amount"]) is int


def test_blank_lines_are_skipped_and_line_numbers_stay_physical(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(
        b"\n"
        + orjson.dumps(listing())
        + b"\n\n"
        + orjson.dumps(listing(vehicle_id="veh_2", vin=None, stock="H2"))
        + b"\n"
    )
    assert read_feed(str(path)).lines == [2, 4]


# -- every problem, with its line -----------------------------------------------------


def test_bad_jsonl_row_reports_line_number_and_every_problem(tmp_path, demo_settings):
    rows = [
        listing(),
        listing(
            vehicle_id="veh_2",
            vin="1HGCV1F30NA12345O",
            stock="S2",
            condition="excellent",
            status="sold",
            price=-1,
            rooftop="Nowhere",
            currency="EUR",
        ),
        listing(vehicle_id="veh_3", vin=None, stock="S3"),
    ]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows), settings=demo_settings)
    at_line_2 = {p.location for p in error.problems if p.line == 2}
    assert {"/vin", "/condition", "/status", "/price", "/rooftop", "/currency"} <= at_line_2
    assert all(p.line == 2 for p in error.problems)
    assert error.total == len(error.problems)
    assert "line 2: /price:" in str(error)


def test_bad_csv_row_reports_its_line_and_unparsable_cells(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text(
        "vehicle_id,stock,make,condition,status,price,dc_fast_charge,fees,updated_at\n"
        "veh_1,S1,Honda,new,available,35500,false,[],2026-04-30T08:42:00Z\n"
        'veh_2,"S2\nsecond line",Honda,new,available,35,500,maybe,[{,yesterday\n'
        "veh_3,S3,Honda,new,available,1000,,,2026-04-30T08:42:00Z\n"
        'veh_4,S4,Honda,new,available,25000.0,no,"[{""name"":""Doc""}]",2026-04-30T08:42:00Z\n',
        encoding="utf-8",
    )
    error = feed_problems(str(path))
    by_line = {}
    for p in error.problems:
        by_line.setdefault(p.line, set()).add(p.location)
    assert by_line[3] == {""}  # 10 cells for 9 columns: the record is rejected as a whole
    assert by_line[6] == {"/price", "/fees/0/amount"}
    assert 2 not in by_line and 5 not in by_line


def test_each_unparsable_cell_is_listed(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text(
        "vehicle_id,stock,make,condition,status,price,dc_fast_charge,fees,updated_at\n"
        "veh_2,S2,Honda,new,available,35.5,maybe,[{,2026-04-30T08:42:00Z\n",
        encoding="utf-8",
    )
    error = feed_problems(str(path))
    assert {(p.line, p.location) for p in error.problems} == {(2, "/price"), (2, "/dc_fast_charge"), (2, "/fees")}


def test_csv_header_problems(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("vin,prce,distance_mi,vin\n", encoding="utf-8")
    error = feed_problems(str(path))
    messages = [p.message for p in error.problems]
    assert all(p.line == 1 for p in error.problems)
    assert any("'prce'" in m for m in messages)
    assert any("'distance_mi'" in m for m in messages)
    assert any("appears twice" in m for m in messages)


def test_duplicates_across_rows_name_the_first_line(tmp_path):
    rows = [
        listing(),
        listing(vehicle_id="veh_2", stock="S2"),  # same VIN as line 1
        listing(vehicle_id="veh_3", vin=None),  # same stock as line 1
        listing(vin=None, stock="S4"),  # same vehicle_id as line 1
    ]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows))
    got = {(p.line, p.location, p.message) for p in error.problems}
    assert got == {
        (2, "/vin", "duplicates the vin of line 1"),
        (3, "/stock", "duplicates the stock of line 1"),
        (4, "/vehicle_id", "duplicates the vehicle_id of line 1"),
    }


def test_same_vin_at_two_aggregate_dealers_is_allowed(tmp_path):
    rows = [listing(dealer_id="a", rooftop=None), listing(dealer_id="b", vehicle_id="veh_2", rooftop=None)]
    assert len(read_feed(write_jsonl(tmp_path / "f.jsonl", rows))) == 2


def test_rules_the_schema_cannot_express(tmp_path, demo_settings):
    evidence = {"code": "sunroof", "label": "Sunroof", "status": "unknown"}
    rows = [
        listing(
            feature_evidence=[evidence, dict(evidence), {"code": "jetpack", "label": "Jetpack", "status": "unknown"}],
            fees=[{"name": "Doc", "amount": 1}, {"name": "Doc", "amount": 2}],
            distance_mi=3.5,
        )
    ]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows), settings=demo_settings)
    assert {p.location for p in error.problems} == {
        "/feature_evidence/1/code",
        "/feature_evidence/2/code",
        "/fees/1/name",
        "/distance_mi",
    }


def test_unsupported_currency_is_rejected(tmp_path, demo_settings):
    usd_only = dataclasses.replace(demo_settings, search=dataclasses.replace(demo_settings.search, currencies=("USD",)))
    path = write_jsonl(tmp_path / "f.jsonl", [listing(currency="CAD", rooftop="Demo Motors Vancouver")])
    error = feed_problems(path, settings=usd_only)
    assert [p.location for p in error.problems] == ["/currency"]


def test_dealer_id_option_fills_and_conflicts(tmp_path):
    rows = [listing(), listing(vehicle_id="veh_2", vin=None, stock="S2", dealer_id="other")]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows), dealer_id="mine")
    assert [(p.line, p.location) for p in error.problems] == [(2, "/dealer_id")]
    feed = read_feed(write_jsonl(tmp_path / "g.jsonl", rows[:1]), dealer_id="mine")
    assert feed.listings[0]["dealer_id"] == "mine"


def test_aggregate_scope_needs_known_dealer_and_vehicle_id(tmp_path, settings_factory):
    from aap.config.model import DealerProfile

    sellers = (
        DealerProfile(
            {"dealer_id": "springfield", "name": "Springfield Honda", "rooftops": [{"name": "Springfield Honda"}]}
        ),
    )
    settings = settings_factory(
        scope="aggregate",
        dealers=sellers,
        filters=tuple(f for f in settings_factory().search.filters if f != "rooftops"),
    )
    rows = [
        listing(rooftop=None),  # no dealer_id
        listing(dealer_id="nobody", vehicle_id="veh_2", stock="S2", rooftop=None),
        listing(dealer_id="springfield", vehicle_id=None, stock="S3", vin=None, rooftop="Springfield Honda"),
        listing(dealer_id="springfield", vehicle_id="veh_4", stock="S4", vin=None, rooftop="Elsewhere"),
        listing(dealer_id="springfield", vehicle_id="veh_5", stock="S5", vin=None, rooftop="Springfield Honda"),
    ]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows), settings=settings)
    assert {(p.line, p.location) for p in error.problems} == {(1, ""), (2, "/dealer_id"), (3, ""), (4, "/rooftop")}


def test_report_is_capped_but_counts_everything(tmp_path):
    rows = [listing(vehicle_id=f"veh_{i}", vin=None, stock=f"S{i}", status="sold") for i in range(MAX_REPORTED + 50)]
    error = feed_problems(write_jsonl(tmp_path / "f.jsonl", rows))
    assert len(error.problems) == MAX_REPORTED
    assert error.total == MAX_REPORTED + 50
    assert "and 50 more" in str(error)


def test_malformed_json_lines(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(orjson.dumps(listing()) + b"\n{not json\n[1, 2]\n")
    error = feed_problems(str(path))
    assert [(p.line, p.location) for p in error.problems] == [(2, ""), (3, "")]


def test_progress_reports_bytes(tmp_path, sample):
    path = str(tmp_path / "feed.jsonl")
    write_feed(path, sample)
    seen = []
    read_feed(path, progress=lambda done, total: seen.append((done, total)))
    size = (tmp_path / "feed.jsonl").stat().st_size
    assert seen[-1] == (size, size)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))


# -- atomic import through the store -------------------------------------------------


def test_rejected_feed_leaves_previous_inventory_intact(tmp_path, sample, demo_settings):
    stores = open_stores(f"sqlite:///{tmp_path}/aap.db")
    try:
        good = write_jsonl(tmp_path / "good.jsonl", sample[:100])
        stats = stores.inventory.import_listings(read_feed(good, settings=demo_settings).listings)
        assert (stats.inserted, stats.total) == (100, 100)
        before = stores.inventory.count()

        bad_rows = sample[100:200] + [dict(sample[0], price="cheap")]
        bad = write_jsonl(tmp_path / "bad.jsonl", bad_rows)
        with pytest.raises(FeedError) as info:
            read_feed(bad, settings=demo_settings)
        assert [p.line for p in info.value.problems] == [101]
        assert stores.inventory.count() == before == 100
    finally:
        stores.close()


def test_store_failure_mid_import_rolls_back(tmp_path, sample):
    stores = open_stores(f"sqlite:///{tmp_path}/aap.db")
    try:
        owned = [dict(x, dealer_id="a", rooftop=None) for x in sample[:10]]
        stores.inventory.import_listings(owned)
        stolen = [dict(x, dealer_id="b", rooftop=None) for x in sample[10:20]] + [dict(owned[3], dealer_id="b")]
        with pytest.raises(InventoryImportError) as info:
            stores.inventory.import_listings(stolen, replace=True)
        assert info.value.index == 10
        assert stores.inventory.count() == 10
    finally:
        stores.close()
