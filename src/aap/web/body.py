"""The one bounded request-body reader, and the middleware that applies it to every request.

:class:`BodyLimitMiddleware` reads each body (up to ``max_body_bytes``) before
the app runs and replays it, so an oversized request never reaches a parser,
whether it announced its size in ``Content-Length`` or streamed it chunked.
Every AAP request body is a small JSON document or form that the endpoints
read whole anyway, so buffering costs nothing. The 413 answer is in the shape
of the surface the path belongs to (:class:`~aap.web.errors.ErrorShapes`): a
JSON-RPC error on ``/a2a`` and ``/mcp``, OAuth error JSON on ``/oauth/*``,
``aap.error`` on ``/poppy/v1/*``, the plain JSON error elsewhere.

Endpoints with a tighter limit of their own (the OAuth forms, Poppy feedback)
read with :func:`read_body` too and answer its :class:`BodyTooLarge` in their
protocol's words.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap.errors import AapError, problem
from aap.web.errors import ErrorShapes


class BodyTooLarge(Exception):
    """The body is larger than the limit it was read with."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit


def too_large_error(limit: int) -> AapError:
    """The failure a 413 carries, in AAP terms (fixed text: never a caller value)."""
    return AapError(
        "SCHEMA_VALIDATION_FAILED",
        f"The request body is larger than this endpoint accepts ({limit} bytes).",
        errors=[problem("", "maxLength", f"The request body exceeds {limit} bytes.")],
    )


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body from ``receive``; :class:`BodyTooLarge` as soon as it passes ``limit``.

    A client that disconnects mid-body raises Starlette's ``ClientDisconnect``.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def read_request_body(request: Request, limit: int) -> bytes:
    """:func:`read_body` for a Starlette request (the body is read once either way)."""
    return await read_body(request.receive, limit)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the already-read body once, then defers to the client."""
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """Pure ASGI middleware enforcing ``max_bytes`` on every HTTP request body."""

    def __init__(self, app: ASGIApp, max_bytes: int, shapes: ErrorShapes) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.shapes = shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_bytes)
        except BodyTooLarge:
            await self._reject(scope, receive, send)
            return
        except ClientDisconnect:
            return  # nobody is listening for an answer
        await self.app(scope, replay(body, receive), send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = self.shapes.respond(scope, 413, too_large_error(self.max_bytes))
        response.headers["Connection"] = "close"  # the rest of the body is never read
        await response(scope, receive, send)
