"""inventory.facets: counts over the full matching set, labels, vocabulary, gating."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext
from aap.errors import AapError
from conftest import assert_valid
from inventory_reference import EVIDENCE, INVENTORY, filters, listing, listings, normalise_facets, reference_facets

CTX = CallContext(binding="test")


def facets(agent: Any, **body: Any) -> dict[str, Any]:
    response = agent.handle({"type": "inventory.facets.request", **body}, CTX)
    return assert_valid(response, "inventory-facets-response")["data"]


def terms(data: dict[str, Any], facet: str) -> dict[Any, int]:
    return {e["value"]: e["count"] for e in data[facet]}


@pytest.fixture
def shop(agent_factory):
    return agent_factory(listings=INVENTORY)


def test_unfiltered_facets_describe_the_usd_inventory(shop):
    data = facets(shop)
    assert (data["currency"], data["mileage_unit"]) == ("USD", "mi")
    assert terms(data, "makes") == {"Honda": 2, "Toyota": 1, "Acme Moto": 1, "Tesla": 1, "Ford": 1}
    assert terms(data, "vehicle_types") == {"car": 5, "motorcycle": 1}
    assert terms(data, "dc_fast_charge") == {False: 1, True: 1}
    assert terms(data, "charge_ports") == {"nacs": 2}
    assert terms(data, "statuses") == {"available": 5, "intransit": 1}
    assert terms(data, "rooftops") == {"Bay Motors San Francisco": 3, "Bay Motors Oakland": 2}
    assert data["price_range"] == {"min": 11999, "max": 35500}
    assert data["electric_range_mi_range"] == {"min": 113, "max": 113}
    # 12 mi .. 30,000 mi; the km odometer (20,000 km) converts to a fractional mile reading
    assert data["mileage_range"] == {"min": 12, "max": 30000}
    assert data["years"] == [] and "year_range" not in data  # known empty vs unavailable
    assert [f["code"] for f in data["features"]] == [
        "adaptive_cruise_control",
        "apple_carplay",
        "heated_front_seats",
        "sunroof",
    ]
    assert all(f["count"] == 0 for f in data["features"])


def test_cad_facets_are_labelled_and_scoped(shop):
    data = facets(shop, currency="CAD", mileage_unit="km")
    assert (data["currency"], data["mileage_unit"]) == ("CAD", "km")
    assert terms(data, "makes") == {"Honda": 1, "Ford": 1}
    assert data["price_range"] == {"min": 45000, "max": 45000}  # the unpriced CAD unit adds nothing
    assert data["mileage_range"] == {"min": 5000, "max": 5000}


def test_mileage_range_converts_exactly(agent_factory):
    agent = agent_factory(listings=[listing("km", mileage=100, mileage_unit="km"), listing("mi", mileage=7)])
    data = facets(agent)
    assert data["mileage_range"] == {"min": 7, "max": float(Fraction(100_000_000, 1_609_344))}
    assert facets(agent, mileage_unit="km")["mileage_range"] == {
        "min": float(Fraction(7 * 1_609_344, 1_000_000)),
        "max": 100,
    }


def test_features_count_verified_present_only(agent_factory):
    present = dict(EVIDENCE["present"])
    agent = agent_factory(
        listings=[
            listing("a", feature_evidence=[present]),
            listing("b", feature_evidence=[EVIDENCE["absent"]]),
            listing("c", feature_evidence=[EVIDENCE["unknown"]]),
            listing("d", feature_evidence=[present], currency="CAD"),
        ]
    )
    counts = {f["code"]: f["count"] for f in facets(agent)["features"]}
    assert counts == {"adaptive_cruise_control": 0, "apple_carplay": 0, "heated_front_seats": 0, "sunroof": 1}
    filtered = {f["code"]: f["count"] for f in facets(agent, filters={"status": ["available"]})["features"]}
    assert filtered == counts


def test_store_vocabulary_when_none_is_configured(agent_factory, settings_factory):
    agent = agent_factory(
        settings_factory(features=()),
        [
            listing("a", feature_evidence=[EVIDENCE["absent"]]),
        ],
    )
    assert facets(agent)["features"] == [{"code": "sunroof", "label": "Sunroof", "count": 0}]


def test_empty_inventory_gives_known_empty_facets(agent):
    data = facets(agent, currency="CAD")
    assert data["makes"] == [] and data["statuses"] == []
    assert not any(key.endswith("_range") for key in data)


def test_filters_scope_the_counts(shop):
    data = facets(shop, filters={"make": ["honda"]})
    assert terms(data, "models") == {"CR-V": 1, "Civic": 1}
    assert data["price_range"] == {"min": 24000, "max": 35500}


def test_unsupported_currency_fails_at_currency(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(currencies=("USD",)))
    with pytest.raises(AapError) as err:
        facets(agent, currency="CAD")
    assert err.value.code == "SCHEMA_VALIDATION_FAILED"
    assert err.value.errors[0]["instanceLocation"] == "/currency"


def test_facets_filters_are_gated_like_search(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(filters=("make",)))
    with pytest.raises(AapError) as err:
        facets(agent, filters={"model": ["Civic"]})
    assert err.value.code == "UNSUPPORTED_FILTER"
    with pytest.raises(AapError) as err:
        facets(agent, filters={"make": ["Honda"], "features_any": ["warp_drive"]})
    assert err.value.code == "UNSUPPORTED_FILTER"


def test_aggregate_facets_leave_out_ambiguous_rooftops(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(scope="aggregate"), INVENTORY)
    assert "rooftops" not in facets(agent)


def test_facets_follow_imports(shop):
    assert terms(facets(shop), "makes")["Toyota"] == 1
    shop.stores.inventory.import_listings([listing("t1", status="sold")])
    assert "Toyota" not in terms(facets(shop), "makes")
    assert "Toyota" not in terms(facets(shop, filters={"status": ["available"]}), "makes")


def _compare(agent: Any, inventory: list[dict], request: dict[str, Any], settings_: Any) -> None:
    data = facets(agent, **{k: v for k, v in request.items() if k != "type"})
    expected = reference_facets(inventory, request, settings_)
    assert normalise_facets(data) == expected


@pytest.mark.slow
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    inventory=listings(),
    block=filters(),
    currency=st.sampled_from([None, "USD", "CAD"]),
    unit=st.sampled_from([None, "mi", "km"]),
)
def test_facets_equal_reference(inventory, block, currency, unit, settings_factory, memory_agent):
    settings_ = settings_factory()
    request: dict[str, Any] = {"type": "inventory.facets.request"}
    if block:
        request["filters"] = block
    if currency:
        request["currency"] = currency
    if unit:
        request["mileage_unit"] = unit
    with memory_agent(settings_, inventory) as agent:
        _compare(agent, inventory, request, settings_)
        # the maintained (unfiltered) counts and the aggregated path agree too
        _compare(agent, inventory, {k: v for k, v in request.items() if k != "filters"}, settings_)
