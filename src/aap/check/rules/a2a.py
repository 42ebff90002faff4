"""A2A JSON-RPC binding: header ingress, the SendMessage envelope, JSON-RPC protocol errors."""

from __future__ import annotations

import uuid
from typing import Any

from aap import EXTENSION_URI
from aap.check.context import CheckContext, problems_text
from aap.check.registry import Fail, rule
from aap.client.a2a import envelope
from aap.client.transport import json_body
from aap.skills.catalog import SKILLS, SkillInfo

VERSION_NOT_SUPPORTED = -32009
EXTENSION_REQUIRED = -32008


async def probe(ctx: CheckContext) -> tuple[Any, SkillInfo, dict[str, Any]]:
    """The A2A transport plus the cheapest read request the dealer declares."""
    transport = await ctx.transport("a2a")
    found = await ctx.discovery()
    for skill_id, payload in (
        ("dealer.information", {"type": "dealer.information.request"}),
        ("inventory.facets", {"type": "inventory.facets.request"}),
        ("inventory.search", {"type": "inventory.search.request", "pagination": {"limit": 1}}),
    ):
        if found.supports(skill_id):
            return transport, SKILLS[skill_id], payload
    raise Fail("the card declares none of the read skills")


async def exchange(
    ctx: CheckContext,
    headers: dict[str, Any] | None = None,
    body: Any = None,
    *,
    request_id: Any = None,
    context_id: str | None = None,
) -> tuple[int, Any, dict[str, Any]]:
    """POST one JSON-RPC body to /a2a with header overrides (None removes a header)."""
    transport, skill, payload = await probe(ctx)
    if body is None:
        body = envelope(skill, payload, a2a_tenant=transport.a2a_tenant, request_id=request_id, context_id=context_id)
    try:
        response = await ctx.post_a2a(body, headers)
    except Exception as exc:  # noqa: BLE001 - any transport failure is a finding
        raise Fail(f"POST {transport.url} failed: {type(exc).__name__}") from exc
    return response.status_code, json_body(response), body


def rpc_code(body: Any) -> int | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        return code if isinstance(code, int) else None
    return None


def is_success(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("result"), dict) and "error" not in body


def outcome_text(status: int, body: Any) -> str:
    code = rpc_code(body)
    if code is not None:
        return f"JSON-RPC error {code}"
    return "a result" if is_success(body) else f"HTTP {status} without a JSON-RPC answer"


@rule(
    "a2a.version_header",
    "A2A-Version: omitted → 1.0; explicit empty or unsupported → -32009",
    "SendMessage A2A-Version parameter (seed 004); A2A §3.2.6",
)
async def version_header(ctx: CheckContext) -> str | None:
    cases = [
        ("omitted", None, True),
        ("1.0", "1.0", True),
        ("explicitly empty", "", False),
        ("0.3", "0.3", False),
        ("2.0", "2.0", False),
    ]
    problems = []
    for label, value, accepted in cases:
        status, body, _ = await exchange(ctx, {"A2A-Version": value})
        if accepted and not is_success(body):
            problems.append(f"A2A-Version {label}: expected a result, got {outcome_text(status, body)}")
        if not accepted and rpc_code(body) != VERSION_NOT_SUPPORTED:
            problems.append(f"A2A-Version {label}: expected -32009, got {outcome_text(status, body)}")
    if problems:
        raise Fail("A2A-Version ingress is wrong", problems)
    return None


@rule(
    "a2a.extensions_header",
    "A2A-Extensions: omitted → AAP activated; a supplied list must contain the v3.1 URI, else -32008",
    "SendMessage A2A-Extensions parameter (seed 004); A2A §3.3.4",
)
async def extensions_header(ctx: CheckContext) -> str | None:
    other = "https://example.com/extensions/other/v1"
    cases = [
        ("omitted", None, True),
        ("exact URI", EXTENSION_URI, True),
        ("list with whitespace", f"{other} ,  {EXTENSION_URI}", True),
        ("explicitly empty", "", False),
        ("another extension only", other, False),
        ("an older AAP version", "https://autoagentprotocol.org/extensions/aap/v3.0", False),
    ]
    problems = []
    notes = []
    for label, value, accepted in cases:
        status, body, _ = await exchange(ctx, {"A2A-Extensions": value})
        if accepted and not is_success(body):
            problems.append(f"A2A-Extensions {label}: expected a result, got {outcome_text(status, body)}")
        if not accepted:
            if rpc_code(body) != EXTENSION_REQUIRED:
                problems.append(f"A2A-Extensions {label}: expected -32008, got {outcome_text(status, body)}")
            elif label == "another extension only":
                message = str(body["error"].get("message", ""))
                if EXTENSION_URI not in message or "A2A-Extensions" not in message:
                    notes.append("the -32008 message should name the extension URI and the A2A-Extensions header")
    if problems:
        raise Fail("A2A-Extensions ingress is wrong", problems)
    return "; ".join(notes) or None


