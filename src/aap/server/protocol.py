"""uvicorn's httptools protocol, bounded: what a request may cost before the app sees it.

httptools parses the whole head before the app is called, and keeps a header
value it has not finished as one ``bytes`` object that it extends with every
read: a 256 MB header field is thousands of ever-longer copies, and no ASGI
middleware ever runs. So the bounds are kept where
the bytes arrive, per connection, by :class:`BoundedHttpToolsProtocol` (every
worker serves with it, :mod:`aap.server.runner`), with ``[server]``'s
:class:`~aap.config.model.ConnectionLimits`:

- **the head**: the request line (``max_request_line_bytes``, else 414), each
  header field (``max_header_field_bytes``, else 431), their number
  (``max_header_fields``, else 431) and their sum with the request line
  (``max_head_bytes``, else 431) are counted from the parser's callbacks; and
  the raw bytes of a head that is not finished are counted as they are read, so
  a head still unfinished after twice ``max_head_bytes`` is refused there, at
  the latest one read (256 KiB) later, without waiting for a field to end;
- **time**: a head must arrive within ``header_timeout_seconds`` of the
  connection (or of the first byte of a following request), else 408, or a
  plain close when nothing of a request came; a body within
  ``body_timeout_seconds`` of the end of its head, else 408 (the timer is set
  only when a read ends with the body unfinished, so a request that arrives in
  one piece costs nothing); an idle connection between requests is closed after
  ``keep_alive_seconds`` (uvicorn's own timer);
- **connections**: past ``max_connections`` open connections a new one is
  answered 503 and closed.

uvicorn's own knobs do not reach this: ``h11_max_incomplete_event_size``
bounds only the h11 parser (the slower one, docs/benchmarks.md), which answers
400 rather than 431; ``limit_concurrency`` answers 503 only once a head has been
read whole; ``timeout_keep_alive`` (set from ``keep_alive_seconds``) runs only
between requests.

The class overrides uvicorn's parser callbacks and ``data_received`` and uses
the protocol's own state (``url``, ``cycle``, ``flow``, the server state), as
uvicorn 0.30 to 0.54 keep them; the suite serves every live test of the limits
through it (tests/test_request_limits.py).

A refused head is answered by the app itself, as a request with no header
fields that carries the :class:`~aap.web.body.Refusal` in its scope: the answer
is in the path's error shape (``aap.error`` on ``/poppy/v1/*``, JSON-RPC on
``/a2a``, ...; :mod:`aap.web.body`), and the access log and metrics count it.
The connection is then closed the way RFC 9112 §9.6 asks: the answer is sent,
the sending side shut, and what the client still sends is read and dropped
(at most :data:`LINGER_BYTES`, for at most :data:`LINGER_SECONDS`) so that the
client reads the answer rather than a reset.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from aap.config.model import ConnectionLimits
from aap.web.body import (
    REFUSED,
    Refusal,
    body_timed_out,
    head_timed_out,
    head_too_large,
    header_field_too_large,
    request_line_too_long,
    too_many_header_fields,
)

log = logging.getLogger("aap.http")

#: What is read and dropped after a refusal before the connection is closed regardless.
LINGER_BYTES = 4 << 20
LINGER_SECONDS = 2.0
#: Bytes of the request line beside the method and the target: two spaces and ``HTTP/1.1``.
_LINE_OVERHEAD = 10
_LONGEST_METHOD = 16  # llhttp knows no longer method name (MKCALENDAR, VERSION-CONTROL)
OVERLOADED = Refusal(503, "The server has too many open connections; try again shortly.")


class _Refuse(Exception):
    """Raised from a parser callback to stop parsing this connection's input."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """:class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` with ``limits``."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ConnectionLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.raw_head_limit = 2 * limits.max_head_bytes
        #: Bytes read since the head in progress began; None from its end to its message's end.
        self.head_bytes: int | None = 0
        self.max_line = limits.max_request_line_bytes
        self.max_field = limits.max_header_field_bytes
        self.max_fields = limits.max_header_fields
        self.max_head = limits.max_head_bytes
        self.line_bytes = 0  # the request line so far, but for the method
        self.fields_bytes = 0  # the header fields so far, names and values
        self.head_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.refusal: Refusal | None = None  # set by a parser callback that stopped the parser
        self.refused = False  # answered and lingering: everything read is dropped
        self.linger_left = LINGER_BYTES

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            log.warning("connection refused: too many open connections")
            self.refuse(OVERLOADED)
            return
        self.head_timer = self.loop.call_later(self.limits.header_timeout_seconds, self.head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_timers()
        super().connection_lost(exc)

    def cancel_timers(self) -> None:
        for timer in (self.head_timer, self.body_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = None

    def data_received(self, data: bytes) -> None:
        if self.refused:
            self.linger_left -= len(data)
            if self.linger_left <= 0:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        if self.head_bytes is not None:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.refusal is not None:
                self.refuse(self.refusal)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            # No surface speaks WebSocket (the runner loads no WebSocket library): the request
            # was answered like any other when its head was in.
            return
        # Timers only for what a read left unfinished: a request that arrives whole sets none.
        if self.head_bytes is None:
            if self.body_timer is None:  # the head is in, its body is not: it has a deadline now
                self.body_timer = self.loop.call_later(self.limits.body_timeout_seconds, self.body_timed_out)
        elif self.head_bytes:
            if self.head_bytes > self.raw_head_limit:
                self.refuse(head_too_large(self.limits.max_head_bytes))
            elif self.head_timer is None:  # part of a head: the rest has a deadline now
                self.head_timer = self.loop.call_later(self.limits.header_timeout_seconds, self.head_timed_out)

    # -- parser callbacks ------------------------------------------------------------------
    # on_url and on_header do what uvicorn's do, inline (they run for every request), and keep
    # to one comparison per call while a head is far from every limit: line_bytes leaves out
    # the method's length, which is asked of the parser only near a limit.

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.line_bytes = len(self.url) + _LINE_OVERHEAD
        if self.line_bytes + _LONGEST_METHOD > self.max_line and self.line_bytes + self.method_bytes() > self.max_line:
            self.stop(request_line_too_long(self.max_line))

    def on_header(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value)
        self.fields_bytes += size
        if (
            size > self.max_field
            or len(self.headers) >= self.max_fields
            or self.line_bytes + self.fields_bytes + _LONGEST_METHOD > self.max_head
        ):
            self.check_field(size)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def check_field(self, size: int) -> None:
        """Near or past a limit: count exactly, and stop the parser past one."""
        if size > self.max_field:
            self.stop(header_field_too_large(self.max_field))
        if len(self.headers) >= self.max_fields:
            self.stop(too_many_header_fields(self.max_fields))
        if self.line_bytes + self.fields_bytes + self.method_bytes() > self.max_head:
            self.stop(head_too_large(self.max_head))

    def on_headers_complete(self) -> None:
        self.head_bytes = None
        self.line_bytes = self.fields_bytes = 0  # for the next head
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.head_bytes = 0  # what follows is the next request's head
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        super().on_message_complete()

    def method_bytes(self) -> int:
        return len(self.parser.get_method())

    def stop(self, refusal: Refusal) -> None:
        self.refusal = refusal
        raise _Refuse(refusal.status)

    # -- timers ----------------------------------------------------------------------------

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.refused or self.transport.is_closing():
            return
        if not self.head_bytes:  # nothing of a request arrived: an idle connection is closed (RFC 9112 §9.5)
            self.transport.close()
            return
        self.refuse(head_timed_out(self.limits.header_timeout_seconds))

    def body_timed_out(self) -> None:
        """The body has not arrived in time: the app, which is waiting for it, answers 408."""
        self.body_timer = None
        cycle = self.cycle
        if cycle is None or self.transport.is_closing():
            return
        if cycle.response_complete:
            self.transport.close()
        elif cycle.response_started:
            cycle.keep_alive = False  # answered without the body: close once the answer is out
        else:
            cycle.scope[REFUSED] = body_timed_out(self.limits.body_timeout_seconds)  # type: ignore[literal-required]
            cycle.message_event.set()  # wakes the app's receive(); aap.web.body answers

    # -- refusing --------------------------------------------------------------------------

    def refuse(self, refusal: Refusal) -> None:
        """Stop reading this connection's requests; the app answers ``refusal``, then it closes."""
        self.refused = True
        self.cancel_timers()
        self._unset_keepalive_if_required()
        self.flow.resume_reading()  # what follows is read only to be dropped
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind an answer still being written: no answer of ours may
            # interleave with it, so the connection just closes once that answer is out.
            self.cycle.keep_alive = False
            return
        task = self.loop.create_task(self.answer(refusal))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def refused_scope(self, refusal: Refusal) -> dict[str, Any]:
        """The request as the app sees it: method and path if they were read, no header fields."""
        path, raw = "/", b"/"
        try:
            method = self.parser.get_method().decode("ascii")
        except Exception:  # nothing of a request was read
            method = "GET"
        # The path picks the answer's shape. A request line cut short names it only if its query
        # had begun within the limit (a path cut short is not the path); what it overran by is
        # never parsed.
        url = getattr(self, "url", b"")[: self.limits.max_request_line_bytes]  # set when a request begins
        if url and (refusal.status != 414 or b"?" in url):
            try:
                parsed = httptools.parse_url(url).path
            except httptools.HttpParserInvalidURLError:
                parsed = b""
            if parsed.startswith(b"/"):
                raw, path = parsed, urllib.parse.unquote(parsed.decode("latin-1"))
        return {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "method": method,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("latin-1") + raw,
            "query_string": b"",
            "headers": [],
            "state": self.app_state.copy(),
            REFUSED: refusal,
        }

    async def answer(self, refusal: Refusal) -> None:
        """Run the app on the refused request, write its answer, then close gracefully."""
        start: dict[str, Any] = {}
        body: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))

        try:
            await self.app(self.refused_scope(refusal), receive, send)
        except Exception as exc:  # the answer is best effort; the connection closes regardless
            log.warning("refusal not answered", extra={"fields": {"error_type": type(exc).__name__}})
        if self.transport.is_closing():
            return
        if start:
            lines = [STATUS_LINE[start["status"]]]
            for name, value in [*self.server_state.default_headers, *start.get("headers", [])]:
                if name.lower() != b"connection":
                    lines.extend([name, b": ", value, b"\r\n"])
            lines.append(b"connection: close\r\n\r\n")
            self.transport.write(b"".join(lines) + b"".join(body))
        self.linger()

    def linger(self) -> None:
        """Shut the sending side and drop what the client still sends, for a while (RFC 9112 §9.6)."""
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
