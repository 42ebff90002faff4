"""Protocol errors a client can act on, on every /mcp path (docs/mcp.md, "Protocol answers").

Each answer is checked for its exact HTTP status, a JSON content type, the JSON-RPC error
code and fixed message, and a body free of internals: no pydantic text, no library link or
version, no echo of the request (a marker planted in each request must not come back).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from mcp_types import HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION

from aap.bindings.mcp import answers, envelope
from aap.bindings.mcp.results import summarized
from aap.config.model import RateLimit
from factories import live_dealer_fixture
from http_helpers import AAP_HEADERS, aap_error_of, send_message
from mcp_helpers import ACCEPT, MODERN, Dealer, lead_request, legacy_headers, live_dealer, modern_call, rpc

MARKER = "ZX-marker-7741"
INTERNALS = (
    "pydantic",
    "errors.pydantic.dev",
    "http://",
    "https://",
    "validation error",
    "input_value",
    "traceback",
    "mcp_types",
    MARKER.lower(),
)


dealer = live_dealer_fixture("mcp-errors", count=20)


def headers_for(era: str, method: str = "tools/list") -> dict[str, str]:
    if era == "modern":
        return {
            "Accept": ACCEPT,
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
            "Content-Type": "application/json",
        }
    return {**legacy_headers(), "Content-Type": "application/json"}


def assert_refused(response: httpx.Response, status: int, code: int, message: str | None = None) -> dict[str, Any]:
    """The JSON-RPC error answer: exact status, JSON, the code, the fixed message, no internals."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code, body
    if message is not None:
        assert body["error"]["message"] == message
    text = response.text.lower()
    assert not [item for item in INTERNALS if item in text], response.text
    return body


# -- malformed JSON-RPC -----------------------------------------------------------------------
MALFORMED = [
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "' + MARKER.encode(), -32700, envelope.PARSE_MESSAGE, id="truncated"
    ),
    pytest.param(b"", -32700, envelope.PARSE_MESSAGE, id="empty"),
    pytest.param(b'{"a": "\xff' + MARKER.encode() + b'"}', -32700, envelope.PARSE_MESSAGE, id="bad-utf8"),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": 1' + b"0" * 400 + b"}}",
        -32700,
        envelope.PARSE_MESSAGE,
        id="number-beyond-double",
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": NaN}}',
        -32700,
        envelope.PARSE_MESSAGE,
        id="nan",
    ),
    pytest.param(
        orjson.dumps([{"jsonrpc": "2.0", "id": 1, "method": MARKER}]), -32600, envelope.BATCH_MESSAGE, id="batch"
    ),
    pytest.param(orjson.dumps(MARKER), -32600, envelope.ENVELOPE_MESSAGE, id="string"),
    pytest.param(
        orjson.dumps({"jsonrpc": "1.0", "id": 1, "method": MARKER}), -32600, envelope.ENVELOPE_MESSAGE, id="jsonrpc-1.0"
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": 5, "params": {"q": MARKER}}),
        -32600,
        envelope.ENVELOPE_MESSAGE,
        id="method-number",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": {"a": MARKER}, "method": "tools/list"}),
        -32600,
        envelope.ENVELOPE_MESSAGE,
        id="id-object",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": None, "method": "tools/list"}),
        -32600,
        envelope.ENVELOPE_MESSAGE,
        id="id-null",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}),
        -32600,
        envelope.ENVELOPE_MESSAGE,
        id="id-fraction",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"x": MARKER}}),
        -32600,
        envelope.ENVELOPE_MESSAGE,
        id="posted-response",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [MARKER]}),
        -32602,
        envelope.PARAMS_MESSAGE,
        id="params-array",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize(("body", "code", "message"), MALFORMED)
