"""The app around the bindings, over real HTTP on loopback: health, metrics,
access logs without customer values, body limit, per-caller rate limiting,
internal errors, and the app assembly contract."""

from __future__ import annotations

import json
import logging
import math

import httpx
import pytest

from aap.config.model import RateLimit
from aap.web import app as app_module
from http_helpers import Deployment, aap_error_of, assert_valid_response, detail_of, send_message, ERROR_INFO

DEALER = {"type": "dealer.information.request"}
SECRET = "zq-secret-4711@customer.example"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with Deployment(
        tmp_path_factory.mktemp("web"), inventory=20, rate_limit=RateLimit(enabled=False), max_body_bytes=4096
    ) as dep:
        yield dep


@pytest.fixture(scope="module")
def http(deployment):
    with httpx.Client(base_url=deployment.base_url, timeout=30) as client:
        yield client


# -- assembly ------------------------------------------------------------------------------
def test_app_state(deployment):
    state = deployment.app.state
    assert state.settings is deployment.settings
    assert state.stores is deployment.stores
    assert state.agent.settings is deployment.settings
    assert "aap.bindings.a2a:build" in app_module.BINDINGS


def test_binding_lifespans_and_startup_hooks_run(tmp_path, monkeypatch):
    """Lifespans of bindings run first, startup hooks after; both are left in reverse order."""
    import contextlib
    import sys
    import types

    events: list[str] = []
    fake = types.ModuleType("aap_test_fake_binding")

    def build(agent):
        from aap.web.parts import BindingParts

        @contextlib.asynccontextmanager
        async def lifespan(app):
            events.append("binding up:" + type(app.state.agent).__name__)
            yield
            events.append("binding down")

        return BindingParts(routes=[], lifespans=[lifespan])

    @contextlib.asynccontextmanager
    async def hook(app):
        events.append("hook up")
        yield
        events.append("hook down")

    fake.build, fake.hook = build, hook
    monkeypatch.setitem(sys.modules, "aap_test_fake_binding", fake)
    monkeypatch.setattr(app_module, "BINDINGS", [*app_module.BINDINGS, "aap_test_fake_binding:build"])
    monkeypatch.setattr(app_module, "STARTUP_HOOKS", ["aap_test_fake_binding:hook"])
    with Deployment(tmp_path, inventory=0) as dep:
        assert httpx.get(dep.base_url + "/healthz").status_code == 200
        assert events == ["binding up:DealerAgent", "hook up"]
    assert events == ["binding up:DealerAgent", "hook up", "hook down", "binding down"]


def test_unknown_path_json_404(http):
    response = http.get("/no-such-thing")
    assert response.status_code == 404
    assert response.json()["error"]["status"] == 404


def test_a2a_get_not_allowed(http):
    response = http.get("/a2a")
    assert response.status_code == 405
    assert response.headers["content-type"].startswith("application/json")


# -- health ---------------------------------------------------------------------------------
def test_healthz(http):
    response = http.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["checks"]["database"] == "ok"
    assert response.headers["cache-control"] == "no-store"


