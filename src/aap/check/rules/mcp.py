"""MCP binding: both revisions on one URL, the aap_<skill> tools, capabilities in the search tool metadata."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable

from aap.check.context import CheckContext, describe
from aap.check.registry import Fail, Skip, rule
from aap.check.rules.errors import error_probes
from aap.client.errors import AapClientError
from aap.client.mcp import LEGACY, MODERN
from aap.skills.catalog import SKILLS

#: How clients read an outputSchema: the TypeScript SDK 1.x runs Ajv in its default draft-07
#: mode and ignores ``$schema``; the Python SDK reads 2020-12.
SCHEMA_READERS = (("draft-07", Draft7Validator), ("2020-12", Draft202012Validator))


async def tools(ctx: CheckContext, version: str) -> list[dict[str, Any]]:
    async def compute() -> list[dict[str, Any]]:
        transport = await ctx.transport("mcp", mcp_version=version)
        try:
            return await transport.list_tools()
        except AapClientError as exc:
            raise Fail(f"tools/list on MCP {version} failed: {describe(exc)}") from exc

    return await ctx.memo(f"mcp-tools:{version}", compute)


def find_capabilities(meta: Any, depth: int = 0) -> dict[str, Any] | None:
    """An InventoryCapabilities-shaped object anywhere in a tool's ``_meta`` (the key is not fixed)."""
    if not isinstance(meta, dict) or depth > 4:
        return None
    if {"scope", "filters", "sort_fields", "max_limit"} <= set(meta):
        return meta
    for value in meta.values():
        found = find_capabilities(value, depth + 1)
        if found is not None:
            return found
    return None


