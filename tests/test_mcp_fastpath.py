"""Plain ``tools/call`` requests answered without the SDK (aap/bindings/mcp/fastpath.py) get the
SDK's own answer: each request is sent with the fast path on, then with it off, and the two
answers compared (status, content type, body; a failure's ``error_id`` and time aside). Requests
the fast path must leave alone are answered as before."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from aap.bindings.mcp.http import McpHttpEndpoint
from factories import live_dealer_fixture
from mcp_helpers import ACCEPT, LEGACY, MODERN, Dealer, envelope, legacy_headers, live_dealer, modern_call, rpc

SEARCH = {
    "type": "inventory.search.request",
    "filters": {"price_max": 60000},
    "sort": {"field": "price", "order": "asc"},
    "pagination": {"limit": 5},
}


dealer = live_dealer_fixture("mcp-fast", count=30)


@pytest.fixture(scope="module")
def endpoint(dealer: Dealer) -> McpHttpEndpoint:
    (route,) = [r for r in dealer.app.state.runtime.routes() if getattr(r, "path", None) == "/mcp"]
    assert isinstance(route.endpoint, McpHttpEndpoint) and route.endpoint.fast is not None
    return route.endpoint


class FastAnswers:
    """Counts the requests the fast path answered itself."""

    def __init__(self, endpoint: McpHttpEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        fast = endpoint.fast
        assert fast is not None
        original = fast.answer

        async def counting(*args: Any) -> Any:
            answer = await original(*args)
            self.count += answer is not None
            return answer

        monkeypatch.setattr(fast, "answer", counting)


def tool_call(name: str, arguments: Any, *, version: str = MODERN, request_id: Any = 7) -> tuple[dict, dict]:
    if version == MODERN:
        body, headers = modern_call("tools/call", {"name": name, "arguments": arguments})
        body["id"] = request_id
        return body, headers
    return rpc("tools/call", {"name": name, "arguments": arguments}, request_id), legacy_headers(version)


def without_error_ids(value: Any) -> Any:
    """The answer with what differs per call (``error_id``, ``created_at``, a cursor's issue time)
    blanked, also in the text block."""
    if isinstance(value, dict):
        return {
            k: ("*" if k in ("error_id", "created_at", "next_cursor") else without_error_ids(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_error_ids(v) for v in value]
    if isinstance(value, str) and value.startswith("{"):
        try:
            return {"text": without_error_ids(orjson.loads(value))}
        except orjson.JSONDecodeError:
            return value
    if isinstance(value, str):  # a rendered answer names the next page's cursor
        return re.sub(r'pagination\.cursor "[^"]*"', 'pagination.cursor "*"', value)
    return value


def both_ways(dealer: Dealer, endpoint: McpHttpEndpoint, body: Any, headers: dict[str, str]) -> tuple:
    answers = []
    fast_calls = endpoint.fast
    for fast in (True, False):
        endpoint.fast = fast_calls if fast else None
        try:
            response = httpx.post(
                dealer.mcp_url,
                content=orjson.dumps(body),
                headers={"Content-Type": "application/json", **headers},
                timeout=30,
            )
        finally:
            endpoint.fast = fast_calls
        try:
            content: Any = without_error_ids(response.json())
        except ValueError:
            content = response.text
        answers.append((response.status_code, response.headers.get("content-type"), content))
    return answers[0], answers[1]


CALLS = [
    ("aap_inventory_search", SEARCH),
    ("aap_dealer_information", {"type": "dealer.information.request"}),
    ("aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}),  # not found
    ("aap_inventory_search", {"type": "inventory.search.request", "filters": {"price_max": "cheap"}}),  # invalid
    ("aap_inventory_search", {"type": "inventory.facets.request"}),  # another tool's type
    ("aap_inventory_facets", None),  # no arguments
]


@pytest.mark.parametrize("version", [MODERN, LEGACY])
@pytest.mark.parametrize("name, arguments", CALLS)
def test_plain_tool_calls_get_the_sdk_answer_without_the_sdk(dealer, endpoint, monkeypatch, version, name, arguments):
    answered = FastAnswers(endpoint, monkeypatch)
    body, headers = tool_call(name, arguments, version=version, request_id="abc" if arguments is None else 7)
    fast, reference = both_ways(dealer, endpoint, body, headers)
    assert answered.count == 1  # the SDK answered only the reference request
    assert fast == reference
    assert fast[0] == 200 and "result" in fast[2]


TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=1"}


@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_trace_context_in_meta_keeps_a_call_plain(dealer, endpoint, monkeypatch, version):
    """W3C trace context in ``params._meta`` (the keys MCP reserves for it; docs/deployment.md,
    "Traces") changes nothing of the answer: the call stays on the fast path, with the SDK's answer."""
    answered = FastAnswers(endpoint, monkeypatch)
    body, headers = tool_call("aap_inventory_search", SEARCH, version=version)
    meta = {**body["params"].get("_meta", {}), **TRACE}
    body = {**body, "params": {**body["params"], "_meta": meta}}
    fast, reference = both_ways(dealer, endpoint, body, headers)
    assert answered.count == 1
    assert fast == reference and "result" in fast[2]


def _variants() -> Iterator[tuple[str, dict, dict]]:
    """Requests near a plain call that the SDK must answer (each differs in one way)."""
    body, headers = tool_call("aap_inventory_search", SEARCH)
    yield "progress token", {**body, "params": {**body["params"], "_meta": envelope(progressToken="p1")}}, headers
    yield "header name differs", body, {**headers, "Mcp-Name": "aap_dealer_information"}
    yield "method header missing", body, {k: v for k, v in headers.items() if k != "Mcp-Method"}
    yield "version header missing", body, {k: v for k, v in headers.items() if k != "MCP-Protocol-Version"}
    yield (
        "older handshake revision",
        tool_call("aap_inventory_search", SEARCH, version="2025-06-18")[0],
        legacy_headers("2025-06-18"),
    )
    yield "unknown tool", {**body, "params": {**body["params"], "name": "nope"}}, {**headers, "Mcp-Name": "nope"}
    yield "arguments not an object", {**body, "params": {**body["params"], "arguments": [1]}}, headers
    yield "extra member", {**body, "extra": 1}, headers
    yield "boolean id", {**body, "id": True}, headers
    yield "accepts json only", body, {**headers, "Accept": "application/json"}
    yield "param header", body, {**headers, "Mcp-Param-Make": "Honda"}
    legacy_body, legacy = tool_call("aap_inventory_search", SEARCH, version=LEGACY)
    yield "legacy with routing headers", legacy_body, {**legacy, "Mcp-Method": "tools/call"}
    yield (
        "legacy with _meta",
        {**legacy_body, "params": {**legacy_body["params"], "_meta": {"progressToken": 1}}},
        legacy,
    )
    yield "notification", {k: v for k, v in legacy_body.items() if k != "id"}, legacy


@pytest.mark.parametrize("label, body, headers", list(_variants()), ids=[v[0] for v in _variants()])
def test_anything_else_is_the_sdks_to_answer(dealer, endpoint, monkeypatch, label, body, headers):
    answered = FastAnswers(endpoint, monkeypatch)
    fast, reference = both_ways(dealer, endpoint, copy.deepcopy(body), headers)
    assert answered.count == 0  # left to the SDK (or to the checks in front of it)
    assert fast == reference


def test_fast_answers_are_logged_and_counted_like_the_sdks(dealer, endpoint):
    body, headers = tool_call(
        "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}
    )
    before = httpx.get(dealer.base_url + "/metrics").text.count("VEHICLE_NOT_FOUND")
    httpx.post(dealer.mcp_url, json=body, headers={"Accept": ACCEPT, **headers})
    text = httpx.get(dealer.base_url + "/metrics").text
    line = next(
        row
        for row in text.splitlines()
        if row.startswith("aap_errors_total") and 'binding="mcp"' in row and "VEHICLE_NOT_FOUND" in row
    )
    assert float(line.rsplit(" ", 1)[1]) >= 1 and before <= 1


def test_the_fronts_protocol_constants_are_the_sdks():
    import mcp_types
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    from aap.bindings.mcp import envelope

    assert envelope.HEADER_MISMATCH == mcp_types.HEADER_MISMATCH
    assert envelope.UNSUPPORTED_PROTOCOL_VERSION == mcp_types.UNSUPPORTED_PROTOCOL_VERSION
    assert envelope.PROTOCOL_VERSION_META_KEY == mcp_types.PROTOCOL_VERSION_META_KEY
    assert envelope.CLIENT_CAPABILITIES_META_KEY == mcp_types.CLIENT_CAPABILITIES_META_KEY
    assert envelope.CLIENT_INFO_META_KEY == mcp_types.CLIENT_INFO_META_KEY
    assert envelope.SERVER_INFO_META_KEY == mcp_types.SERVER_INFO_META_KEY
    assert set(envelope.HANDSHAKE_VERSIONS) == set(HANDSHAKE_PROTOCOL_VERSIONS)


@pytest.mark.slow
@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_a_rate_limited_call_gets_the_same_answer_and_retry_after(tmp_path, version):
    from aap.config.model import RateLimit

    with live_dealer(tmp_path, count=5, rate_limit=RateLimit(enabled=True, per_minute=1, burst=1)) as limited:
        (route,) = [r for r in limited.app.state.runtime.routes() if getattr(r, "path", None) == "/mcp"]
        endpoint = route.endpoint
        body, headers = tool_call("aap_dealer_information", {"type": "dealer.information.request"}, version=version)
        fast_calls, answers = endpoint.fast, []
        for fast in (True, True, False):  # admitted, then refused by the fast path, then by the SDK path
            endpoint.fast = fast_calls if fast else None
            response = httpx.post(
                limited.mcp_url,
                content=orjson.dumps(body),
                headers={"Content-Type": "application/json", **headers},
                timeout=30,
            )
            answers.append((response.status_code, response.headers.get("retry-after"), response.json()))
        endpoint.fast = fast_calls
    assert answers[0][2]["result"]["isError"] is False and answers[0][1] is None
    for status, retry_after, answer in answers[1:]:
        error = answer["result"]["structuredContent"]
        assert status == 200 and error["code"] == "RATE_LIMITED"
        assert int(retry_after) == -(-error["details"]["retry_after_ms"] // 1000)  # whole seconds, rounded up

    refused_fast, refused_sdk = answers[1][2], answers[2][2]
    for answer in (refused_fast, refused_sdk):  # the wait shrinks between the two refusals
        answer["result"]["content"] = "*"  # the same object as text
        answer["result"]["structuredContent"]["details"].update(retry_after_ms="*", hint="*")
    assert without_error_ids(refused_fast) == without_error_ids(refused_sdk)


@pytest.mark.slow
def test_a2a_and_plain_tool_calls_never_load_the_sdk(tmp_path):
    """The SDK (and pydantic) load on the first request that needs them, not before."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from starlette.testclient import TestClient
        from aap.server.app import create_app
        from aap.store import open_stores
        from http_helpers import make_settings, send_message
        from mcp_helpers import modern_call
        settings = make_settings("http://127.0.0.1:8000", "sqlite:///{tmp_path}/aap.db")
        app = create_app(settings, open_stores(settings.database_url))
        loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types", "pydantic"))
        with TestClient(app, base_url="http://127.0.0.1:8000") as http:
            assert "result" in http.post("/a2a", json=send_message({{"type": "dealer.information.request"}})).json()
            body, headers = modern_call("tools/call", {{"name": "aap_dealer_information",
                                                        "arguments": {{"type": "dealer.information.request"}}}})
            assert http.post("/mcp", json=body, headers=headers).json()["result"]["isError"] is False
            assert loaded() == [], loaded()
            body, headers = modern_call("tools/list")
            assert len(http.post("/mcp", json=body, headers=headers).json()["result"]["tools"]) == 5
            assert "mcp" in loaded()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("ok"), done.stdout + done.stderr[-3000:]
