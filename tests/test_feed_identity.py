"""Nothing wrong is published: one car one listing across feeds, shared VINs, the content guard.

The same cars as a dealer's DMS export, its Google feed and its Meta catalog
(``feed_samples``) are imported in sequence through ``aap import``; what is
stored is read back from the inventory store.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feed_samples as samples
from aap.cli.main import main
from aap.config.loader import load_settings
from aap.feeds.job import ImportRequest, run_import
from aap.inventory.vin import expected_check_digit, with_check_digit
from aap.store import open_stores
from aap.work import Work

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

COUNT = 12
DEMO_TOML = Path(__file__).resolve().parent.parent / "src" / "aap" / "config" / "demo.toml"


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path}/aap.db"


def invoke(*args: str):
    return CliRunner().invoke(main, ["import", *args])


def imported(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def published(db: str) -> list[dict[str, Any]]:
    """Every available listing's document, by VIN then id."""
    stores = open_stores(db)
    try:
        with stores.inventory.db.read() as tx:
            docs = [orjson.loads(row[0]) for row in tx.fetchall("SELECT doc FROM inv_doc")]
    finally:
        stores.close()
    return sorted(docs, key=lambda d: (d.get("vin") or "", d["vehicle_id"]))


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.fixture
def cars():
    return samples.vehicles(COUNT, seed=31)


# -- the wrong format -------------------------------------------------------------------------


def test_a_wrong_format_is_refused_before_any_row_and_says_which_one(tmp_path, db, cars):
    dms = write(tmp_path, "dms_export.csv", samples.dealer_csv(cars))
    imported(dms, "--database", db)
    before = published(db)
    result = invoke(dms, "--format", "meta-vehicle", "--replace", "--database", db)
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "--format meta-vehicle reads no column for" in text and "did you mean --format dealer-csv?" in text
    assert '"Internet Price"' in text  # a column it did not recognise
    assert published(db) == before
    stores = open_stores(db)
    try:
        assert stores.feeds.runs(limit=1)[0].outcome == "rejected"
    finally:
        stores.close()


def test_a_table_that_feeds_no_price_is_refused_unless_allowed(tmp_path, db, cars):
    rows = [row[:9] + row[11:] for row in samples.dealer_rows(cars)]  # no Internet Price, no MSRP
    feed = write(tmp_path, "no-prices.csv", samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(feed, "--database", db)
    assert result.exit_code == 1 and "reads no column for a price" in " ".join(result.output.split())
    assert published(db) == []
    summary = imported(feed, "--allow-field-loss", "--database", db)
    assert summary["inserted"] == COUNT


# -- one car, one listing -----------------------------------------------------------------------


def test_three_feeds_of_the_same_cars_publish_each_car_once(tmp_path, db, cars):
    dms = write(tmp_path, "dms.csv", samples.dealer_csv(cars))
    google = write(tmp_path, "google.tsv", samples.google_tsv(cars))
    meta = write(tmp_path, "catalog.csv", samples.meta_csv(cars))
    assert imported(dms, "--database", db)["inserted"] == COUNT
    ids = {d["vin"]: d["vehicle_id"] for d in published(db)}
    second = imported(google, "--database", db)
    assert (second["inserted"], second["updated"]) == (0, COUNT)
    third = imported(meta, "--database", db)  # vehicle_id "veh-S1000"...: matched by VIN
    assert (third["inserted"], third["updated"], third["details"]["matched"]) == (0, COUNT, COUNT)
    docs = published(db)
    assert len(docs) == COUNT and len({d["vin"] for d in docs}) == COUNT
    assert {d["vin"]: d["vehicle_id"] for d in docs} == ids  # each car keeps its first id
    by_vin = {car.vin: car for car in cars}
    for doc in docs:
        car = by_vin[doc["vin"]]
        assert (doc["make"], doc["model"], doc["year"], doc["price"]) == (car.make, car.model, car.year, car.price)
        assert doc["stock"] == car.stock  # Meta's catalog has no stock column: kept as published
    assert third["details"]["kept_fields"]["stock"] == COUNT
    stores = open_stores(db)
    try:
        for car in cars[:3]:
            assert [r.id for r in stores.inventory.find(vin=car.vin) if r.available] == [ids[car.vin]]
    finally:
        stores.close()


def test_an_identical_reimport_reports_nothing_updated(tmp_path, db, cars):
    dms = write(tmp_path, "dms.csv", samples.dealer_csv(cars))
    imported(dms, "--database", db)
    again = imported(dms, "--database", db)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, COUNT)
    meta = write(tmp_path, "catalog.csv", samples.meta_csv(cars))
    imported(meta, "--database", db)
    before = published(db)
    again = imported(meta, "--replace", "--database", db)
    assert (again["inserted"], again["updated"], again["unchanged"], again["removed"]) == (0, 0, COUNT, 0)
    assert published(db) == before
    result = invoke(meta, "--database", db)
    assert f"0 new, 0 updated, {COUNT} unchanged, 0 removed" in " ".join(result.output.split())


