"""What ``/mcp`` refuses before the SDK reads a request: media types and the JSON-RPC envelope.

Pure functions over headers and body bytes (no I/O), in the order the HTTP
front (:mod:`.http`) applies them. The SDK's own refusals of the same
mistakes are not usable on the wire: a wrong ``Content-Type`` gets
``text/plain``, a wrong ``Accept`` an empty ``406``, and a malformed envelope
the pydantic error text (class names, the offending input, a documentation
link of the library version). Here each refusal is a JSON-RPC error with a
fixed, short message that never quotes the request (docs/mcp.md, "Protocol
answers").

The body is read with orjson, the reader of ``/a2a`` and ``/poppy/v1/*``: a
number beyond the range of a double is a parse error on every binding, and
what it accepts the SDK's reader accepts too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response

from aap.bindings.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, error_response
from aap.protocols import MCP_MODERN_VERSION, MCP_PROTOCOL_VERSIONS
from aap.spec.bounds import REQUEST_BOUNDS, Bounds, bound_problems

# What the front needs of the MCP protocol without loading the SDK (tests/test_mcp_fastpath.py
# checks each against the SDK's own constant): two error codes, the per-request envelope keys of
# the stateless revision (MCP 2026-07-28, "Per-request protocol fields": protocol version and
# client capabilities required, client info optional; results carry the server's identity), and
# the ``initialize``-handshake revisions served (the SDK's legacy era), newest first.
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
HANDSHAKE_VERSIONS: tuple[str, ...] = tuple(v for v in MCP_PROTOCOL_VERSIONS if v != MCP_MODERN_VERSION)

JSON_MEDIA_TYPE = "application/json"
_JSON_RANGES = frozenset({JSON_MEDIA_TYPE, "application/*", "*/*"})

# The fixed messages (JSON-RPC 2.0 §5.1 names; the rest is ours).
PARSE_MESSAGE = "Parse error: the body is not one JSON document"
ENVELOPE_MESSAGE = "Invalid Request: send one JSON-RPC 2.0 request or notification object"
BATCH_MESSAGE = "Invalid Request: batches are not supported; send one JSON-RPC 2.0 message per POST"
PARAMS_MESSAGE = "Invalid params: params must be an object"
MEDIA_TYPE_MESSAGE = "Unsupported Media Type: send the JSON-RPC message as application/json"
NOT_ACCEPTABLE_MESSAGE = "Not Acceptable: this endpoint answers application/json; list it in Accept"
METHOD_MESSAGE = "Method Not Allowed: send JSON-RPC messages with POST"


SIZE_MESSAGE = "Invalid params: the request is larger than this server reads; see error.data.errors"

#: The request bounds (docs/search.md, "Request bounds") with room for the JSON-RPC envelope
#: around the arguments (``params.arguments``, ``params._meta``).
MESSAGE_BOUNDS = Bounds(depth=REQUEST_BOUNDS.depth + 3, values=REQUEST_BOUNDS.values + 100)


@dataclass(frozen=True)
class Refusal:
    """A JSON-RPC error answer with its HTTP status."""

    status: int
    code: int
    message: str
    request_id: str | int | None = None
    data: Any = None

    def response(self, headers: Mapping[str, str] | None = None) -> Response:
        return error_response(self.status, self.code, self.message, self.request_id, data=self.data, headers=headers)


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _accepts_json(accept: str) -> bool:
    """Whether an ``Accept`` value admits JSON (RFC 9110 §12.5.1; a range with ``q=0`` refuses)."""
    for item in accept.split(","):
        media, *parameters = item.split(";")
        if media.strip().lower() not in _JSON_RANGES:
            continue
        weights = [p.split("=", 1)[1].strip() for p in parameters if p.strip().lower().startswith("q=")]
        try:
            if not weights or float(weights[0]) > 0:
                return True
        except ValueError:
            return True  # a malformed weight is not a refusal
    return False


def media_refusal(headers: Headers) -> Refusal | None:
    """``415`` unless the body is declared JSON; ``406`` unless the client takes a JSON answer."""
    if _media_type(headers.get("content-type", "")) != JSON_MEDIA_TYPE:
        return Refusal(415, INVALID_REQUEST, MEDIA_TYPE_MESSAGE)
    if not _accepts_json(",".join(headers.getlist("accept"))):
        return Refusal(406, INVALID_REQUEST, NOT_ACCEPTABLE_MESSAGE)
    return None


def method_refusal() -> Refusal:
    """Anything but POST (the answer also carries ``Allow: POST``)."""
    return Refusal(405, INVALID_REQUEST, METHOD_MESSAGE)


def _request_id(message: dict[str, Any]) -> str | int | None:
    """The id to echo: a string or an integer (MCP: never null, never fractional), else None."""
    value = message.get("id")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def read_message(body: bytes) -> dict[str, Any] | Refusal:
    """The one JSON-RPC request or notification in ``body``, or why it is not one.

    A request is ``jsonrpc: "2.0"``, a string ``method``, an ``id`` that is a
    string or an integer, and ``params`` that is an object when present. A
    posted response (no ``method``) is refused too: this server never sends
    requests, so there is nothing a client could answer.
    """
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Refusal(400, PARSE_ERROR, PARSE_MESSAGE)
    if isinstance(message, list):
        return Refusal(400, INVALID_REQUEST, BATCH_MESSAGE)
    if not isinstance(message, dict):
        return Refusal(400, INVALID_REQUEST, ENVELOPE_MESSAGE)
    request_id = _request_id(message)
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str) or not message["method"]:
        return Refusal(400, INVALID_REQUEST, ENVELOPE_MESSAGE, request_id)
    if "id" in message and request_id is None:
        return Refusal(400, INVALID_REQUEST, ENVELOPE_MESSAGE)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return Refusal(400, INVALID_PARAMS, PARAMS_MESSAGE, request_id)
    return message


def size_refusal(message: dict[str, Any]) -> Refusal | None:
    """A message over the request bounds, before the SDK reads it (its reader costs ~100 times
    what the bounds walk does on a 1 MiB body); the problems point at members, never quote them.

    A plain tool call never gets here: its arguments meet the same bounds in the core and
    are answered as an ``aap.error`` tool result, like any other AAP refusal.
    """
    problems = bound_problems(message, MESSAGE_BOUNDS)
    if not problems:
        return None
    return Refusal(400, INVALID_PARAMS, SIZE_MESSAGE, _request_id(message), data={"errors": problems})
