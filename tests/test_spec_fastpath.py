"""The jsonschema-rs fast path and the explaining python path agree on what is valid.

``aap.spec.is_valid`` asks jsonschema-rs alone and ``aap.spec.validate`` explains
only what jsonschema-rs rejects, so the two engines must draw the same line: on
the seed examples, on generated valid instances, and on mutations of them aimed at
the places where they could differ (format semantics, ECMA-262 patterns, integral
floats, big integers, non-finite floats, unpaired surrogates).
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aap.spec as spec
from aap.config.loader import load_settings
from aap.inventory.demo import generate_listings
from aap.spec import ecma, schema_files
from aap.spec.validator import compiled, fast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inventory_reference as ref  # noqa: E402
from test_spec_validate import LEAD, SEARCH  # noqa: E402

SAMPLE = list(generate_listings(300, seed=11, settings=load_settings(environ={})))
BOUNDED = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def agree(instance: Any, name: str) -> bool:
    """Assert both engines (and both public functions) give the same verdict."""
    expected = compiled(name).is_valid(instance)  # python-jsonschema
    assert spec.is_valid(instance, name) is expected  # jsonschema-rs
    problems = spec.validate(instance, name)
    assert (problems == []) is expected, problems
    return expected


def _seed_requests() -> list[tuple[str, dict]]:
    out = []
    body = spec.openapi_document()["paths"]["/"]["post"]["requestBody"]["content"]
    for media in body.values():
        for example in media["examples"].values():
            for part in example["value"]["params"]["message"]["parts"]:
                media_type = part.get("mediaType", "")  # application/vnd.autoagent.<name>+json
                if media_type.startswith("application/vnd.autoagent."):
                    out.append((media_type.split(".", 2)[2].removesuffix("+json"), part["data"]))
    return out


SEEDS = _seed_requests()
LEADS = [LEAD] + [data for name, data in SEEDS if name == "lead-submit-request"]
SEARCHES = [SEARCH] + [data for name, data in SEEDS if name == "inventory-search-request"]


# -- the seed examples ----------------------------------------------------------------


def test_seed_request_examples_are_valid_on_both_paths():
    assert {name for name, _ in SEEDS} >= {"inventory-search-request", "lead-submit-request"}
    for name, data in SEEDS:
        assert agree(data, name), name


def test_every_schema_examples_entry_agrees():
    checked = 0
    for name in spec.schema_names():
        for example in spec.schema(name).get("examples", []):
            assert agree(example, name), name
            checked += 1
    assert checked >= 8


def test_every_bundled_schema_compiles_offline():
    for name in spec.schema_names():
        assert isinstance(fast(name), jsonschema_rs.Validator)


def test_unbundled_refs_are_never_fetched():
    with pytest.raises(jsonschema_rs.ValidationError, match="never fetched"):
        jsonschema_rs.validator_for(
            {"$ref": "https://example.com/elsewhere.schema.json"},
            registry=schema_files.rust_registry(),
            retriever=schema_files.no_fetch,
        )


def test_unknown_schema():
    with pytest.raises(spec.UnknownSchema):
        spec.is_valid({}, "no-such-schema")


# -- the places where the engines differ by default ------------------------------------

WHITESPACE_LIKE = ["\x1c", "\x1f", "\x85", "\xa0", "\u180e", "\u2007", "\u200b", "\u2028", "\u3000", "\ufeff"]


@pytest.mark.parametrize(
    "pattern", [r"\s", r"\S", r"\d", r"\D", r"\w", r"\W", r"^.$", r"^a$", r"[\s]", r"[^\d]", r"[\w-]"]
)
def test_ecma_translation_matches_jsonschema_rs(pattern):
    rust = jsonschema_rs.validator_for({"pattern": pattern})
    python = ecma.compile(pattern)
    # every BMP character outside the surrogates, and a few astral ones
    for cp in [*range(0, 0xD800), *range(0xE000, 0x10000), 0x1D7CE, 0x1F600, 0x10FFFF]:
        for text in (chr(cp), "a" + chr(cp), "x" + chr(cp)):
            assert rust.is_valid(text) is bool(python.search(text)), (pattern, hex(cp))


def test_every_bundled_pattern_translates():
    patterns = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.add(node["pattern"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for name in spec.schema_names():
        walk(spec.schema(name))
    assert len(patterns) >= 20
    for p in patterns:
        re.compile(ecma.translate(p))


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        ({"vin": "1HGCV1F30NA123456\n"}, False),  # `$` is the end, not "before a newline"
        ({"vin": "1HGCV1F30NA12345\u0663"}, False),  # an Arabic-Indic digit is no VIN character
        ({"updated_at": "2026-04-30T08:42:00"}, False),  # offset required
        ({"updated_at": "2026-04-30t08:42:00z"}, True),
        ({"updated_at": "2026-04-30T08:42:00Z\n"}, False),
        ({"vdp_url": "https://x.example/a\n"}, False),
        ({"inventory_date": "2026-02-30"}, False),
        ({"price": 35500.0}, True),
        ({"year": 2024.0}, True),
        ({"year": 2024.5}, False),
        ({"price": 10**30}, True),
        ({"mileage": 2**64}, True),
        ({"price": -(10**30)}, False),
        ({"price": float("nan")}, False),
        ({"price": float("inf")}, False),
        ({"other_attributes": {"a": float("nan")}}, False),
        ({"make": "Hon\ud800da"}, True),
        ({"vin": "1HGCV1F30NA12345\udc00"}, False),
        ({"photos": ["https://x.example/1.jpg", "no scheme"]}, False),
        ({"photos": ["https://x.example/\u00e9.jpg"]}, False),
    ],
)
def test_edge_cases_agree(change, valid):
    assert agree(dict(SAMPLE[0], **change), "inventory-listing") is valid


@pytest.mark.parametrize(
    ("customer", "valid"),
    [
        ({"email": "ada@example.com"}, True),
        ({"email": "ada@example"}, False),
        ({"email": "ada@example.com\n"}, False),
        ({"email": "\u00e4da@example.com"}, False),
        ({"phone": "+14155550123\n"}, False),
        ({"phone": "+1415555\u0660123"}, False),
    ],
)
def test_lead_edge_cases_agree(customer, valid):
    lead = copy.deepcopy(LEAD)
    lead["customer"].update(customer)
    assert agree(lead, "lead-submit-request") is valid


def test_blank_text_by_ecma_whitespace():
    """`\\S` patterns: a value of only U+001C is not blank for ECMA-262; U+FEFF is."""
    for ch in WHITESPACE_LIKE:
        for name, key in (("inventory-search-request", "query"),):
            agree(dict(SEARCH, filters={key: ch}), name)


def test_identifier_rule():
    item = {k: v for k, v in SAMPLE[0].items() if k not in ("vin", "vehicle_id", "stock")}
    assert agree(item, "inventory-listing") is False
    assert spec.validate(item, "inventory-listing") == [
        {"instanceLocation": "", "keyword": "required", "error": "one of vin, vehicle_id or stock is required"}
    ]
    assert agree(dict(item, stock="S1"), "inventory-listing") is True


def test_every_demo_listing_is_valid_on_both_paths():
    assert all(spec.is_valid(item, "inventory-listing") for item in SAMPLE)
    assert all(compiled("inventory-listing").is_valid(item) for item in SAMPLE[:50])


# -- differential property tests -------------------------------------------------------

TRICKY_STRINGS = [
    "",
    " ",
    "\n",
    "new",
    "used",
    "CAD",
    "USD",
    "km",
    "mi",
    "present",
    "dealer",
    "nacs",
    "suv",
    "1HGCV1F30NA123456",
    "1hgcv1f30na123456",
    "1HGCV1F30NA123456\n",
    "1HGCV1F30NA12345\u0663",
    "2026-04-30T08:42:00Z",
    "2026-04-30T08:42:00+02:00",
    "2026-04-30T08:42:00",
    "2026-04-30",
    "2026-02-30",
    "2026-04-30\n",
    "https://x.example/a",
    "http://x.example",
    "https://x.example/a\n",
    "not a uri",
    "ada@example.com",
    "ada@example.com\n",
    "a@b",
    "+14155550123",
    "+14155550123\n",
    "+1415555\u0663123",
    "price",
    "asc",
    "desc",
    "email",
    "phone",
    "lead_submission",
    "adaptive_cruise_control",
    "sunroof",
    "\ud800",
    "x\udc00y",
    *WHITESPACE_LIKE,
]
NUMBERS = (
    st.integers(-5, 10**6)
    | st.sampled_from([0, 1, 2**63, 2**64, 10**30, -(10**30)])
    | st.floats(-10, 1e6, allow_nan=False)
    | st.sampled_from([0.0, 1.0, 2024.0, 1e30, -0.0, 0.5, float("nan"), float("inf"), float("-inf")])
)
KEYS = [
    "name",
    "amount",
    "code",
    "label",
    "status",
    "source",
    "text",
    "url",
    "observed_at",
    "email",
    "phone",
    "first_name",
    "query",
    "make",
    "limit",
    "field",
    "order",
    "x_extra",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | NUMBERS
    | st.sampled_from(TRICKY_STRINGS)
    | st.text(
        alphabet=st.sampled_from(["a", "Z", "7", "\u0663", "-", " ", "\n", "@", ".", *WHITESPACE_LIKE]), max_size=4
    ),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS), children, max_size=3),
    max_leaves=6,
)
STRING_TWEAKS = [
    lambda s: s + "\n",
    lambda s: " " + s,
    lambda s: s.upper(),
    lambda s: s[:-1],
    lambda s: re.sub(r"[0-9]", "\u0663", s, count=1),
    lambda s: s + "\ud800",
    lambda s: s.replace(":", "", 1),
    lambda s: "\x1c" + s,
    lambda s: "\ufeff",
    lambda s: "\x1c",
    lambda s: "\x85",
]


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every string and number leaf of ``node``."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))]
    return [path] if isinstance(node, (str, int, float)) and not isinstance(node, bool) else []


NUMBER_TWEAKS = [
    lambda n: float(n),
    lambda n: n + 0.5,
    lambda n: -n,
    lambda n: n * 10**20,
    lambda n: float("nan"),
    lambda n: float("inf"),
    lambda n: str(n),
]


@st.composite
def mutated(draw: Any, base: Any) -> Any:
    """``base`` with one place changed: a leaf tweaked, or a node deleted, replaced or extended."""
    doc = copy.deepcopy(base)
    leaves = _leaves(doc)
    if leaves and draw(st.booleans()):  # tweak a leaf: where formats and patterns bite
        *path, last = draw(st.sampled_from(leaves))
        parent = doc
        for step in path:
            parent = parent[step]
        value = parent[last]
        tweaks = STRING_TWEAKS if isinstance(value, str) else NUMBER_TWEAKS
        parent[last] = draw(st.sampled_from(tweaks))(value)
        return doc
    parent, key, node = None, None, doc
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 2)) > 0:
        key = draw(st.sampled_from(sorted(node)) if isinstance(node, dict) else st.integers(0, len(node) - 1))
        parent, node = node, node[key]
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "add" and isinstance(node, dict):
        node[draw(st.sampled_from(KEYS + sorted(node)))] = draw(json_values)
    elif action == "add" and isinstance(node, list):
        node.append(draw(json_values) if draw(st.booleans()) or not node else copy.deepcopy(node[0]))
    elif action == "delete" and parent is not None:
        del parent[key]
    elif parent is not None:
        parent[key] = draw(json_values)
    else:
        return draw(json_values)
    return doc


def search_requests() -> st.SearchStrategy[dict]:
    built = st.builds(
        lambda f, limit: {"type": "inventory.search.request", "filters": f, "pagination": {"limit": limit}},
        ref.filters(),
        st.integers(1, 50),
    )
    return built | st.sampled_from(SEARCHES)


def test_generated_bases_are_valid():
    for base in SEARCHES:
        assert agree(base, "inventory-search-request")
    for base in LEADS:
        assert agree(base, "lead-submit-request")


@pytest.mark.slow
@BOUNDED
@given(inventory=ref.listings(max_size=4))
def test_generated_listings_agree(inventory):
    for item in inventory:
        assert agree(item, "inventory-listing")


@pytest.mark.slow
@BOUNDED
@given(data=st.data(), index=st.integers(0, len(SAMPLE) - 1))
def test_mutated_listings_agree(data, index):
    agree(data.draw(mutated(SAMPLE[index])), "inventory-listing")


@pytest.mark.slow
@BOUNDED
@given(data=st.data(), base=search_requests())
def test_search_requests_agree(data, base):
    assert agree(base, "inventory-search-request")
    agree(data.draw(mutated(base)), "inventory-search-request")


@pytest.mark.slow
@BOUNDED
@given(data=st.data(), base=st.sampled_from(LEADS))
def test_mutated_lead_requests_agree(data, base):
    agree(data.draw(mutated(base)), "lead-submit-request")
