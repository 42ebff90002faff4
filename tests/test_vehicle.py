"""inventory.vehicle: identifier precedence, ambiguity, not-found versus unavailable."""

from __future__ import annotations

from typing import Any

import pytest

from aap.agent import CallContext
from aap.config.model import DealerProfile
from aap.errors import AapError
from aap.store.inventory import synthesized_id
from conftest import DEFAULT_ROOFTOPS, assert_valid
from inventory_reference import listing

CTX = CallContext(binding="test")
VIN = "1HGCV1F30NA123456"
OTHER_VIN = "2T3P1RFV8MW123457"


def vehicle(agent: Any, **ids: Any) -> dict[str, Any]:
    response = agent.handle({"type": "inventory.vehicle.request", **ids}, CTX)
    return assert_valid(response, "vehicle-detail-response")["data"]


def assert_refused(agent: Any, **ids: Any) -> AapError:
    with pytest.raises(AapError) as caught:
        agent.handle({"type": "inventory.vehicle.request", **ids}, CTX)
    assert_valid(caught.value.to_dict(), "error")
    assert not caught.value.retryable
    return caught.value


@pytest.fixture
def shop(agent_factory):
    return agent_factory(
        listings=[
            listing("a", vin=VIN, stock="S1", price=30000),
            listing("b", stock="S2"),
            {"vin": OTHER_VIN, "status": "intransit", "updated_at": "2026-04-30T08:00:00Z"},
            listing("cad", stock="C1", currency="CAD", price=40000),
        ]
    )


def test_each_identifier_finds_the_listing(shop):
    assert vehicle(shop, vin=VIN)["vehicle_id"] == "a"
    assert vehicle(shop, stock="S1")["vehicle_id"] == "a"
    assert vehicle(shop, vehicle_id="a", vin=VIN, stock="S1")["price"] == 30000


def test_synthesized_vehicle_id_resolves(shop):
    data = shop.handle({"type": "inventory.search.request", "filters": {"vin": OTHER_VIN}}, CTX)["data"]
    (found,) = data["vehicles"]
    assert found["vehicle_id"] == synthesized_id(None, OTHER_VIN, None)
    assert vehicle(shop, vehicle_id=found["vehicle_id"])["vin"] == OTHER_VIN


def test_cad_listing_is_labelled(shop):
    assert vehicle(shop, stock="C1")["currency"] == "CAD"


def test_unknown_identifier_is_not_found(shop):
    assert assert_refused(shop, vin="1FTFW1E50NFA12345").code == "VEHICLE_NOT_FOUND"
    assert assert_refused(shop, vehicle_id="zzz").code == "VEHICLE_NOT_FOUND"


def test_conflicting_identifiers_are_not_guessed(shop):
    err = assert_refused(shop, vehicle_id="b", vin=VIN)
    assert err.code == "VEHICLE_NOT_FOUND"
    assert "vehicle_id" in err.details["hint"]
    assert assert_refused(shop, vin=VIN, stock="S2").code == "VEHICLE_NOT_FOUND"
    assert assert_refused(shop, vin=VIN, stock="nope").code == "VEHICLE_NOT_FOUND"


def test_ambiguous_identifier_asks_for_vehicle_id(agent_factory):
    agent = agent_factory(listings=[listing("x", stock="DUP"), listing("y", stock="DUP")])
    err = assert_refused(agent, stock="DUP")
    assert err.code == "VEHICLE_NOT_FOUND" and "vehicle_id" in err.details["hint"]
    assert vehicle(agent, stock="DUP", vehicle_id="y")["vehicle_id"] == "y"


def test_sold_or_removed_is_unavailable(shop):
    inventory = shop.stores.inventory
    inventory.import_listings([listing("a", vin=VIN, stock="S1", status="sold")])
    assert assert_refused(shop, vin=VIN).code == "VEHICLE_UNAVAILABLE"
    assert assert_refused(shop, vehicle_id="a").code == "VEHICLE_UNAVAILABLE"
    inventory.import_listings([listing("cad", stock="C1", currency="CAD")], replace=True)
    assert assert_refused(shop, stock="S2").code == "VEHICLE_UNAVAILABLE"
    assert assert_refused(shop, vin=OTHER_VIN).code == "VEHICLE_UNAVAILABLE"
    assert assert_refused(shop, stock="never").code == "VEHICLE_NOT_FOUND"


def test_a_relisted_vin_resolves_to_the_available_listing(shop):
    shop.stores.inventory.import_listings([listing("a", vin=VIN, status="sold"), listing("a2", vin=VIN)])
    assert vehicle(shop, vin=VIN)["vehicle_id"] == "a2"
    assert assert_refused(shop, vehicle_id="a", vin=VIN).code == "VEHICLE_UNAVAILABLE"


def test_aggregate_lookup_carries_the_seller(agent_factory, settings_factory):
    sellers = tuple(
        DealerProfile({"dealer_id": name, "name": name.title(), "rooftops": [dict(DEFAULT_ROOFTOPS[0])]})
        for name in ("north", "south")
    )
    agent = agent_factory(settings_factory(scope="aggregate", dealers=sellers, filters=("make", "model")))
    for seller in ("north", "south", "gone"):
        agent.stores.inventory.import_listings([listing(f"{seller}-1", vin=VIN)], dealer_id=seller)
    assert assert_refused(agent, vin=VIN).code == "VEHICLE_NOT_FOUND"  # two sellers list that VIN
    assert vehicle(agent, vehicle_id="south-1")["dealer_id"] == "south"
    assert assert_refused(agent, vehicle_id="gone-1").code == "VEHICLE_NOT_FOUND"  # not a seller here


def test_identifier_that_is_not_unicode_is_a_schema_error(shop):
    err = assert_refused(shop, stock="\ud800")
    assert err.code == "SCHEMA_VALIDATION_FAILED"
    assert err.errors[0]["instanceLocation"] == "/stock"
