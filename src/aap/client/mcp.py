"""AAP over MCP streamable HTTP: the ``aap_<skill>`` tools, revision 2026-07-28 or 2025-11-25.

Why raw JSON-RPC over httpx instead of the official ``mcp`` client SDK: AAP
calls are single stateless ``tools/call`` exchanges, so the transport is a few
dozen lines; the SDK (a young 2.x line that brings its own HTTP stack) would
become a runtime dependency of every buyer and of ``aap check``; and the
checker needs the HTTP status, headers and raw envelope of every exchange,
which the SDK hides. The official SDK is still used in this project's tests to
cross-check the server.

Modern (2026-07-28): every POST carries ``params._meta`` with the protocol
version and client capabilities, plus the ``MCP-Protocol-Version``,
``Mcp-Method`` and ``Mcp-Name`` headers; no handshake, no session.
Legacy (2025-11-25): ``initialize`` once, ``notifications/initialized``, then
requests with ``MCP-Protocol-Version`` (and ``Mcp-Session-Id`` if the server
issued one).
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import orjson

from aap import __version__
from aap.client.errors import ProtocolError
from aap.client.transport import CallOutcome, answered_error, http_failure, network_failure, rpc_failure
from aap.protocols import MCP_HANDSHAKE_VERSION, MCP_MODERN_VERSION
from aap.skills.catalog import SkillInfo

MODERN = MCP_MODERN_VERSION
LEGACY = MCP_HANDSHAKE_VERSION
SUPPORTED = (MODERN, LEGACY)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
NAME_KEYS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
CLIENT_INFO = {"name": "aap-client", "version": __version__}


def parse_sse(text: str) -> list[Any]:
    """JSON payloads of the ``data:`` events of a text/event-stream body."""
    messages: list[Any] = []
    data: list[str] = []
    for line in text.splitlines() + [""]:
        if line == "":
            if data:
                try:
                    messages.append(orjson.loads("\n".join(data)))
                except orjson.JSONDecodeError:
                    pass
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return messages


def jsonrpc_message(response: httpx.Response, request_id: Any) -> Any:
    """The JSON-RPC response for ``request_id`` from a JSON or SSE answer."""
    ctype = response.headers.get("content-type", "")
    if ctype.startswith("text/event-stream"):
        for message in parse_sse(response.text):
            if (
                isinstance(message, dict)
                and message.get("id") == request_id
                and ("result" in message or "error" in message)
            ):
                return message
        return None
    try:
        return response.json()
    except ValueError:
        return None


class McpTransport:
    name = "mcp"

    def __init__(self, http: httpx.AsyncClient, url: str, *, protocol_version: str = MODERN) -> None:
        if protocol_version not in SUPPORTED:
            raise ValueError(f"unsupported MCP revision {protocol_version!r}; use one of {SUPPORTED}")
        self.http = http
        self.url = url
        self.protocol_version = protocol_version
        self.negotiated: str | None = None
        self.session_id: str | None = None
        self.server_info: dict[str, Any] | None = None
        self._ids = itertools.count(1)

    @property
    def modern(self) -> bool:
        return self.protocol_version == MODERN

    # -- low level ---------------------------------------------------------
    def build(
        self, method: str, params: dict[str, Any] | None = None, *, notification: bool = False
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The JSON-RPC body and HTTP headers of one request in this transport's revision."""
        params = dict(params or {})
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.modern:
            meta = dict(params.get("_meta") or {})
            meta.setdefault(META_VERSION, MODERN)
            meta.setdefault(META_CAPABILITIES, {})
            meta.setdefault(META_CLIENT_INFO, CLIENT_INFO)
            params["_meta"] = meta
            headers["MCP-Protocol-Version"] = MODERN
            headers["Mcp-Method"] = method
            if method in NAME_KEYS and isinstance(params.get(NAME_KEYS[method]), str):
                headers["Mcp-Name"] = params[NAME_KEYS[method]]
        else:
            if self.negotiated:
                headers["MCP-Protocol-Version"] = self.negotiated
            if self.session_id:
                headers["Mcp-Session-Id"] = self.session_id
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params:
            body["params"] = params
        if not notification:
            body["id"] = next(self._ids)
        return body, headers

    async def post(self, body: Any, headers: dict[str, str]) -> httpx.Response:
        content = body if isinstance(body, (bytes, str)) else orjson.dumps(body)
        return await self.http.post(self.url, content=content, headers=headers)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[httpx.Response, Any]:
        """Send one request; return the HTTP response and its JSON-RPC message (or None)."""
        if not self.modern and method != "initialize":
            await self.initialize()
        body, headers = self.build(method, params)
        response = await self.post(body, headers)
        return response, jsonrpc_message(response, body["id"])

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """``result`` of one request, or :class:`ProtocolError`."""
        try:
            response, message = await self.request(method, params)
        except httpx.HTTPError as exc:
            raise network_failure(self.name, exc, f"MCP {method} failed") from exc
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            raise rpc_failure(self.name, response, message["error"], f"MCP {method}: ")
        if response.status_code >= 400:
            raise http_failure(self.name, response, f"MCP {method}")
        if not isinstance(message, dict) or not isinstance(message.get("result"), dict):
            raise ProtocolError(
                f"MCP {method}: no JSON-RPC result in the answer", binding=self.name, http_status=response.status_code
            )
        return message["result"]

    async def initialize(self) -> None:
        """Legacy handshake, once per transport."""
        if self.negotiated:
            return
        body, headers = self.build(
            "initialize",
            {
                "protocolVersion": self.protocol_version,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            },
        )
        try:
            response = await self.post(body, headers)
        except httpx.HTTPError as exc:
            raise network_failure(self.name, exc, "MCP initialize failed") from exc
        message = jsonrpc_message(response, body["id"])
        if response.status_code >= 400 or not isinstance(message, dict) or "result" not in message:
            raise ProtocolError(
                "MCP initialize was refused", binding=self.name, http_status=response.status_code, data=message
            )
        result = message["result"]
        version = result.get("protocolVersion")
        if version != self.protocol_version:
            raise ProtocolError(f"MCP server negotiated {version!r}, not {self.protocol_version}", binding=self.name)
        self.negotiated = version
        self.server_info = result.get("serverInfo")
        self.session_id = response.headers.get("mcp-session-id")
        note, note_headers = self.build("notifications/initialized", notification=True)
        await self.post(note, note_headers)

    # -- AAP ---------------------------------------------------------------
    async def discover(self) -> dict[str, Any]:
        """``server/discover`` (modern revision only)."""
        return await self.rpc("server/discover")

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):  # bounded: a dealer has five tools
            result = await self.rpc("tools/list", {"cursor": cursor} if cursor else None)
            tools.extend(t for t in result.get("tools") or [] if isinstance(t, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    async def call(self, skill: SkillInfo, payload: dict[str, Any]) -> CallOutcome:
        params = {"name": skill.tool_name, "arguments": payload}
        outcome = CallOutcome(self.name, skill, request=params)
        answer = await outcome.attempt(self.request("tools/call", params), "MCP tools/call failed")
        if answer is None:
            return outcome
        response, message = answer
        outcome.record(response, message)
        self.interpret(outcome, response, message)
        return outcome

    def interpret(self, outcome: CallOutcome, response: httpx.Response, message: Any) -> None:
        skill = outcome.skill
        if not isinstance(message, dict):
            outcome.error = (
                http_failure(self.name, response, "MCP tools/call")
                if response.status_code >= 400
                else ProtocolError(
                    "MCP answer is not a JSON-RPC message", binding=self.name, http_status=response.status_code
                )
            )
            return
        if isinstance(message.get("error"), dict):
            outcome.error = rpc_failure(self.name, response, message["error"], "MCP tools/call: ")
            return
        result = message.get("result")
        if not isinstance(result, dict):
            outcome.error = ProtocolError("MCP tools/call: no result", binding=self.name)
            return
        structured = result.get("structuredContent")
        if structured is None:
            structured = _json_text(result.get("content"))
        if result.get("isError"):
            if isinstance(structured, dict) and structured.get("type") == "aap.error":
                outcome.error = answered_error(self.name, response, structured)
            else:
                outcome.error = ProtocolError(
                    "MCP tool failed without an aap.error object", binding=self.name, data=result
                )
            return
        if not isinstance(structured, dict) or structured.get("type") != skill.response_type:
            outcome.error = ProtocolError(
                f"MCP result carries no {skill.response_type} structuredContent", binding=self.name, data=result
            )
            return
        outcome.response = structured

    async def aclose(self) -> None:
        if self.session_id:
            try:
                await self.http.delete(
                    self.url,
                    headers={"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": self.negotiated or LEGACY},
                )
            except httpx.HTTPError:
                pass
            self.session_id = None


def _json_text(content: Any) -> Any:
    """Fallback for servers that only send a text block: its JSON, if it parses."""
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            try:
                return orjson.loads(block["text"])
            except orjson.JSONDecodeError:
                continue
    return None
