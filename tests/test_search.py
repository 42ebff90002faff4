"""inventory.search: error paths in the order of docs/search.md, and the labelled semantics.

Every successful response is validated against ``inventory-search-response``
and every error against ``error``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from aap.agent import CallContext
from aap.config.model import DealerProfile
from aap.errors import AapError
from aap.inventory.geo import haversine_mi
from conftest import DEFAULT_ROOFTOPS, OAKLAND, SF, VANCOUVER, assert_valid
from inventory_reference import EVIDENCE, INVENTORY, listing

NOW_CTX = CallContext(binding="test")


def search(agent: Any, ctx: CallContext = NOW_CTX, **body: Any) -> dict[str, Any]:
    response = agent.handle({"type": "inventory.search.request", **body}, ctx)
    return assert_valid(response, "inventory-search-response")["data"]


def failure(agent: Any, ctx: CallContext = NOW_CTX, **body: Any) -> AapError:
    with pytest.raises(AapError) as caught:
        agent.handle({"type": "inventory.search.request", **body}, ctx)
    assert_valid(caught.value.to_dict(), "error")
    return caught.value


def ids(data: dict[str, Any]) -> list[str]:
    return [v["vehicle_id"] for v in data["vehicles"]]


@pytest.fixture
def shop(agent_factory):
    return agent_factory(listings=INVENTORY)


# -- validation order ------------------------------------------------------------


def test_schema_problems_are_all_listed(shop):
    err = failure(shop, filters={"make": [], "colour": ["red"]}, pagination={"limit": 0})
    assert err.code == "SCHEMA_VALIDATION_FAILED"
    locations = {e["instanceLocation"] for e in err.errors}
    assert {"/filters/make", "/pagination/limit"} <= locations
    assert any(e["instanceLocation"] in ("/filters", "/filters/colour") for e in err.errors)


def test_semantic_problems_are_collected_together(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(currencies=("USD",), max_limit=10, offset=False))
    err = failure(
        agent,
        currency="CAD",
        filters={"price_min": 5, "price_max": 1, "year_min": 2025, "year_max": 2020, "make": ["  "]},
        pagination={"limit": 11, "skip": 2},
    )
    assert err.code == "SCHEMA_VALIDATION_FAILED"
    assert {e["instanceLocation"] for e in err.errors} == {
        "/currency",
        "/pagination/skip",
        "/pagination/limit",
        "/filters/price_min",
        "/filters/year_min",
        "/filters/make/0",
    }


def test_limit_above_max_limit_is_rejected_not_clamped(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(max_limit=5, default_limit=5))
    err = failure(agent, pagination={"limit": 6})
    assert err.code == "SCHEMA_VALIDATION_FAILED"
    assert err.errors[0]["instanceLocation"] == "/pagination/limit"
    assert search(agent, pagination={"limit": 5})["limit"] == 5


def test_semantic_errors_come_before_capability_errors(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(filters=("make",)))
    err = failure(agent, filters={"model": ["Civic"], "price_min": 9, "price_max": 1})
    assert err.code == "SCHEMA_VALIDATION_FAILED"


def test_unsupported_filters_are_named(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(filters=("make", "model")))
    err = failure(
        agent,
        filters={"make": ["Honda"], "trim": ["LX"], "near": {"latitude": 1, "longitude": 2, "radius_mi": 3}},
        sort={"field": "distance_mi", "order": "asc"},
    )
    assert err.code == "UNSUPPORTED_FILTER"
    assert not err.retryable
    assert {e["instanceLocation"] for e in err.errors} >= {"/filters/trim", "/filters/near"}


def test_unknown_feature_code_is_an_unsupported_filter(shop):
    err = failure(shop, filters={"features_all": ["sunroof", "jet_pack"]})
    assert err.code == "UNSUPPORTED_FILTER"
    assert [e["instanceLocation"] for e in err.errors] == ["/filters/features_all/1"]
    assert "inventory.facets" in err.details["hint"]


def test_store_vocabulary_applies_without_configured_features(agent_factory, settings_factory):
    evidence = [
        {"code": "tow_package", "label": "Tow package", "status": "absent", "source": "dealer", "text": "Not fitted."}
    ]
    agent = agent_factory(settings_factory(features=()), [listing("a", feature_evidence=evidence)])
    assert search(agent, filters={"features_any": ["tow_package"]})["total"] == 0
    assert failure(agent, filters={"features_any": ["sunroof"]}).code == "UNSUPPORTED_FILTER"


def test_unsupported_sort(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(sort_fields=("price", "updated_at")))
    err = failure(agent, sort={"field": "year", "order": "asc"})
    assert err.code == "UNSUPPORTED_SORT"
    assert err.errors[0]["instanceLocation"] == "/sort/field"


def test_rooftops_filter_is_unsupported_on_aggregate_endpoints(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(scope="aggregate"))
    assert failure(agent, filters={"rooftops": ["Bay Motors Oakland"]}).code == "UNSUPPORTED_FILTER"


# -- cursors -----------------------------------------------------------------------


def first_page(agent: Any, **body: Any) -> dict[str, Any]:
    data = search(agent, pagination={"limit": 2}, sort={"field": "price", "order": "asc"}, **body)
    assert data["next_cursor"] is not None
    return data


def continue_with(agent: Any, cursor: str, ctx: CallContext = NOW_CTX, limit: int = 2, **body: Any) -> Any:
    return agent.handle(
        {
            "type": "inventory.search.request",
            "pagination": {"limit": limit, "cursor": cursor},
            "sort": {"field": "price", "order": "asc"},
            **body,
        },
        ctx,
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c[:-2] + ("A" if c[-2] != "A" else "B") + c[-1],  # signature altered
        lambda c: ("e" if c[0] != "e" else "f") + c[1:],  # payload altered
        lambda c: c.replace(".", ""),  # structure broken
        lambda c: "not-a-cursor",
        lambda c: c + "." + c,
    ],
)
def test_tampered_cursor(shop, mutate):
    cursor = first_page(shop)["next_cursor"]
    with pytest.raises(AapError) as err:
        continue_with(shop, mutate(cursor))
    assert err.value.code == "INVALID_CURSOR"
    assert err.value.details["hint"] == "restart without cursor"
    assert not err.value.retryable


@pytest.mark.parametrize(
    "change",
    [
        {"filters": {"make": ["Honda"]}},
        {"currency": "CAD"},
        {"mileage_unit": "km"},
        {"sort": {"field": "price", "order": "desc"}},
        {"pagination": {"limit": 3}},
    ],
)
def test_cursor_bound_to_the_effective_query(shop, change):
    cursor = first_page(shop)["next_cursor"]
    body = {
        "type": "inventory.search.request",
        "pagination": {"limit": 2, "cursor": cursor},
        "sort": {"field": "price", "order": "asc"},
    }
    for key, value in change.items():
        body[key] = dict(value, cursor=cursor) if key == "pagination" else value
    with pytest.raises(AapError) as err:
        shop.handle(body, NOW_CTX)
    assert err.value.code == "INVALID_CURSOR"


def test_cursor_accepts_the_same_effective_query_spelled_differently(shop):
    data = first_page(shop, filters={"make": ["Honda", "Ford", "Toyota", "Acme Moto"]})
    again = continue_with(
        shop, data["next_cursor"], filters={"make": ["ford ", "TOYOTA", "honda", "acme moto"]}, currency="USD"
    )
    assert again["data"]["vehicles"]


def test_cursor_expires(agent_factory, settings_factory):
    agent = agent_factory(dataclasses.replace(settings_factory(), cursor_ttl_seconds=60), INVENTORY)
    cursor = first_page(agent)["next_cursor"]
    later = CallContext(binding="test", now=NOW_CTX.now + timedelta(seconds=30))
    assert continue_with(agent, cursor, later)["data"]["vehicles"]
    expired = CallContext(binding="test", now=NOW_CTX.now + timedelta(seconds=120))
    with pytest.raises(AapError) as err:
        continue_with(agent, cursor, expired)
    assert err.value.code == "INVALID_CURSOR"


def test_cursor_from_another_deployment_is_rejected(agent_factory):
    one = agent_factory(listings=INVENTORY)
    two = agent_factory(listings=INVENTORY)
    cursor = first_page(one)["next_cursor"]
    with pytest.raises(AapError) as err:
        continue_with(two, cursor)
    assert err.value.code == "INVALID_CURSOR"


def test_cursor_is_shared_by_every_worker(database_url, settings_factory):
    from aap.agent import DealerAgent
    from aap.store import open_stores

    url = database_url
    first, second = open_stores(url), open_stores(url)
    try:
        first.inventory.import_listings(INVENTORY)
        a, b = DealerAgent(settings_factory(), first), DealerAgent(settings_factory(), second)
        cursor = first_page(a)["next_cursor"]
        assert continue_with(b, cursor)["data"]["vehicles"]
    finally:
        first.close()
        second.close()


def test_cursor_with_cursor_and_skip_is_a_schema_error(shop):
    cursor = first_page(shop)["next_cursor"]
    err = failure(shop, pagination={"cursor": cursor, "skip": 1})
    assert err.code == "SCHEMA_VALIDATION_FAILED"


def test_cursor_survives_inserts_and_deletes(agent_factory):
    inventory = [listing(f"v{n:02d}", price=1000 * n) for n in range(10)]
    agent = agent_factory(listings=inventory)
    page = search(agent, pagination={"limit": 4}, sort={"field": "price", "order": "asc"})
    seen = ids(page)
    assert seen == ["v00", "v01", "v02", "v03"]
    # Between pages: v04 sold, v05 removed by a replace, a new cheap listing and a new dear one.
    changed = [item for item in inventory if item["vehicle_id"] not in ("v04", "v05")]
    changed += [
        listing("v04", price=4000, status="sold"),
        listing("new-cheap", price=1),
        listing("new-dear", price=99_000),
    ]
    agent.stores.inventory.import_listings(changed, replace=True)
    cursor = page["next_cursor"]
    while cursor:
        page = assert_valid(continue_with(agent, cursor, limit=4), "inventory-search-response")["data"]
        seen += ids(page)
        cursor = page["next_cursor"]
    assert seen == ["v00", "v01", "v02", "v03", "v06", "v07", "v08", "v09", "new-dear"]


def test_next_cursor_is_null_exactly_when_exhausted(agent_factory):
    agent = agent_factory(listings=[listing(f"v{n}") for n in range(4)])
    assert search(agent, pagination={"limit": 4})["next_cursor"] is None
    data = search(agent, pagination={"limit": 3})
    assert data["next_cursor"] is not None and data["total"] == 4
    past_the_end = search(agent, pagination={"limit": 5, "skip": 9})
    assert (past_the_end["vehicles"], past_the_end["next_cursor"], past_the_end["total"]) == ([], None, 4)


def test_oversized_sort_keys_still_give_a_short_cursor(agent_factory):
    long_make = "M" * 6000
    agent = agent_factory(listings=[listing(f"v{n}", make=long_make + str(n)) for n in range(3)])
    walked: list[str] = []
    data = search(agent, pagination={"limit": 1}, sort={"field": "make", "order": "asc"})
    while True:
        walked += ids(data)
        if data["next_cursor"] is None:
            break
        assert len(data["next_cursor"]) <= 4096
        data = search(
            agent, pagination={"limit": 1, "cursor": data["next_cursor"]}, sort={"field": "make", "order": "asc"}
        )
    assert walked == ["v0", "v1", "v2"]


def test_skip_is_echoed_only_when_sent(shop):
    assert "skip" not in search(shop)
    assert search(shop, pagination={"skip": 0})["skip"] == 0


# -- semantics ---------------------------------------------------------------------


def test_defaults_are_echoed(shop):
    data = search(shop)
    assert data["sort"] == {"field": "updated_at", "order": "desc"}
    assert data["limit"] == 20
    assert data["applied_filters"] == {}
    assert data["total"] == 6  # the USD listings, including the unpriced one


def test_term_filters_are_whole_values_casefolded(shop):
    data = search(shop, filters={"make": ["HONDA"]}, sort={"field": "price", "order": "asc"})
    assert ids(data) == ["h2", "h1"]
    assert data["applied_filters"] == {"make": ["HONDA"]}
    assert search(shop, filters={"make": ["Hond"]})["total"] == 0
    assert search(shop, filters={"exterior_color": ["black"]})["total"] == 0
    assert ids(search(shop, filters={"exterior_color": ["crystal black pearl"]})) == ["h1"]
    assert ids(search(shop, filters={"charge_port": ["nacs"]}, sort={"field": "make", "order": "asc"})) == ["m1", "e1"]


def test_applied_filters_are_normalised_and_deduplicated(shop):
    data = search(shop, filters={"make": [" Honda", "honda", "Ford"], "query": "  cr-v  "})
    assert data["applied_filters"] == {"make": ["Honda", "Ford"], "query": "cr-v"}
    assert data["query_terms"] == ["cr-v"]


def test_vehicle_type_absent_means_car(shop):
    assert set(ids(search(shop, filters={"vehicle_type": ["car"]}))) == {"h1", "h2", "t1", "e1", "n1"}
    assert ids(search(shop, filters={"vehicle_type": ["motorcycle"]})) == ["m1"]


def test_dc_fast_charge_false_keeps_false_only(shop):
    assert ids(search(shop, filters={"dc_fast_charge": False})) == ["m1"]
    assert ids(search(shop, filters={"dc_fast_charge": True})) == ["e1"]


def test_missing_values_never_match(shop):
    assert "n1" not in ids(search(shop, filters={"price_max": 10**9}))
    assert "n1" not in ids(search(shop, filters={"mileage_max": 10**9}))
    assert ids(search(shop, filters={"electric_range_mi_min": 0})) == ["m1"]


def test_currency_scopes_the_set_and_cad_is_labelled(shop):
    data = search(shop, currency="CAD", sort={"field": "price", "order": "asc"})
    assert data["currency"] == "CAD"
    assert ids(data) == ["c1", "c2"]  # the unpriced CAD listing is in, missing price last
    assert all(v["currency"] == "CAD" for v in data["vehicles"])
    usd = search(shop, filters={"price_max": 50000})
    assert "c1" not in ids(usd) and usd["currency"] == "USD"
    assert all(v.get("currency", "USD") == "USD" for v in usd["vehicles"])


def test_cad_default_currency_is_labelled(agent_factory, settings_factory):
    agent = agent_factory(settings_factory(default_currency="CAD"), INVENTORY)
    data = search(agent)
    assert data["currency"] == "CAD" and set(ids(data)) == {"c1", "c2"}


def test_mileage_context_converts_exactly(shop):
    # t1: 20,000 km = 12,427.42 mi; h2: 30,000 mi = 48,280.32 km
    assert set(ids(search(shop, filters={"mileage_max": 12427}))) == {"h1"}
    assert set(ids(search(shop, filters={"mileage_max": 12428}))) == {"h1", "t1"}
    km = search(shop, mileage_unit="km", filters={"mileage_max": 48280}, sort={"field": "mileage", "order": "desc"})
    assert km["mileage_unit"] == "km"
    assert ids(km) == ["t1", "h1"]
    assert "h2" in ids(search(shop, mileage_unit="km", filters={"mileage_max": 48281}))
    t1 = next(v for v in km["vehicles"] if v["vehicle_id"] == "t1")
    assert (t1["mileage"], t1["mileage_unit"]) == (20000, "km")  # native reading kept


def test_mileage_sort_compares_converted_readings(shop):
    data = search(shop, sort={"field": "mileage", "order": "asc"})
    assert ids(data) == ["h1", "t1", "h2", "e1", "m1", "n1"]  # 12 mi, 12,427 mi, 30,000 mi, then missing


def test_missing_values_sort_last_in_both_directions(shop):
    asc = ids(search(shop, sort={"field": "price", "order": "asc"}))
    desc = ids(search(shop, sort={"field": "price", "order": "desc"}))
    assert asc == ["m1", "h2", "t1", "h1", "e1", "n1"]
    assert desc == ["h1", "t1", "h2", "m1", "e1", "n1"]


def test_string_sort_casefolds_first(shop):
    data = search(shop, sort={"field": "make", "order": "asc"})
    assert ids(data) == ["m1", "n1", "h1", "h2", "e1", "t1"]


def test_updated_at_sorts_by_instant(agent_factory):
    agent = agent_factory(
        listings=[
            listing("late-offset", updated_at="2026-04-30T10:00:00+05:00"),  # 05:00Z
            listing("utc", updated_at="2026-04-30T06:00:00Z"),
            listing("early", updated_at="2026-04-30T01:00:00-03:00"),  # 04:00Z
        ]
    )
    assert ids(search(agent, sort={"field": "updated_at", "order": "asc"})) == ["early", "late-offset", "utc"]


def test_near_measures_to_the_rooftop(shop):
    near = {"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": 20}
    data = search(shop, filters={"near": near}, sort={"field": "distance_mi", "order": "asc"})
    oakland = haversine_mi(SF["latitude"], SF["longitude"], OAKLAND["latitude"], OAKLAND["longitude"])
    assert 8 < oakland < 9
    by_id = {v["vehicle_id"]: v["distance_mi"] for v in data["vehicles"]}
    assert by_id == {"h1": 0.0, "m1": 0.0, "e1": 0.0, "h2": oakland, "t1": oakland}
    assert ids(data) == ["e1", "h1", "m1", "h2", "t1"]
    assert "n1" not in by_id  # unknown rooftop coordinates never match
    far = search(shop, filters={"near": dict(near, radius_mi=1000)}, currency="CAD")
    vancouver = haversine_mi(SF["latitude"], SF["longitude"], VANCOUVER["latitude"], VANCOUVER["longitude"])
    assert {v["distance_mi"] for v in far["vehicles"]} == {vancouver}
    assert all("distance_mi" not in v for v in search(shop)["vehicles"])


def test_the_rooftop_index_is_built_by_the_first_search_near_a_place_and_kept(shop):
    """An agent's rooftop index is made for ``near`` alone: a platform builds most tenants
    again for a single search, which seldom filters on a place. Once made, it is kept."""
    near = {"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": 20}
    search(shop)
    search(shop, filters={"make": ["Honda"]}, sort={"field": "price", "order": "asc"})
    assert shop.handle({"type": "inventory.facets.request"}, NOW_CTX)["type"] == "inventory.facets.response"
    assert "rooftops" not in vars(shop.deps)
    search(shop, filters={"near": near})
    made = vars(shop.deps)["rooftops"]
    assert len(made) == sum(1 for rooftop in DEFAULT_ROOFTOPS if rooftop.get("geo"))
    assert ids(search(shop, filters={"near": near})) and vars(shop.deps)["rooftops"] is made


def test_near_radius_is_inclusive(shop):
    exact = haversine_mi(SF["latitude"], SF["longitude"], OAKLAND["latitude"], OAKLAND["longitude"])
    near = {"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": exact}
    assert {"h2", "t1"} <= set(ids(search(shop, filters={"near": near})))


def test_null_rooftop_resolves_only_for_a_single_rooftop_dealer(agent_factory, settings_factory):
    near = {"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": 5}
    single = agent_factory(settings_factory(rooftops=DEFAULT_ROOFTOPS[:1]), [listing("x")])
    assert ids(search(single, filters={"near": near})) == ["x"]
    several = agent_factory(listings=[listing("x")])
    assert search(several, filters={"near": near})["total"] == 0


def test_rooftops_filter_is_exact(shop):
    assert set(ids(search(shop, filters={"rooftops": ["Bay Motors Oakland"]}))) == {"h2", "t1"}
    assert search(shop, filters={"rooftops": ["bay motors oakland"]})["total"] == 0


def test_features_match_only_present_evidence(agent_factory):
    agent = agent_factory(
        listings=[
            listing("yes", feature_evidence=[EVIDENCE["present"]]),
            listing("no", feature_evidence=[EVIDENCE["absent"]]),
            listing("unknown", feature_evidence=[EVIDENCE["unknown"]]),
            listing("silent", trim="Sunroof Edition", features=["Sunroof"]),
        ]
    )
    data = search(agent, filters={"features_all": ["sunroof"]})
    assert ids(data) == ["yes"]
    assert data["vehicles"][0]["feature_evidence"] == [EVIDENCE["present"]]
    assert ids(search(agent, filters={"features_any": ["sunroof", "apple_carplay"]})) == ["yes"]
    assert search(agent, filters={"features_all": ["sunroof", "apple_carplay"]})["total"] == 0


@pytest.mark.parametrize("skill", ["search", "facets"])
def test_a_request_reads_one_inventory_version(agent_factory, settings_factory, monkeypatch, skill):
    """An import committing between the feature-code check and the answer changes neither."""
    import aap.skills.inventory_facets as facets_skill
    import aap.skills.inventory_search as search_skill
    from aap.store import open_stores

    module = search_skill if skill == "search" else facets_skill
    before = [listing(f"s{i}", feature_evidence=[EVIDENCE["present"]]) for i in range(3)]
    agent = agent_factory(settings_factory(features=()), before)
    other = open_stores(agent.stores.db.url)  # its own connections, like another worker
    checked = module.feature_vocabulary

    def check_then_import(settings, inventory):
        codes = checked(settings, inventory)
        other.inventory.import_listings([listing("later")], replace=True)  # no sunroof any more
        return codes

    monkeypatch.setattr(module, "feature_vocabulary", check_then_import)
    try:
        request = {"type": f"inventory.{skill}.request", "filters": {"features_all": ["sunroof"]}}
        response = agent.handle(request, NOW_CTX)
        if skill == "search":
            data = assert_valid(response, "inventory-search-response")["data"]
            assert data["total"] == 3 and sorted(ids(data)) == ["s0", "s1", "s2"]
        else:
            data = assert_valid(response, "inventory-facets-response")["data"]
            assert data["features"] == [{"code": "sunroof", "label": "Sunroof", "count": 3}]
        assert other.inventory.count() == 1  # the import did land, after the snapshot began
    finally:
        other.close()


def test_query_tokens_are_case_insensitive_substrings(shop):
    data = search(shop, filters={"query": "HON cr-"})
    assert set(ids(data)) == {"h1"}
    assert data["query_terms"] == ["HON", "cr-"]
    assert ids(search(shop, filters={"query": "carplay"})) == ["h1"]  # features text counts
    assert search(shop, filters={"query": '"CR-V"'})["total"] == 0  # quotes are characters
    assert search(shop, filters={"query": "Honda under 40k"})["total"] == 0  # no NL parsing
    assert search(shop, filters={"query": "honda civic"})["total"] == 1  # tokens may hit different fields


def test_query_tokens_never_span_two_fields(agent_factory):
    agent = agent_factory(listings=[listing("x", make="Ab", model="Cd")])
    assert search(agent, filters={"query": "bc"})["total"] == 0
    assert search(agent, filters={"query": "ab cd"})["total"] == 1


def test_query_wildcard_characters_are_literal(agent_factory):
    agent = agent_factory(listings=[listing("x", stock="A_1"), listing("y", stock="AB1"), listing("z", stock="100%")])
    assert ids(search(agent, filters={"query": "a_1"})) == ["x"]
    assert ids(search(agent, filters={"query": "0%"})) == ["z"]


def test_vin_and_stock_are_exact(agent_factory):
    agent = agent_factory(listings=[listing("x", vin="1HGCV1F30NA123456", stock="H12"), listing("y", stock="h12")])
    assert ids(search(agent, filters={"vin": "1HGCV1F30NA123456"})) == ["x"]
    assert ids(search(agent, filters={"stock": "h12"})) == ["y"]


def test_aggregate_results_carry_dealer_and_vehicle_ids(agent_factory, settings_factory):
    north = DealerProfile({"dealer_id": "north", "name": "North Cars", "rooftops": [dict(DEFAULT_ROOFTOPS[0])]})
    south = DealerProfile({"dealer_id": "south", "name": "South Cars", "rooftops": [dict(DEFAULT_ROOFTOPS[1])]})
    settings = settings_factory(
        scope="aggregate",
        dealers=(north, south),
        filters=tuple(f for f in settings_factory().search.filters if f != "rooftops"),
    )
    agent = agent_factory(settings)
    agent.stores.inventory.import_listings(
        [{"vin": "1HGCV1F30NA123456", "status": "available", "updated_at": "2026-04-30T08:00:00Z"}], dealer_id="north"
    )
    agent.stores.inventory.import_listings(
        [{"stock": "S1", "status": "available", "updated_at": "2026-04-30T08:00:00Z"}], dealer_id="south"
    )
    agent.stores.inventory.import_listings(
        [{"stock": "Z1", "status": "available", "updated_at": "2026-04-30T08:00:00Z"}], dealer_id="unknown"
    )
    data = search(agent)
    assert data["total"] == 2
    assert {v["dealer_id"] for v in data["vehicles"]} == {"north", "south"}
    assert all(v["vehicle_id"] for v in data["vehicles"])
    near = {"latitude": SF["latitude"], "longitude": SF["longitude"], "radius_mi": 1}
    # null rooftop: each seller has one rooftop; only north's is within a mile of SF
    assert [v["dealer_id"] for v in search(agent, filters={"near": near})["vehicles"]] == ["north"]


def test_bounds_beyond_64_bits_are_answered_exactly(shop):
    assert search(shop, filters={"price_max": 10**30})["total"] == 4
    assert search(shop, filters={"price_min": 10**30})["total"] == 0
    assert search(shop, filters={"mileage_max": 10**25})["total"] == 3
    data = search(shop, pagination={"skip": 10**30})
    assert (data["total"], data["vehicles"], data["next_cursor"]) == (6, [], None)


def test_text_that_is_not_unicode_is_a_schema_error(shop):
    err = failure(shop, filters={"make": ["Honda", "\ud800"], "query": "a\udfff"})
    assert err.code == "SCHEMA_VALIDATION_FAILED"
    assert {e["instanceLocation"] for e in err.errors} == {"/filters/make/1", "/filters/query"}
