"""The SDK's answers on their way out of ``/mcp``: fixed error texts, the full revision list, ``Retry-After``.

The front (:mod:`.envelope`) refuses malformed requests itself, so what the
SDK still answers with an error is a well-formed request it cannot serve.
Three of those answers need editing, and an ASGI ``send`` wrapper is the one
place they all pass:

* ``-32601`` carries the unknown method name as ``data`` (an echo of the
  request), the legacy dispatcher answers an unexpected exception with code
  ``0`` and the exception's text, and ``-32602`` may carry an empty ``data``.
  An error keeps ``data`` only where the revision defines it (``-32022``), an
  unexpected failure becomes ``-32603`` with a fixed text, and a message that
  looks like library output (long, multi-line, a link, a pydantic term) is
  replaced by the fixed text of its code.
* ``-32022`` lists every revision served, not only the modern one the SDK
  knows about (the client uses the list to fall back to ``initialize``).
* A ``tools/call`` that ended in ``RATE_LIMITED`` gets an HTTP ``Retry-After``
  header, as on ``/a2a`` and ``/poppy/v1/*``: the tool runner leaves the delay
  in the request scope (:func:`remember_retry_after`).

Anything the SDK answers with an error status but without a JSON body gets a
JSON-RPC error body, so every answer of the endpoint is JSON.

Only complete bodies up to :data:`MAX_EDITED_BYTES` are parsed (every error
answer is far smaller); larger or streamed answers pass through untouched.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Message, Scope, Send

from aap.bindings.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from aap.bindings.mcp.envelope import HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION

MAX_EDITED_BYTES = 16_384
RETRY_AFTER_KEY = "aap.mcp.retry_after"

FIXED_MESSAGES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    HEADER_MISMATCH: "Header mismatch: the MCP routing headers do not match the request body",
    UNSUPPORTED_PROTOCOL_VERSION: "Unsupported protocol version",
}
# Codes whose text is always ours: the SDK's may quote the request or an exception.
_ALWAYS_FIXED = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INTERNAL_ERROR})
_LIBRARY_MARKERS = ("http://", "https://", "pydantic", "input_value", "validation error", "traceback")
_STATUS_MESSAGES = {
    406: "Not Acceptable: this endpoint answers application/json; list it in Accept",
    415: "Unsupported Media Type: send the JSON-RPC message as application/json",
}


def remember_retry_after(scope: Scope, seconds: int) -> None:
    """Ask for ``Retry-After: seconds`` on the answer to this request."""
    scope.setdefault("state", {})[RETRY_AFTER_KEY] = seconds


def _safe(message: Any) -> bool:
    if not isinstance(message, str) or not message or len(message) > 200 or "\n" in message:
        return False
    lowered = message.lower()
    return not any(marker in lowered for marker in _LIBRARY_MARKERS)


def edited_error(error: dict[str, Any], versions: tuple[str, ...]) -> dict[str, Any]:
    """The error object as the endpoint sends it (see the module docstring)."""
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or code == 0:
        code = INTERNAL_ERROR  # the legacy dispatcher's catch-all for an unexpected exception
    message = error.get("message")
    if code in _ALWAYS_FIXED or not _safe(message):
        message = FIXED_MESSAGES.get(code, "Request failed")
    edited: dict[str, Any] = {"code": code, "message": message}
    data = error.get("data")
    if code == UNSUPPORTED_PROTOCOL_VERSION and isinstance(data, dict):
        edited["data"] = {**data, "supported": list(versions)}
    return edited


def edited_body(body: bytes, status: int, versions: tuple[str, ...]) -> bytes:
    """``body`` with its JSON-RPC error edited, or a JSON-RPC error body for a non-JSON failure."""
    try:
        decoded = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
        return orjson.dumps({**decoded, "error": edited_error(decoded["error"], versions)})
    if status >= 400 and not isinstance(decoded, dict):
        message = _STATUS_MESSAGES.get(status, FIXED_MESSAGES[INTERNAL_ERROR if status >= 500 else INVALID_REQUEST])
        code = INTERNAL_ERROR if status >= 500 else INVALID_REQUEST
        return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
    return body


def editing_answers(scope: Scope, send: Send, versions: tuple[str, ...]) -> Send:
    """``send`` for the SDK: holds the response start until the body shows whether to edit it."""
    start: Message | None = None

    async def wrapped(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if start is None or message["type"] != "http.response.body":
            await send(message)
            return
        head, start = start, None
        headers = [(k, v) for k, v in head["headers"] if k.lower() != b"content-length"]
        retry_after = scope.get("state", {}).get(RETRY_AFTER_KEY)
        if retry_after is not None:
            headers.append((b"retry-after", str(retry_after).encode()))
        body = message.get("body", b"")
        if message.get("more_body", False) or len(body) > MAX_EDITED_BYTES:
            # streamed or large: a result, never an error answer; only the length header is kept
            await send({**head, "headers": [*headers, *_original_length(head)]})
            await send(message)
            return
        status = head["status"]
        if status >= 400 or b'"error"' in body:
            edited = edited_body(body, status, versions)
            if edited is not body:
                headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]
                headers.append((b"content-type", b"application/json"))
                body = edited
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**head, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return wrapped


def _original_length(head: Message) -> list[tuple[bytes, bytes]]:
    """The original ``content-length`` of a passed-through answer, if it had one."""
    return [(k, v) for k, v in head["headers"] if k.lower() == b"content-length"]