def _swap_in(rows: list[list[str]], index: int, vin: str) -> list[list[str]]:
    out = [list(row) for row in rows]
    out[index][0] = vin
    return out


def test_rows_sharing_a_vin_are_all_left_out_and_every_published_car_stays(tmp_path, db, cars):
    """The Silverado and the Tesla: one typed VIN must not remove one car and mix up the other."""
    dms = write(tmp_path, "dms.csv", samples.dealer_csv(cars))
    imported(dms, "--database", db)
    before = published(db)
    rows = samples.dealer_rows(cars)
    rows[1 + 4][9] = "$1"  # a price changes on a row that stays valid
    shared = _swap_in(rows, 1 + 3, cars[2].vin)  # row 4 types the VIN of row 3's car
    feed = write(tmp_path, "next.csv", samples._delimited(shared, ";").encode("cp1252"))
    # a row without updated_at is dated by its file's time: the same time for both files, so that
    # the cars the second file leaves unchanged are unchanged to the second, whenever it runs
    os.utime(feed, ns=(os.stat(dms).st_atime_ns, os.stat(dms).st_mtime_ns))
    rejects = tmp_path / "rejects.csv"
    summary = imported(feed, "--skip-invalid", "--replace", "--rejects", str(rejects), "--database", db)
    assert summary["outcome"] == "imported" and summary["skipped"] == 2
    with rejects.open(encoding="utf-8", newline="") as handle:
        rejected = list(csv.DictReader(handle))
    lines = [int(r["line"]) for r in rejected]
    assert len(lines) == 2
    for row in rejected:
        other = next(n for n in lines if n != int(row["line"]))
        assert f"is also the VIN of line {other}" in row["problems"]
    after = {d["vin"]: d for d in published(db)}
    assert len(after) == COUNT
    for doc in before:
        if doc["vin"] == cars[4].vin:
            assert after[doc["vin"]]["price"] == 1  # the valid row's change is published
        else:
            assert after[doc["vin"]] == doc  # the two rejected rows' cars are exactly as they were


def test_an_all_or_nothing_import_names_the_earlier_line(tmp_path, db, cars):
    shared = _swap_in(samples.dealer_rows(cars), 1 + 3, cars[2].vin)
    feed = write(tmp_path, "next.csv", samples._delimited(shared, ";").encode("cp1252"))
    result = invoke(feed, "--database", db, "--json")
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert any("duplicates the vin of line" in p["message"] for p in summary["problems"])
    assert published(db) == []


