"""Whether the ``OTEL_*`` environment asks for traces, read without importing OpenTelemetry.

The OpenTelemetry SDK's environment variables (its "SDK configuration" specification) keep
their meaning; what this module adds is the rule for *off*, which the SDK itself does not have
(its exporter defaults to OTLP on localhost):

- **on** when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
  or ``OTEL_TRACES_EXPORTER`` names ``otlp``;
- **off** otherwise, and always when ``OTEL_SDK_DISABLED`` is ``true`` or
  ``OTEL_TRACES_EXPORTER`` is ``none``.

Spans go out as OTLP over HTTP with protobuf bodies; another exporter or protocol asked for is a
problem the server reports at start rather than a silent loss of traces.
"""

from __future__ import annotations

from collections.abc import Mapping

EXPORTER = "OTEL_TRACES_EXPORTER"
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
DISABLED = "OTEL_SDK_DISABLED"
PROTOCOL = "http/protobuf"


def _exporters(environ: Mapping[str, str]) -> list[str]:
    return [name.strip().lower() for name in environ.get(EXPORTER, "").split(",") if name.strip()]


def wanted(environ: Mapping[str, str]) -> bool:
    """True when the environment asks for traces (see the module's rules)."""
    if environ.get(DISABLED, "").strip().lower() == "true":
        return False
    exporters = _exporters(environ)
    if exporters == ["none"]:
        return False
    return "otlp" in exporters or any(environ.get(name, "").strip() for name in ENDPOINTS)


def problems(environ: Mapping[str, str]) -> list[str]:
    """What in the environment asks for traces this server cannot send (empty when none)."""
    if not wanted(environ):
        return []
    found = []
    others = [name for name in _exporters(environ) if name not in ("otlp", "none")]
    if others:
        found.append(f"{EXPORTER}={','.join(others)}: traces are exported with OTLP only (otlp, or none)")
    for name in PROTOCOLS:
        value = environ.get(name, "").strip()
        if value and value != PROTOCOL:
            found.append(f"{name}={value}: traces are sent as OTLP over HTTP ({PROTOCOL})")
            break
    return found
