"""Protocol edge cases of /mcp with raw HTTP: the answers each MCP revision prescribes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from aap.bindings.mcp.results import render
from aap.bindings.mcp.server import NO_STRUCTURED_CONTENT
from aap.protocols import MCP_PROTOCOL_VERSIONS as PROTOCOL_VERSIONS
from aap.skills.catalog import SKILLS
from aap.spec import validate
from factories import live_dealer_fixture
from mcp_helpers import (
    ACCEPT,
    LEGACY,
    MODERN,
    Dealer,
    envelope,
    initialize,
    legacy_headers,
    modern_call,
    rpc,
)

TOOL_NAMES = [s.tool_name for s in SKILLS.values()]
SEARCH = {"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 2}}}


dealer = live_dealer_fixture("mcp-protocol", count=20)


@pytest.fixture
def http(dealer: Dealer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dealer.base_url, timeout=30) as client:
        yield client


def assert_jsonrpc_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == code, body
    assert "mcp-session-id" not in response.headers
    return body


def assert_result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert "mcp-session-id" not in response.headers
    body = response.json()
    assert "error" not in body, body
    return body["result"]


# -- 2026-07-28 --------------------------------------------------------------------------
def test_modern_discover_lists_every_served_revision(http: httpx.Client) -> None:
    body, headers = modern_call("server/discover")
    result = assert_result(http.post("/mcp", json=body, headers=headers))
    assert result["supportedVersions"] == list(PROTOCOL_VERSIONS)
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["resultType"] == "complete"
    assert (result["ttlMs"], result["cacheScope"]) == (300_000, "public")
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "aap"


def test_modern_tools_list_is_cacheable_and_ordered(http: httpx.Client) -> None:
    body, headers = modern_call("tools/list")
    result = assert_result(http.post("/mcp", json=body, headers=headers))
    assert [t["name"] for t in result["tools"]] == TOOL_NAMES
    assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (300_000, "public", "complete")
    assert "io.modelcontextprotocol/serverInfo" in result["_meta"]
    assert "nextCursor" not in result


def test_modern_tools_call_success(http: httpx.Client) -> None:
    body, headers = modern_call("tools/call", SEARCH)
    result = assert_result(http.post("/mcp", json=body, headers=headers))
    assert result["isError"] is False and result["resultType"] == "complete"
    assert validate(result["structuredContent"], "inventory-search-response") == []
    assert result["content"][0]["text"] == render(result["structuredContent"])  # the compact rendering


def test_modern_session_id_is_ignored_and_never_issued(http: httpx.Client) -> None:
    body, headers = modern_call("tools/list")
    response = http.post("/mcp", json=body, headers={**headers, "Mcp-Session-Id": "made-up"})
    assert_result(response)


@pytest.mark.parametrize("requested", ["2099-01-01", "2026-01-01", "not-a-date"])
def test_unsupported_modern_version_names_every_served_revision(http: httpx.Client, requested: str) -> None:
    body, headers = modern_call("tools/list", version=requested)
    error = assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32022)["error"]
    assert error["data"] == {"supported": list(PROTOCOL_VERSIONS), "requested": requested}


def test_handshake_revision_inside_a_modern_envelope_is_unsupported(http: httpx.Client) -> None:
    body, headers = modern_call("tools/list", version=LEGACY)
    error = assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32022)["error"]
    assert error["data"] == {"supported": list(PROTOCOL_VERSIONS), "requested": LEGACY}


@pytest.mark.parametrize(
    "change",
    [
        {"drop": "MCP-Protocol-Version"},
        {"drop": "Mcp-Method"},
        {"drop": "Mcp-Name"},
        {"set": ("Mcp-Method", "tools/list")},
        {"set": ("Mcp-Name", "aap_dealer_information")},
        {"set": ("MCP-Protocol-Version", LEGACY)},
        {"set": ("MCP-Protocol-Version", "2099-01-01")},
    ],
    ids=["no-version", "no-method", "no-name", "other-method", "other-name", "legacy-version", "other-version"],
)
def test_missing_or_mismatched_headers_are_header_mismatch(http: httpx.Client, change: dict[str, Any]) -> None:
    body, headers = modern_call("tools/call", SEARCH)
    if "drop" in change:
        del headers[change["drop"]]
    else:
        name, value = change["set"]
        headers[name] = value
    body_error = assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32020)
    assert body_error["id"] == 1


def test_base64_encoded_name_header_is_decoded(http: httpx.Client) -> None:
    import base64

    body, headers = modern_call("tools/call", SEARCH)
    headers["Mcp-Name"] = "=?base64?" + base64.b64encode(b"aap_inventory_search").decode() + "?="
    assert assert_result(http.post("/mcp", json=body, headers=headers))["isError"] is False


@pytest.mark.parametrize(
    "missing", ["io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/protocolVersion"]
)
def test_incomplete_envelope_is_invalid_params(http: httpx.Client, missing: str) -> None:
    body, headers = modern_call("tools/list")
    del body["params"]["_meta"][missing]
    assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32602)


def test_modern_request_without_envelope_is_invalid_params(http: httpx.Client) -> None:
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    assert_jsonrpc_error(http.post("/mcp", json=rpc("tools/list", {}), headers=headers), 400, -32602)


def test_unknown_method_is_404_method_not_found(http: httpx.Client) -> None:
    body, headers = modern_call("resources/list")
    assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 404, -32601)
    body, headers = modern_call("tools/frobnicate")
    assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 404, -32601)


def test_unknown_tool_is_invalid_params(http: httpx.Client) -> None:
    body, headers = modern_call("tools/call", {"name": "aap_inventory_teleport", "arguments": {}})
    error = assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32602)["error"]
    assert error["message"].startswith("Unknown tool")
    assert "teleport" not in orjson.dumps(error).decode()  # the caller's name is never echoed


def test_arguments_of_the_wrong_shape_are_invalid_params(http: httpx.Client) -> None:
    body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": ["not", "an", "object"]})
    assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32602)


def test_invalid_argument_values_are_an_is_error_result_listing_every_problem(http: httpx.Client) -> None:
    arguments = {
        "type": "inventory.search.request",
        "filters": {"make": "Honda", "price_max": -5, "no_such_filter": 1},
        "pagination": {"limit": 1000},
    }
    body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": arguments})
    result = assert_result(http.post("/mcp", json=body, headers=headers))
    assert result["isError"] is True
    error = result["structuredContent"]
    assert validate(error, "error") == []
    assert error["code"] == "SCHEMA_VALIDATION_FAILED"
    assert len(error["details"]["errors"]) >= 4
    assert "Honda" not in orjson.dumps(error).decode()  # no value of the request is echoed


def test_missing_arguments_are_a_schema_failure(http: httpx.Client) -> None:
    body, headers = modern_call("tools/call", {"name": "aap_inventory_vehicle"})
    result = assert_result(http.post("/mcp", json=body, headers=headers))
    assert result["isError"] is True and result["structuredContent"]["code"] == "SCHEMA_VALIDATION_FAILED"


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "OPTIONS"])
@pytest.mark.parametrize("version", [MODERN, LEGACY, None])
def test_anything_but_post_is_405(http: httpx.Client, method: str, version: str | None) -> None:
    headers = {"Accept": "text/event-stream, application/json"}
    if version:
        headers["MCP-Protocol-Version"] = version
    response = http.request(method, "/mcp", headers={**headers, "Mcp-Session-Id": "abc"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_bad_origin_is_403(http: httpx.Client, method: str) -> None:
    body, headers = modern_call("tools/list")
    response = http.request(method, "/mcp", json=body, headers={**headers, "Origin": "https://evil.example"})
    error = assert_jsonrpc_error(response, 403, -32600)
    assert error["id"] is None


def test_allowed_origin_and_host(http: httpx.Client, dealer: Dealer) -> None:
    body, headers = modern_call("tools/list")
    ok = http.post("/mcp", json=body, headers={**headers, "Origin": dealer.base_url})
    assert_result(ok)
    bad_host = http.post("/mcp", json=body, headers={**headers, "Host": "rebound.evil.example"})
    assert_jsonrpc_error(bad_host, 421, -32600)


def test_notification_is_accepted_with_202(http: httpx.Client) -> None:
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "notifications/cancelled"}
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": envelope()}}
    response = http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 202 and response.content == b""


def test_parse_error_and_batch(http: httpx.Client) -> None:
    _, headers = modern_call("tools/list")
    raw = http.post("/mcp", content=b"{not json", headers={**headers, "Content-Type": "application/json"})
    assert_jsonrpc_error(raw, 400, -32700)
    body, _ = modern_call("tools/list")
    assert_jsonrpc_error(http.post("/mcp", json=[body, body], headers=headers), 400, -32600)


def test_accept_header_must_allow_json(http: httpx.Client) -> None:
    body, headers = modern_call("tools/list")
    response = http.post("/mcp", json=body, headers={**headers, "Accept": "text/html"})
    assert response.status_code == 406


# -- 2025-11-25 and older handshake revisions --------------------------------------------
@pytest.mark.parametrize("version", [v for v in PROTOCOL_VERSIONS if v != MODERN])
def test_initialize_echoes_each_handshake_revision_without_a_session(http: httpx.Client, version: str) -> None:
    response = http.post("/mcp", json=initialize(version), headers={"Accept": ACCEPT})
    result = assert_result(response)
    assert result["protocolVersion"] == version
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["serverInfo"]["name"] == "aap"
    assert "instructions" in result


def test_initialize_asking_for_the_modern_revision_answers_2025_11_25(http: httpx.Client) -> None:
    result = assert_result(http.post("/mcp", json=initialize(MODERN), headers={"Accept": ACCEPT}))
    assert result["protocolVersion"] == LEGACY


def test_initialized_notification_is_202(http: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    response = http.post("/mcp", json=body, headers=legacy_headers())
    assert response.status_code == 202


def test_legacy_tools_list_has_no_modern_members(http: httpx.Client) -> None:
    result = assert_result(http.post("/mcp", json=rpc("tools/list", {}), headers=legacy_headers()))
    assert [t["name"] for t in result["tools"]] == TOOL_NAMES
    assert not {"resultType", "ttlMs", "cacheScope"} & set(result)
    assert all(t["outputSchema"]["type"] == "object" for t in result["tools"])


@pytest.mark.parametrize("version", [v for v in PROTOCOL_VERSIONS if v != MODERN])
def test_legacy_tools_call_at_each_handshake_revision(http: httpx.Client, version: str) -> None:
    result = assert_result(http.post("/mcp", json=rpc("tools/call", SEARCH), headers=legacy_headers(version)))
    assert result["isError"] is False
    assert "resultType" not in result
    text = result["content"][0]["text"]  # every revision has the text block
    assert validate(result["structuredContent"], "inventory-search-response") == []
    if version in NO_STRUCTURED_CONTENT:  # a client of a revision before 2025-06-18 reads only the text
        assert orjson.loads(text) == result["structuredContent"]
    else:  # the JSON as structured content, a compact rendering as text
        assert text == render(result["structuredContent"])


def test_legacy_is_error_result(http: httpx.Client) -> None:
    params = {"name": "aap_inventory_vehicle", "arguments": {"type": "inventory.vehicle.request", "stock": "NOPE-0"}}
    result = assert_result(http.post("/mcp", json=rpc("tools/call", params), headers=legacy_headers()))
    assert result["isError"] is True
    assert validate(result["structuredContent"], "error") == []
    assert result["structuredContent"]["code"] == "VEHICLE_NOT_FOUND"


def test_legacy_unknown_tool_and_discover(http: httpx.Client) -> None:
    unknown = http.post("/mcp", json=rpc("tools/call", {"name": "nope", "arguments": {}}), headers=legacy_headers())
    assert unknown.json()["error"]["code"] == -32602
    discover = http.post("/mcp", json=rpc("server/discover", {}), headers=legacy_headers())
    assert discover.json()["error"]["code"] == -32601


def test_legacy_request_without_version_header_is_served(http: httpx.Client) -> None:
    result = assert_result(http.post("/mcp", json=rpc("tools/call", SEARCH), headers={"Accept": ACCEPT}))
    assert result["isError"] is False


def test_modern_envelope_without_version_header_is_header_mismatch(http: httpx.Client) -> None:
    body, headers = modern_call("tools/call", SEARCH)
    del headers["MCP-Protocol-Version"]
    assert_jsonrpc_error(http.post("/mcp", json=body, headers=headers), 400, -32020)


def test_unknown_version_header_without_envelope_is_400(http: httpx.Client) -> None:
    response = http.post("/mcp", json=rpc("tools/list", {}), headers=legacy_headers("2024-01-01"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] in (-32602, -32022)


def test_advertised_revisions_are_exactly_the_ones_the_sdk_serves() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    assert set(PROTOCOL_VERSIONS) == set(MODERN_PROTOCOL_VERSIONS) | set(HANDSHAKE_PROTOCOL_VERSIONS)
    assert PROTOCOL_VERSIONS[:2] == (MODERN, LEGACY)  # the two AAP 3.1 requires, newest first
