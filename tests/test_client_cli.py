"""`aap search`, `aap vehicle`, `aap dealer`: tables for people, --json for scripts, errors as exit code 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aap.cli.explore import dealer_command, search_command, vehicle_command
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
    vin = next(v["vin"] for v in page["vehicles"] if v.get("vin"))
    result = invoke(vehicle_command, own_dealer.url, "--binding", binding, "--vin", vin, *extra)
    assert result.exit_code == 0 and vin in result.output


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
