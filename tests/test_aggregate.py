"""An aggregate endpoint end to end over /a2a, on both backends.

Two sellers behind one endpoint, one VIN listed by both: listings name their
seller, dealer.information answers for each seller, ``rooftops`` is refused,
inventory.vehicle never guesses between the duplicates, each seller's leads
reach that seller's CRM, and ``aap import --dealer-id X --replace`` replaces
only X's inventory.
"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
from click.testing import CliRunner

from aap.cli.main import main
from aap.config.loader import load_settings
from aap.server.app import create_app
from aap.spec import validate
from aap.store import open_stores
from factories import seller_listing
from http_helpers import AAP_HEADERS, LiveServer, aap_error_of, send_message
from lead_support import Receiver, lead_request

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

SHARED_VIN = "1HGCV1F34PA000001"

CONFIG = """
id = "cars-marketplace"
public_url = "https://cars.example"
database = "{database}"

[search]
scope = "aggregate"
filters = ["make", "price_max", "near"]

[dealer]
name = "Cars Marketplace"
[[dealer.rooftops]]
name = "Cars Marketplace HQ"

[[dealers]]
dealer_id = "springfield-honda"
name = "Springfield Honda"
[[dealers.rooftops]]
name = "Springfield Honda"
timezone = "America/Chicago"
geo = {{ latitude = 39.7817, longitude = -89.6501 }}

[[dealers]]
dealer_id = "shelbyville-ford"
name = "Shelbyville Ford"
[[dealers.rooftops]]
name = "Shelbyville Ford"
timezone = "America/Chicago"
geo = {{ latitude = 39.4067, longitude = -88.7898 }}

[leads.delivery]
poll_seconds = 1
base_backoff_seconds = 1

[[leads.routes]]
rooftop = "*"
dealer_id = "springfield-honda"
[[leads.routes.targets]]
type = "adf_http"
name = "springfield-crm"
url = "{springfield}"

