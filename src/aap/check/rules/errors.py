"""Error shapes: aap.error in a Struct detail on A2A, isError on MCP, the HTTP body on Poppy."""

from __future__ import annotations

from typing import Any

from aap.check.context import CheckContext, describe, problems_text
from aap.check.registry import Fail, Skip, rule
from aap.client.a2a import envelope, find_aap_error
from aap.client.errors import AapRemoteError
from aap.client.transport import json_body
from aap.protocols import STRUCT_TYPE
from aap.skills.catalog import SKILLS

FORBIDDEN_TYPE = "https://autoagentprotocol.org/extensions/aap/error"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
UNKNOWN_VIN = "AAPCHECK000000001"  # valid VIN syntax, never a real vehicle


async def error_probes(ctx: CheckContext) -> list[tuple[str, dict[str, Any], set[str]]]:
    """Requests that must fail, with the acceptable AAP codes."""
    found = await ctx.discovery()
    probes: list[tuple[str, dict[str, Any], set[str]]] = []
    if found.supports("inventory.vehicle"):
        probes.append(("unknown VIN", {"type": "inventory.vehicle.request", "vin": UNKNOWN_VIN}, {"VEHICLE_NOT_FOUND"}))
    if found.supports("inventory.search"):
        probes.append(
            (
                "schema violation",
                {"type": "inventory.search.request", "filters": {"make": []}, "aap_check_unknown": True},
                {"SCHEMA_VALIDATION_FAILED"},
            )
        )
    if not probes:
        raise Skip("the card declares neither inventory.vehicle nor inventory.search")
    return probes


def aap_error_problems(ctx: CheckContext, label: str, error: dict[str, Any], code: Any, codes: set[str]) -> list[str]:
    """What is wrong with the aap.error a probe got, on any binding: its schema, and its code."""
    found = [f"{label}: {p}" for p in problems_text(ctx.validate(error, "error"))]
    if code not in codes:
        found.append(f"{label}: code {code}, expected {' or '.join(sorted(codes))}")
    return found


def struct_problems(body: Any) -> list[str]:
    """Shape problems of a JSON-RPC error answer carrying an AAP skill error."""
    problems = []
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ["no JSON-RPC error object"]
    if not isinstance(error.get("code"), int):
        problems.append("error.code is not a number (AAP codes go in the aap.error, not in error.code)")
    data = error.get("data")
    if not isinstance(data, list):
        return problems + ["error.data is not an array of @type-tagged details"]
    structs = []
    for i, detail in enumerate(data):
        if not isinstance(detail, dict) or not isinstance(detail.get("@type"), str):
            problems.append(f"error.data[{i}] has no @type")
            continue
        if detail["@type"] == FORBIDDEN_TYPE:
            problems.append(f"error.data[{i}] uses the forbidden @type {FORBIDDEN_TYPE} (pre-3.1 drafts)")
        if detail["@type"] == STRUCT_TYPE:
            extra = set(detail) - {"@type", "value"}
            if extra:
                problems.append(f"error.data[{i}] Struct detail has extra members {sorted(extra)}")
            if isinstance(detail.get("value"), dict) and detail["value"].get("type") == "aap.error":
                structs.append(detail["value"])
    if not structs:
        problems.append("no google.protobuf.Struct detail with value.type == aap.error")
    elif not (data and isinstance(data[0], dict) and data[0].get("@type") == ERROR_INFO_TYPE):
        problems.append("AAP skill errors should lead with a google.rpc.ErrorInfo detail")
    return problems


@rule(
    "errors.a2a",
    "A2A skill errors carry the aap.error in a Struct detail, never the old @type",
    "JsonRpcError, Error (seed 004); A2A §3.3.2",
)
async def errors_a2a(ctx: CheckContext) -> str | None:
    transport = await ctx.transport("a2a")
    problems = []
    for label, payload, codes in await error_probes(ctx):
        skill = next(s for s in SKILLS.values() if s.request_type == payload["type"])
        response = await ctx.post_a2a(envelope(skill, payload, a2a_tenant=transport.a2a_tenant))
        body = json_body(response)
        shape = struct_problems(body)
        problems += [f"{label}: {p}" for p in shape]
        problems += [f"{label}: {p}" for p in problems_text(ctx.validate(body, "json-rpc-response"))]
        outcome = await ctx.call("a2a", payload)
        if isinstance(outcome.error, AapRemoteError):
            problems += aap_error_problems(ctx, label, outcome.error.payload, outcome.error.code, codes)
        elif not shape:
            problems.append(f"{label}: {describe(outcome.error) if outcome.error else 'no error returned'}")
    if problems:
        raise Fail("A2A error answers are malformed", problems)
    return None


