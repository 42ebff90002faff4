"""Traces: OpenTelemetry, off by default, on when the standard ``OTEL_*`` variables say so.

Tracing is a property of the process (OpenTelemetry has one tracer provider per process, and the
MCP SDK's own spans use it): the process's entry point — each ``aap serve`` worker, ``aap
deliver``, ``aap feeds run`` — calls :func:`aap.telemetry.setup.start` once, which reads the
environment (:mod:`.environment`) and, when tracing is asked for, builds the SDK's provider and
OTLP/HTTP exporter and sets :data:`active`. Everything else looks at :data:`active` only:
while it is None (tracing off, the default) no OpenTelemetry module is even imported, and what
an instrumented place costs is that one check (docs/deployment.md, "Traces").

- the HTTP server span of each request: :mod:`aap.web.tracing`;
- the MCP server span of a tool call answered without the SDK, named and attributed as the
  SDK names its own (:mod:`aap.bindings.mcp.fastpath`);
- a span per database transaction (:mod:`aap.store.db`), per feed fetch
  (:mod:`aap.feeds.fetch`) and per CRM delivery (:mod:`aap.leads.worker`), the delivery in the
  trace of the request that stored the lead (its ``traceparent`` is kept with the outbox row);
- the facts a door records about a request (:func:`aap.web.accesslog.annotate`) on the span it
  runs in.

No attribute carries a customer's data: names and values are chosen here and in
:mod:`aap.web.tracing`, never copied from a request body (tests/test_telemetry.py reads every
attribute a run exports).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

#: This process's tracing; None while tracing is off (set by :func:`aap.telemetry.setup.start`).
active: Tracing | None = None
