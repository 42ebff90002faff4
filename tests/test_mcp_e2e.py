"""End to end over real HTTP on loopback with the official MCP client SDK, once pinned to
2026-07-28 and once to 2025-11-25 (initialize handshake): list tools, call every tool, get
aap.error results. Every structured result is checked against the AAP schemas."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import httpx
import orjson
import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from mcp import Client
from referencing import Registry

from aap.bindings.mcp.llm_schema import llm_input_schema
from aap.bindings.mcp.results import render
from aap.bindings.mcp.tools import CAPABILITIES_META_KEY, reference_output_schema
from aap.discovery.agent_card import mcp_endpoint as endpoint_descriptor
from aap.protocols import MCP_PROTOCOL_VERSIONS as PROTOCOL_VERSIONS
from aap.skills.catalog import SKILLS
from aap.spec import validate
from factories import live_dealer_fixture
from mcp_helpers import LEGACY, MODERN, Dealer, lead_request

MODES = [pytest.param(MODERN, MODERN, id="2026-07-28"), pytest.param("legacy", LEGACY, id="2025-11-25")]
TOOL_NAMES = [s.tool_name for s in SKILLS.values()]


dealer = live_dealer_fixture("mcp-e2e")


def structured(result: Any, schema: str) -> dict[str, Any]:
    """The structured content, valid against ``schema``; the text block renders it (a success)
    or is its JSON (an aap.error)."""
    content = result.structured_content
    assert validate(content, schema) == [], validate(content, schema)
    assert len(result.content) == 1 and result.content[0].type == "text"
    if content["type"] == "aap.error":
        assert orjson.loads(result.content[0].text) == content
    else:
        assert result.content[0].text == render(content)
    return content


def listing_vehicle(dealer: Dealer) -> dict[str, Any]:
    return next(v for v in dealer.listings if v.get("vin") and v.get("status", "available") == "available")


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_tools_are_listed_with_llm_schemas_annotations_and_capabilities(
    dealer: Dealer, mode: str, version: str
) -> None:
    card = httpx.get(dealer.base_url + "/.well-known/agent-card.json").json()
    params = next(e for e in card["capabilities"]["extensions"] if "autoagentprotocol" in e["uri"])["params"]
    async with Client(dealer.mcp_url, mode=mode) as client:
        assert client.protocol_version == version
        listing = await client.list_tools()
    assert [t.name for t in listing.tools] == TOOL_NAMES
    for tool, skill in zip(listing.tools, SKILLS.values()):
        assert tool.input_schema == llm_input_schema(skill.request_schema)
        assert tool.input_schema["type"] == "object"
        assert "type" not in tool.input_schema["properties"]  # the tool names the request type
        assert tool.output_schema == reference_output_schema(skill)  # the response or aap.error, by reference
        assert tool.output_schema["properties"]["type"]["enum"] == [skill.response_type, "aap.error"]
        assert tool.title == skill.name
        notes = tool.annotations
        assert notes is not None and notes.title == skill.name
        if skill.read_only:
            assert (notes.read_only_hint, notes.open_world_hint) == (True, False)
        else:
            assert (notes.read_only_hint, notes.destructive_hint, notes.idempotent_hint, notes.open_world_hint) == (
                False,
                False,
                True,
                True,
            )
        assert tool.meta["org.autoagentprotocol/skill"] == skill.id
        assert tool.meta["org.autoagentprotocol/request_schema"] == skill.request_schema_url
        assert tool.meta["org.autoagentprotocol/response_schema"] == skill.response_schema_url
    search = listing.tools[TOOL_NAMES.index("aap_inventory_search")]
    assert search.meta[CAPABILITIES_META_KEY] == params["skills"]["inventory.search"]["capabilities"]
    assert validate(search.meta[CAPABILITIES_META_KEY], "inventory-capabilities") == []
    assert params["mcp"]["url"] == dealer.settings.url("/mcp")


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_every_tool_answers_with_its_typed_response(dealer: Dealer, mode: str, version: str) -> None:
    async with Client(dealer.mcp_url, mode=mode) as client:
        assert client.protocol_version == version
        info = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
        assert not info.is_error
        assert structured(info, "dealer-information-response")["type"] == "dealer.information.response"

        facets = await client.call_tool(
            "aap_inventory_facets", {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}
        )
        assert not facets.is_error
        assert structured(facets, "inventory-facets-response")["type"] == "inventory.facets.response"

        search = await client.call_tool(
            "aap_inventory_search",
            {
                "type": "inventory.search.request",
                "pagination": {"limit": 5},
                "sort": {"field": "price", "order": "asc"},
            },
        )
        assert not search.is_error
        page = structured(search, "inventory-search-response")["data"]
        assert 1 <= len(page["vehicles"]) <= 5

        vehicle_id = page["vehicles"][0]["vehicle_id"]  # a summary: the full record is one call away
        vehicle = await client.call_tool("aap_inventory_vehicle", {"vehicle_id": vehicle_id})
        assert not vehicle.is_error
        assert structured(vehicle, "vehicle-detail-response")["data"]["vehicle_id"] == vehicle_id

        lead = await client.call_tool("aap_lead_submit", lead_request(listing_vehicle(dealer), uuid.uuid4().hex))
        assert not lead.is_error
        outcome = structured(lead, "lead-submit-response")["data"]
        assert outcome["status"] == "received"
        assert not outcome.get("replayed", False)


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_skill_failures_are_is_error_results_carrying_aap_error(dealer: Dealer, mode: str, version: str) -> None:
    async with Client(dealer.mcp_url, mode=mode) as client:
        missing = await client.call_tool(
            "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}
        )
        assert missing.is_error
        error = structured(missing, "error")
        assert error["code"] == "VEHICLE_NOT_FOUND" and error["retryable"] is False

        invalid = await client.call_tool(
            "aap_inventory_search",
            {
                "type": "inventory.search.request",
                "filters": {"make": "Honda", "year_min": "new"},
                "pagination": {"limit": 0},
            },
        )
        assert invalid.is_error
        error = structured(invalid, "error")
        assert error["code"] == "SCHEMA_VALIDATION_FAILED"
        locations = {p["instanceLocation"] for p in error["details"]["errors"]}
        assert {"/filters/make", "/filters/year_min", "/pagination/limit"} <= locations  # every problem at once

        untyped = await client.call_tool("aap_inventory_search", {"pagination": {"limit": 0}})  # type: the tool's
        assert untyped.is_error
        error = structured(untyped, "error")
        assert error["code"] == "SCHEMA_VALIDATION_FAILED"
        assert [p["instanceLocation"] for p in error["details"]["errors"]] == ["/pagination/limit"]
        assert "pagination.limit" in error["message"]  # the field to change, by the name a model sends

        foreign = await client.call_tool("aap_dealer_information", {"type": "inventory.search.request"})
        assert foreign.is_error
        error = structured(foreign, "error")
        assert error["code"] == "SCHEMA_VALIDATION_FAILED"
        assert error["details"]["errors"][0]["instanceLocation"] == "/type"

        no_consent = lead_request(listing_vehicle(dealer), uuid.uuid4().hex)
        del no_consent["consent"]
        refused = await client.call_tool("aap_lead_submit", no_consent)
        assert refused.is_error
        assert structured(refused, "error")["code"] == "CONTACT_CONSENT_REQUIRED"

        # Every error is valid against the tool's own outputSchema, as a draft-07 reader (the
        # TypeScript SDK 1.x) and a 2020-12 reader see it: no client throws the AAP error away.
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name, result in (
            ("aap_inventory_vehicle", missing),
            ("aap_inventory_search", invalid),
            ("aap_inventory_search", untyped),
            ("aap_dealer_information", foreign),
            ("aap_lead_submit", refused),
        ):
            published = {k: v for k, v in tools[name].output_schema.items() if k != "$schema"}
            for reader in (Draft7Validator, Draft202012Validator):
                assert reader(published, registry=Registry()).is_valid(result.structured_content), (name, reader)


async def test_auto_mode_discovers_and_picks_the_modern_revision(dealer: Dealer) -> None:
    async with Client(dealer.mcp_url) as client:
        assert client.protocol_version == MODERN
        discovered = client.session.discover_result
        assert discovered is not None
        assert discovered.supported_versions == list(PROTOCOL_VERSIONS)
        assert {MODERN, LEGACY} <= set(discovered.supported_versions)
        result = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
        assert not result.is_error


async def test_a_lead_retry_on_either_revision_replays_the_original(dealer: Dealer) -> None:
    request = lead_request(listing_vehicle(dealer), uuid.uuid4().hex)
    async with Client(dealer.mcp_url, mode=MODERN) as client:
        first = structured(await client.call_tool("aap_lead_submit", request), "lead-submit-response")["data"]
    async with Client(dealer.mcp_url, mode="legacy") as client:
        again = structured(await client.call_tool("aap_lead_submit", request), "lead-submit-response")["data"]
        changed = await client.call_tool("aap_lead_submit", {**request, "message": "A different question."})
    assert again["replayed"] is True
    assert again["lead_id"] == first["lead_id"] and again["status"] == first["status"]
    assert changed.is_error and structured(changed, "error")["code"] == "IDEMPOTENCY_CONFLICT"


async def test_an_unexpected_failure_is_internal_error_without_detail(
    dealer: Dealer, caplog: pytest.LogCaptureFixture
) -> None:
    from aap.skills import dealer_information

    def broken(agent: Any, request: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise RuntimeError("connection to 10.0.0.7 failed for jane.doe@example.com")

    dealer.agent.register("dealer.information", broken)
    try:
        with caplog.at_level("ERROR", logger="aap.mcp"):
            async with Client(dealer.mcp_url, mode=MODERN) as client:
                result = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
    finally:
        dealer.agent.register("dealer.information", dealer_information.run)
    assert result.is_error
    error = structured(result, "error")
    assert error["code"] == "INTERNAL_ERROR" and error["retryable"] is True
    assert "jane" not in result.content[0].text and "10.0.0.7" not in result.content[0].text
    logged = [f"{r.getMessage()} {r.fields}" for r in caplog.records if r.name == "aap.mcp"]
    assert any(
        r.fields["error_type"] == "RuntimeError" and r.fields["error_id"] == error["error_id"]
        for r in caplog.records
        if r.name == "aap.mcp"
    ), logged
    assert not any("jane" in line or "10.0.0.7" in line for line in logged)
    assert all(r.exc_info is None for r in caplog.records if r.name == "aap.mcp")


def test_the_agent_card_advertises_this_endpoint(dealer: Dealer) -> None:
    card = httpx.get(dealer.base_url + "/.well-known/agent-card.json").json()
    params = next(e for e in card["capabilities"]["extensions"] if "autoagentprotocol" in e["uri"])["params"]
    advertised = params["mcp"]
    descriptor = endpoint_descriptor(dealer.settings)
    assert advertised["url"] == descriptor["url"] == dealer.mcp_url
    assert advertised["transport"] == "streamable-http" and advertised["public_read"] is True
    assert {MODERN, LEGACY} <= set(advertised["protocol_versions"]) <= set(PROTOCOL_VERSIONS)
    public = endpoint_descriptor(dataclasses.replace(dealer.settings, public_url="https://dealer.example"))
    assert validate(public, "mcp-endpoint") == []  # the seed wants https; loopback http is for development
    assert public["url"] == "https://dealer.example/mcp"
