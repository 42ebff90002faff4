"""Turning tracing on for this process, from the ``OTEL_*`` environment (:func:`start`).

The OpenTelemetry SDK reads its own variables: the exporter's endpoint, headers, timeout,
compression and certificates (``OTEL_EXPORTER_OTLP_*``), the sampler (``OTEL_TRACES_SAMPLER``,
parent-based always-on by default: a request that arrives sampled is traced, one that arrives
unsampled is not), the batch processor's limits (``OTEL_BSP_*``), the propagators
(``OTEL_PROPAGATORS``: W3C Trace Context and Baggage) and the resource
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``). aap adds ``service.name = aap`` and
``service.version`` when they are not given. The provider becomes the process's global one, so
the MCP SDK's spans (the tool calls it answers) go to the same exporter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import aap
from aap import telemetry
from aap.telemetry import environment

if TYPE_CHECKING:
    from aap.telemetry.tracing import Tracing

log = logging.getLogger("aap.telemetry")

SERVICE_NAME = "aap"


def start(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """This process's tracing, turned on once when ``environ`` (the process's environment by
    default) asks for it; None, with nothing imported, when it does not."""
    environ = os.environ if environ is None else environ
    if telemetry.active is not None:
        return telemetry.active
    if not environment.wanted(environ):
        return None
    problems = environment.problems(environ)
    if problems:
        raise ValueError("; ".join(problems))
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from aap.telemetry.tracing import Tracing

    attributes = dict(Resource.create({}).attributes)  # the SDK's own, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    if str(attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = SERVICE_NAME
    attributes.setdefault("service.version", aap.__version__)
    resource = Resource(attributes)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    telemetry.active = Tracing(provider.get_tracer("aap", aap.__version__))
    log.info(
        "traces are exported over OTLP/HTTP", extra={"fields": {"service": resource.attributes.get("service.name")}}
    )
    return telemetry.active


def stop() -> None:
    """Send what is still buffered and stop (a process that is ending)."""
    if telemetry.active is None:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        shutdown()