def test_healthz_database_down(tmp_path):
    with Deployment(tmp_path, inventory=0) as dep:
        dep.stores.close()
        database = tmp_path / "aap.db"
        for _ in range(100):  # the delivery worker's thread may reopen (recreate) the file meanwhile
            database.unlink(missing_ok=True)
            try:
                database.mkdir()  # the path is no longer a database
                break
            except FileExistsError:
                continue
        assert database.is_dir()
        response = httpx.get(dep.base_url + "/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"


# -- body limit --------------------------------------------------------------------------------
def test_body_limit_content_length(http):
    body = send_message({"type": "inventory.search.request", "query": "x" * 5000})
    response = http.post("/a2a", json=body)
    assert response.status_code == 413
    payload = response.json()
    assert payload["error"]["code"] == -32600 and "4096" in payload["error"]["message"]
    assert_valid_response(payload)


def test_body_limit_chunked(http):
    def chunks():
        for _ in range(10):
            yield b" " * 1000

    response = http.post("/a2a", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["id"] is None


def test_body_under_limit_served(http):
    body = send_message({"type": "inventory.search.request"}, metadata={"note": "x" * 3000})
    assert 3000 < len(json.dumps(body)) < 4096
    response = http.post("/a2a", json=body)
    assert response.status_code == 200 and "result" in response.json()


# -- metrics ------------------------------------------------------------------------------------
def test_metrics(http):
    http.post("/a2a", json=send_message(DEALER))
    http.post("/a2a", json=send_message({"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}))
    http.post("/a2a", content=b"{nope", headers={"Content-Type": "application/json"})
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    lines = text.splitlines()

    def value(prefix: str) -> float:
        (line,) = [l for l in lines if l.startswith(prefix + " ")]
        return float(line.rsplit(" ", 1)[1])

    assert "# TYPE aap_requests_total counter" in text
    assert "# TYPE aap_request_duration_seconds histogram" in text
    assert value('aap_requests_total{binding="a2a",skill="dealer.information",status="200"}') >= 1
    assert value('aap_errors_total{binding="a2a",skill="inventory.vehicle",code="VEHICLE_NOT_FOUND"}') >= 1
    assert value('aap_errors_total{binding="a2a",skill="",code="-32700"}') >= 1
    count = value('aap_request_duration_seconds_count{binding="a2a",skill="dealer.information"}')
    assert value('aap_request_duration_seconds_bucket{binding="a2a",skill="dealer.information",le="+Inf"}') == count


# -- access log --------------------------------------------------------------------------------
def test_access_log_has_no_customer_values(http, caplog):
    from aap.web.logconfig import JsonFormatter

    formatter = JsonFormatter()
    caplog.set_level(logging.INFO, logger="aap")
    payloads = [
        # a search whose keyword query and an unknown filter carry the value
        send_message({"type": "inventory.search.request", "query": SECRET, "filters": {"email": SECRET}}),
        # a lead-shaped request (whether or not lead.submit is implemented here)
        send_message(
            {"type": "lead.submit.request", "customer": {"email": SECRET, "first_name": SECRET}},
            media_type=None,
            accepted=None,
        ),
        # an unknown skill named after the value
        send_message({"type": SECRET}),
    ]
    bodies = []
    for body in payloads:
        response = http.post(f"/a2a?email={SECRET}", json=body, headers={"X-Note": "ok"})
        assert response.status_code == 200
        bodies.append(response.text)
    records = [r for r in caplog.records if r.name == "aap.access"]
    assert len(records) >= 3
    for record in caplog.records:
        line = formatter.format(record)
        assert SECRET not in line and "zq-secret" not in line
    last = json.loads(formatter.format(records[-1]))
    assert set(last) >= {"ts", "level", "method", "path", "status", "binding", "duration_ms"}
    assert last["path"] == "/a2a" and last["method"] == "POST" and last["status"] == 200
    assert last["aap_code"] and last["error_id"]
    for text in bodies:
        assert "zq-secret" not in text


def test_access_log_success_fields(http, caplog):
    from aap.web.logconfig import JsonFormatter

    caplog.set_level(logging.INFO, logger="aap")
    http.post("/a2a", json=send_message(DEALER))
    record = [r for r in caplog.records if r.name == "aap.access"][-1]
    line = json.loads(JsonFormatter().format(record))
    assert line["binding"] == "a2a" and line["skill"] == "dealer.information"
    assert "aap_code" not in line and "error_id" not in line
    assert isinstance(line["duration_ms"], float)


# -- internal errors -----------------------------------------------------------------------------
def test_unexpected_exception_is_internal_error(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="aap")

    def broken(agent, request, ctx):
        raise RuntimeError("database said: " + SECRET)

    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=False)) as dep:
        dep.app.state.agent.register("dealer.information", broken)
        response = httpx.post(dep.base_url + "/a2a", json=send_message(DEALER))
    assert response.status_code == 200
    payload = response.json()
    assert_valid_response(payload)
    assert payload["error"]["code"] == -32603
    err = aap_error_of(payload)
    assert err["code"] == "INTERNAL_ERROR" and err["retryable"] is True
    assert "zq-secret" not in response.text and "Traceback" not in response.text
    logged = [r for r in caplog.records if r.name == "aap.a2a"]
    assert logged and logged[-1].fields["error_id"] == err["error_id"]
    assert logged[-1].fields["error_type"] == "RuntimeError"
    from aap.web.logconfig import JsonFormatter

    for record in caplog.records:
        assert "zq-secret" not in JsonFormatter().format(record)


def test_unserialisable_result_is_internal_error(tmp_path):
    def odd(agent, request, ctx):
        return {"type": "dealer.information.response", "data": {"when": object()}}

    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=False)) as dep:
        dep.app.state.agent.register("dealer.information", odd)
        response = httpx.post(dep.base_url + "/a2a", json=send_message(DEALER))
    assert response.status_code == 200
    assert aap_error_of(response.json())["code"] == "INTERNAL_ERROR"


# -- rate limiting ------------------------------------------------------------------------------
def test_rate_limited_per_caller(tmp_path):
    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=True, per_minute=6, burst=2)) as dep:
        with httpx.Client(base_url=dep.base_url) as http:
            ok = [http.post("/a2a", json=send_message(DEALER)) for _ in range(2)]
            limited = http.post("/a2a", json=send_message(DEALER, request_id="r3"))
            # The bucket lives in the database: another app on the same database shares it.
            from aap.web.ratelimit import RateLimiter, anonymous_caller_key
            from aap.errors import AapError

            shared = RateLimiter(dep.stores.state, dep.settings.rate_limit)
            with pytest.raises(AapError):
                shared.check(anonymous_caller_key("127.0.0.1"))
            shared.check(anonymous_caller_key("192.0.2.1"))  # another caller has its own bucket
    assert all("result" in r.json() for r in ok)
    assert limited.status_code == 200
    payload = limited.json()
    assert_valid_response(payload)
    assert payload["id"] == "r3"
    assert payload["error"]["code"] == -32000
    err = aap_error_of(payload)
    assert err["code"] == "RATE_LIMITED" and err["retryable"] is True
    retry_ms = err["details"]["retry_after_ms"]
    # 6 per minute: one token every 10 s.
    assert 0 < retry_ms <= 10_000
    retry_after = int(limited.headers["Retry-After"])
    assert retry_after == max(1, math.ceil(retry_ms / 1000))
    assert detail_of(payload, ERROR_INFO)["metadata"]["retry_after_ms"] == str(retry_ms)


def test_rate_limit_disabled(tmp_path):
    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=False, per_minute=1, burst=1)) as dep:
        with httpx.Client(base_url=dep.base_url) as http:
            answers = [http.post("/a2a", json=send_message(DEALER)).json() for _ in range(4)]
    assert all("result" in a for a in answers)


def test_metrics_label_escaping():
    from aap.web.metrics import Metrics

    metrics = Metrics()
    metrics.observe(binding='a"b', skill="line\nbreak\\", status=200, code="X", seconds=0.003)
    text = metrics.render()
    assert 'aap_requests_total{binding="a\\"b",skill="line\\nbreak\\\\",status="200"} 1' in text
    assert 'aap_request_duration_seconds_bucket{binding="a\\"b",skill="line\\nbreak\\\\",le="0.0025"} 0' in text
    assert 'aap_request_duration_seconds_bucket{binding="a\\"b",skill="line\\nbreak\\\\",le="0.005"} 1' in text
