"""An OTLP/HTTP trace receiver on 127.0.0.1 for the tests: what a collector would receive.

``POST /v1/traces`` bodies are ``ExportTraceServiceRequest`` protobuf messages (gzip when the
exporter compresses), decoded with the official ``opentelemetry-proto`` classes into plain
:class:`ReceivedSpan` records: every attribute of every span, its resource and its events, so a
test can read everything an aap process exported.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def plain(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    status_code: int
    status_message: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> list[str]:
        """Every string this span carries: name, attribute keys and values, resource, events, status."""
        out = [self.name, self.status_message, self.scope]
        for mapping in (self.attributes, self.resource, *self.events):
            for key, value in mapping.items():
                out.append(str(key))
                out.append(str(value))
        return out


class OtlpReceiver:
    """Collects the spans exported to ``self.endpoint`` (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                outer.receive(self.path, body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def receive(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: plain(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=KINDS[span.kind],
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={kv.key: plain(kv.value) for kv in span.attributes},
                            resource=resource,
                            scope=scope_spans.scope.name,
                            status_code=span.status.code,
                            status_message=span.status.message,
                            events=[
                                {"name": e.name, **{kv.key: plain(kv.value) for kv in e.attributes}}
                                for e in span.events
                            ],
                        )
                    )
        with self.lock:
            self.paths.append(path)
            self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, found: Callable[[list[ReceivedSpan]], bool], rounds: int = 600) -> list[ReceivedSpan]:
        """The spans received once ``found`` holds of them (a deadline for a broken exporter,
        never a measurement: the batch processor sends every few tens of milliseconds here)."""
        for _ in range(rounds):
            spans = self.received()
            if found(spans):
                return spans
            time.sleep(0.05)
        raise AssertionError(f"the expected spans never arrived; got {[s.name for s in self.received()]}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