@rule(
    "a2a.envelope",
    "SendMessage answers result.message: ROLE_AGENT, new messageId, contextId kept or minted",
    "JsonRpcResponse, A2aMessage (seed 004); A2A §5.5",
)
async def a2a_envelope(ctx: CheckContext) -> str | None:
    problems = []
    transport, skill, _ = await probe(ctx)
    for request_id, context_id in (
        (7, None),
        ("aap-check-" + uuid.uuid4().hex[:8], "ctx-aap-check-" + uuid.uuid4().hex),
    ):
        status, body, request = await exchange(ctx, request_id=request_id, context_id=context_id)
        label = f"id {request_id!r}"
        if status != 200:
            problems.append(f"{label}: HTTP {status}")
        if not isinstance(body, dict):
            problems.append(f"{label}: the answer is not a JSON object")
            continue
        schema_problems = ctx.validate(body, "json-rpc-response")
        problems += [f"{label}: {p}" for p in problems_text(schema_problems)]
        if body.get("id") != request_id:
            problems.append(f"{label}: id {body.get('id')!r} does not echo the request id")
        if not is_success(body):
            problems.append(f"{label}: expected a result, got {outcome_text(status, body)}")
            continue
        message = body["result"].get("message")
        if not isinstance(message, dict):
            problems.append(f"{label}: result.message is missing (a Task or bare message is not allowed)")
            continue
        if message.get("role") != "ROLE_AGENT":
            problems.append(f"{label}: role is {message.get('role')!r}, not ROLE_AGENT")
        if not message.get("messageId") or message.get("messageId") == request["params"]["message"]["messageId"]:
            problems.append(f"{label}: the response needs its own new messageId")
        if not message.get("contextId"):
            problems.append(f"{label}: contextId is missing or empty")
        elif context_id and message.get("contextId") != context_id:
            problems.append(f"{label}: the client's contextId was not preserved")
        parts = message.get("parts") or []
        if not parts or parts[0].get("mediaType") != skill.response_media_type:
            problems.append(f"{label}: the DataPart's mediaType should be {skill.response_media_type}")
        if "task" in body["result"]:
            problems.append(f"{label}: result carries a task; AAP answers with result.message only")
    if problems:
        raise Fail("the SendMessage envelope is wrong", problems)
    return None


@rule(
    "a2a.protocol_errors",
    "JSON-RPC protocol errors: -32700 (id null), -32601, -32602/-32600, -32004",
    "JsonRpcResponse (seed 004); A2A §5.4, §9.5",
)
async def protocol_errors(ctx: CheckContext) -> str | None:
    transport, skill, payload = await probe(ctx)
    problems = []

    status, body, _ = await exchange(ctx, body=b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", ')
    if rpc_code(body) != -32700:
        problems.append(f"malformed JSON: expected -32700, got {outcome_text(status, body)}")
    elif body.get("id") is not None:
        problems.append("malformed JSON: the error id must be null")

    cases: list[tuple[str, dict[str, Any], set[int]]] = [
        ("unknown method", {"jsonrpc": "2.0", "id": 2, "method": "message/teleport", "params": {}}, {-32601}),
        (
            "SendMessage without params.message",
            {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {}},
            {-32602, -32600},
        ),
        (
            "SendStreamingMessage (streaming not declared)",
            {
                **envelope(skill, payload, a2a_tenant=transport.a2a_tenant, request_id=4),
                "method": "SendStreamingMessage",
            },
            {-32004},
        ),
        ("not JSON-RPC 2.0", {"jsonrpc": "1.0", "id": 5, "method": "SendMessage", "params": {}}, {-32600}),
    ]
    for label, request, codes in cases:
        status, body, _ = await exchange(ctx, body=request)
        if rpc_code(body) not in codes:
            problems.append(
                f"{label}: expected {' or '.join(map(str, sorted(codes)))}, got {outcome_text(status, body)}"
            )
            continue
        schema_problems = ctx.validate(body, "json-rpc-response")
        problems += [f"{label}: {p}" for p in problems_text(schema_problems)]
    if problems:
        raise Fail("JSON-RPC protocol errors are wrong", problems)
    return None
