"""lead.submit over A2A, MCP (both revisions) and Poppy on our own dealer, real HTTPS on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from aap import EXTENSION_URI
from aap.bindings.mcp.results import render
from aap.client import AapClient
from aap.client.a2a import A2ATransport, envelope
from aap.client.mcp import McpTransport, jsonrpc_message
from aap.client.transport import CallOutcome, json_body
from aap.skills.catalog import SKILLS
from aap.spec import validate
from aap.util.rfc3339 import to_utc_z
from deploy_env import own_dealer  # noqa: F401  (fixture)

BINDINGS = [
    pytest.param({"binding": "a2a"}, id="a2a"),
    pytest.param({"binding": "mcp", "mcp_protocol_version": "2026-07-28"}, id="mcp-2026-07-28"),
    pytest.param({"binding": "mcp", "mcp_protocol_version": "2025-11-25"}, id="mcp-2025-11-25"),
    pytest.param({"binding": "poppy"}, id="poppy"),
]
LEAD = SKILLS["lead.submit"]


def connect(own_dealer, options):
    kwargs = dict(options)
    if kwargs["binding"] == "poppy":
        kwargs["poppy_identity"] = own_dealer.identity
    return AapClient.discover(own_dealer.url, verify=own_dealer.ca.context(), **kwargs)


def lead(key: str, **fields) -> dict:
    granted = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0).isoformat()
    return {
        "type": "lead.submit.request",
        "customer": {"first_name": "Binding", "last_name": "Test", "email": "binding-test@example.com"},
        "consent": {
            "granted_at": granted,
            "allowed_channels": ["email"],
            "consent_text": "I agree to be contacted about this test.",
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "aap-binding-tests"},
        "idempotency_key": key,
        **fields,
    }


async def send_literally(dealer: AapClient, payload: dict) -> CallOutcome:
    """One call whose JSON is written by the standard library, so integers of any size go out as
    the digits they are (the client's own encoder, orjson, stops at 64 bits)."""
    await dealer.open()
    transport = dealer.transport
    if isinstance(transport, A2ATransport):
        request = envelope(LEAD, payload, a2a_tenant=transport.a2a_tenant)
        outcome = CallOutcome("a2a", LEAD, request=request)
        response = await transport.post(json.dumps(request).encode())
        body = json_body(response)
        outcome.record(response, body)
        transport.interpret(outcome, response, body)
        return outcome
    if isinstance(transport, McpTransport):
        if not transport.modern:
            await transport.initialize()
        params = {"name": LEAD.tool_name, "arguments": payload}
        body, headers = transport.build("tools/call", params)
        outcome = CallOutcome("mcp", LEAD, request=params)
        response = await transport.post(json.dumps(body).encode(), headers)
        message = jsonrpc_message(response, body["id"])
        outcome.record(response, message)
        transport.interpret(outcome, response, message)
        return outcome
    return await dealer.call_outcome(payload)  # Poppy posts with httpx's json=, the standard library's


@pytest.mark.parametrize("options", BINDINGS)
@pytest.mark.parametrize(
    "appointment",
    [
        pytest.param({"duration_minutes": 63369747323023441920}, id="duration-beyond-64-bits"),
        pytest.param({"duration_minutes": 2**53}, id="duration-beyond-exact"),
    ],
)
async def test_an_integer_no_reader_keeps_exact_is_a_typed_refusal_on_every_binding(own_dealer, options, appointment):
    """Found by the random HTTP tests: HTTP 500 INTERNAL_ERROR on /poppy/v1/lead.submit."""
    before = own_dealer.stores.leads.count_leads()
    async with connect(own_dealer, options) as dealer:
        body = lead(f"bindings-{uuid.uuid4()}", appointment={"appointment_type": "service", **appointment})
        outcome = await send_literally(dealer, body)
    error = outcome.error
    assert error is not None and getattr(error, "code", None) == "SCHEMA_VALIDATION_FAILED", outcome.body
    assert validate(error.payload, "error") == []
    assert [(p["instanceLocation"], p["keyword"]) for p in error.errors] == [
        ("/appointment/duration_minutes", "maximum")
    ]
    assert "9007199254740991" in error.errors[0]["error"]
    if options["binding"] == "poppy":
        assert outcome.http_status == 400
    assert own_dealer.stores.leads.count_leads() == before


# -- the documented exchanges (docs/leads.md, "A complete lead.submit on each binding") ----------
#
# The lead below is sent over each binding to the dealer of this module; what the dealer answers,
# with its ids replaced by stable stand-ins and its address by dealer.example, must be what the
# documentation shows, and every documented message must validate against its schema. After a
# change the documentation is rewritten from a real run with:
#
#     AAP_WRITE_DOCS=1 pytest tests/test_lead_bindings.py -k documented

DOCS = Path(__file__).resolve().parents[1] / "docs" / "leads.md"
WRITE_DOCS = os.environ.get("AAP_WRITE_DOCS") == "1"
PUBLIC = "https://dealer.example"
EXAMPLE_KEYS = {
    "a2a": "8a1f2c4e-5b6d-4e7f-9a0b-1c2d3e4f5a61",
    "mcp": "8a1f2c4e-5b6d-4e7f-9a0b-1c2d3e4f5a62",
    "poppy": "8a1f2c4e-5b6d-4e7f-9a0b-1c2d3e4f5a63",
}
#: The times the documentation shows; the real run sends the same lead with current ones.
EXAMPLE_TIMES = {
    ("consent", "granted_at"): ("2026-05-02T17:55:00Z", timedelta(minutes=-5)),
    ("consent", "expires_at"): ("2026-06-01T17:55:00Z", timedelta(days=30)),
    ("submitted_at",): ("2026-05-02T17:56:00Z", timedelta(minutes=-4)),
}
BLOCK = re.compile(r"<!-- lead\.submit example: (\w+) (request|answer) -->\n```http\n(.*?)\n```", re.S)
STAND_IN = re.compile(r"\b(lead|appt)_[0-9a-f]{32}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def example_lead(binding: str) -> dict:
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "email": "ada@example.com",
            "phone": "+14155550123",
            "preferred_contact": "email",
            "address": {"city": "San Francisco", "state": "CA", "zip": "94103"},
        },
        "consent": {
            "granted_at": EXAMPLE_TIMES[("consent", "granted_at")][0],
            "expires_at": EXAMPLE_TIMES[("consent", "expires_at")][0],
            "allowed_channels": ["email", "phone"],
            "consent_text": "I agree that Demo Motors may contact me by email or phone about this inquiry.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": {"year": 2025, "make": "Toyota", "model": "RAV4", "trim": "XLE", "condition": "new"},
        "trade_in": {"year": 2016, "make": "Honda", "model": "Civic", "mileage": 84000, "condition": "good"},
        "appointment": {
            "appointment_type": "test_drive",
            "duration_minutes": 45,
            "notes": "I'd like to bring my partner.",
        },
        "message": "Is the RAV4 XLE available in blue?",
        "source_agent": {"name": "example-buyer", "url": "https://buyer.example"},
        "submitted_at": EXAMPLE_TIMES[("submitted_at",)][0],
        "idempotency_key": EXAMPLE_KEYS[binding],
    }


def with_current_times(lead: dict) -> dict:
    out = json.loads(json.dumps(lead))
    now = datetime.now(UTC).replace(microsecond=0)
    for path, (_, offset) in EXAMPLE_TIMES.items():
        target = out
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = to_utc_z(now + offset)
    return out


def a2a_envelope(lead: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": "req-1",
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "0b9d5c1e-7f3a-4d2b-8e6c-5a4f3e2d1c0b",
                "role": "ROLE_USER",
                "parts": [{"data": lead, "mediaType": LEAD.request_media_type}],
            },
            "configuration": {"acceptedOutputModes": [LEAD.response_media_type]},
        },
    }