def test_a_stock_number_of_another_published_car_is_a_conflict(tmp_path, db, cars):
    imported(write(tmp_path, "dms.csv", samples.dealer_csv(cars[:4])), "--database", db)
    newcomer = samples.vehicles(1, seed=77)[0]
    rows = samples.dealer_rows([newcomer])
    rows[1][1] = cars[0].stock  # the new car would take a published car's stock number
    feed = write(tmp_path, "new.csv", samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(feed, "--database", db)
    assert result.exit_code == 1 and "stock number is another published listing's" in result.output
    partial = imported(feed, "--skip-invalid", "--rejects", str(tmp_path / "r.csv"), "--database", db)
    assert (partial["inserted"], partial["skipped"]) == (0, 1)
    # A replace that removes the old car frees its stock number for the new one.
    rows[1][1] = cars[0].stock
    swap = samples.dealer_rows(cars[1:4])[1:] + rows[1:]
    feed = write(tmp_path, "swap.csv", samples._delimited([rows[0], *swap], ";").encode("cp1252"))
    summary = imported(feed, "--replace", "--database", db)
    assert (summary["inserted"], summary["removed"]) == (1, 1)
    stocks = [d["stock"] for d in published(db)]
    assert len(stocks) == len(set(stocks)) == 4


# -- VIN check digits -------------------------------------------------------------------------------


def test_a_wrong_check_digit_is_a_warning_and_an_error_with_strict(tmp_path, db, cars):
    good = with_check_digit("KM8JBCAE0SH923119")
    wrong = good[:8] + ("3" if good[8] != "3" else "4") + good[9:]
    assert expected_check_digit(wrong) != wrong[8]
    rows = _swap_in(samples.dealer_rows(cars[:3]), 1, wrong)
    feed = write(tmp_path, "km8.csv", samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(feed, "--database", db)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert f'column "VIN": "{wrong}" has a wrong check digit (expected {expected_check_digit(wrong)})' in text
    strict = invoke(feed, "--strict", "--database", db)
    assert strict.exit_code == 1 and "wrong check digit" in strict.output


# -- rooftops: store codes and a default ------------------------------------------------------------


def _config_with_store_codes(tmp_path: Path) -> str:
    text = DEMO_TOML.read_text()
    text = text.replace(
        'name = "Demo Motors San Francisco"\n', 'name = "Demo Motors San Francisco"\nstore_codes = ["DM-SF", "1111"]\n'
    )
    text = text.replace(
        'name = "Demo Motors Oakland Pre-Owned"\n', 'name = "Demo Motors Oakland Pre-Owned"\nstore_codes = ["DM-OAK"]\n'
    )
    path = tmp_path / "aap.toml"
    path.write_text(text)
    return str(path)


def test_rooftops_are_found_by_the_store_codes_the_configuration_names(tmp_path, db, cars):
    config = _config_with_store_codes(tmp_path)
    settings = load_settings(config, environ={})
    assert settings.dealer.store_codes["dm-sf"] == "Demo Motors San Francisco"
    assert all("store_codes" not in r for r in settings.dealer.rooftops)  # never published
    feed = write(tmp_path, "google.tsv", samples.google_tsv(cars))
    result = invoke(feed, "--config", config, "--database", db, "--json")
    assert result.exit_code == 0, result.output
    docs = published(db)
    assert {d["vin"]: d["rooftop"] for d in docs} == {car.vin: car.rooftop for car in cars}


def test_a_feed_without_a_location_takes_the_default_rooftop(tmp_path, db, cars):
    config = _config_with_store_codes(tmp_path)
    rows = [row[:15] + row[16:] for row in samples.dealer_rows(cars)]  # no Location column
    feed = write(tmp_path, "one-store.csv", samples._delimited(rows, ";").encode("cp1252"))
    oakland = "Demo Motors Oakland Pre-Owned"
    result = invoke(feed, "--config", config, "--database", db, "--rooftop", oakland, "--json")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["details"]["defaults"]["rooftop"] == COUNT
    assert {d["rooftop"] for d in published(db)} == {oakland}
    wrong = invoke(feed, "--config", config, "--database", db, "--rooftop", "Nowhere")
    assert wrong.exit_code == 2 and "is not a configured rooftop" in wrong.output


def test_a_store_code_may_name_one_rooftop_only(tmp_path):
    config = _config_with_store_codes(tmp_path)
    text = Path(config).read_text().replace('store_codes = ["DM-OAK"]', 'store_codes = ["dm-sf"]')
    Path(config).write_text(text)
    result = CliRunner().invoke(main, ["config", "check", "--config", config])
    assert result.exit_code != 0 and "is already a store code of rooftops[0]" in result.output


# -- the content guard --------------------------------------------------------------------------------


def test_a_feed_that_would_strip_prices_is_refused_and_keeps_the_inventory(tmp_path, db, cars):
    imported(write(tmp_path, "dms.csv", samples.dealer_csv(cars)), "--database", db)
    before = published(db)
    rows = samples.dealer_rows(cars)
    for row in rows[1:]:
        row[9] = ""  # every Internet Price empty ("call for price")
    feed = write(tmp_path, "no-price.csv", samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(feed, "--replace", "--database", db, "--json")
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "refused"
    assert f"it would leave {COUNT} without a price" in summary["message"]
    assert published(db) == before
    allowed = imported(feed, "--replace", "--allow-field-loss", "--database", db)
    assert allowed["updated"] == COUNT and all("price" not in d for d in published(db))


def test_prices_that_move_far_are_refused(tmp_path, db, cars):
    imported(write(tmp_path, "dms.csv", samples.dealer_csv(cars)), "--database", db)
    rows = samples.dealer_rows(cars)
    for row, car in zip(rows[1:], cars):
        row[9] = f"${car.price * 100:,}"  # a decimal point lost
    feed = write(tmp_path, "cents.csv", samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(feed, "--database", db)
    assert result.exit_code == 1 and f"{COUNT} with a price moved more than 2x" in " ".join(result.output.split())


def test_one_car_losing_its_price_is_no_refusal(tmp_path, db, cars):
    imported(write(tmp_path, "dms.csv", samples.dealer_csv(cars)), "--database", db)
    rows = samples.dealer_rows(cars)
    rows[1][9] = ""
    summary = imported(write(tmp_path, "one.csv", samples._delimited(rows, ";").encode("cp1252")), "--database", db)
    assert summary["details"]["guard"]["lost"] == {"price": 1}


# -- the property: random feeds never mix cars --------------------------------------------------------

POOL = samples.vehicles(8, seed=5)
DEMO = load_settings(environ={})


@st.composite
def feed_rows(draw: Any) -> list[tuple[int, str]]:
    """(car, what is wrong with its row): "" (nothing), "price" (rejected), "vin"/"stock" (typed
    the identity of another row of the same feed, one that keeps its own), "dup" (the row twice).

    Two rows that trade VINs would describe two real cars as far as any reader can tell, so
    a typed identity always names a row that keeps its own (as a typing slip does)."""
    chosen = draw(st.lists(st.integers(0, len(POOL) - 1), unique=True, max_size=len(POOL)))
    return [(car, draw(st.sampled_from(["", "", "", "price", "vin", "stock", "dup"]))) for car in chosen]


def _render(rows: list[tuple[int, str]], ids: str) -> bytes:
    lines = []
    for position, (car, fault) in enumerate(rows):
        item = POOL[car]
        listing: dict[str, Any] = {
            "vin": item.vin,
            "stock": item.stock,
            "year": item.year,
            "make": item.make,
            "model": item.model,
            "price": item.price + position,
            "status": "available",
            "updated_at": "2026-05-01T10:00:00Z",
        }
        if ids != "none":
            listing["vehicle_id"] = f"{ids}-{item.stock}"
        others = [POOL[c] for c, f in rows if c != car and f in ("", "price")]  # rows keeping their own
        if fault == "price":
            listing["price"] = -1
        elif fault == "vin" and others:
            listing["vin"] = others[0].vin
        elif fault == "stock" and others:
            listing["stock"] = others[0].stock
        lines.append(orjson.dumps(listing))
        if fault == "dup":
            lines.append(orjson.dumps(listing))
    return b"\n".join(lines) + b"\n"


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(feed_rows(), st.booleans(), st.booleans(), st.sampled_from(["none", "meta", "google"])),
        min_size=1,
        max_size=4,
    )
)
def test_random_feeds_never_leave_two_listings_of_a_vin_or_a_vin_on_another_car(tmp_path_factory, steps):
    directory = tmp_path_factory.mktemp("property")
    stores = open_stores(f"sqlite:///{directory}/aap.db")
    truth = {item.vin: (item.make, item.model, item.year, item.stock) for item in POOL}
    try:
        for number, (rows, replace, partial, ids) in enumerate(steps):
            path = directory / f"feed{number}.jsonl"
            path.write_bytes(_render(rows, ids))
            with stores.inventory.db.read() as tx:
                before = {orjson.loads(d)["vin"]: d for (d,) in tx.fetchall("SELECT doc FROM inv_doc")}
            request = ImportRequest(
                str(path), replace=replace, partial=partial, max_removed_share=None, allow_field_loss=True
            )
            result = __import__("asyncio").run(run_import(stores, DEMO, request, work=WORK))
            with stores.inventory.db.read() as tx:
                docs = [orjson.loads(d) for (d,) in tx.fetchall("SELECT doc FROM inv_doc")]
            vins = [d["vin"] for d in docs]
            stocks = [d["stock"] for d in docs]
            assert len(vins) == len(set(vins)) and len(stocks) == len(set(stocks))
            for doc in docs:  # every published VIN carries its own car's data
                assert (doc["make"], doc["model"], doc["year"], doc["stock"]) == truth[doc["vin"]]
            now = {d["vin"]: d for d in docs}
            if result.run.outcome != "imported":
                assert {vin: orjson.loads(doc) for vin, doc in before.items()} == now  # nothing changed
                continue
            report = result.report
            if replace and partial and report is not None:
                # A rejected row's car, published before, stays exactly as it was (unless a valid row
                # names it too).
                rejected_lines = {r.line for r in report.rejected}
                accepted = [x for x, line in zip(report.listings, report.lines) if line not in rejected_lines]
                named = {(k, r.listing.get(k)) for r in report.rejected for k in ("vin", "stock")}
                listed = {(k, x.get(k)) for x in accepted for k in ("vin", "stock")}
                for vin, text in before.items():
                    doc = orjson.loads(text)
                    keys = {("vin", doc["vin"]), ("stock", doc["stock"])}
                    if keys & named and not keys & listed:
                        assert now.get(vin) == doc
    finally:
        stores.close()


# -- the feature vocabulary ------------------------------------------------------------------------------


def test_any_evidence_code_without_features():
    """Without [[features]] the vocabulary is the codes the inventory carries (docs/search.md)."""
    import dataclasses

    from aap.inventory.listing_rules import ListingChecker

    listing = {
        "vin": with_check_digit("1HGCM82603A004352"),
        "status": "available",
        "updated_at": "2026-05-01T10:00:00Z",
        "feature_evidence": [{"code": "heated_seats", "label": "Heated seats", "status": "unknown"}],
    }
    bare = dataclasses.replace(DEMO, features=())
    assert ListingChecker(bare).check(dict(listing), 1) == []
    codes = {f.code for f in DEMO.features}
    assert codes and "heated_seats" not in codes
    assert ListingChecker(DEMO).check(dict(listing), 1) == [
        ("/feature_evidence/0/code", "is not in the configured [[features]] vocabulary")
    ]


def test_format_aap_on_another_formats_header_says_which_it_looks_like(tmp_path, db, cars):
    result = invoke(write(tmp_path, "dms.csv", samples.dealer_csv(cars)), "--format", "aap", "--database", db)
    assert result.exit_code == 1 and "did you mean --format dealer-csv?" in " ".join(result.output.split())