[[leads.routes]]
rooftop = "*"
dealer_id = "shelbyville-ford"
[[leads.routes.targets]]
type = "adf_http"
name = "shelbyville-crm"
url = "{shelbyville}"
"""


SPRINGFIELD = [
    seller_listing(
        "sh-1", "springfield-honda", "Springfield Honda", SHARED_VIN, make="Honda", price=21000, model="Model sh-1"
    ),
    seller_listing(
        "sh-2",
        "springfield-honda",
        "Springfield Honda",
        "1HGCV1F34PA000002",
        make="Honda",
        price=23000,
        model="Model sh-2",
    ),
]
SHELBYVILLE = [
    seller_listing(
        "sf-1", "shelbyville-ford", "Shelbyville Ford", SHARED_VIN, make="Honda", price=20500, model="Model sf-1"
    ),
    seller_listing(
        "sf-2",
        "shelbyville-ford",
        "Shelbyville Ford",
        "1FTEW1EP5PKA00003",
        make="Ford",
        price=41000,
        model="Model sf-2",
    ),
]


def write_feed(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def run_cli(*args: str):
    env = {k: v for k, v in os.environ.items() if k not in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL")}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def marketplace(tmp_path, database_url):
    springfield, shelbyville = Receiver(), Receiver()
    server = LiveServer()
    config = tmp_path / "aap.toml"
    config.write_text(CONFIG.format(database=database_url, springfield=springfield.url, shelbyville=shelbyville.url))
    # Each seller's feed imported on its own, by dealer id (the rows carry it too).
    run_cli(
        "import",
        write_feed(tmp_path / "sh.jsonl", SPRINGFIELD),
        "--config",
        str(config),
        "--dealer-id",
        "springfield-honda",
    )
    run_cli(
        "import",
        write_feed(tmp_path / "sf.jsonl", SHELBYVILLE),
        "--config",
        str(config),
        "--dealer-id",
        "shelbyville-ford",
    )
    settings = load_settings(str(config), environ={})
    stores = open_stores(settings.database_url)
    server.start(create_app(settings, stores))
    yield server, config, stores, {"springfield-honda": springfield, "shelbyville-ford": shelbyville}
    server.stop()
    stores.close()
    springfield.close()
    shelbyville.close()


def call(server, data: dict) -> dict:
    reply = httpx.post(server.base_url + "/a2a", json=send_message(data), headers=AAP_HEADERS, timeout=30)
    assert reply.status_code == 200
    body = reply.json()
    assert validate(body, "json-rpc-response") == [], body
    return body


def assert_result(server, data: dict) -> dict:
    body = call(server, data)
    assert "result" in body, body
    return body["result"]["message"]["parts"][0]["data"]


def assert_error(server, data: dict) -> dict:
    body = call(server, data)
    error = aap_error_of(body)
    assert error is not None, body
    return error


def search(server, **body) -> dict:
    found = assert_result(server, {"type": "inventory.search.request", **body})
    assert validate(found, "inventory-search-response") == []
    return found["data"]


def test_every_listing_names_its_seller_and_each_seller_answers_for_itself(marketplace):
    server, _, _, _ = marketplace
    vehicles = search(server, pagination={"limit": 10})["vehicles"]
    assert {(v["vehicle_id"], v["dealer_id"]) for v in vehicles} == {
        ("sh-1", "springfield-honda"),
        ("sh-2", "springfield-honda"),
        ("sf-1", "shelbyville-ford"),
        ("sf-2", "shelbyville-ford"),
    }
    for v in vehicles:
        info = assert_result(server, {"type": "dealer.information.request", "dealer_id": v["dealer_id"]})
        assert validate(info, "dealer-information-response") == []
        assert info["data"]["dealer_id"] == v["dealer_id"]
        assert [r["name"] for r in info["data"]["rooftops"]] == [v["rooftop"]]
    operator = assert_result(server, {"type": "dealer.information.request"})
    assert operator["data"]["name"] == "Cars Marketplace"
    missing = assert_error(server, {"type": "dealer.information.request", "dealer_id": "capital-city-kia"})
    assert missing["code"] == "DEALER_NOT_FOUND"


def test_the_rooftops_filter_is_refused(marketplace):
    server, _, _, _ = marketplace
    err = assert_error(server, {"type": "inventory.search.request", "filters": {"rooftops": ["Springfield Honda"]}})
    assert err["code"] == "UNSUPPORTED_FILTER"


def test_vehicle_resolves_by_vehicle_id_and_refuses_to_guess_a_shared_vin(marketplace):
    server, _, _, _ = marketplace
    for vehicle_id, dealer_id in (("sh-1", "springfield-honda"), ("sf-1", "shelbyville-ford")):
        got = assert_result(server, {"type": "inventory.vehicle.request", "vehicle_id": vehicle_id})
        assert validate(got, "vehicle-detail-response") == []
        assert (got["data"]["vin"], got["data"]["dealer_id"]) == (SHARED_VIN, dealer_id)
    ambiguous = assert_error(server, {"type": "inventory.vehicle.request", "vin": SHARED_VIN})
    assert ambiguous["code"] == "VEHICLE_NOT_FOUND"
    unique = assert_result(server, {"type": "inventory.vehicle.request", "vin": "1FTEW1EP5PKA00003"})
    assert unique["data"]["vehicle_id"] == "sf-2"


def test_leads_reach_the_selling_dealers_crm(marketplace):
    server, _, stores, crms = marketplace
    sent = {}
    for vehicle_id, dealer_id in (("sh-2", "springfield-honda"), ("sf-1", "shelbyville-ford")):
        reply = assert_result(server, lead_request(vehicle_of_interest={"vehicle_id": vehicle_id}))
        assert validate(reply, "lead-submit-response") == []
        sent[reply["data"]["lead_id"]] = dealer_id
    for _ in range(300):  # bounded by count: the in-app delivery worker polls every second
        if sum(len(crm.requests) for crm in crms.values()) >= 2:
            break
        time.sleep(0.1)
    for dealer_id, crm in crms.items():
        got = [r["headers"]["X-AAP-Lead-Id"] for r in crm.requests]
        assert got == [lead for lead, d in sent.items() if d == dealer_id]
    for lead_id, dealer_id in sent.items():
        assert stores.leads.get_lead(lead_id)["dealer_id"] == dealer_id


def test_replacing_one_dealers_feed_leaves_the_others_alone(marketplace, tmp_path):
    server, config, _, _ = marketplace
    fresh = [
        seller_listing(
            "sh-9",
            "springfield-honda",
            "Springfield Honda",
            "1HGCV1F34PA000009",
            make="Honda",
            price=19000,
            model="Model sh-9",
        )
    ]
    run_cli(
        "import",
        write_feed(tmp_path / "sh2.jsonl", fresh),
        "--config",
        str(config),
        "--dealer-id",
        "springfield-honda",
        "--replace",
        "--allow-shrink",
    )
    ids = {v["vehicle_id"] for v in search(server, pagination={"limit": 10})["vehicles"]}
    assert ids == {"sh-9", "sf-1", "sf-2"}
    gone = assert_error(server, {"type": "inventory.vehicle.request", "vehicle_id": "sh-1"})
    assert gone["code"] == "VEHICLE_UNAVAILABLE"
    # Now the shared VIN has one available listing, so it resolves.
    assert (
        assert_result(server, {"type": "inventory.vehicle.request", "vin": SHARED_VIN})["data"]["vehicle_id"] == "sf-1"
    )


def test_agent_card_advertises_dealer_information(marketplace):
    server, _, _, _ = marketplace
    card = httpx.get(server.base_url + "/.well-known/agent-card.json", timeout=10).json()
    assert validate(card, "agent-card") == []
    assert "dealer.information" in [s["id"] for s in card["skills"]]
    assert json.dumps(card).count('"aggregate"') >= 1


def test_listings_of_sellers_not_configured_stay_invisible(marketplace):
    server, _, stores, _ = marketplace
    before = search(server)["total"]
    stores.inventory.import_listings(
        [
            seller_listing(
                "gh-1",
                "ghost-motors",
                "Ghost Motors",
                "1GHOST00000000001",
                make="Honda",
                price=15000,
                model="Model gh-1",
            )
        ]
    )
    assert search(server)["total"] == before
    assert search(server, filters={"make": ["Honda"]})["total"] == 3
    assert (
        assert_error(server, {"type": "inventory.vehicle.request", "vehicle_id": "gh-1"})["code"] == "VEHICLE_NOT_FOUND"
    )
    # Dropping the ghost seller makes the configured sellers the whole inventory again.
    stores.inventory.import_listings([], dealer_id="ghost-motors", replace=True)
    assert search(server, filters={"make": ["Honda"]})["total"] == 3
