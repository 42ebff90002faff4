"""The MCP server proper: ``tools/list``, ``tools/call`` and ``server/discover``.

Built on the official SDK's low-level :class:`mcp.server.Server`, which owns
the JSON-RPC surface of both protocol eras (envelope checks, the ``initialize``
handshake, result shaping per revision). This module supplies only what is
AAP-specific: the tool list, the call path into :class:`~aap.agent.DealerAgent`
and a ``server/discover`` answer that lists every revision served (the SDK's
default names only the modern one).
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import orjson
from mcp.server import CacheHint, Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from starlette.requests import Request

from aap import __version__
from aap.agent import CallContext, DealerAgent
from aap.bindings.mcp.answers import remember_retry_after
from aap.bindings.mcp.auth import VerifiedCaller, caller_of
from aap.bindings.mcp.tools import ToolSpec
from aap.errors import AapError, problem
from aap.protocols import MCP_PROTOCOL_VERSIONS
from aap.ratelimit import RateLimiter, retry_after_seconds
from aap.spec import validate
from aap.web.accesslog import annotate
from aap.web.callers import anonymous_caller
from aap.web.errors import unexpected

UNKNOWN_TOOL_MESSAGE = "Unknown tool: tools/list names the tools of this server"


def _result(value: dict[str, Any], is_error: bool) -> dict[str, Any]:
    """A ``CallToolResult`` in wire form: the object as structured content and as JSON text.

    The text block is the MCP SHOULD for clients that read only text. Built as a
    plain dict: the SDK validates and shapes every result per revision anyway, so
    a pydantic model here would only be built and dumped once more.
    """
    text = orjson.dumps(value).decode()
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": value,
        "isError": is_error,
        "resultType": "complete",  # required at 2026-07-28; the SDK drops it for older revisions
    }


def success_result(response: dict[str, Any]) -> dict[str, Any]:
    return _result(response, False)


def error_result(error: AapError) -> dict[str, Any]:
    return _result(error.to_dict(), True)


def caller_key(caller: VerifiedCaller | None, request: Request | None) -> str:
    """Rate-limit bucket: the verified caller when there is one, else the client address.

    A verified caller is a Poppy caller; its bucket is the one the Poppy API uses too.
    """
    if caller is not None:
        return "poppy:" + caller.caller_id
    return anonymous_caller(request)


class ToolRunner:
    """Turns a ``tools/call`` into ``DealerAgent.handle`` and its outcome into a result."""

    def __init__(self, agent: DealerAgent, tools: dict[str, ToolSpec], limiter: RateLimiter) -> None:
        self.agent = agent
        self.tools = tools
        self.limiter = limiter

    def payload(self, spec: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """The AAP request: the arguments as given, whose ``type`` must name this tool's skill.

        A missing or foreign ``type`` is a schema failure listing every problem of
        the arguments against this tool's request schema (never a silent default,
        never a dispatch to another skill).
        """
        payload = {} if arguments is None else arguments
        expected = spec.skill.request_type
        if payload.get("type") != expected:
            if "type" in payload:
                wrong = problem("/type", "const", f"must be {expected!r} for tool {spec.name}")
            else:
                wrong = problem("", "required", f"missing property 'type' ({expected!r} for tool {spec.name})")
            others = validate({**payload, "type": expected}, spec.skill.request_schema)
            raise AapError(
                "SCHEMA_VALIDATION_FAILED",
                errors=[wrong, *others],
                hint=f'Set "type" to "{expected}": {spec.name} takes the AAP {expected} object.',
            )
        return payload

    def run(self, spec: ToolSpec, arguments: dict[str, Any] | None, context: CallContext, key: str) -> dict[str, Any]:
        """Rate limit, argument check, skill. Blocking (database work): run in a worker thread."""
        self.limiter.check(key)
        return self.agent.run(spec.skill, self.payload(spec, arguments), context)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> dict[str, Any]:
        spec = self.tools.get(params.name)
        if spec is None:
            # a fixed text: the name is the caller's (tools/list names the real ones)
            raise MCPError(INVALID_PARAMS, UNKNOWN_TOOL_MESSAGE)
        scope = ctx.request.scope if ctx.request is not None else {}
        caller = caller_of(ctx.request)
        context = CallContext(
            binding="mcp",
            caller_id=caller.caller_id if caller else None,
            client_id=caller.client_id if caller else None,
        )
        try:
            response = await anyio.to_thread.run_sync(
                self.run, spec, params.arguments, context, caller_key(caller, ctx.request)
            )
            result = success_result(response)
        except AapError as exc:
            annotate(scope, skill=spec.skill.id, aap_code=exc.code, error_id=exc.error_id)
            retry_after = retry_after_seconds(exc)
            if retry_after is not None:
                remember_retry_after(scope, retry_after)
            return error_result(exc)
        except Exception as exc:  # never a stack trace or customer data on the wire or in the log
            error = unexpected(exc, binding="mcp", skill=spec.skill.id)
            annotate(scope, skill=spec.skill.id, aap_code=error.code, error_id=error.error_id)
            return error_result(error)
        annotate(scope, skill=spec.skill.id)
        return result


def instructions_for(agent: DealerAgent) -> str:
    settings = agent.settings
    return (
        f"{settings.agent.name}: an Auto Agent Protocol (AAP 3.1) dealer agent. Each tool takes the AAP "
        'request object as its arguments (with its "type") and returns the typed AAP response as structured '
        "content; failures are aap.error objects with isError true. Reads need no sign-in; a lead needs the "
        "customer's consent in the payload."
    )


def make_server(agent: DealerAgent, tools: dict[str, ToolSpec], limiter: RateLimiter, *, ttl_ms: int) -> Server[Any]:
    """The low-level SDK server for ``tools`` (stateless: no per-connection state)."""
    listing = types.ListToolsResult(tools=[spec.tool for spec in tools.values()])

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    hint = CacheHint(ttl_ms=ttl_ms, scope="public")  # the list holds no caller data
    server: Server[Any] = Server(
        "aap",
        version=__version__,
        title=agent.settings.agent.name,
        instructions=instructions_for(agent),
        website_url=agent.settings.public_url,
        cache_hints={"tools/list": hint, "server/discover": hint},
        get_tool_input_schema=lambda name: None,  # no x-mcp-header in AAP schemas: nothing to mirror
        on_list_tools=list_tools,
        # A handler may return a dict (mcp.server.context.HandlerResult); this keyword's hint
        # names only the result models, and _result() says why the dict is built directly.
        on_call_tool=ToolRunner(agent, tools, limiter),  # type: ignore[arg-type]
    )

    async def discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MCP_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server
