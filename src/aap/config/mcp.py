"""The ``[mcp]`` table: what the MCP binding (:mod:`aap.bindings.mcp`) is configured with.

Part of the configuration package, so reading a file never loads the MCP SDK.

```toml
[mcp]
allowed_hosts = ["aap.internal:8000"]           # added to the hosts derived from public_url
allowed_origins = ["https://chat.example.com"]  # added to the public origin
tools_cache_ttl_ms = 300000                     # ttlMs of tools/list and server/discover
tool_schemas = "llm"                            # or "full": the bundled AAP schemas (docs/mcp.md)
search_listings = "summary"                     # or "full": every member of each search listing
```
"""

from __future__ import annotations

from dataclasses import dataclass

from aap.config.table import Problems, Table

#: What ``tools/list`` publishes: schemas a model's provider accepts, or the full AAP schemas.
TOOL_SCHEMAS = ("llm", "full")
#: What a search answer's listings carry on MCP: a summary (full record: inventory.vehicle) or all.
SEARCH_LISTINGS = ("summary", "full")


@dataclass(frozen=True)
class McpSettings:
    """Host/Origin additions (see :mod:`aap.bindings.mcp.policy`), the list cache hint, and how
    large the tool surface is (docs/mcp.md, "For LLM agents")."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    tools_cache_ttl_ms: int = 300_000
    tool_schemas: str = "llm"
    search_listings: str = "summary"


def _pattern_problem(value: str, origin: bool) -> str | None:
    if value == "*":
        return None
    if any(c.isspace() for c in value) or value.endswith("/") and origin:
        return f"{value!r} is not a valid pattern"
    if origin and "://" not in value:
        return f"{value!r} must be an origin such as 'https://chat.example.com'"
    if not origin and ("://" in value or "/" in value):
        return f"{value!r} must be a host such as 'aap.internal:8000' (no scheme or path)"
    return None


def parse_mcp_section(table: Table, problems: Problems) -> McpSettings:
    """The ``[mcp]`` table; every problem goes to ``problems`` with its path."""
    base = McpSettings()
    hosts = table.strings("allowed_hosts", base.allowed_hosts, min_items=0)
    origins = table.strings("allowed_origins", base.allowed_origins, min_items=0)
    for key, values, origin in (("allowed_hosts", hosts, False), ("allowed_origins", origins, True)):
        for value in values:
            problem = _pattern_problem(value, origin)
            if problem:
                table.problem(key, problem)
    ttl = table.integer("tools_cache_ttl_ms", base.tools_cache_ttl_ms, minimum=0)
    schemas = table.string("tool_schemas", base.tool_schemas, choices=TOOL_SCHEMAS)
    listings = table.string("search_listings", base.search_listings, choices=SEARCH_LISTINGS)
    table.finish()
    return McpSettings(
        allowed_hosts=hosts,
        allowed_origins=origins,
        tools_cache_ttl_ms=ttl,
        tool_schemas=schemas,
        search_listings=listings,
    )
