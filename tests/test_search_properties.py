"""Property tests: the engine agrees with a plain-Python reading of the rules.

Random small inventories (collisions in case, currency, units, rooftops,
evidence) × random valid requests: walking ``next_cursor`` page by page must
yield exactly the reference order, each match once, with ``total`` equal to
the reference count on every page; ``skip`` must enter the same order at the
right place. Every response is validated against the AAP schema.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext
from aap.config.model import ALL_SORT_FIELDS
from aap.errors import AapError
from aap.store.inventory import search as search_module
from conftest import DEFAULT_ROOFTOPS
from inventory_reference import filters, listings, reference_search

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

CTX = CallContext(binding="test")
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def walk(agent: Any, request: dict[str, Any], assert_valid: Any) -> tuple[list[str], list[int]]:
    """Follow next_cursor to the end; (vehicle_ids in order, total of each page)."""
    ids: list[str] = []
    totals: list[int] = []
    pagination = dict(request.get("pagination", {}))
    for _ in range(200):
        page = dict(request, pagination=pagination) if pagination else dict(request)
        response = assert_valid(agent.handle(page, CTX), "inventory-search-response")
        data = response["data"]
        ids += [v["vehicle_id"] for v in data["vehicles"]]
        totals.append(data["total"])
        if data["next_cursor"] is None:
            return ids, totals
        assert len(data["vehicles"]) == data["limit"]  # no concurrent changes here
        pagination = {k: v for k, v in pagination.items() if k != "skip"}
        pagination["cursor"] = data["next_cursor"]
    raise AssertionError("cursor walk did not terminate")


@st.composite
def requests(draw: Any, *, sort_field: str | None = None, sort_order: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"type": "inventory.search.request"}
    block = draw(filters())
    if sort_field == "distance_mi" and "near" not in block:
        block["near"] = {"latitude": 37.7749, "longitude": -122.4194, "radius_mi": 5000}
    if block:
        request["filters"] = block
    currency = draw(st.sampled_from([None, "USD", "CAD"]))
    if currency:
        request["currency"] = currency
    unit = draw(st.sampled_from([None, "mi", "km"]))
    if unit:
        request["mileage_unit"] = unit
    fields = [f for f in ALL_SORT_FIELDS if f != "distance_mi" or "near" in block]
    field = sort_field or draw(st.sampled_from([None] + fields))
    if field:
        request["sort"] = {"field": field, "order": sort_order or draw(st.sampled_from(["asc", "desc"]))}
    request["pagination"] = {"limit": draw(st.integers(1, 4))}
    return request


def _vocabulary_gap(inventory: list[dict[str, Any]], request: dict[str, Any]) -> bool:
    """True when a feature code of the request is outside the store's own vocabulary."""
    known = {e["code"] for item in inventory for e in item.get("feature_evidence", [])}
    f = request.get("filters", {})
    return any(code not in known for code in f.get("features_all", []) + f.get("features_any", []))


# The store picks an index walk or a scan by how sparse the matches are; pin each in turn.
PLANS = st.sampled_from([0, 10**9])


@PROPERTY
@given(inventory=listings(), request=requests(), configured=st.booleans(), rooftops=st.sampled_from([1, 3]), plan=PLANS)
def test_cursor_walk_equals_reference(
    inventory, request, configured, rooftops, plan, settings_factory, memory_agent, assert_valid
):
    """``rooftops=1``: a null Vehicle.rooftop then sits at the one rooftop (near)."""
    kw = {} if configured else {"features": ()}
    settings_ = settings_factory(rooftops=DEFAULT_ROOFTOPS[:rooftops], **kw)
    with memory_agent(settings_, inventory) as agent, patch.object(search_module, "WALK_FACTOR", plan):
        if not configured and _vocabulary_gap(inventory, request):
            with pytest.raises(AapError) as err:
                agent.handle(request, CTX)
            assert err.value.code == "UNSUPPORTED_FILTER"
            return
        expected = reference_search(inventory, request, settings_)
        ids, totals = walk(agent, request, assert_valid)
    assert ids == expected
    assert set(totals) == {len(expected)}


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("field", ALL_SORT_FIELDS)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_every_sort_visits_each_match_once(field, order, data, settings_factory, memory_agent, assert_valid):
    inventory = data.draw(listings(max_size=16))
    request = data.draw(requests(sort_field=field, sort_order=order))
    settings_ = settings_factory()
    with memory_agent(settings_, inventory) as agent, patch.object(search_module, "WALK_FACTOR", data.draw(PLANS)):
        ids, totals = walk(agent, request, assert_valid)
    expected = reference_search(inventory, request, settings_)
    assert ids == expected
    assert len(ids) == len(set(ids))
    assert set(totals) == {len(expected)}


@PROPERTY
@given(inventory=listings(), request=requests(), skip=st.integers(0, 16))
def test_skip_enters_the_same_order(inventory, request, skip, settings_factory, memory_agent, assert_valid):
    settings_ = settings_factory()
    request["pagination"]["skip"] = skip
    limit = request["pagination"]["limit"]
    with memory_agent(settings_, inventory) as agent:
        response = assert_valid(agent.handle(request, CTX), "inventory-search-response")
        data = response["data"]
        expected = reference_search(inventory, request, settings_)
        assert data["skip"] == skip
        assert data["total"] == len(expected)
        assert [v["vehicle_id"] for v in data["vehicles"]] == expected[skip : skip + limit]
        assert (data["next_cursor"] is None) == (skip + limit >= len(expected))
        if data["next_cursor"] is not None:
            rest = dict(request, pagination={"limit": limit, "cursor": data["next_cursor"]})
            ids, _ = walk(agent, rest, assert_valid)
            assert ids == expected[skip + limit :]


@PROPERTY
@given(inventory=listings(), request=requests())
def test_response_echoes_the_effective_query(inventory, request, settings_factory, memory_agent, assert_valid):
    settings_ = settings_factory()
    with memory_agent(settings_, inventory) as agent:
        data = assert_valid(agent.handle(request, CTX), "inventory-search-response")["data"]
    block = request.get("filters", {})
    assert data["currency"] == request.get("currency", "USD")
    assert data["mileage_unit"] == request.get("mileage_unit", "mi")
    assert data["sort"] == request.get("sort", {"field": "updated_at", "order": "desc"})
    assert set(data["applied_filters"]) == set(block)
    if "query" in block:
        assert data["query_terms"] == block["query"].split()
    else:
        assert "query_terms" not in data
    near = "near" in block
    assert all(("distance_mi" in v) == near for v in data["vehicles"])
    if near:
        assert all(v["distance_mi"] <= block["near"]["radius_mi"] for v in data["vehicles"])
    if "features_all" in block or "features_any" in block:
        for vehicle in data["vehicles"]:
            present = {e["code"] for e in vehicle["feature_evidence"] if e["status"] == "present"}
            assert set(block.get("features_all", [])) <= present
            if "features_any" in block:
                assert present & set(block["features_any"])
    assert len({v["vehicle_id"] for v in data["vehicles"]}) == len(data["vehicles"])