@rule(
    "mcp.endpoint",
    "The MCP endpoint serves 2026-07-28 (server/discover) and 2025-11-25 (initialize)",
    "McpEndpoint.protocol_versions (seed 004); docs/mcp.md",
)
async def mcp_endpoint(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    if found.mcp is None:
        raise Skip("the card advertises no MCP endpoint")
    problems = []
    versions = found.mcp.get("protocol_versions") or []
    for required in (MODERN, LEGACY):
        if required not in versions:
            problems.append(f"params.mcp.protocol_versions lacks {required}")
    if found.mcp.get("transport") != "streamable-http":
        problems.append("params.mcp.transport is not streamable-http")
    notes = []
    modern = await ctx.transport("mcp", mcp_version=MODERN)
    try:
        result = await modern.discover()
        supported = result.get("supportedVersions") or []
        if MODERN not in supported:
            problems.append(f"server/discover supportedVersions {supported} lacks {MODERN}")
        elif LEGACY not in supported:
            notes.append(f"server/discover does not list {LEGACY}")
    except AapClientError as exc:
        problems.append(f"server/discover failed: {describe(exc)}")
    legacy = await ctx.transport("mcp", mcp_version=LEGACY)
    try:
        await legacy.initialize()
    except AapClientError as exc:
        problems.append(f"initialize at {LEGACY} failed: {describe(exc)}")
    if problems:
        raise Fail("the MCP endpoint does not serve both revisions", problems)
    return "; ".join(notes) or None


@rule(
    "mcp.tools",
    "tools/list offers aap_<skill> for every declared skill, with object input schemas",
    'MCP tools (inputSchema root type object); tool names: docs/mcp.md, "Tools"',
)
async def mcp_tools(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    problems = []
    notes: set[str] = set()
    names_by_version = {}
    for version in (MODERN, LEGACY):
        listed = await tools(ctx, version)
        by_name = {t.get("name"): t for t in listed}
        names_by_version[version] = sorted(n for n in by_name if isinstance(n, str))
        for skill_id in found.skills:
            info = SKILLS.get(skill_id)
            if info is None:
                continue
            tool = by_name.get(info.tool_name)
            if tool is None:
                problems.append(f"MCP {version}: no tool {info.tool_name} for {skill_id}")
                continue
            schema = tool.get("inputSchema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                problems.append(f"MCP {version}: {info.tool_name}.inputSchema needs type: object at the root")
            read_only = (tool.get("annotations") or {}).get("readOnlyHint")
            if info.read_only and read_only is not True:
                notes.add(f"{info.tool_name} could be annotated readOnlyHint: true")
            if not info.read_only and read_only is True:
                problems.append(f"MCP {version}: {info.tool_name} writes, so it must not be readOnlyHint")
    if names_by_version[MODERN] != names_by_version[LEGACY]:
        problems.append("the two revisions list different tools")
    if problems:
        raise Fail("the MCP tools do not match the card", problems)
    return "; ".join(sorted(notes)) or None


@rule(
    "mcp.capabilities",
    "The search tool's metadata carries the card's inventory.search capabilities",
    "InventoryCapabilities (seed 004: 'publish in … the MCP search tool metadata')",
)
async def mcp_capabilities(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    problems = []
    for version in (MODERN, LEGACY):
        listed = await tools(ctx, version)
        tool = next((t for t in listed if t.get("name") == SKILLS["inventory.search"].tool_name), None)
        if tool is None:
            raise Skip("no search tool to inspect")
        meta_caps = find_capabilities(tool.get("_meta"))
        if meta_caps is None:
            problems.append(f"MCP {version}: the search tool's _meta carries no capabilities object")
            continue
        differing = sorted(k for k in set(caps) | set(meta_caps) if caps.get(k) != meta_caps.get(k))
        if differing:
            problems.append(f"MCP {version}: capabilities differ from the card in {', '.join(differing)}")
    if problems:
        raise Fail("MCP and the agent card advertise different search capabilities", problems)
    return None


async def failed_call_errors(ctx: CheckContext) -> list[tuple[str, dict[str, Any]]]:
    """The aap.error objects of MCP calls that must fail (the probes of errors.mcp)."""
    found = []
    for label, payload, _ in await error_probes(ctx):
        outcome = await ctx.call("mcp", payload)
        result = (outcome.body or {}).get("result") if isinstance(outcome.body, dict) else None
        if isinstance(result, dict) and result.get("isError") is True:
            structured = result.get("structuredContent")
            if isinstance(structured, dict) and structured.get("type") == "aap.error":
                found.append((label, structured))
    return found


def schema_problems(name: str, schema: dict[str, Any], errors: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Why ``schema`` (one tool's outputSchema) refuses one of ``errors`` in some client's reading."""
    bare = {k: v for k, v in schema.items() if k != "$schema"}
    problems = []
    for reading, reader in SCHEMA_READERS:
        try:
            validator = reader(bare, registry=Registry())  # clients resolve nothing from the network
            refused = [f"{label} ({error.get('code')})" for label, error in errors if not validator.is_valid(error)]
        except (Unresolvable, SchemaError) as exc:
            problems.append(f"{name}: the outputSchema cannot be used as {reading}: {type(exc).__name__}")
            continue
        if refused:
            problems.append(
                f"{name}: read as {reading}, the outputSchema refuses the aap.error of " + ", ".join(refused)
            )
    return problems


@rule(
    "mcp.error_schema",
    "Every tool's outputSchema accepts aap.error results, read as draft-07 and as 2020-12",
    'Error (seed 004: the MCP structuredContent of isError results); MCP tools (outputSchema); docs/mcp.md, "Tools"',
)
async def mcp_error_schema(ctx: CheckContext) -> str | None:
    published = {
        t["name"]: t["outputSchema"]
        for t in await tools(ctx, MODERN)
        if isinstance(t.get("name"), str) and isinstance(t.get("outputSchema"), dict)
    }
    if not published:
        raise Skip("no tool publishes an outputSchema")
    errors = await failed_call_errors(ctx)
    if not errors:
        raise Skip("no probe ended in an aap.error result (errors.mcp reports why)")
    problems = [p for name, schema in sorted(published.items()) for p in schema_problems(name, schema, errors)]
    if problems:
        raise Fail(
            "clients that validate isError results against outputSchema (the TypeScript SDK 1.x) throw "
            "these AAP errors away as McpError -32602",
            problems,
        )
    return None
