"""The compiled yes/no listing check agrees with the full AAP validator."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from aap.config.loader import load_settings
from aap.inventory import fastvalid
from aap.inventory.demo import generate_listings
from aap.spec import validate

SAMPLE = list(generate_listings(300, seed=11, settings=load_settings(environ={})))
FIELDS = sorted({key for item in SAMPLE for key in item}) + ["distance_mi", "x_extra"]
NESTED = ["fees", "feature_evidence", "other_attributes", "photos", "features"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(-10, 1e6, allow_nan=False)
    | st.sampled_from(["", " ", "new", "CAD", "km", "present", "dealer", "nacs",
                       "1HGCV1F30NA123456", "1hgcv1f30na123456", "2026-04-30T08:42:00Z",
                       "2026-04-30T08:42:00", "2026-04-30", "https://x.example/a",
                       "http://x.example", "not a uri", "adaptive_cruise_control"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "amount", "code", "label", "status", "source", "text", "url",
                         "observed_at", "final_drive", "abs"]), children, max_size=4),
    max_leaves=6,
)


def agree(item) -> None:
    expected = validate(item, "inventory-listing") == []
    assert fastvalid.is_valid(item, "inventory-listing") is expected


def test_every_sample_listing_takes_the_fast_path():
    check = fastvalid.compiled("inventory-listing")
    assert all(check(item) for item in SAMPLE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(SAMPLE) - 1), field=st.sampled_from(FIELDS), value=json_values,
       delete=st.booleans())
def test_top_level_mutations_agree(index, field, value, delete):
    item = copy.deepcopy(SAMPLE[index])
    if delete:
        item.pop(field, None)
    else:
        item[field] = value
    agree(item)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(SAMPLE) - 1), field=st.sampled_from(NESTED),
       position=st.integers(0, 3), key=st.sampled_from(["name", "amount", "code", "label", "status",
                                                         "source", "text", "url", "observed_at",
                                                         "final_drive", "abs", "wheel_count"]),
       value=json_values, delete=st.booleans())
def test_nested_mutations_agree(index, field, position, key, value, delete):
    item = copy.deepcopy(SAMPLE[index])
    container = item.get(field)
    if isinstance(container, list) and container:
        target = container[position % len(container)]
        if isinstance(target, dict):
            if delete:
                target.pop(key, None)
            else:
                target[key] = value
        else:
            container[position % len(container)] = value
    elif isinstance(container, dict):
        if delete:
            container.pop(key, None)
        else:
            container[key] = value
    else:
        item[field] = [value]
    agree(item)


@pytest.mark.parametrize("change", [
    {"price": 35500.0}, {"price": True}, {"year": 1899}, {"vin": "1HGCV1F30NA12345I"},
    {"condition": "excellent"}, {"status": "sold"}, {"rooftop": None}, {"charge_port": None},
    {"updated_at": "2026-04-30T08:42:00"}, {"inventory_date": "2026-02-30"},
    {"fees": [{"name": "Doc", "amount": 1}, {"name": "Doc", "amount": 1}]},
    {"fees": [{"name": " ", "amount": 1}]}, {"other_attributes": {"a": {"b": 1}}},
    {"other_attributes": {"a": [1, "x"]}}, {"other_attributes": {"a": [1.5, 2]}},
    {"feature_evidence": [{"code": "sunroof", "label": "Sunroof", "status": "present"}]},
    {"feature_evidence": [{"code": "sunroof", "label": "Sunroof", "status": "unknown", "url": "http://x.example"}]},
    {"photos": ["https://x.example/1.jpg", "no scheme"]}, {"mileage_unit": "mm"},
])
def test_edge_cases_agree(change):
    agree(dict(SAMPLE[0], **change))


def test_identifier_rule_agrees():
    item = {k: v for k, v in SAMPLE[0].items() if k not in ("vin", "vehicle_id", "stock")}
    agree(item)
    assert fastvalid.is_valid(item, "inventory-listing") is False
    assert fastvalid.is_valid(dict(item, stock="S1"), "inventory-listing") is True


def test_unsupported_keywords_refuse_to_compile():
    with pytest.raises(fastvalid.Unsupported):
        fastvalid._Compiler().compile({"patternProperties": {"^x": {}}}, None)
    assert fastvalid.is_valid({}, "inventory-search-response") is None  # uses dependentSchemas
