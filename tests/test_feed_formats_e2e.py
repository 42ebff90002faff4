"""Dealer feeds as they come, end to end: ``aap import`` of each format, then read back over ``/a2a``.

One live deployment (the demo dealer on SQLite) for the module; each test
replaces its inventory with one generated feed (Google TSV/CSV/XML, Meta
CSV/XML, a provider CSV in Windows-1252 with semicolons, gzip, zip, a
mapping file) and asks ``inventory.search`` and ``inventory.vehicle`` over
real HTTP what was published.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import feed_samples as samples
from aap.cli.main import main
from factories import deployment_fixture, http_fixture
from http_helpers import AAP_HEADERS, send_message

COUNT = 18


deployment = deployment_fixture("feeds", inventory=0)


http = http_fixture()


def a2a(http: httpx.Client, data: dict) -> dict:
    response = http.post("/a2a", json=send_message(data), headers=AAP_HEADERS)
    assert response.status_code == 200
    body = response.json()
    assert "result" in body, body
    return body["result"]["message"]["parts"][0]["data"]


def import_feed(deployment, path: Path, *args: str) -> str:
    result = CliRunner().invoke(
        main,
        ["import", str(path), "--replace", "--allow-shrink", "--database", deployment.settings.database_url, *args],
    )
    assert result.exit_code == 0, result.output
    return result.output


def vehicle_over_a2a(http, vin: str) -> dict:
    return a2a(http, {"type": "inventory.vehicle.request", "vin": vin})["data"]


def all_over_a2a(http) -> dict:
    return a2a(http, {"type": "inventory.search.request", "pagination": {"limit": 100}})["data"]


def check_published(http, items: list[samples.Vehicle], *, rooftops: bool = False) -> None:
    page = all_over_a2a(http)
    assert page["total"] == len(items)
    assert {v["vin"] for v in page["vehicles"]} == {v.vin for v in items}
    for item in (items[1], items[2], items[3]):  # used, cpo, new
        listing = vehicle_over_a2a(http, item.vin)
        assert listing["price"] == item.price
        assert listing["condition"] == item.condition
        assert listing["make"] == item.make and listing["model"] == item.model
        assert listing["year"] == item.year
        assert listing["exterior_color"] == item.color  # accented names survive every encoding
        if item.condition != "new":
            assert listing["mileage"] == item.mileage
            assert listing.get("mileage_unit", "mi") == "mi"
        assert listing["photos"] == list(item.photos)  # in order, every one https
        assert listing["status"] == "available"
        if rooftops:
            assert listing["rooftop"] == item.rooftop


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "render", "fmt"),
    [
        ("inventory.tsv", samples.google_tsv, "google-vehicle"),
        ("vehicle-ads.csv", samples.google_csv, "google-vehicle"),
        ("google.xml", samples.google_xml, "google-vehicle"),
        ("catalog.csv", samples.meta_csv, "meta-vehicle"),
        ("catalog.xml", samples.meta_xml, "meta-vehicle"),
        ("export.csv", samples.dealer_csv, "dealer-csv"),
    ],
)
def test_each_format_is_detected_imported_and_served(deployment, http, tmp_path, name, render, fmt):
    items = samples.vehicles(COUNT, seed=len(name))
    path = tmp_path / name
    path.write_bytes(render(items))
    output = import_feed(deployment, path)
    assert f"format {fmt} (detected from the" in output
    assert f"Imported {COUNT} listings" in output
    assert "Default status = available" in output
    check_published(http, items)


def test_explicit_format_gzip_and_zip(deployment, http, tmp_path):
    items = samples.vehicles(COUNT, seed=3)
    gz = tmp_path / "google.tsv.gz"
    gz.write_bytes(samples.gzipped(samples.google_tsv(items)))
    output = import_feed(deployment, gz, "--format", "google-vehicle")
    assert "format google-vehicle (as given)" in output and "gzip archive" in output
    check_published(http, items)
    items = samples.vehicles(COUNT, seed=4)
    archive = tmp_path / "export.zip"
    archive.write_bytes(samples.zipped(samples.dealer_csv(items), "nightly/inventory.csv"))
    output = import_feed(deployment, archive)
    assert "zip archive (nightly/inventory.csv)" in output
    assert "encoding cp1252" in output and "delimiter ';'" in output
    check_published(http, items)


def test_messy_provider_csv_values_are_normalised(deployment, http, tmp_path):
    items = samples.vehicles(COUNT, seed=5)
    path = tmp_path / "dms.csv"
    path.write_bytes(samples.dealer_csv(items))
    output = import_feed(deployment, path, "--format", "dealer-csv")
    # http photos are upgraded with a warning; the store codes are unknown without a mapping.
    assert "photo URL(s) over http://; published as https://" in output
    assert re.search(r'column "Location": "DM-SF" is not a configured rooftop', output)
    lower = items[1]  # odd rows carry a lower-case VIN and "28,411" without a unit
    listing = vehicle_over_a2a(http, lower.vin)
    assert listing["vin"] == lower.vin
    assert listing["stock"] == lower.stock  # trimmed
    assert listing["msrp"] == lower.msrp
    assert listing["inventory_date"] == lower.in_stock  # from MM/DD/YYYY
    assert listing["description"] == f"One owner.\nClean history for {lower.stock}."  # quoted newline
    assert listing["features"] == ["Sunroof", "Heated Seats"]
    assert "rooftop" not in listing or listing["rooftop"] is None


def test_mapping_file_maps_store_codes_and_columns(deployment, http, tmp_path):
    items = samples.vehicles(COUNT, seed=6)
    rows = samples.dealer_rows(items)
    rows[0] = [
        "Serial",
        "Lot Number",
        "MY",
        "Manufacturer",
        "Model",
        "Trim",
        "Body",
        "Paint",
        "Kilometrage",
        "Prix",
        "MSRP",
        "State",
        "CPO",
        "Pics",
        "Arrived",
        "Site",
        "Notes",
        "Options",
    ]
    for row in rows[1:]:
        row[8] = row[8].replace(",", " ").replace(" mi", "")  # 28 411
        row[9] = row[9].replace("$", "").replace(",", ".") + ",00 €"  # 33.995,00 €
    path = tmp_path / "fr.csv"
    path.write_bytes(samples._delimited(rows, ";").encode("cp1252"))
    mapping = tmp_path / "mapping.toml"
    mapping.write_text("""
