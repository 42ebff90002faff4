"""The spans aap makes, given a tracer (:class:`Tracing`); imported only while tracing is on.

Names and attributes follow the OpenTelemetry semantic conventions: HTTP server spans
(``http.request.method``, ``url.path``, ``http.route``, ``http.response.status_code``...,
:mod:`aap.web.tracing`), MCP server spans (``mcp.method.name``, ``gen_ai.tool.name``...,
exactly as the MCP SDK words its own), database client spans (``db.system.name``, never a
statement), and ``aap.*`` attributes for what only aap knows (the binding, skill, AAP error
code, platform tenant). Every value is one aap chose — an id, a name from the configuration, a
status — never a value a request carried, so no span can hold a customer's data.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

T = TypeVar("T")

#: The request facts of :func:`aap.web.accesslog.annotate`, as span attributes.
ANNOTATIONS = {
    "binding": "aap.binding",
    "skill": "aap.skill",
    "aap_code": "aap.error.code",
    "rpc_code": "rpc.response.status_code",
    "error_id": "aap.error.id",
    "tenant": "aap.tenant",
}
#: The W3C Trace Context and Baggage keys an MCP request may carry in ``params._meta`` (the MCP
#: specification reserves them, unprefixed, for trace context propagation).
TRACE_META_KEYS = frozenset({"traceparent", "tracestate", "baggage"})


class Tracing:
    """This process's tracer and the spans made with it."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    # -- context -----------------------------------------------------------------------------
    def extract(self, carrier: Mapping[str, str]) -> Context | None:
        """The remote context a W3C ``traceparent`` in ``carrier`` names, or None (no valid one:
        the span then has the current context as its parent, as the MCP SDK does)."""
        if "traceparent" not in carrier:
            return None
        try:
            context = propagate.extract(dict(carrier))
        except (ValueError, TypeError):
            return None
        return context if trace.get_current_span(context).get_span_context().is_valid else None

    def traceparent(self) -> str | None:
        """The current span's W3C ``traceparent`` (None outside a sampled span): what is kept
        with work done later on the current request's behalf (a lead's deliveries)."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier.get("traceparent")

    def carried(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` run in the current context wherever it runs (an executor thread): its spans
        are children of the request's."""
        return functools.partial(contextvars.copy_context().run, fn)

    def annotate(self, fields: Mapping[str, Any]) -> None:
        """A door's facts about the request (:func:`aap.web.accesslog.annotate`) on the current span."""
        self.annotate_span(trace.get_current_span(), fields)

    @staticmethod
    def annotate_span(span: Span, fields: Mapping[str, Any]) -> None:
        """``fields`` (names of :data:`ANNOTATIONS`) as ``span``'s attributes."""
        if span.is_recording():
            for name, value in fields.items():
                if value is not None and name in ANNOTATIONS:
                    span.set_attribute(ANNOTATIONS[name], str(value))

    @staticmethod
    def failed(span: Span, error_type: str) -> None:
        """Mark ``span`` failed (:func:`failed`)."""
        failed(span, error_type)

    # -- spans -----------------------------------------------------------------------------------
    def span(
        self,
        name: str,
        kind: SpanKind,
        attributes: Mapping[str, str | int | bool],
        context: Context | None = None,
    ) -> AbstractContextManager[Span]:
        """A span made current for the ``with`` block; an exception in it marks the span failed
        with the exception's type only (its text may hold a value)."""
        return self.tracer.start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    @contextmanager
    def transaction(self, inner: AbstractContextManager[T], system: str, write: bool, url: str) -> Iterator[T]:
        """A client span around one database transaction (``inner``): which database, read or
        write; never a statement (statements carry values). Only inside a span: the transactions
        of background loops (a platform's registry poll, lease sweeps) make no traces of their own."""
        if not trace.get_current_span().is_recording():
            with inner as tx:
                yield tx
            return
        summary = "write transaction" if write else "read transaction"
        attributes: dict[str, str | int | bool] = {"db.system.name": system, "db.query.summary": summary}
        if system != "sqlite":
            attributes.update(_server(url))
            database = urlsplit(url).path.strip("/")
            if database:
                attributes["db.namespace"] = database
        with self.span(summary, SpanKind.CLIENT, attributes) as span:
            try:
                with inner as tx:
                    yield tx
            except BaseException as exc:
                failed(span, type(exc).__qualname__)
                raise

    def feed_fetch(self, feed_source: str, scheme: str) -> AbstractContextManager[Span]:
        """A client span around one fetch of a feed: the scheme and host, never the path or
        query (a query may hold a token)."""
        attributes: dict[str, str | int | bool] = {"url.scheme": scheme}
        if scheme != "file":
            attributes.update(_server(feed_source))
        return self.span(f"feed fetch {scheme}", SpanKind.CLIENT, attributes)

    def delivery(
        self, traceparent: str | None, attributes: Mapping[str, str | int | bool]
    ) -> AbstractContextManager[Span]:
        """A client span around one delivery attempt of a lead to its CRM, in the trace of the
        request that stored the lead when its ``traceparent`` was kept."""
        context = self.extract({"traceparent": traceparent}) if traceparent else None
        return self.span(
            f"lead delivery {attributes.get('aap.delivery.kind', '')}".rstrip(), SpanKind.CLIENT, attributes, context
        )

    def mcp_tool_call(
        self, tool: str, protocol_version: str, request_id: str | int, meta: Mapping[str, Any] | None
    ) -> AbstractContextManager[Span]:
        """The MCP server span of one ``tools/call``, named and attributed as the MCP SDK's
        ``OpenTelemetryMiddleware`` makes it (the MCP semantic conventions): a call answered
        without the SDK looks the same in a trace as one the SDK answered."""
        carrier = {k: v for k, v in (meta or {}).items() if k in TRACE_META_KEYS and isinstance(v, str)}
        attributes: dict[str, str | int | bool] = {
            "mcp.method.name": "tools/call",
            "mcp.protocol.version": protocol_version,
            "jsonrpc.request.id": str(request_id),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
        }
        return self.span(f"tools/call {tool}", SpanKind.SERVER, attributes, self.extract(carrier))


def failed(span: Span, error_type: str, description: str | None = None) -> None:
    """Mark ``span`` failed with ``error.type`` (a type or code, never a message with values)."""
    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, description)


def _server(url: str) -> dict[str, str | int | bool]:
    """``server.address`` and ``server.port`` of ``url`` (no user, path or query)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return {}
    found: dict[str, str | int | bool] = {}
    if host:
        found["server.address"] = host
    if port:
        found["server.port"] = port
    return found
