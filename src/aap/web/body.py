"""The one bounded request-body reader, and the middleware that applies it to every request.

:class:`RequestLimitMiddleware` reads each body (up to ``max_body_bytes``, within
``body_timeout_seconds``) before the app runs and replays it, so an oversized or
trickled request never reaches a parser, whether it announced its size in
``Content-Length`` or streamed it chunked. Every AAP request body is a small JSON
document or form that the endpoints read whole anyway, so buffering costs nothing.
The 413 (and 408) answer is in the shape of the surface the path belongs to
(:class:`~aap.web.errors.ErrorShapes`): a JSON-RPC error on ``/a2a`` and ``/mcp``,
OAuth error JSON on ``/oauth/*``, ``aap.error`` on ``/poppy/v1/*``, the plain JSON
error elsewhere.

The same middleware answers what the HTTP server refused before the app could see
it (a request line or header fields over ``[server]`` limits, a head that did not
arrive in time): the server's protocol (:mod:`aap.server.protocol`) hands the app a
request with no header fields and a :class:`Refusal` under :data:`REFUSED` in its
scope, and the answer goes out in the path's shape, logged and counted like any other.

Endpoints with a tighter limit of their own (the OAuth forms, Poppy feedback)
read with :func:`read_body` too and answer its :class:`BodyTooLarge` in their
protocol's words.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap.errors import AapError, problem
from aap.web.errors import ErrorShapes
from aap.web.middleware import HttpMiddleware


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


class BodyTimedOut(Exception):
    """The server gave up waiting for the rest of the body (its :class:`Refusal` is in the scope)."""


async def read_body(receive: Receive, limit: int, scope: Scope | None = None) -> bytes:
    """The whole body from ``receive``; :class:`BodyTooLarge` as soon as it passes ``limit``.

    A client that disconnects mid-body raises Starlette's ``ClientDisconnect``. With the
    request's ``scope``, a body the server stopped waiting for (:data:`REFUSED`, set by
    :mod:`aap.server.protocol` once ``body_timeout_seconds`` pass) raises :class:`BodyTimedOut`.
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
        if scope is not None and REFUSED in scope:
            raise BodyTimedOut()
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


#: The scope key of a request the HTTP server refused before the app (its :class:`Refusal`).
REFUSED = "aap.refused"


@dataclass(frozen=True)
class Refusal:
    """Why the server refused a request before reading it whole: the status and fixed text.

    414 (RFC 9110 §15.5.15) for a request line over the limit, 431 (RFC 6585 §5) for header
    fields over theirs, 408 (RFC 9110 §15.5.9) for a head or body that did not arrive in time.
    The text names the limit, never a value of the request.
    """

    status: int
    message: str

    def error(self) -> AapError:
        if self.status == 408:
            return AapError("SCHEMA_VALIDATION_FAILED", self.message, retryable=True)
        return AapError("SCHEMA_VALIDATION_FAILED", self.message, errors=[problem("", "maxLength", self.message)])


def request_line_too_long(limit: int) -> Refusal:
    return Refusal(414, f"The request line is longer than this server accepts ({limit} bytes).")


def header_field_too_large(limit: int) -> Refusal:
    return Refusal(431, f"A request header field is larger than this server accepts ({limit} bytes).")


def head_too_large(limit: int) -> Refusal:
    return Refusal(431, f"The request header fields are larger than this server accepts ({limit} bytes in all).")


def too_many_header_fields(limit: int) -> Refusal:
    return Refusal(431, f"The request has more header fields than this server accepts ({limit}).")


def head_timed_out(seconds: float) -> Refusal:
    return Refusal(408, f"The request header fields did not arrive within {seconds:g} seconds.")


def body_timed_out(seconds: float) -> Refusal:
    return Refusal(408, f"The request body did not arrive within {seconds:g} seconds.")


@dataclass(eq=False)
class RequestLimitMiddleware(HttpMiddleware):
    """``max_bytes`` on every HTTP request body, and the answer to a request the server
    refused (:data:`REFUSED`: a head over the limits, or a late body)."""

    app: ASGIApp
    max_bytes: int
    shapes: ErrorShapes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = scope.get(REFUSED)
        if refusal is not None:
            await self._answer(scope, receive, send, refusal.status, refusal.error())
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._answer(scope, receive, send, 413, too_large_error(self.max_bytes))
            return
        try:
            body = await read_body(receive, self.max_bytes, scope)
        except BodyTooLarge:
            await self._answer(scope, receive, send, 413, too_large_error(self.max_bytes))
            return
        except BodyTimedOut:
            refusal = scope[REFUSED]
            await self._answer(scope, receive, send, refusal.status, refusal.error())
            return
        except ClientDisconnect:
            return  # nobody is listening for an answer
        await self.app(scope, replay(body, receive), send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, status: int, error: AapError) -> None:
        response = self.shapes.respond(scope, status, error)
        response.headers["Connection"] = "close"  # the rest of the request is never read
        await response(scope, receive, send)
