"""The app around the bindings, over real HTTP on loopback: health, metrics,
access logs without customer values, body limit, per-caller rate limiting,
internal errors, and the app assembly contract."""

from __future__ import annotations

import json
import logging
import math

import httpx
import orjson
import pytest

import aap
from aap import poppy
from aap.bindings import a2a
from aap.config.model import RateLimit
from aap.server import app as app_module
from aap.server.logconfig import JsonFormatter
from aap.spec import validate
from aap.web.surface import Surface
from factories import deployment_fixture, http_fixture
from http_helpers import ERROR_INFO, Deployment, aap_error_of, assert_valid_response, detail_of, send_message

DEALER = {"type": "dealer.information.request"}
SECRET = "zq-secret-4711@customer.example"


deployment = deployment_fixture("web", inventory=20, rate_limit=RateLimit(enabled=False), max_body_bytes=4096)


http = http_fixture()


# -- assembly ------------------------------------------------------------------------------
def test_app_state(deployment):
    state = deployment.app.state
    assert state.settings is deployment.settings
    assert state.stores is deployment.stores
    assert state.agent.settings is deployment.settings
    assert a2a.build in [surface.build for surface in app_module.SURFACES]


def test_every_surface_builds_within_the_paths_it_declares(deployment):
    """A surface's declared paths are what routes requests to it (aap.web.surface): every route
    it builds lies within them, and no two surfaces declare one path."""
    from aap.web.surface import SurfaceTable

    runtime = deployment.app.state.runtime
    table = SurfaceTable(app_module.SURFACES)
    for index, surface in enumerate(app_module.SURFACES):
        built = runtime.built(index)
        assert built is not None, surface.name
        for route in built.router.routes:
            path = route.path.split("{", 1)[0]
            assert surface.answers(path), (surface.name, route.path)
            assert table.owner(path) == index, (surface.name, route.path)
        for path, _method in built.direct:
            assert table.owner(path) == index
    declared = [rule for surface in app_module.SURFACES for rule in surface.paths]
    assert len(declared) == len(set(declared))


def test_surface_lifespans_and_services_run(tmp_path, monkeypatch):
    """Lifespans of surfaces run first, services after; both are left in reverse order."""
    import contextlib

    from aap.web.parts import BindingParts

    events: list[str] = []

    def build(gateway):
        @contextlib.asynccontextmanager
        async def lifespan(app):
            events.append("binding up:" + type(app.state.agent).__name__)
            yield
            events.append("binding down")

        return BindingParts(routes=[], lifespans=[lifespan])

    @contextlib.asynccontextmanager
    async def hook(gateway):
        events.append("hook up:" + type(gateway.agent).__name__)
        yield
        events.append("hook down")

    monkeypatch.setattr(app_module, "SURFACES", (*app_module.SURFACES, Surface("test", ("/test",), build)))
    monkeypatch.setattr(app_module, "SERVICES", (hook,))
    with Deployment(tmp_path, inventory=0) as dep:
        assert httpx.get(dep.base_url + "/healthz").status_code == 200
        assert events == ["binding up:DealerAgent", "hook up:DealerAgent"]
    assert events == ["binding up:DealerAgent", "hook up:DealerAgent", "hook down", "binding down"]


def test_every_path_of_the_table_is_served(deployment):
    """aap.paths is the one table of routes: everything it names is mounted at that path."""
    from aap import paths

    own = deployment.app.user_middleware[1].kwargs["own"]  # the deployment's own endpoints
    served = {route.path for route in deployment.app.state.runtime.routes()} | {r.path for r in own.routes}
    named = {name: value for name, value in vars(paths).items() if name.endswith("_PATH")}
    # including the RFC 9728 metadata of /mcp that the MCP 401 challenge names (docs/mcp.md)
    assert {name for name, value in named.items() if value not in served} == set()
    assert paths.SCHEMAS_PREFIX in served
    assert {paths.POPPY_API_PREFIX + skill.id for skill in deployment.app.state.agent.skills} <= served


def test_deployment_urls_follow_the_public_base_url():
    from aap.paths import DeploymentUrls

    urls = DeploymentUrls("https://platform.example/dealers/42/")
    assert urls.agent_card == "https://platform.example/dealers/42/.well-known/agent-card.json"
    assert urls.poppy_operation("inventory.search") == "https://platform.example/dealers/42/poppy/v1/inventory.search"
    assert urls.poppy_api == "https://platform.example/dealers/42/poppy/v1"
    assert urls.mcp_protected_resource == "https://platform.example/dealers/42/.well-known/oauth-protected-resource/mcp"


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


