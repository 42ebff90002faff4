"""The MCP server proper: ``tools/list``, ``tools/call`` and ``server/discover``.

Built on the official SDK's low-level :class:`mcp.server.Server`, which owns
the JSON-RPC surface of both protocol eras (envelope checks, the ``initialize``
handshake, result shaping per revision). This module supplies only what is
AAP-specific: the tool list, the call path (:class:`~.calls.ToolRunner`) and a
``server/discover`` answer that lists every revision served (the SDK's default
names only the modern one). Imported only when a request needs the SDK
(:mod:`.sdk`).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import CacheHint, Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aap.bindings.mcp.calls import SERVER_NAME, UNKNOWN_TOOL_MESSAGE, ToolRunner, server_identity
from aap.bindings.mcp.tools import ToolSpec
from aap.gateway import Gateway
from aap.protocols import MCP_PROTOCOL_VERSIONS

#: Revisions whose tool results have no ``structuredContent`` (it came with 2025-06-18).
NO_STRUCTURED_CONTENT = frozenset({"2025-03-26", "2024-11-05"})


def instructions_for(gateway: Gateway) -> str:
    settings = gateway.settings
    return (
        f"{settings.agent.name}: a car dealership's Auto Agent Protocol (AAP 3.1) agent. Search its inventory "
        "(aap_inventory_search; aap_inventory_facets says which values exist), read one vehicle in full "
        "(aap_inventory_vehicle) and the dealer's profile (aap_dealer_information); send the shopper's inquiry "
        "with aap_lead_submit only after they gave their contact details and consent. Failures are aap.error "
        "objects (isError) that name each field to change."
    )


def make_server(gateway: Gateway, tools: dict[str, ToolSpec], runner: ToolRunner, *, ttl_ms: int) -> Server[Any]:
    """The low-level SDK server for ``tools`` (stateless: no per-connection state)."""
    listing = types.ListToolsResult(tools=[spec.tool for spec in tools.values()])

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> dict[str, Any]:
        if params.name not in runner.tools:
            # a fixed text: the name is the caller's (tools/list names the real ones)
            raise MCPError(INVALID_PARAMS, UNKNOWN_TOOL_MESSAGE)
        # revisions before 2025-06-18 know no structuredContent: their text block is the JSON
        json_text = ctx.protocol_version in NO_STRUCTURED_CONTENT
        return await runner.call(params.name, params.arguments, ctx.request, json_text=json_text)

    identity = server_identity(gateway)
    hint = CacheHint(ttl_ms=ttl_ms, scope="public")  # the list holds no caller data
    server: Server[Any] = Server(
        SERVER_NAME,
        version=identity["version"],
        title=identity["title"],
        instructions=instructions_for(gateway),
        website_url=identity["websiteUrl"],
        cache_hints={"tools/list": hint, "server/discover": hint},
        get_tool_input_schema=lambda name: None,  # no x-mcp-header in AAP schemas: nothing to mirror
        on_list_tools=list_tools,
        # A handler may return a dict (mcp.server.context.HandlerResult); this keyword's hint
        # names only the result models, and calls._result() says why the dict is built directly.
        on_call_tool=call_tool,  # type: ignore[arg-type]
    )

    async def discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MCP_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server
