"""Traces (docs/deployment.md, "Traces"): the real server (``aap.server.runner.run``, with its
delivery worker) in a child process whose ``OTEL_*`` environment points at a loopback OTLP/HTTP
receiver that decodes what arrives with the official protobuf classes. A request's
``traceparent`` is continued; MCP tool calls answered with and without the SDK leave the same
span; database transactions are children of their request; a lead's CRM delivery is in the
lead's trace; and no attribute of anything exported holds any of the customer's values.
Without the variables, nothing of OpenTelemetry is even imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aap.telemetry import environment
from aap.work import Work
from http_helpers import AAP_HEADERS, send_message
from lead_support import CONSENT_TEXT, EMAIL, FIRST, LAST, MESSAGE, PHONE, Receiver, free_port, lead_request
from mcp_helpers import LEGACY, MODERN, envelope, legacy_headers, modern_call, rpc
from otlp_receiver import OtlpReceiver, ReceivedSpan

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

SERVER = Path(__file__).with_name("lead_server.py")
SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 5}}
#: Every value of the lead's customer: none may appear in any exported string.
PERSONAL = (FIRST, LAST, EMAIL, PHONE, PHONE[2:], MESSAGE, MESSAGE[:12], CONSENT_TEXT, EMAIL.split("@")[0])


def traceparent() -> tuple[str, str]:
    """A fresh sampled W3C ``traceparent`` and its trace id."""
    trace_id = uuid.uuid4().hex
    return f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01", trace_id


def a2a(data: dict) -> dict:
    return send_message(data)


class TracedServer:
    """``tests/lead_server.py`` (the real runner, deliveries in process) exporting to ``receiver``."""

    def __init__(self, tmp_path: Path, receiver: OtlpReceiver, crm_url: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "server.json"
        config.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "database_url": f"sqlite:///{tmp_path}/traced.db",
                    "crm_url": crm_url,
                    "poll_seconds": 0.05,
                    "timeout_seconds": 5,
                    "lease_seconds": 30,
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AAP_", "OTEL_"))}
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        self.log = tmp_path / "server.log"
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, str(SERVER), str(config)], stdout=output, stderr=output, env=env
            )
        for _ in range(300):  # bounded by count (~30 s on a loaded machine)
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(self.base + "/livez", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start: " + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Iterator[tuple[TracedServer, OtlpReceiver, Receiver]]:
    receiver = OtlpReceiver()
    crm = Receiver()
    server = TracedServer(tmp_path_factory.mktemp("traced"), receiver, crm.url)
    try:
        yield server, receiver, crm
    finally:
        server.stop()
        crm.close()
        receiver.close()


def in_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def server_span(spans: list[ReceivedSpan], trace_id: str, name: str) -> ReceivedSpan:
    (span,) = [s for s in in_trace(spans, trace_id) if s.kind == "SERVER" and s.name == name]
    return span


@pytest.mark.slow  # a server in a child process, spans batched out of it
def test_a_request_continues_the_incoming_trace_with_http_and_aap_attributes(traced):
    server, receiver, _ = traced
    header, trace_id = traceparent()
    answer = httpx.post(server.base + "/a2a", json=a2a(SEARCH), headers={**AAP_HEADERS, "traceparent": header})
    assert answer.status_code == 200 and "result" in answer.json()
    spans = receiver.wait_for(lambda got: any(s.trace_id == trace_id and s.kind == "SERVER" for s in got))
    span = server_span(spans, trace_id, "POST /a2a")
    assert span.parent_span_id == header.split("-")[2]  # the caller's span is its parent
    assert span.attributes == {
        "http.request.method": "POST",
        "url.scheme": "http",
        "url.path": "/a2a",
        "http.route": "/a2a",
        "network.protocol.version": "1.1",
        "server.address": "127.0.0.1",
        "server.port": server.port,
        "http.response.status_code": 200,
        "aap.binding": "a2a",
        "aap.skill": "inventory.search",
    }
    assert span.resource["service.name"] == "aap" and span.resource["service.version"]
    # The transactions of the search are the request's children, named by what they are.
    children = [s for s in in_trace(spans, trace_id) if s.parent_span_id == span.span_id]
    assert children and {s.kind for s in children} == {"CLIENT"}
    for child in children:
        assert child.name in ("read transaction", "write transaction")
        assert child.attributes["db.system.name"] == "sqlite"
        assert set(child.attributes) == {"db.system.name", "db.query.summary"}


@pytest.mark.slow  # a server in a child process, spans batched out of it
def test_an_error_is_named_by_its_aap_code_and_a_route_by_its_template(traced):
    server, receiver, _ = traced
    header, trace_id = traceparent()
    bad = httpx.post(
        server.base + "/a2a",
        json=a2a({"type": "inventory.search.request", "pagination": {"limit": -3}}),
        headers={**AAP_HEADERS, "traceparent": header},
    )
    assert "error" in bad.json()
    header2, missing_trace = traceparent()
    assert httpx.get(server.base + "/vehicles/NO-SUCH-CAR", headers={"traceparent": header2}).status_code == 404
    spans = receiver.wait_for(lambda got: {trace_id, missing_trace} <= {s.trace_id for s in got if s.kind == "SERVER"})
    failed = server_span(spans, trace_id, "POST /a2a")
    assert failed.attributes["aap.error.code"] == "SCHEMA_VALIDATION_FAILED"
    assert failed.attributes["rpc.response.status_code"] == "-32602"  # the JSON-RPC code, as a string
    page = server_span(spans, missing_trace, "GET /vehicles/{vehicle_id}")
    assert page.attributes["http.route"] == "/vehicles/{vehicle_id}"
    assert page.attributes["http.response.status_code"] == 404
    assert page.status_code == 0  # a 4xx is the client's: the server span's status stays unset


@pytest.mark.slow  # a server in a child process, spans batched out of it
@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_mcp_tool_calls_leave_the_same_span_with_and_without_the_sdk(traced, version):
    server, receiver, _ = traced
    spans_by_path = {}
    for path, extra in (("fast", {}), ("sdk", {"progressToken": "p-1"})):  # a progress token: the SDK answers
        header, trace_id = traceparent()
        if version == MODERN:
            body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": SEARCH})
            body["params"]["_meta"] = envelope(MODERN, traceparent=header, **extra)
        else:
            meta = {"traceparent": header, **extra}
            body = rpc("tools/call", {"name": "aap_inventory_search", "arguments": SEARCH, "_meta": meta})
            headers = legacy_headers(LEGACY)
        answer = httpx.post(server.base + "/mcp", json=body, headers=headers)
        assert answer.status_code == 200 and answer.json()["result"]["isError"] is False
        # wait for the server span itself: a child span ends first and may leave in an earlier batch
        spans = receiver.wait_for(
            lambda got, t=trace_id: any(s.trace_id == t and s.name == "tools/call aap_inventory_search" for s in got)
        )
        (span,) = [s for s in in_trace(spans, trace_id) if s.name == "tools/call aap_inventory_search"]
        assert span.kind == "SERVER" and span.parent_span_id == header.split("-")[2]  # the trace in _meta
        spans_by_path[path] = span
    fast, sdk = spans_by_path["fast"], spans_by_path["sdk"]
    assert fast.scope == "aap" and sdk.scope == "mcp-python-sdk"  # each path made its own
    assert fast.attributes == sdk.attributes
    assert fast.attributes["mcp.method.name"] == "tools/call"
    assert fast.attributes["gen_ai.tool.name"] == "aap_inventory_search"
    assert fast.attributes["mcp.protocol.version"] == version
    assert fast.attributes["aap.skill"] == "inventory.search"
    assert (fast.status_code, sdk.status_code) == (0, 0)


@pytest.mark.slow  # a server in a child process, spans batched out of it
def test_a_failed_tool_call_is_a_tool_error_on_both_paths(traced):
    server, receiver, _ = traced
    found = {}
    for path, extra in (("fast", {}), ("sdk", {"progressToken": "p-2"})):
        header, trace_id = traceparent()
        body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": {"type": "x"}})
        body["params"]["_meta"] = envelope(MODERN, traceparent=header, **extra)
        assert httpx.post(server.base + "/mcp", json=body, headers=headers).json()["result"]["isError"] is True
        spans = receiver.wait_for(lambda got, t=trace_id: any(s.trace_id == t and s.kind == "SERVER" for s in got))
        (found[path],) = [s for s in in_trace(spans, trace_id) if s.kind == "SERVER"]
    fast, sdk = ({k: v for k, v in found[p].attributes.items() if k != "aap.error.id"} for p in ("fast", "sdk"))
    assert fast == sdk  # each with its own error id
    assert found["sdk"].attributes["aap.error.id"].startswith("err_")
    assert found["fast"].attributes["error.type"] == "tool_error"
    assert found["fast"].attributes["aap.error.code"] == "SCHEMA_VALIDATION_FAILED"
    assert found["fast"].status_code == found["sdk"].status_code == 2  # STATUS_CODE_ERROR


@pytest.mark.slow  # a server in a child process, spans batched out of it
def test_a_lead_delivery_continues_the_leads_trace_and_no_span_holds_customer_data(traced):
    server, receiver, crm = traced
    header, trace_id = traceparent()
    lead = httpx.post(server.base + "/a2a", json=a2a(lead_request()), headers={**AAP_HEADERS, "traceparent": header})
    assert "result" in lead.json(), lead.text
    for extra in ({}, {"progressToken": "p-3"}):  # over MCP too, answered without and with the SDK
        body, headers = modern_call("tools/call", {"name": "aap_lead_submit", "arguments": lead_request()})
        body["params"]["_meta"] = envelope(MODERN, **extra)
        assert httpx.post(server.base + "/mcp", json=body, headers=headers).json()["result"]["isError"] is False
    spans = receiver.wait_for(
        lambda got: (
            any(s.trace_id == trace_id and s.name.startswith("lead delivery") for s in got)
            and sum(s.name.startswith("lead delivery") for s in got) >= 3
        )
    )
    assert len(crm.accepted()) >= 3  # the CRM stand-in got the three leads
    (delivery,) = [s for s in in_trace(spans, trace_id) if s.name.startswith("lead delivery")]
    request = server_span(spans, trace_id, "POST /a2a")
    assert request.attributes["aap.skill"] == "lead.submit"
    # Its parent is the transaction that stored the lead, a child of the request.
    (stored,) = [s for s in in_trace(spans, trace_id) if s.span_id == delivery.parent_span_id]
    assert stored.name == "write transaction" and stored.parent_span_id == request.span_id
    assert delivery.kind == "CLIENT"
    assert delivery.attributes["aap.delivery.outcome"] == "delivered"
    assert delivery.attributes["aap.delivery.target"] == "crm"
    assert delivery.attributes["aap.lead.id"].startswith("lead_") or delivery.attributes["aap.lead.id"]
    # Every string of every span exported so far: names, attributes, resources, events, statuses.
    texts = [text for span in receiver.received() for text in span.texts()]
    assert texts
    for value in PERSONAL:
        leaked = [text for text in texts if value.casefold() in text.casefold()]
        assert not leaked, f"{value!r} was exported: {leaked[:3]}"


@pytest.mark.slow  # a server in a child process, spans batched out of it
def test_without_otel_variables_nothing_of_opentelemetry_is_loaded():
    script = (
        "import sys, json\n"
        "from aap.server.runner import open_app\n"
        "from aap.config.loader import load_settings\n"
        "settings = load_settings(None, overrides={'database': 'sqlite://:memory:'}, environ={})\n"
        "app, stores = open_app(settings)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AAP_", "OTEL_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "dealer"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    ],
)
def test_when_the_environment_asks_for_traces(environ, wanted):
    assert environment.wanted(environ) is wanted
    assert environment.problems(environ) == []


def test_what_the_server_cannot_send_is_a_start_up_problem():
    problems = environment.problems({"OTEL_TRACES_EXPORTER": "otlp,zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert problems == [
        "OTEL_TRACES_EXPORTER=zipkin: traces are exported with OTLP only (otlp, or none)",
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: traces are sent as OTLP over HTTP (http/protobuf)",
    ]


@pytest.mark.slow  # a platform served by two worker processes, each exporting its spans
def test_a_platforms_spans_name_the_tenant_and_its_route_template(tmp_path):
    from aap.store import open_platform_database
    from aap.tenants import TenantRegistry
    from platform_support import PLATFORM_HOST, PlatformServer, platform_settings, tenant_config

    database_url = f"sqlite:///{tmp_path}/platform.db"
    db = open_platform_database(database_url)
    TenantRegistry(platform_settings(database_url), db, environ={}).add(
        "alpha", tenant_config("Alpha Motors"), ["alpha.example"]
    )
    db.close()
    receiver = OtlpReceiver()
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    server = PlatformServer(tmp_path, database_url, workers=2, environ=environ)
    try:
        traces = {}
        with server.client() as client:
            for name, url in (
                ("prefix", f"https://{PLATFORM_HOST}/t/alpha/a2a"),
                ("domain", "https://alpha.example/a2a"),
            ):
                header, traces[name] = traceparent()
                answer = client.post(url, json=a2a(SEARCH), headers={**AAP_HEADERS, "traceparent": header})
                assert "result" in answer.json(), answer.text
        spans = receiver.wait_for(lambda got: set(traces.values()) <= {s.trace_id for s in got if s.kind == "SERVER"})
        prefixed = server_span(spans, traces["prefix"], "POST /t/{tenant}/a2a")
        assert prefixed.attributes["aap.tenant"] == "alpha"
        assert prefixed.attributes["http.route"] == "/t/{tenant}/a2a"
        assert prefixed.attributes["server.address"] == PLATFORM_HOST
        domain = server_span(spans, traces["domain"], "POST /a2a")
        assert domain.attributes["aap.tenant"] == "alpha" and domain.attributes["server.address"] == "alpha.example"
    finally:
        server.stop()
        receiver.close()


# -- the spans of one process, in memory (a provider of this test's own, never the global one) -----


@pytest.fixture
def spans(monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from aap import telemetry
    from aap.telemetry.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("aap"))
    monkeypatch.setattr(telemetry, "active", tracing)
    yield tracing, exporter
    provider.shutdown()


async def test_a_feed_fetch_is_a_client_span_naming_only_scheme_and_host(spans, tmp_path):
    from opentelemetry.trace import SpanKind

    from aap.feeds.fetch import fetch

    _, exporter = spans
    feed = tmp_path / "feed.csv"
    feed.write_text("vin,price\n")
    fetched = await fetch(str(feed), work=WORK)
    assert fetched.data == b"vin,price\n"
    (span,) = exporter.get_finished_spans()
    assert (span.name, span.kind) == ("feed fetch file", SpanKind.CLIENT)
    assert dict(span.attributes) == {"url.scheme": "file", "aap.feed.unchanged": False}
    assert str(tmp_path) not in str(dict(span.attributes))


def test_a_transaction_is_a_span_only_inside_another(spans, tmp_path):
    from aap.store import open_database

    tracing, exporter = spans
    db = open_database(f"sqlite:///{tmp_path}/aap.db")
    try:
        exporter.clear()
        with db.read() as tx:  # a background loop's read: no span of its own
            tx.fetchone("SELECT 1")
        assert exporter.get_finished_spans() == ()
        with tracing.tracer.start_as_current_span("request"), db.transaction() as tx:
            tx.fetchone("SELECT 1")
        names = [s.name for s in exporter.get_finished_spans()]
        assert names == ["write transaction", "request"]
        with pytest.raises(ZeroDivisionError):
            with tracing.tracer.start_as_current_span("failing"), db.read():
                raise ZeroDivisionError("a value 4155557731 the message holds")
        failed = exporter.get_finished_spans()[-2]
        assert failed.attributes["error.type"] == "ZeroDivisionError"
        assert "4155557731" not in str(failed.status.description) + str(dict(failed.attributes))
    finally:
        db.close()


def test_a_traceparent_that_is_not_one_starts_no_trace_of_its_own(spans):
    tracing, _ = spans
    assert tracing.extract({"traceparent": "00-nonsense"}) is None
    assert tracing.extract({"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}) is None  # all-zero ids
    assert tracing.extract({}) is None
    assert tracing.traceparent() is None  # outside a span, nothing to keep with an outbox row
    with tracing.tracer.start_as_current_span("request"):
        kept = tracing.traceparent()
    assert kept is not None and tracing.extract({"traceparent": kept}) is not None