def test_malformed_json_rpc_gets_a_fixed_short_message(
    dealer: Dealer, era: str, body: bytes, code: int, message: str
) -> None:
    response = httpx.post(dealer.mcp_url, content=body, headers=headers_for(era))
    answer = assert_refused(response, 400, code, message)
    assert "data" not in answer["error"]
    request_id = answer["id"]
    assert request_id in (None, 1)


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_unknown_method_is_not_echoed(dealer: Dealer, era: str) -> None:
    method = f"secret/{MARKER}"
    if era == "modern":
        body, headers = modern_call(method)
        status = 404
    else:
        body, headers = rpc(method, {}), legacy_headers()
        status = 200
    answer = assert_refused(httpx.post(dealer.mcp_url, json=body, headers=headers), status, -32601, "Method not found")
    assert answer["id"] == 1 and "data" not in answer["error"]


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_unknown_tool_and_bad_call_params_are_not_echoed(dealer: Dealer, era: str) -> None:
    params = {"name": f"aap_{MARKER}", "arguments": {}}
    if era == "modern":
        body, headers = modern_call("tools/call", params)
    else:
        body, headers = rpc("tools/call", params), legacy_headers()
    status = 400 if era == "modern" else 200
    assert_refused(httpx.post(dealer.mcp_url, json=body, headers=headers), status, -32602)
    body = rpc("tools/call", {"name": 5, "arguments": MARKER})
    answer = assert_refused(httpx.post(dealer.mcp_url, json=body, headers=legacy_headers()), 200, -32602)
    assert "data" not in answer["error"]  # the SDK's empty data is dropped


# -- every answer is JSON ------------------------------------------------------------------------
@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded", "application/jsonx"])
def test_a_wrong_content_type_is_415_json(dealer: Dealer, era: str, content_type: str | None) -> None:
    headers = headers_for(era)
    del headers["Content-Type"]
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = httpx.post(dealer.mcp_url, content=orjson.dumps(rpc("tools/list", {})), headers=headers)
    assert_refused(response, 415, -32600, envelope.MEDIA_TYPE_MESSAGE)


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize("accept", ["text/html", "", "text/event-stream", "application/json;q=0"])
def test_a_wrong_accept_is_406_json(dealer: Dealer, era: str, accept: str) -> None:
    headers = {**headers_for(era), "Accept": accept}
    response = httpx.post(dealer.mcp_url, content=orjson.dumps(rpc("tools/list", {})), headers=headers)
    assert_refused(response, 406, -32600, envelope.NOT_ACCEPTABLE_MESSAGE)


@pytest.mark.parametrize("accept", ["application/json", "*/*", "application/*", "text/html, application/json;q=0.5"])
def test_any_accept_that_admits_json_is_served(dealer: Dealer, accept: str) -> None:
    headers = {**headers_for("legacy"), "Accept": accept}
    response = httpx.post(dealer.mcp_url, content=orjson.dumps(rpc("tools/list", {})), headers=headers)
    assert response.status_code == 200 and "result" in response.json()


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_anything_but_post_is_405_json(dealer: Dealer, method: str) -> None:
    response = httpx.request(method, dealer.mcp_url, headers={"Accept": ACCEPT})
    assert_refused(response, 405, -32600, envelope.METHOD_MESSAGE)
    assert response.headers["allow"] == "POST"


# -- integers beyond 64 bits: the same answer as over A2A -------------------------------------
def search_with(literal: str) -> tuple[bytes, bytes, bytes]:
    """(modern MCP body, legacy MCP body, A2A body) of one search whose price_max is written as ``literal``."""
    arguments = {"type": "inventory.search.request", "filters": {"price_max": 424242}, "pagination": {"limit": 3}}
    params = {"name": "aap_inventory_search", "arguments": arguments}
    modern, _ = modern_call("tools/call", params)
    bodies = (modern, rpc("tools/call", params), send_message(arguments))
    return tuple(orjson.dumps(body).replace(b"424242", literal.encode()) for body in bodies)  # type: ignore[return-value]


def outcome_over_a2a(response: httpx.Response) -> dict[str, Any]:
    """The AAP response, or the aap.error, of an A2A answer."""
    body = response.json()
    if "result" in body:
        return body["result"]["message"]["parts"][0]["data"]
    return next(d["value"] for d in body["error"]["data"] if d.get("@type", "").endswith("Struct"))


def without_cursor(response: dict[str, Any]) -> dict[str, Any]:
    """The answer without its continuation cursor, which carries its issue second (never compared)."""
    return {**response, "data": {k: v for k, v in response["data"].items() if k != "next_cursor"}}