@pytest.mark.slow
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


OVERSIZED = b'{"padding": "' + b"x" * 5000 + b'"}'


def test_body_limit_answers_mcp_in_json_rpc(http):
    response = http.post("/mcp", content=OVERSIZED, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.headers["connection"] == "close"
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600 and "4096" in body["error"]["message"]


def test_body_limit_answers_oauth_in_oauth_error_json(http):
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in ("/oauth/token", "/oauth/revoke"):
        response = http.post(path, content=b"grant_type=" + b"x" * 5000, headers=form)
        assert response.status_code == 413
        body = response.json()
        assert set(body) == {"error", "error_description"} and body["error"] == "invalid_request"
        assert "4096" in body["error_description"]
        assert response.headers["cache-control"] == "no-store"


def test_body_limit_answers_the_poppy_api_in_aap_error(http):
    response = http.post("/poppy/v1/inventory.search", content=OVERSIZED, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    error = response.json()
    assert validate(error, "error") == []
    assert error["code"] == "SCHEMA_VALIDATION_FAILED" and "4096" in error["message"]
    assert error["details"]["errors"] == [
        {"instanceLocation": "", "keyword": "maxLength", "error": "The request body exceeds 4096 bytes."}
    ]


def test_body_limit_answers_other_paths_in_the_plain_shape(http):
    for path in ("/llms.txt", "/no-such-thing"):
        response = http.post(path, content=OVERSIZED, headers={"Content-Type": "application/json"})
        assert response.status_code == 413
        assert response.json() == {
            "error": {"status": 413, "message": ("The request body is larger than this endpoint accepts (4096 bytes).")}
        }


def test_error_shapes_pick_exact_paths_and_the_longest_prefix():
    from aap.errors import AapError
    from aap.web.errors import ErrorShapes, plain_error

    def a(status, error): ...
    def b(status, error): ...
    def c(status, error): ...

    shapes = ErrorShapes({"/a2a": a, "/poppy/": b, "/poppy/v1/": c})
    assert shapes.for_path("/a2a") is a
    assert shapes.for_path("/a2a/openapi.json") is plain_error  # an exact path is not a prefix
    assert shapes.for_path("/poppy/feedback") is b
    assert shapes.for_path("/poppy/v1/lead.submit") is c
    assert shapes.for_path("/healthz") is plain_error
    assert plain_error(500, AapError("INTERNAL_ERROR")).status_code == 500


# -- metrics ------------------------------------------------------------------------------------
def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, by name and label set (label order is the library's)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics(http):
    http.post("/a2a", json=send_message(DEALER))
    http.post("/a2a", json=send_message({"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}))
    http.post("/a2a", content=b"{nope", headers={"Content-Type": "application/json"})
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    values = samples(text)

    def value(name: str, **labels: str) -> float:
        return values[(name, frozenset(labels.items()))]

    assert "# TYPE aap_requests_total counter" in text
    assert "# TYPE aap_request_duration_seconds histogram" in text
    assert value("aap_requests_total", binding="a2a", skill="dealer.information", status="200") >= 1
    assert value("aap_errors_total", binding="a2a", skill="inventory.vehicle", code="VEHICLE_NOT_FOUND") >= 1
    assert value("aap_errors_total", binding="a2a", skill="", code="-32700") >= 1
    count = value("aap_request_duration_seconds_count", binding="a2a", skill="dealer.information")
    assert value("aap_request_duration_seconds_bucket", binding="a2a", skill="dealer.information", le="+Inf") == count
    assert value("aap_info", version=aap.__version__, aap_version=aap.AAP_VERSION) == 1
    # The library's process and platform collectors.
    assert value("process_resident_memory_bytes") > 0
    assert ("python_info", frozenset()) not in values and any(name == "python_info" for name, _ in values)


# -- access log --------------------------------------------------------------------------------
def test_access_log_has_no_customer_values(http, caplog):
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
    caplog.set_level(logging.INFO, logger="aap")
    http.post("/a2a", json=send_message(DEALER))
    record = [r for r in caplog.records if r.name == "aap.access"][-1]
    line = json.loads(JsonFormatter().format(record))
    assert line["binding"] == "a2a" and line["skill"] == "dealer.information"
    assert "aap_code" not in line and "error_id" not in line
    assert isinstance(line["duration_ms"], float)


# -- internal errors -----------------------------------------------------------------------------
@pytest.mark.slow
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
    for record in caplog.records:
        assert "zq-secret" not in JsonFormatter().format(record)


@pytest.mark.slow
def test_unserialisable_result_is_internal_error(tmp_path):
    def odd(agent, request, ctx):
        return {"type": "dealer.information.response", "data": {"when": object()}}

    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=False)) as dep:
        dep.app.state.agent.register("dealer.information", odd)
        response = httpx.post(dep.base_url + "/a2a", json=send_message(DEALER))
    assert response.status_code == 200
    assert aap_error_of(response.json())["code"] == "INTERNAL_ERROR"


@pytest.mark.slow
def test_an_exception_no_endpoint_catches_is_a_logged_500_in_the_path_shape(tmp_path, monkeypatch, caplog):
    """One handler, one log line (error id, type, place; never the text), the body in the surface's shape."""
    from starlette.routing import Route

    from aap.web.parts import BindingParts

    async def crash(request):
        raise RuntimeError("database said: " + SECRET)

    def build(gateway):
        return BindingParts(
            routes=[Route("/poppy/v1/crash", crash, methods=["POST"]), Route("/crash", crash, methods=["GET"])]
        )

    tested = Surface(
        "test", ("/poppy/v1/crash", "/crash"), build, {"/poppy/v1/crash": poppy.ERROR_SHAPES["/poppy/v1/"]}
    )
    monkeypatch.setattr(app_module, "SURFACES", (*app_module.SURFACES, tested))
    caplog.set_level(logging.INFO, logger="aap")
    with Deployment(tmp_path, inventory=0) as dep:
        api = httpx.post(dep.base_url + "/poppy/v1/crash", json={})
        plain = httpx.get(dep.base_url + "/crash")
    assert api.status_code == 500 and plain.status_code == 500
    error = api.json()
    assert validate(error, "error") == [] and error["code"] == "INTERNAL_ERROR"
    assert plain.json() == {"error": {"status": 500, "message": "The dealer agent hit an unexpected error."}}
    logged = [r for r in caplog.records if r.getMessage() == "internal error"]
    assert [r.fields["endpoint"] for r in logged] == ["/poppy/v1/crash", "/crash"]
    assert logged[0].fields["error_id"] == error["error_id"]
    assert all(
        r.fields["error_type"] == "RuntimeError" and r.fields["where"].startswith("test_server_app.py:crash:")
        for r in logged
    )
    for record in caplog.records:
        assert "zq-secret" not in JsonFormatter().format(record)
    assert "zq-secret" not in api.text + plain.text


def test_each_binding_resolves_the_skill_once(deployment, http):
    """A2A resolves it from data.type (once); MCP from the tool and Poppy from the path (never again)."""
    from mcp_helpers import modern_call

    agent = deployment.app.state.agent
    resolved: list[str] = []
    original = agent.skill_for

    def counting(payload):
        resolved.append(payload.get("type"))
        return original(payload)

    agent.skill_for = counting
    try:
        assert "result" in http.post("/a2a", json=send_message(DEALER)).json()
        assert resolved == ["dealer.information.request"]
        body, headers = modern_call("tools/call", {"name": "aap_dealer_information", "arguments": DEALER})
        answer = http.post("/mcp", json=body, headers=headers).json()
        assert answer["result"]["isError"] is False
        assert resolved == ["dealer.information.request"]
    finally:
        del agent.skill_for


# -- rate limiting ------------------------------------------------------------------------------
@pytest.mark.slow
def test_rate_limited_per_caller(tmp_path):
    with Deployment(tmp_path, inventory=0, rate_limit=RateLimit(enabled=True, per_minute=6, burst=2)) as dep:
        with httpx.Client(base_url=dep.base_url) as http:
            ok = [http.post("/a2a", json=send_message(DEALER)) for _ in range(2)]
            limited = http.post("/a2a", json=send_message(DEALER, request_id="r3"))
            # The bucket lives in the database: another app on the same database shares it.
            from aap.errors import AapError
            from aap.ratelimit import RateLimiter, anonymous_caller_key

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


@pytest.mark.slow
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
    assert 'binding="a\\"b"' in text and 'skill="line\\nbreak\\\\"' in text
    values = samples(text)
    labels = {"binding": 'a"b', "skill": "line\nbreak\\"}
    assert values[("aap_requests_total", frozenset({**labels, "status": "200"}.items()))] == 1
    assert values[("aap_request_duration_seconds_bucket", frozenset({**labels, "le": "0.0025"}.items()))] == 0
    assert values[("aap_request_duration_seconds_bucket", frozenset({**labels, "le": "0.005"}.items()))] == 1


@pytest.mark.slow
def test_a_direct_path_is_answered_ahead_of_the_router_inside_the_middleware(tmp_path, monkeypatch, caplog):
    """A surface's hot path (aap.web.direct) gets its method straight, still logged, still under the
    body limit and the unexpected-error handler; its other methods go to the router as before."""
    from starlette.routing import Route

    from aap.web.parts import BindingParts

    seen: list[str] = []

    async def direct(scope, receive, send):
        seen.append(scope["method"])
        if scope["path"].endswith("/crash"):
            raise RuntimeError("database said: " + SECRET)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"direct"})

    async def routed(request):
        raise AssertionError("the router must not see a direct path's method")

    def build(gateway):
        return BindingParts(
            routes=[Route("/poppy/v1/hot", routed, methods=["POST"])],
            direct={("/poppy/v1/hot", "POST"): direct, ("/poppy/v1/crash", None): direct},
        )

    shapes = {path: poppy.ERROR_SHAPES["/poppy/v1/"] for path in ("/poppy/v1/hot", "/poppy/v1/crash")}
    tested = Surface("test", ("/poppy/v1/hot", "/poppy/v1/crash"), build, shapes)
    monkeypatch.setattr(app_module, "SURFACES", (*app_module.SURFACES, tested))
    caplog.set_level(logging.INFO, logger="aap")
    with Deployment(tmp_path, inventory=0) as dep:
        hot = httpx.post(dep.base_url + "/poppy/v1/hot", content=b"{}")
        wrong_method = httpx.get(dep.base_url + "/poppy/v1/hot")
        too_large = httpx.post(dep.base_url + "/poppy/v1/hot", content=b"x" * (dep.settings.max_body_bytes + 1))
        crash = httpx.put(dep.base_url + "/poppy/v1/crash", content=b"{}")
    assert (hot.status_code, hot.text) == (200, "direct")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["status"] == 405
    assert too_large.status_code == 413 and too_large.json()["code"] == "SCHEMA_VALIDATION_FAILED"
    assert crash.status_code == 500 and validate(crash.json(), "error") == []
    assert seen == ["POST", "PUT"]
    logged = [r.fields for r in caplog.records if r.getMessage() == "request"]
    assert [(f["path"], f["status"]) for f in logged] == [
        ("/poppy/v1/hot", 200),
        ("/poppy/v1/hot", 405),
        ("/poppy/v1/hot", 413),
        ("/poppy/v1/crash", 500),
    ]
    assert "zq-secret" not in crash.text


def test_listing_documents_pass_through_a2a_mcp_and_poppy_as_stored(deployment, http):
    """The skill hands stored listing documents on as text (aap.jsontext.StoredJson); the doors
    that write answers copy them in (encode): the page is the same, byte for byte, as the decoded one."""
    from aap.agent import CallContext
    from aap.bindings.mcp.calls import success_result
    from aap.jsontext import StoredJson, encode

    request = {
        "type": "inventory.search.request",
        "sort": {"field": "price", "order": "asc"},
        "pagination": {"limit": 10},
    }
    agent = deployment.app.state.agent
    skill = agent.skill_for(request)
    now = CallContext(binding="test").now
    decoded = agent.run(skill, request, CallContext(binding="test", now=now))
    stored = agent.answer(skill, request, CallContext(binding="test", now=now))
    assert all(isinstance(v, StoredJson) for v in stored["data"]["vehicles"]), "documents stay as stored"
    assert len(decoded["data"]["vehicles"]) == 10
    assert all(isinstance(v, dict) for v in decoded["data"]["vehicles"])
    assert encode(stored) == orjson.dumps(decoded)
    assert orjson.dumps(success_result(stored, encoded=True)) == orjson.dumps(success_result(decoded))
    assert success_result(stored) == success_result(decoded)  # the SDK's path reads plain values
    answer = http.post("/a2a", json=send_message(request)).json()
    assert_valid_response(answer)
    assert answer["result"]["message"]["parts"][0]["data"]["data"]["vehicles"] == decoded["data"]["vehicles"]