def mcp_call(lead: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": LEAD.tool_name,
            "arguments": lead,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "example-buyer", "version": "1.0"},
            },
        },
    }


A2A_HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0", "A2A-Extensions": EXTENSION_URI}
MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": LEAD.tool_name,
}
POPPY_HEADERS = {
    "Content-Type": "application/json",
    "Authorization": "DPoP <access token from POST /oauth/token>",
    "DPoP": "<DPoP proof JWT for this request, with ath>",
}
#: The answer headers each binding documents.
ANSWER_HEADERS = {
    "a2a": ("Content-Type", "A2A-Extensions"),
    "mcp": ("Content-Type",),
    "poppy": ("Content-Type", "Cache-Control"),
}


def pretty(value: object, indent: int = 0, used: int = 0, width: int = 96) -> str:
    """JSON with two-space indents, an object or array kept on one line where it fits in
    ``width`` (``used``: columns already taken on the line by its key)."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or indent + used + len(flat) <= width:
        return flat
    inner = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            label = f"{json.dumps(key, ensure_ascii=False)}: "
            items.append(inner + label + pretty(item, indent + 2, len(label), width))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(inner + pretty(v, indent + 2, 0, width) for v in value) + "\n" + " " * indent + "]"


def http_text(first_line: str, headers: dict[str, str], body: object) -> str:
    lines = [first_line, *(f"{name}: {value}" for name, value in headers.items())]
    return "\n".join(lines) + "\n\n" + pretty(body)


def parse_http(text: str) -> tuple[str, dict[str, str], object]:
    head, _, body = text.partition("\n\n")
    first, *header_lines = head.split("\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return first, headers, json.loads(body)


def stand_ins(text: str, binding: str) -> str:
    """``text`` with each generated id (lead, appointment, message and context UUIDs) replaced by a
    stable stand-in of the same shape, in order of first appearance."""
    seen: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        value = match.group(0)
        if value not in seen:
            digest = hashlib.sha256(f"{binding}:{len(seen)}".encode()).hexdigest()
            seen[value] = f"{match.group(1)}_{digest[:32]}" if match.group(1) else str(uuid.UUID(digest[:32]))
        return seen[value]

    return STAND_IN.sub(replace, text)


async def documented_exchange(own_dealer, binding: str) -> tuple[str, str]:
    """(request, answer) as the documentation shows them, from a real call over ``binding``."""
    lead = example_lead(binding)
    sent = with_current_times(lead)
    options = {"binding": binding} if binding != "mcp" else {"binding": "mcp", "mcp_protocol_version": "2026-07-28"}
    async with connect(own_dealer, options) as dealer:
        await dealer.open()
        found = dealer.discovery
        transport = dealer.transport
        if binding == "a2a":
            url, body, headers = found.a2a_url, a2a_envelope(lead), A2A_HEADERS
            response = await transport.http.post(url, content=json.dumps(a2a_envelope(sent)), headers=headers)
        elif binding == "mcp":
            url, body, headers = found.mcp_url, mcp_call(lead), MCP_HEADERS
            response = await transport.http.post(url, content=json.dumps(mcp_call(sent)), headers=headers)
        else:
            await transport.open()
            url, body, headers = transport.operations["lead.submit"], lead, POPPY_HEADERS
            response = await transport.authorized_post(url, sent)
            assert response.request.headers["authorization"].startswith("DPoP ")
            assert response.request.headers["dpop"].count(".") == 2
    assert response.status_code == 200, response.text
    path = urlsplit(url).path
    request = http_text(f"POST {path} HTTP/1.1", {"Host": "dealer.example", **headers}, body)
    answer_headers = {name: response.headers[name] for name in ANSWER_HEADERS[binding]}
    answer = http_text("HTTP/1.1 200 OK", answer_headers, response.json())
    return request, stand_ins(answer.replace(own_dealer.url, PUBLIC), binding)


def documented_blocks() -> dict[tuple[str, str], str]:
    return {(m.group(1), m.group(2)): m.group(3) for m in BLOCK.finditer(DOCS.read_text(encoding="utf-8"))}


def _server_version(answer: object) -> object:
    meta = answer.get("result", {}).get("_meta", {}) if isinstance(answer, dict) else {}
    return meta.get("io.modelcontextprotocol/serverInfo", {}).get("version")


async def test_the_documented_lead_submit_exchanges_are_what_the_dealer_does(own_dealer):
    real = {binding: await documented_exchange(own_dealer, binding) for binding in ("a2a", "mcp", "poppy")}
    if WRITE_DOCS:
        text = DOCS.read_text(encoding="utf-8")
        for binding, (request, answer) in real.items():
            for part, block in (("request", request), ("answer", answer)):
                marker = f"<!-- lead.submit example: {binding} {part} -->\n```http\n"
                start = text.index(marker) + len(marker)
                text = text[:start] + block + text[text.index("\n```", start - 1) :]
        DOCS.write_text(text, encoding="utf-8")
    documented = documented_blocks()
    regenerate = "AAP_WRITE_DOCS=1 pytest tests/test_lead_bindings.py -k documented rewrites them"
    for binding, (request, answer) in real.items():
        assert documented.get((binding, "request")) == request, f"docs/leads.md: the {binding} request; {regenerate}"
        doc_first, doc_headers, doc_body = parse_http(documented[(binding, "answer")])
        real_first, real_headers, real_body = parse_http(answer)
        if binding == "mcp":  # the server's version goes with every release: not a change of the example
            doc_body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["version"] = _server_version(real_body)
        assert (doc_first, doc_headers, doc_body) == (real_first, real_headers, real_body), (
            f"docs/leads.md: the {binding} answer; {regenerate}"
        )


def test_the_documented_lead_submit_messages_validate_against_their_schemas():
    documented = documented_blocks()
    assert set(documented) == {(b, p) for b in ("a2a", "mcp", "poppy") for p in ("request", "answer")}
    leads, answers = [], []
    for binding in ("a2a", "mcp", "poppy"):
        request_line, headers, request = parse_http(documented[(binding, "request")])
        status_line, _, answer = parse_http(documented[(binding, "answer")])
        assert request_line.startswith("POST /") and status_line == "HTTP/1.1 200 OK"
        assert headers["Content-Type"] == "application/json"
        if binding == "a2a":
            assert validate(request, "json-rpc-request") == [] and validate(answer, "json-rpc-response") == []
            leads.append(request["params"]["message"]["parts"][0]["data"])
            answers.append(answer["result"]["message"]["parts"][0]["data"])
        elif binding == "mcp":
            assert request["method"] == "tools/call" and request["params"]["name"] == LEAD.tool_name
            leads.append(request["params"]["arguments"])
            answers.append(answer["result"]["structuredContent"])
            assert answer["result"]["content"][0]["text"] == render(answers[-1])  # the compact rendering
            assert answer["result"]["isError"] is False
        else:
            leads.append(request)
            answers.append(answer)
    for lead, answer in zip(leads, answers, strict=True):
        assert validate(lead, "lead-submit-request") == []
        assert validate(answer, "lead-submit-response") == []
        assert answer["data"]["status"] == "received" and "replayed" not in answer["data"]
    # one lead, three bindings: only the idempotency key differs
    assert len({json.dumps({**lead, "idempotency_key": ""}, sort_keys=True) for lead in leads}) == 1