def same_outcome(over_mcp: dict[str, Any], over_a2a: dict[str, Any]) -> None:
    if over_a2a["type"] == "aap.error":
        assert over_mcp["code"] == over_a2a["code"]
        assert over_mcp["details"]["errors"] == over_a2a["details"]["errors"]
    else:
        assert without_cursor(over_mcp) == without_cursor(summarized(over_a2a))  # MCP: listing summaries
        assert bool(over_mcp["data"].get("next_cursor")) == bool(over_a2a["data"].get("next_cursor"))


@pytest.mark.parametrize(
    "literal",
    [
        "1" + "0" * 30,
        "1e30",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
    ],
)
def test_integers_beyond_64_bits_answer_as_over_a2a(
    dealer: Dealer, literal: str, caplog: pytest.LogCaptureFixture
) -> None:
    modern, legacy, a2a = search_with(literal)
    _, headers = modern_call("tools/call", {"name": "aap_inventory_search"})
    with caplog.at_level(logging.ERROR):
        over_modern = httpx.post(
            dealer.mcp_url, content=modern, headers={**headers, "Content-Type": "application/json"}
        )
        over_legacy = httpx.post(dealer.mcp_url, content=legacy, headers=headers_for("legacy"))
        over_a2a = httpx.post(dealer.a2a_url, content=a2a, headers={**AAP_HEADERS, "Content-Type": "application/json"})
    assert not [r for r in caplog.records if r.name.startswith("aap")], [r.getMessage() for r in caplog.records]
    expected = outcome_over_a2a(over_a2a)
    for response in (over_modern, over_legacy):
        assert response.status_code == 200
        result = response.json()["result"]
        assert result["isError"] is (expected["type"] == "aap.error"), result
        same_outcome(result["structuredContent"], expected)
    if float(literal) > 0:  # a search for everything below an enormous price: every listing
        assert expected["type"] == "inventory.search.response"
        price_max = expected["data"]["applied_filters"]["price_max"]
        assert price_max == float(literal) and math.isfinite(price_max)
    else:
        assert expected["code"] == "SCHEMA_VALIDATION_FAILED"


def test_a_number_beyond_a_double_is_a_parse_error_on_both_bindings(dealer: Dealer) -> None:
    mcp_body, legacy_body, a2a_body = search_with("9" * 400)
    _, headers = modern_call("tools/call", {"name": "aap_inventory_search"})
    assert_refused(
        httpx.post(dealer.mcp_url, content=mcp_body, headers={**headers, "Content-Type": "application/json"}),
        400,
        -32700,
    )
    assert_refused(httpx.post(dealer.mcp_url, content=legacy_body, headers=headers_for("legacy")), 400, -32700)
    over_a2a = httpx.post(dealer.a2a_url, content=a2a_body, headers={**AAP_HEADERS, "Content-Type": "application/json"})
    assert over_a2a.json()["error"]["code"] == -32700


def test_a_huge_mileage_in_a_lead_is_refused_as_over_a2a(dealer: Dealer, caplog: pytest.LogCaptureFixture) -> None:
    """10^25 reaches the skill as an int from the MCP SDK's reader and as a double from A2A's: the
    same answer either way, the lead's bound on integers (docs/leads.md section 2)."""
    vehicle = next(v for v in dealer.listings if v.get("vin"))
    answers_by_binding = {}
    for binding in ("mcp", "a2a"):
        request = lead_request(vehicle, f"huge-mileage-{binding}")
        request["trade_in"] = {"year": 2015, "make": "Honda", "model": "Civic", "mileage": 424242}
        if binding == "mcp":
            body, headers = modern_call("tools/call", {"name": "aap_lead_submit", "arguments": request})
            url, headers = dealer.mcp_url, {**headers, "Content-Type": "application/json"}
        else:
            body, url, headers = (
                send_message(request),
                dealer.a2a_url,
                {**AAP_HEADERS, "Content-Type": "application/json"},
            )
        with caplog.at_level(logging.ERROR):
            response = httpx.post(url, content=orjson.dumps(body).replace(b"424242", b"1" + b"0" * 25), headers=headers)
        answers_by_binding[binding] = response.json()
    assert not [r for r in caplog.records if r.name.startswith("aap")]
    over_mcp = answers_by_binding["mcp"]["result"]["structuredContent"]
    over_a2a = aap_error_of(answers_by_binding["a2a"])
    assert over_mcp["type"] == over_a2a["type"] == "aap.error"
    assert over_mcp["code"] == over_a2a["code"] == "SCHEMA_VALIDATION_FAILED"
    assert over_mcp["details"]["errors"] == over_a2a["details"]["errors"]
    assert [(p["instanceLocation"], p["keyword"]) for p in over_a2a["details"]["errors"]] == [
        ("/trade_in/mileage", "maximum")
    ]


