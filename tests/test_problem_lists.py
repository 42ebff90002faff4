"""Problem lists are complete and have one entry per (location, keyword) (docs/search.md, "Validation order").

- schema problems and capability problems (an unadvertised filter, a feature code outside
  the vocabulary, an unsupported sort field) of one request are listed together;
- a ``type`` that is not a string is a ``type`` problem at ``/type``, on every binding;
- two schema rules rejecting one value with the same keyword (``trade_in.condition`` fails
  the vehicle's condition enum and the lead's wear-condition enum) are one entry, naming
  the values both allow.

Agent-level tests here; the bindings' answers are compared in test_adversarial.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from aap.agent import CallContext
from aap.errors import AapError
from aap.spec import validate
from conftest import make_settings, open_memory_agent
from lead_support import lead_request


def assert_refused(agent, payload) -> AapError:
    with pytest.raises(AapError) as caught:
        agent.handle(payload, CallContext(binding="test"))
    return caught.value


def entries(error: AapError) -> list[tuple[str, str]]:
    return [(p["instanceLocation"], p["keyword"]) for p in error.errors]


def test_unknown_feature_code_and_schema_error_are_listed_together():
    with open_memory_agent() as agent:
        error = assert_refused(
            agent, {"type": "inventory.search.request", "filters": {"features_all": ["no_such_feature"], "make": 5}}
        )
    assert error.code == "SCHEMA_VALIDATION_FAILED"  # the first stage names the code
    assert entries(error) == [("/filters/features_all/0", "capability"), ("/filters/make", "type")]


def test_unadvertised_filter_and_unsupported_sort_come_with_the_schema_problems():
    settings = make_settings(filters=("make", "price_max"), sort_fields=("price",))
    with open_memory_agent(settings) as agent:
        error = assert_refused(
            agent, {"type": "inventory.facets.request", "filters": {"model": ["Civic"], "price_max": "20000"}}
        )
        assert entries(error) == [("/filters/model", "capability"), ("/filters/price_max", "type")]
        search = assert_refused(
            agent,
            {
                "type": "inventory.search.request",
                "filters": {"model": ["Civic"]},
                "sort": {"field": "year", "order": "asc"},
                "pagination": {"limit": 0},
            },
        )
    assert search.code == "SCHEMA_VALIDATION_FAILED"
    assert entries(search) == [
        ("/filters/model", "capability"),
        ("/pagination/limit", "minimum"),
        ("/sort/field", "capability"),
    ]


def test_capability_problems_alone_keep_their_own_code():
    with open_memory_agent() as agent:
        error = assert_refused(agent, {"type": "inventory.search.request", "filters": {"features_all": ["nope"]}})
    assert error.code == "UNSUPPORTED_FILTER"
    assert entries(error) == [("/filters/features_all/0", "capability")]


@pytest.mark.parametrize("kind", [5, None, True, ["inventory.search.request"], {"x": 1}])
def test_a_type_that_is_not_a_string_is_a_type_problem_at_type(kind):
    with open_memory_agent() as agent:
        error = assert_refused(agent, {"type": kind})
    assert error.code == "SCHEMA_VALIDATION_FAILED"
    assert entries(error) == [("/type", "type")]
    assert error.errors[0]["error"] == "must be string"


def test_a_missing_type_is_still_required_at_the_root():
    with open_memory_agent() as agent:
        error = assert_refused(agent, {"filters": {}})
    assert entries(error) == [("/type", "required")]


def test_a_wrong_trade_in_condition_is_one_entry_naming_the_values_both_rules_allow():
    with open_memory_agent() as agent:
        error = assert_refused(agent, lead_request(trade_in={"condition": "mint"}))
    assert error.code == "INVALID_CONDITION"
    assert entries(error) == [("/trade_in/condition", "enum")]
    assert error.errors[0]["error"] == "must be one of: excellent, good, fair, poor"


def test_one_entry_per_location_and_keyword_everywhere():
    lead = lead_request(
        trade_in={"condition": "mint", "year": "x"}, vehicle_of_interest={"condition": "excellent", "year": 1.5}
    )
    problems = validate(lead, "lead-submit-request")
    counts = Counter((p["instanceLocation"], p["keyword"]) for p in problems)
    assert counts and max(counts.values()) == 1, problems
    # the vehicle of interest's sale condition: the enums of both rules meet in new, used, cpo
    by_place = {(p["instanceLocation"], p["keyword"]): p["error"] for p in problems}
    assert by_place[("/vehicle_of_interest/condition", "enum")] == "must be one of: new, used, cpo"
