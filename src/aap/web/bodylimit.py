"""Request body size limit: HTTP 413 with a JSON body, before any binding parses.

The body is read (up to the limit) before the app runs and replayed to it, so an
oversized request never reaches a parser, whether it announced its size in
``Content-Length`` or streamed it chunked. Every AAP request body is a small
JSON document that the bindings read whole anyway, so buffering costs nothing.

The 413 body is a JSON-RPC error object with ``id: null``: the JSON-RPC bindings
(A2A, MCP) are the ones that take request bodies, and a JSON-RPC client can show
it. (A stock A2A SDK client stops at the HTTP status either way.)
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap.bindings.jsonrpc import INVALID_REQUEST, failure


def too_large_body(max_bytes: int) -> bytes:
    return orjson.dumps(
        failure(
            None,
            {
                "code": INVALID_REQUEST,
                "message": f"The request body is larger than this endpoint accepts ({max_bytes} bytes).",
            },
        )
    )


class BodyLimitMiddleware:
    """Pure ASGI middleware enforcing ``max_bytes`` on every HTTP request body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._reject(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send: Send) -> None:
        body = too_large_body(self.max_bytes)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
