"""lead.submit over A2A, MCP (both revisions) and Poppy on our own dealer, real HTTPS on loopback."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from aap.client import AapClient
from aap.client.a2a import A2ATransport, envelope
from aap.client.mcp import McpTransport, jsonrpc_message
from aap.client.transport import CallOutcome, json_body
from aap.skills.catalog import SKILLS
from aap.spec import validate
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
        request = envelope(LEAD, payload, tenant=transport.tenant)
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