extends = "dealer-csv"
unknown = "error"

[columns]
"Serial" = "vin"
"Lot Number" = "stock"
"MY" = "year"
"Manufacturer" = "make"
"Paint" = "exterior_color"
"Kilometrage" = { field = "mileage", unit = "km" }
"Prix" = { field = "price", decimal = "," }
"State" = "condition"
"Pics" = { field = "photos", separator = "|" }
"Arrived" = "inventory_date"
"Site" = "rooftop"
"Notes" = "description"

[defaults]
currency = "USD"

[rooftops]
"DM-SF" = "Demo Motors San Francisco"
"DM-OAK" = "Demo Motors Oakland Pre-Owned"
""")
    output = import_feed(deployment, path, "--mapping", str(mapping))
    assert "format mapping (dealer-csv) (as given)" in output
    page = all_over_a2a(http)
    assert page["total"] == COUNT
    used = items[1]
    listing = vehicle_over_a2a(http, used.vin)
    assert listing["price"] == used.price
    assert listing["mileage"] == used.mileage and listing["mileage_unit"] == "km"
    assert listing["rooftop"] == used.rooftop
    assert listing["currency"] == "USD"


def test_docs_examples_import(deployment, http, tmp_path):
    """Every example feed in docs/feeds.md imports (and says what it is)."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "feeds.md").read_text(encoding="utf-8")
    examples = re.findall(r"<!-- example: (\S+) -->\n```\w*\n(.*?)```", docs, re.S)
    assert len(examples) >= 5
    mapping = None
    for name, body in examples:
        path = tmp_path / name
        path.write_text(body, encoding="utf-8")
        if name.endswith(".toml"):
            mapping = path
            continue
        args = ["--mapping", str(mapping)] if name.startswith("mapped") else []
        output = import_feed(deployment, path, *args)
        imported = re.search(r"Imported (\d+) listings?", output)
        assert imported and int(imported.group(1)) >= 1, (name, output)
        assert "rejected" not in output
        assert deployment.stores.inventory.count() == int(imported.group(1))
