"""``tools/call`` answered directly, for the plainest requests of the two revisions AAP requires.

The SDK's session manager costs about three times the work of an AAP search per
``tools/call`` (pydantic models built and dumped around the result, which it
then serialises with the standard ``json`` module, and carries twice: structured
and as text) — docs/benchmarks.md, "MCP next to A2A". A tool call is the request
buyers repeat; everything else (``initialize``, ``tools/list``,
``server/discover``, notifications, anything unusual) stays with the SDK.

:func:`plain_tool_call` accepts a request only when every protocol check the SDK
would run is certain to pass, and then the SDK's answer is certain too: a
JSON-RPC result holding the ``CallToolResult`` our :class:`~.server.ToolRunner`
builds (``resultType`` and the server's ``_meta`` stamp only at 2026-07-28). Anything else — another revision, a
header missing, repeated or encoded differently, an ``Mcp-Param-*`` header, extra
``_meta`` keys (a progress token...), extra members, an unknown tool, a session
id — returns None and goes to the SDK, which answers it as before.
tests/test_mcp_fastpath.py sends the same requests both ways and compares the
answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Scope

from aap import telemetry
from aap.bindings.mcp.answers import RETRY_AFTER_KEY
from aap.bindings.mcp.envelope import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from aap.protocols import MCP_HANDSHAKE_VERSION, MCP_MODERN_VERSION

if TYPE_CHECKING:
    from aap.bindings.mcp.calls import ToolRunner

_ENVELOPE = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY})
#: W3C trace context in ``_meta`` (reserved by the MCP specification for it): the SDK answers
#: such a call exactly as one without it, so it stays plain (its span continues that trace).
_TRACE_META = frozenset({"traceparent", "tracestate", "baggage"})
_ROUTING = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_REQUEST_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS = frozenset({"name", "arguments", "_meta"})


@dataclass(frozen=True)
class PlainToolCall:
    """A ``tools/call`` the SDK would accept as it is."""

    request_id: str | int
    name: str
    arguments: dict[str, Any] | None
    modern: bool  # 2026-07-28 (else 2025-11-25, stateless)

    def response_body(self, result: dict[str, Any], server_info: dict[str, Any]) -> bytes:
        """The JSON-RPC result as the SDK words it for this revision (2026-07-28 results carry
        the server's identity in ``_meta``, spec #3002)."""
        if self.modern:
            result = {**result, "_meta": {SERVER_INFO_META_KEY: server_info}}
        else:
            result = {k: v for k, v in result.items() if k != "resultType"}
        return orjson.dumps({"jsonrpc": "2.0", "id": self.request_id, "result": result})


class FastToolCalls:
    """What ``/mcp`` needs to answer plain tool calls itself."""

    def __init__(self, runner: ToolRunner, server_info: dict[str, Any]) -> None:
        self.runner = runner
        self.server_info = server_info  # the SDK server's own identity stamp
        self.tool_names = frozenset(runner.tools)

    async def answer(self, scope: Scope, message: dict[str, Any]) -> Response | None:
        """The answer to ``message`` if it is a plain ``tools/call``; None for the SDK to answer."""
        call = plain_tool_call(scope["headers"], message, self.tool_names)
        if call is None:
            return None
        tracing = telemetry.active
        if tracing is None:
            result = await self.runner.call(call.name, call.arguments, HTTPConnection(scope), encoded=True)
        else:  # the span the SDK's OpenTelemetryMiddleware would have made (aap.telemetry)
            version = MCP_MODERN_VERSION if call.modern else MCP_HANDSHAKE_VERSION
            with tracing.mcp_tool_call(call.name, version, call.request_id, message["params"].get("_meta")) as span:
                result = await self.runner.call(call.name, call.arguments, HTTPConnection(scope), encoded=True)
                if result["isError"]:
                    tracing.failed(span, "tool_error")
        retry_after = scope.get("state", {}).get(RETRY_AFTER_KEY)  # RATE_LIMITED, as the SDK path says it
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return Response(call.response_body(result, self.server_info), media_type="application/json", headers=headers)


def _media_types(value: str) -> set[str]:
    return {part.split(";", 1)[0].strip().lower() for part in value.split(",")}


def plain_tool_call(
    headers: list[tuple[bytes, bytes]], message: dict[str, Any], tools: frozenset[str]
) -> PlainToolCall | None:
    """``message`` (a JSON-RPC message the front accepted, :func:`~.envelope.read_message`) when
    it is a plain ``tools/call`` of one of ``tools``; else None."""
    seen: dict[bytes, str] = {}
    content_type = accept = None
    for raw_name, raw_value in headers:
        header = raw_name.lower()
        if header in _ROUTING:
            if header in seen:
                return None  # repeated: the SDK refuses it
            seen[header] = raw_value.decode("latin-1")
        elif header == b"content-type":
            content_type = raw_value.decode("latin-1")
        elif header == b"accept":
            accept = raw_value.decode("latin-1")
        elif header.startswith(b"mcp-param-") or header in (b"mcp-session-id", b"last-event-id"):
            return None
    if content_type is None or _media_types(content_type) != {"application/json"}:
        return None
    if accept is None or not {"application/json", "text/event-stream"} <= _media_types(accept):
        return None
    version = seen.get(b"mcp-protocol-version")
    if version not in (MCP_MODERN_VERSION, MCP_HANDSHAKE_VERSION):
        return None
    if set(message) != _REQUEST_MEMBERS:
        return None
    request_id = message["id"]
    if (
        message["jsonrpc"] != "2.0"
        or message["method"] != "tools/call"
        or isinstance(request_id, bool)
        or not isinstance(request_id, (str, int))
    ):
        return None
    params = message["params"]
    if not isinstance(params, dict) or not set(params) <= _PARAMS:
        return None
    name, arguments = params.get("name"), params.get("arguments")
    if not isinstance(name, str) or name not in tools or not (arguments is None or isinstance(arguments, dict)):
        return None
    meta = params.get("_meta")
    if version == MCP_MODERN_VERSION:
        if (
            not isinstance(meta, dict)
            or not set(meta) <= _ENVELOPE | _TRACE_META
            or meta.get(PROTOCOL_VERSION_META_KEY) != version
            or CLIENT_CAPABILITIES_META_KEY not in meta
        ):
            return None
        if seen.get(b"mcp-method") != "tools/call" or seen.get(b"mcp-name") != name:
            return None
        return PlainToolCall(request_id, name, arguments, modern=True)
    if b"mcp-method" in seen or b"mcp-name" in seen:
        return None
    if "_meta" in params and not (isinstance(meta, dict) and meta and set(meta) <= _TRACE_META):
        return None
    return PlainToolCall(request_id, name, arguments, modern=False)