@rule(
    "errors.all_problems",
    "A schema failure lists every problem at once in details.errors[]",
    "Error.details.errors (seed 004)",
)
async def errors_all_problems(ctx: CheckContext) -> str | None:
    await ctx.implements("inventory.search")
    payload = {
        "type": "inventory.search.request",
        "filters": {"make": [], "year_min": 1800},
        "pagination": {"limit": 0},
    }
    error = await ctx.expect_error("a2a", payload, {"SCHEMA_VALIDATION_FAILED"}, "three schema problems")
    locations = {e.get("instanceLocation") for e in error.errors}
    expected = {"/filters/make", "/filters/year_min", "/pagination/limit"}
    missing = sorted(expected - locations)
    if missing:
        raise Fail(
            "details.errors[] does not list every problem",
            [f"missing instanceLocation {m}" for m in missing] + [f"got {sorted(map(str, locations))}"],
        )
    return None


@rule(
    "errors.unsupported_skill",
    "An unknown AAP request type gets UNSUPPORTED_SKILL (or a media-type error)",
    "Error.code (seed 004); A2A §5.4",
)
async def errors_unsupported_skill(ctx: CheckContext) -> str | None:
    transport = await ctx.transport("a2a")
    skill = SKILLS["dealer.information"]
    payload = {"type": "inventory.teleport.request"}
    body_request = envelope(skill, payload, a2a_tenant=transport.a2a_tenant)
    response = await ctx.post_a2a(body_request)
    body = json_body(response)
    error = body.get("error") if isinstance(body, dict) else None
    aap_error = find_aap_error(error)
    if aap_error is not None:
        if aap_error.get("code") not in ("UNSUPPORTED_SKILL", "SCHEMA_VALIDATION_FAILED"):
            raise Fail(f"unknown request type answered with {aap_error.get('code')}, expected UNSUPPORTED_SKILL")
        return None
    if isinstance(error, dict) and error.get("code") in (-32005, -32602):
        return f"answered with JSON-RPC {error.get('code')} (no aap.error)"
    raise Fail("an unknown request type was not rejected with UNSUPPORTED_SKILL")


@rule(
    "errors.mcp",
    "MCP skill failures are isError results whose structuredContent is a valid aap.error",
    "Error (seed 004); MCP tools (isError results)",
)
async def errors_mcp(ctx: CheckContext) -> str | None:
    transport = await ctx.transport("mcp")
    problems = []
    for label, payload, codes in await error_probes(ctx):
        outcome = await ctx.call("mcp", payload)
        result = (outcome.body or {}).get("result") if isinstance(outcome.body, dict) else None
        if not isinstance(result, dict) or result.get("isError") is not True:
            problems.append(
                f"{label}: expected a tools/call result with isError: true, got "
                f"{describe(outcome.error) if outcome.error else 'success'}"
            )
            continue
        structured = result.get("structuredContent")
        if not isinstance(structured, dict):
            problems.append(f"{label}: no structuredContent")
            continue
        problems += aap_error_problems(ctx, label, structured, structured.get("code"), codes)
    unknown_body, headers = transport.build("tools/call", {"name": "aap_teleport", "arguments": {}})
    response = await transport.post(unknown_body, headers)
    message = (
        json_body(response) if not response.headers.get("content-type", "").startswith("text/event-stream") else None
    )
    if not (isinstance(message, dict) and isinstance(message.get("error"), dict)):
        problems.append("an unknown tool name should be a JSON-RPC error (-32602), not a tool result")
    if problems:
        raise Fail("MCP error answers are malformed", problems)
    return None


@rule(
    "errors.poppy",
    "Poppy API failures are aap.error bodies with a fitting HTTP status",
    "Error, Poppy publication profile (seed 004)",
)
async def errors_poppy(ctx: CheckContext) -> str | None:
    await ctx.transport("poppy")
    problems = []
    for label, payload, codes in await error_probes(ctx):
        outcome = await ctx.call("poppy", payload)
        if not isinstance(outcome.error, AapRemoteError):
            problems.append(
                f"{label}: expected an aap.error body, got {describe(outcome.error) if outcome.error else 'success'}"
            )
            continue
        problems += aap_error_problems(ctx, label, outcome.error.payload, outcome.error.code, codes)
        if not (outcome.http_status and 400 <= outcome.http_status < 600):
            problems.append(f"{label}: HTTP status {outcome.http_status} for a failure")
    if problems:
        raise Fail("Poppy error answers are malformed", problems)
    return None