# -- RATE_LIMITED carries Retry-After ------------------------------------------------------------
@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dealer]:
    rule = RateLimit(enabled=True, per_minute=1, burst=1)
    with live_dealer(tmp_path_factory.mktemp("mcp-errors-limited"), count=5, rate_limit=rule) as live:
        yield live


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_rate_limited_results_carry_retry_after(limited: Dealer, era: str) -> None:
    params = {"name": "aap_dealer_information", "arguments": {"type": "dealer.information.request"}}
    if era == "modern":
        body, headers = modern_call("tools/call", params)
    else:
        body, headers = rpc("tools/call", params), legacy_headers()
    answers_seen = [httpx.post(limited.mcp_url, json=body, headers=headers) for _ in range(2)]
    response = answers_seen[-1]  # burst 1: the second call (at the latest) is limited
    result = response.json()["result"]
    assert response.status_code == 200 and result["isError"] is True
    error = result["structuredContent"]
    assert error["code"] == "RATE_LIMITED"
    assert int(response.headers["retry-after"]) == math.ceil(error["details"]["retry_after_ms"] / 1000)
    for answer in answers_seen:  # Retry-After exactly on the limited answers
        limited_now = answer.json()["result"]["structuredContent"].get("code") == "RATE_LIMITED"
        assert ("retry-after" in answer.headers) is limited_now


# -- the editing of the SDK's answers, unit by unit ---------------------------------------------
VERSIONS = ("2026-07-28", "2025-11-25")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"code": -32601, "message": "Method not found", "data": "secret/x"},
            {"code": -32601, "message": "Method not found"},
        ),
        ({"code": 0, "message": "KeyError: 'card number 4111'"}, {"code": -32603, "message": "Internal error"}),
        (
            {"code": -32602, "message": "Invalid request parameters", "data": ""},
            {"code": -32602, "message": "Invalid request parameters"},
        ),
        (
            {
                "code": -32602,
                "message": "Validation error: 3 validation errors for JSONRPCRequest\nid\n  Input should be",
            },
            {"code": -32602, "message": "Invalid params"},
        ),
        (
            {"code": -32600, "message": "see https://errors.pydantic.dev/2.14/v/literal_error"},
            {"code": -32600, "message": "Invalid Request"},
        ),
        (
            {"code": HEADER_MISMATCH, "message": "Mcp-Method header does not match the request body's method"},
            {"code": HEADER_MISMATCH, "message": "Mcp-Method header does not match the request body's method"},
        ),
        (
            {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": "Unsupported protocol version",
                "data": {"supported": ["2026-07-28"], "requested": "2030-01-01"},
            },
            {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": "Unsupported protocol version",
                "data": {"supported": list(VERSIONS), "requested": "2030-01-01"},
            },
        ),
    ],
)
def test_sdk_errors_are_edited(error: dict[str, Any], expected: dict[str, Any]) -> None:
    assert answers.edited_error(error, VERSIONS) == expected


def test_an_error_status_without_a_json_body_gets_one() -> None:
    for status, body in ((406, b""), (400, b"Invalid Content-Type header"), (500, b"oops")):
        edited = orjson.loads(answers.edited_body(body, status, VERSIONS))
        assert edited["jsonrpc"] == "2.0" and edited["id"] is None
        assert edited["error"]["code"] == (-32603 if status >= 500 else -32600)
    success = b'{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'
    assert answers.edited_body(success, 200, VERSIONS) is success
