"""The same AAP request through /a2a and through /mcp gives the same answer: same data
(a search's listings as summaries on MCP, docs/mcp.md "For LLM agents"), same errors, cursors
and lead idempotency keys shared across the bindings."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from mcp import Client

from aap.bindings.mcp.results import summarized
from aap.skills.catalog import BY_REQUEST_TYPE
from aap.spec import validate
from factories import live_dealer_fixture
from http_helpers import AAP_HEADERS, aap_error_of, send_message
from mcp_helpers import MODERN, Dealer, lead_request

dealer = live_dealer_fixture("mcp-equivalence")


def over_a2a(dealer: Dealer, request: dict[str, Any]) -> dict[str, Any]:
    """The AAP response object (or aap.error) that /a2a answers for ``request``."""
    body = httpx.post(dealer.a2a_url, json=send_message(request), headers=AAP_HEADERS, timeout=30).json()
    error = aap_error_of(body)
    if error is not None:
        return error
    (part,) = body["result"]["message"]["parts"]
    return part["data"]


async def over_mcp(client: Client, request: dict[str, Any]) -> dict[str, Any]:
    skill = BY_REQUEST_TYPE[request["type"]]
    result = await client.call_tool(skill.tool_name, request)
    assert result.is_error == (result.structured_content["type"] == "aap.error")
    return result.structured_content


def without_cursor(response: dict[str, Any]) -> dict[str, Any]:
    """Cursors carry their issue time, so two issues a second apart differ in bytes; the A2A
    answer as MCP words it (search listings as summaries)."""
    response = summarized(response)
    data = dict(response["data"])
    data.pop("next_cursor", None)
    return {**response, "data": data}


READS = [
    {"type": "dealer.information.request"},
    {"type": "inventory.facets.request"},
    {"type": "inventory.facets.request", "filters": {"condition": ["used"], "price_max": 40000}},
    {"type": "inventory.search.request", "pagination": {"limit": 7}, "sort": {"field": "price", "order": "asc"}},
    {
        "type": "inventory.search.request",
        "filters": {"vehicle_type": ["car"], "year_min": 2020},
        "pagination": {"limit": 3},
    },
    {"type": "inventory.search.request", "filters": {"query": "awd"}, "pagination": {"limit": 4}},
]


@pytest.mark.slow
@pytest.mark.parametrize("request_", READS, ids=lambda r: r["type"])
async def test_reads_answer_the_same_data(dealer: Dealer, request_: dict[str, Any]) -> None:
    via_a2a = over_a2a(dealer, request_)
    async with Client(dealer.mcp_url, mode=MODERN) as client:
        via_mcp = await over_mcp(client, request_)
    assert via_mcp["type"] == via_a2a["type"] == BY_REQUEST_TYPE[request_["type"]].response_type
    assert without_cursor(via_mcp) == without_cursor(via_a2a)
    assert validate(via_mcp, BY_REQUEST_TYPE[request_["type"]].response_schema) == []


async def test_vehicle_detail_is_the_same(dealer: Dealer) -> None:
    vin = next(v["vin"] for v in dealer.listings if v.get("vin"))
    request = {"type": "inventory.vehicle.request", "vin": vin}
    async with Client(dealer.mcp_url, mode="legacy") as client:
        assert await over_mcp(client, request) == over_a2a(dealer, request)


async def test_a_cursor_from_a2a_continues_on_mcp(dealer: Dealer) -> None:
    first = {"type": "inventory.search.request", "pagination": {"limit": 5}, "sort": {"field": "price", "order": "asc"}}
    page_one = over_a2a(dealer, first)["data"]
    assert page_one.get("next_cursor")
    second = {**first, "pagination": {"limit": 5, "cursor": page_one["next_cursor"]}}
    async with Client(dealer.mcp_url, mode=MODERN) as client:
        via_mcp = await over_mcp(client, second)
    via_a2a = over_a2a(dealer, second)
    assert without_cursor(via_mcp) == without_cursor(via_a2a)
    first_ids = {v.get("vehicle_id") or v.get("vin") for v in page_one["vehicles"]}
    assert via_mcp["data"]["vehicles"]
    assert not first_ids & {v.get("vehicle_id") or v.get("vin") for v in via_mcp["data"]["vehicles"]}


async def test_errors_carry_the_same_code_and_problems(dealer: Dealer) -> None:
    bad = {
        "type": "inventory.search.request",
        "filters": {"make": "Honda", "year_min": "x"},
        "pagination": {"limit": 0},
    }
    via_a2a = over_a2a(dealer, bad)
    async with Client(dealer.mcp_url, mode=MODERN) as client:
        via_mcp = await over_mcp(client, bad)
    assert via_mcp["type"] == via_a2a["type"] == "aap.error"
    assert via_mcp["code"] == via_a2a["code"] == "SCHEMA_VALIDATION_FAILED"
    assert via_mcp["details"]["errors"] == via_a2a["details"]["errors"]
    assert via_mcp["error_id"] != via_a2a["error_id"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_a_lead_key_used_on_a2a_replays_on_mcp(dealer: Dealer, mode: str) -> None:
    vehicle = next(v for v in dealer.listings if v.get("vin"))
    request = lead_request(vehicle, "equivalence-" + uuid.uuid4().hex)
    original = over_a2a(dealer, request)
    assert original["type"] == "lead.submit.response", original
    async with Client(dealer.mcp_url, mode=mode) as client:
        replay = await over_mcp(client, request)
        conflict = await over_mcp(client, {**request, "message": "Something else entirely."})
    assert replay["data"]["replayed"] is True
    assert {k: v for k, v in replay["data"].items() if k != "replayed"} == {
        k: v for k, v in original["data"].items() if k != "replayed"
    }
    assert conflict["code"] == "IDEMPOTENCY_CONFLICT"
    # and back: the A2A binding replays a lead first sent over MCP
    fresh = lead_request(vehicle, "equivalence-" + uuid.uuid4().hex)
    async with Client(dealer.mcp_url, mode=mode) as client:
        first = await over_mcp(client, fresh)
    again = over_a2a(dealer, fresh)
    assert again["data"]["replayed"] is True and again["data"]["lead_id"] == first["data"]["lead_id"]
