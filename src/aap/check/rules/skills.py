"""Each declared read skill over each advertised binding, every response schema-valid and equivalent."""

from __future__ import annotations

from typing import Any

from aap.check.context import CheckContext, describe, problems_text
from aap.check.registry import Fail, Skip, rule
from aap.client.errors import AapClientError
from aap.client.mcp import LEGACY, MODERN
from aap.skills.catalog import SKILLS

READ_SKILLS = ("dealer.information", "inventory.facets", "inventory.search", "inventory.vehicle")


def identify(listing: dict[str, Any]) -> dict[str, str]:
    """The inventory.vehicle identifier of a listing (vehicle_id first: it is unambiguous on aggregates)."""
    for key in ("vehicle_id", "vin", "stock"):
        if isinstance(listing.get(key), str):
            return {key: listing[key]}
    raise Skip("the sample listing has no identifier")


async def read_requests(ctx: CheckContext) -> list[dict[str, Any]]:
    """One small valid request per declared read skill."""
    found = await ctx.discovery()
    requests: list[dict[str, Any]] = []
    if found.supports("dealer.information"):
        requests.append({"type": "dealer.information.request"})
    if found.supports("inventory.facets"):
        requests.append({"type": "inventory.facets.request"})
    if found.supports("inventory.search"):
        caps = found.capabilities or {}
        limit = min(5, caps.get("max_limit", 5))
        requests.append({"type": "inventory.search.request", "pagination": {"limit": limit}})
    if found.supports("inventory.vehicle"):
        try:
            listing = await ctx.sample_listing()
        except Skip:
            listing = None
        if listing is not None:
            requests.append({"type": "inventory.vehicle.request", **identify(listing)})
    if not requests:
        raise Skip("the card declares no read skill")
    return requests


async def run_skills(ctx: CheckContext, binding: str, *, mcp_version: str | None = None) -> list[str]:
    version = {"mcp_version": mcp_version} if mcp_version else {}
    await ctx.transport(binding, **version)
    problems = []
    for payload in await read_requests(ctx):
        skill = next(s for s in SKILLS.values() if s.request_type == payload["type"])
        label = f"{skill.id}" + (f" (MCP {mcp_version})" if mcp_version else "")
        try:
            outcome = await ctx.call(binding, payload, **version)
        except AapClientError as exc:
            problems.append(f"{label}: {describe(exc)}")
            continue
        if outcome.error is not None:
            problems.append(f"{label}: {describe(outcome.error)}")
            continue
        for problem in problems_text(ctx.validate(outcome.response, skill.response_schema)):
            problems.append(f"{label}: {problem}")
        if payload["type"] == "inventory.vehicle.request":
            data = (outcome.response or {}).get("data") or {}
            for key, value in payload.items():
                if key != "type" and data.get(key) != value:
                    problems.append(f"{label}: asked for {key}={value}, got {key}={data.get(key)!r}")
    return problems


@rule(
    "skills.a2a",
    "Every declared read skill answers over A2A with a schema-valid response",
    "AAP skills (seed 004 request/response schemas)",
)
async def skills_a2a(ctx: CheckContext) -> str | None:
    problems = await run_skills(ctx, "a2a")
    if problems:
        raise Fail("skills over A2A failed", problems)
    return None


@rule(
    "skills.mcp",
    "Every declared read skill answers as an MCP tool on 2026-07-28 and 2025-11-25",
    'McpEndpoint (seed 004); docs/mcp.md, "Tools"',
)
async def skills_mcp(ctx: CheckContext) -> str | None:
    problems = []
    for version in (MODERN, LEGACY):
        try:
            problems += await run_skills(ctx, "mcp", mcp_version=version)
        except AapClientError as exc:
            problems.append(f"MCP {version}: {describe(exc)}")
    if problems:
        raise Fail("skills over MCP failed", problems)
    return None


@rule(
    "skills.poppy",
    "Every declared read skill answers over the Poppy native API with a guest DPoP token",
    "Poppy publication profile (seed 004); RFC 9449",
)
async def skills_poppy(ctx: CheckContext) -> str | None:
    problems = await run_skills(ctx, "poppy")
    if problems:
        raise Fail("skills over Poppy failed", problems)
    return None


def comparable(response: dict[str, Any]) -> Any:
    """What must be equal across bindings (cursors are opaque and may differ)."""
    data = dict(response.get("data") or {})
    if response.get("type") == "inventory.search.response":
        data.pop("next_cursor", None)
    return data


def _part_of(member: Any, whole: Any) -> bool:
    """``member`` equals ``whole``, or is a list of some of its items (a listing summary's evidence)."""
    if isinstance(member, list) and isinstance(whole, list):
        return all(item in whole for item in member)
    return bool(member == whole)


def same_data(data: Any, reference: Any) -> bool:
    """Whether a binding's data is the reference's; search listings may be summaries.

    The MCP binding may answer a search with listing summaries, each a valid
    InventoryListing carrying some of the listing's members (docs/mcp.md, "For LLM
    agents"): the same vehicles in the same order, and every member a summary carries
    equal to the reference's (evidence: some of its entries).
    """
    if data == reference:
        return True
    if not (isinstance(data, dict) and isinstance(reference, dict)):
        return False
    vehicles, expected = data.get("vehicles"), reference.get("vehicles")
    if not (isinstance(vehicles, list) and isinstance(expected, list) and len(vehicles) == len(expected)):
        return False
    if {k: v for k, v in data.items() if k != "vehicles"} != {k: v for k, v in reference.items() if k != "vehicles"}:
        return False
    return all(
        isinstance(v, dict) and isinstance(r, dict) and all(k in r and _part_of(x, r[k]) for k, x in v.items())
        for v, r in zip(vehicles, expected)
    )


@rule(
    "bindings.equivalent",
    "The same request gives the same data on every advertised binding",
    'InventorySearchResponse, LeadSubmitResponse (seed 004: shared by MCP, A2A and PAP); docs/mcp.md, "For LLM agents"',
)
async def bindings_equivalent(ctx: CheckContext) -> str | None:
    bindings = await ctx.bindings()
    if len(bindings) < 2:
        raise Skip("only one binding can be exercised")
    found = await ctx.discovery()
    requests: list[dict[str, Any]] = []
    if found.supports("dealer.information"):
        requests.append({"type": "dealer.information.request"})
    if found.supports("inventory.search"):
        caps = found.capabilities or {}
        sort = caps.get("default_sort") or {"field": "updated_at", "order": "desc"}
        requests.append(
            {
                "type": "inventory.search.request",
                "sort": sort,
                "pagination": {"limit": min(5, caps.get("max_limit", 5))},
            }
        )
    if found.supports("inventory.facets"):
        requests.append({"type": "inventory.facets.request"})
    problems = []
    for payload in requests:
        answers = {}
        for binding in bindings:
            outcome = await ctx.call(binding, payload)
            if outcome.error is None:
                answers[binding] = comparable(outcome.response or {})
        reference = answers.get("a2a")
        for binding, data in answers.items():
            if binding != "a2a" and reference is not None and not same_data(data, reference):
                problems.append(f"{payload['type']}: {binding} returns different data than a2a")
    if problems:
        raise Fail("bindings disagree", problems)
    return "compared " + ", ".join(bindings)
