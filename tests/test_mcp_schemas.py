"""Bundled (self-contained) JSON Schemas for the MCP tool definitions."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from aap.bindings.mcp.schemas import DIALECT, bundle, bundled
from aap.skills.catalog import SKILLS
from aap.spec import validate

BASE = "https://autoagentprotocol.org/v3.1/schemas/"

DOCS: dict[str, dict[str, Any]] = {
    BASE + "root.schema.json": {
        "$id": BASE + "root.schema.json",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "properties": {
            "listing": {"$ref": "listing.schema.json"},
            "price": {"$ref": BASE + "money.schema.json#/$defs/amount"},
            "local": {"$ref": "#/$defs/local"},
            # data, not schemas: never rewritten
            "const_with_ref": {"const": {"$ref": "listing.schema.json"}},
            # a property *named* like a data keyword is still a schema
            "default": {"$ref": "money.schema.json"},
        },
        "$defs": {"local": {"type": "string"}},
    },
    BASE + "listing.schema.json": {
        "$id": BASE + "listing.schema.json",
        "type": "object",
        "properties": {
            "price": {"$ref": "money.schema.json#/$defs/amount"},
            "self": {"$ref": "#/$defs/inner"},
            "back": {"$ref": "root.schema.json"},
        },
        "$defs": {"inner": {"type": "integer"}},
    },
    BASE + "money.schema.json": {
        "$id": BASE + "money.schema.json",
        "type": "object",
        "$defs": {"amount": {"type": "integer", "minimum": 0}},
    },
}


def test_bundle_rewrites_every_reference_to_a_local_pointer() -> None:
    schema = bundle("root", DOCS.__getitem__)
    assert schema["$schema"] == DIALECT
    assert schema["type"] == "object"
    assert "$id" not in schema
    props = schema["properties"]
    assert props["listing"] == {"$ref": "#/$defs/listing"}
    assert props["price"] == {"$ref": "#/$defs/money/$defs/amount"}
    assert props["local"] == {"$ref": "#/$defs/local"}
    assert props["const_with_ref"] == {"const": {"$ref": "listing.schema.json"}}
    assert props["default"] == {"$ref": "#/$defs/money"}
    listing = schema["$defs"]["listing"]
    assert "$id" not in listing
    assert listing["properties"]["price"] == {"$ref": "#/$defs/money/$defs/amount"}
    assert listing["properties"]["self"] == {"$ref": "#/$defs/listing/$defs/inner"}
    assert listing["properties"]["back"] == {"$ref": "#"}
    assert set(schema["$defs"]) == {"local", "listing", "money"}


def test_bundled_schema_validates_without_any_registry() -> None:
    schema = bundle("root", DOCS.__getitem__)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema, registry=Registry())
    assert validator.is_valid({"listing": {"price": 5, "self": 1, "back": {}}, "price": 3, "local": "x"})
    assert not validator.is_valid({"listing": {"price": -5}})
    assert not validator.is_valid({"price": "3"})
    assert not validator.is_valid({"listing": {"back": {"local": 1}}})


def test_bundle_refuses_what_it_cannot_inline() -> None:
    outside = {BASE + "x.schema.json": {"properties": {"a": {"$ref": "https://example.com/other.json"}}}}
    with pytest.raises(ValueError, match="outside the AAP schema set"):
        bundle("x", outside.__getitem__)
    anchor = {BASE + "x.schema.json": {"properties": {"a": {"$ref": "#anchor"}}}}
    with pytest.raises(ValueError, match="anchor"):
        bundle("x", anchor.__getitem__)
    nested = {BASE + "x.schema.json": {"$defs": {"a": {"$id": "inner.json"}}}}
    with pytest.raises(ValueError, match="nested"):
        bundle("x", nested.__getitem__)


def _keywords(node: Any, keyword: str) -> list[Any]:
    """Every value of ``keyword`` in schema positions (data keywords are skipped)."""
    if isinstance(node, dict):
        found = [node[keyword]] if keyword in node else []
        for key, value in node.items():
            if key not in ("const", "enum", "default", "examples"):
                found += _keywords(value, keyword)
        return found
    if isinstance(node, list):
        return [v for item in node for v in _keywords(item, keyword)]
    return []


SCHEMA_NAMES = sorted({n for s in SKILLS.values() for n in (s.request_schema, s.response_schema)})


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_aap_tool_schema_is_self_contained(name: str) -> None:
    schema = bundled(name)
    assert schema["type"] == "object"
    assert schema["$schema"] == DIALECT
    Draft202012Validator.check_schema(schema)
    refs = _keywords(schema, "$ref")
    assert all(isinstance(r, str) and r.startswith("#") for r in refs), refs
    assert _keywords(schema, "$id") == []
    resolver = Registry().with_resource("urn:tool", DRAFT202012.create_resource(schema)).resolver("urn:tool")
    for ref in refs:
        resolver.lookup(ref)  # every pointer lands inside the document


SEARCH_OK = {
    "type": "inventory.search.request",
    "filters": {"make": ["Honda"], "price_max": 35000, "condition": ["used"]},
    "sort": {"field": "price", "order": "asc"},
    "pagination": {"limit": 10},
}
SEARCH_BAD = {
    "type": "inventory.search.request",
    "filters": {"make": "Honda", "price_max": -1, "bogus": True},
    "pagination": {"limit": 1000},
}


@pytest.mark.parametrize("instance", [SEARCH_OK, SEARCH_BAD, {"type": "inventory.search.request"}, {}])
def test_bundled_search_schema_agrees_with_the_aap_validator(instance: dict[str, Any]) -> None:
    validator = Draft202012Validator(bundled("inventory-search-request"), registry=Registry())
    assert validator.is_valid(instance) == (validate(instance, "inventory-search-request") == [])
