"""`aap search`, `aap vehicle`, `aap dealer`: tables for people, --json for scripts, errors as exit code 1."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from aap.cli.explore import dealer_command, results_table, search_command, vehicle_command
from aap.client.models import Listing
from check_fakes import FakeDealer
from deploy_env import own_dealer  # noqa: F401  (fixture)
from http_helpers import LiveServer


@pytest.fixture(scope="module")
def fake_url():
    server = LiveServer()
    fake = FakeDealer(base=server.base_url)
    server.start(fake.app)
    yield server.base_url, fake
    server.stop()


def invoke(command, *args):
    return CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)


def test_search_table_and_json(fake_url):
    url, fake = fake_url
    hondas = [v for v in fake.inventory if v["make"] == "Honda"]
    result = invoke(search_command, url, "--make", "Honda", "--sort", "price:asc", "--limit", 3)
    assert result.exit_code == 0, result.output
    assert f"Fake Motors agent: {len(hondas)} matching" in result.output
    assert "Honda" in result.output and "Toyota" not in result.output
    assert "next page: --cursor " in result.output
    result = invoke(search_command, url, "--make", "Honda", "--limit", 3, "--json")
    body = json.loads(result.output)
    assert body["type"] == "inventory.search.response"
    assert body["data"]["total"] == len(hondas) and len(body["data"]["vehicles"]) == 3
    cursor = body["data"]["next_cursor"]
    result = invoke(search_command, url, "--make", "Honda", "--limit", 3, "--cursor", cursor, "--json")
    second = json.loads(result.output)["data"]["vehicles"]
    six = json.loads(invoke(search_command, url, "--make", "Honda", "--limit", 6, "--json").output)
    assert body["data"]["vehicles"] + second == six["data"]["vehicles"][:6]


def test_search_all_walks_every_page(fake_url):
    url, fake = fake_url
    result = invoke(search_command, url, "--all", "--limit", 7, "--json")
    pages = json.loads(result.output)
    assert len(pages) == 6
    assert sum(len(p["data"]["vehicles"]) for p in pages) == len(fake.inventory)
    suvs = sum(1 for v in fake.inventory if v["body"] == "suv")
    result = invoke(search_command, url, "--filters", '{"body": ["suv"]}', "--all", "--limit", 25)
    assert result.exit_code == 0
    assert f"{suvs} matching" in result.output
    assert "next page" not in result.output


def test_search_errors_are_readable(fake_url):
    url, _ = fake_url
    result = invoke(search_command, url, "--limit", 30)
    assert result.exit_code == 1
    assert "SCHEMA_VALIDATION_FAILED" in result.output and "/pagination/limit" in result.output
    result = invoke(search_command, url, "--filters", "[1]")
    assert result.exit_code == 2 and "must be a JSON object" in result.output
    result = invoke(search_command, url, "--model", "Civic")
    assert result.exit_code == 1 and "UNSUPPORTED_FILTER" in result.output


def test_vehicle_and_dealer(fake_url):
    url, fake = fake_url
    listing = fake.inventory[3]
    result = invoke(vehicle_command, url, "--vin", listing["vin"])
    assert result.exit_code == 0
    assert listing["vin"] in result.output and listing["stock"] in result.output
    result = invoke(vehicle_command, url, "--stock", listing["stock"], "--json")
    assert json.loads(result.output)["data"] == listing
    result = invoke(vehicle_command, url, "--vin", "AAPCHECK000000001")
    assert result.exit_code == 1 and "VEHICLE_NOT_FOUND" in result.output
    result = invoke(vehicle_command, url)
    assert result.exit_code == 2
    result = invoke(dealer_command, url)
    assert result.exit_code == 0
    assert "Fake Motors" in result.output and "Fake Motors Main" in result.output
    assert f"agent card: {url}/.well-known/agent-card.json" in result.output
    assert json.loads(invoke(dealer_command, url, "--json").output)["data"]["name"] == "Fake Motors"


@pytest.mark.slow
@pytest.mark.parametrize("binding", ["a2a", "mcp", "poppy"])
def test_commands_against_our_dealer_over_each_binding(own_dealer, binding):
    extra = ["--ca-file", own_dealer.ca.ca_file]
    if binding == "poppy":
        extra += [
            "--poppy-client-id",
            own_dealer.identity.client_id,
            "--poppy-client-key",
            own_dealer.key_file,
            "--poppy-key-id",
            own_dealer.identity.kid,
        ]
    result = invoke(dealer_command, own_dealer.url, "--binding", binding, *extra)
    assert result.exit_code == 0, result.output
    assert own_dealer.settings.dealer.name in result.output
    result = invoke(
        search_command, own_dealer.url, "--binding", binding, "--condition", "used", "--limit", 2, "--json", *extra
    )
    assert result.exit_code == 0, result.output
    page = json.loads(result.output)["data"]
    assert page["applied_filters"]["condition"] == ["used"]
    # MCP answers a search with listing summaries (docs/mcp.md): the vehicle_id is what every binding carries.
    vehicle_id = next(v["vehicle_id"] for v in page["vehicles"] if v.get("vehicle_id"))
    result = invoke(vehicle_command, own_dealer.url, "--binding", binding, "--vehicle-id", vehicle_id, *extra)
    assert result.exit_code == 0 and vehicle_id in result.output


def test_search_all_json_is_a_list_of_pages_even_for_one_page(fake_url):
    url, fake = fake_url
    result = invoke(search_command, url, "--all", "--limit", 25, "--filters", '{"body": ["suv"]}', "--json")
    pages = json.loads(result.stdout)
    assert isinstance(pages, list) and len(pages) == 1
    assert pages[0]["type"] == "inventory.search.response"
    single = json.loads(invoke(search_command, url, "--limit", 25, "--filters", '{"body": ["suv"]}', "--json").stdout)
    assert isinstance(single, dict) and single["data"] == pages[0]["data"]


@pytest.mark.slow
def test_search_table_at_80_columns_never_wraps_identifiers_or_the_cursor(fake_url):
    url, fake = fake_url
    result = CliRunner().invoke(
        search_command,
        [url, "--limit", "5", "--sort", "price:asc"],
        catch_exceptions=False,
        terminal_width=80,
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    page = json.loads(invoke(search_command, url, "--limit", 5, "--sort", "price:asc", "--json").stdout)
    for vehicle in page["data"]["vehicles"]:
        identifier = vehicle.get("vin") or vehicle.get("stock") or vehicle["vehicle_id"]
        assert any(identifier in line for line in lines), identifier  # whole, on one line
    cursor = page["data"]["next_cursor"]
    assert cursor in lines  # alone on its line: paste it back as it is
    assert max(len(line) for line in lines if line != cursor) <= 80


def test_vehicle_takes_a_vin_or_a_stock_number_positionally(fake_url):
    url, fake = fake_url
    listing = fake.inventory[5]
    by_vin = invoke(vehicle_command, url, listing["vin"], "--json")
    assert by_vin.exit_code == 0, by_vin.output
    assert json.loads(by_vin.stdout)["data"] == listing
    by_stock = invoke(vehicle_command, url, listing["stock"], "--json")
    assert by_stock.exit_code == 0 and json.loads(by_stock.stdout)["data"] == listing
    table = invoke(vehicle_command, url, listing["stock"])
    assert table.exit_code == 0 and listing["vin"] in table.output
    missing = invoke(vehicle_command, url, "NOSUCHSTOCK")
    assert missing.exit_code == 1 and "VEHICLE_NOT_FOUND" in missing.output
    both = invoke(vehicle_command, url, listing["vin"], "--stock", listing["stock"])
    assert both.exit_code == 2 and "not both" in both.output


def test_a_stock_number_shaped_like_a_vin_is_found_as_a_stock_number(fake_url):
    url, fake = fake_url
    odd = {"vehicle_id": "veh_odd", "stock": "WDD2050041R123456", "make": "Mercedes-Benz", "status": "available"}
    fake.inventory.append(odd)
    try:
        result = invoke(vehicle_command, url, odd["stock"], "--json")
    finally:
        fake.inventory.remove(odd)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["data"]["vehicle_id"] == "veh_odd"


def long_listings() -> list[Listing]:
    rooftops = ("Demo Motors San Francisco Preowned Center", "Demo Motors Oakland", "Demo Powersports San Jose")
    out = []
    for i, (year, make, model, trim) in enumerate(
        [
            (2023, "Ford", "Mustang Mach-E", "Premium AWD Extended Range"),
            (2025, "Chevrolet", "Silverado 1500", "High Country"),
            (2018, "Toyota", "Tacoma", "Limited"),
            (2026, "Polaris", "Sportsman 570", None),
        ]
    ):
        raw = {
            "vehicle_id": f"veh_{i}",
            "vin": f"1FMCU9J9{i}NUA1234{i}"[:17].ljust(17, "0"),
            "year": year,
            "make": make,
            "model": model,
            "price": 1_234_567 if i == 0 else 25_000 + i,
            "mileage": 123_456 if i == 1 else 40 + i,
            "rooftop": rooftops[i % len(rooftops)],
            "status": "pending" if i == 2 else "available",
        }
        if trim:
            raw["trim"] = trim
        out.append(Listing(raw))
    return out


def rendered(cars: list[Listing], width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(results_table("Dealer: 4 matching", cars, width))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100, 60])
def test_search_results_fit_the_terminal_with_identifiers_whole(width):
    cars = long_listings()
    lines = rendered(cars, width)
    assert max(len(line) for line in lines) <= width
    for car in cars:
        assert sum(car.vin in line for line in lines) == 1  # whole, on one line
    assert any("(pending)" in line for line in lines)


def test_at_80_columns_the_rooftop_gives_way_with_an_ellipsis_and_units_go_to_the_header():
    cars = long_listings()
    lines = rendered(cars, 80)
    header = next(line for line in lines if "Vehicle" in line)
    assert "Price USD" in header and "Miles" in header and "Rooftop" in header
    assert any("1,234,567" in line and "…" in line for line in lines)  # the rooftop, shortened
    assert not any(" USD" in line or " mi " in line for line in lines[lines.index(header) + 1 :])
    # one line per listing where the name fits 26 columns
    assert sum(line.startswith("2018 Toyota Tacoma Limited") for line in lines) == 1


def test_mixed_currencies_and_units_stay_in_the_cells():
    cars = long_listings()
    cars[1].raw.update(currency="CAD", mileage_unit="km")
    lines = rendered(cars, 80)
    assert any("25,001 CAD" in line and "123,456 km" in line for line in lines)
    assert any("1,234,567 USD" in line for line in lines)


def test_a_narrow_terminal_drops_the_rooftop_before_cutting_anything():
    cars = long_listings()
    lines = rendered(cars, 56)
    assert max(len(line) for line in lines) <= 56
    assert not any("Rooftop" in line for line in lines)
    for car in cars:
        assert sum(car.vin in line for line in lines) == 1
