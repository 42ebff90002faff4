"""The provisioning API over real HTTP on loopback, with the platform host's ``Host`` header, on
SQLite and PostgreSQL: every operation, its refusals, its authentication and rate limit, and
every answer validated against the OpenAPI document it serves (and schemathesis on it)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from aap.config.model import RateLimit
from aap.gateway import Gateway
from aap.platform.api import MAX_BODY_BYTES, ProvisioningApi
from aap.ratelimit import RateLimiter, anonymous_caller_key
from aap.secretbox import new_key
from aap.server.platform import PlatformContext, create_platform_app
from aap.server.platform_api import provisioning_routes
from aap.server.runner import open_app
from aap.store import Stores, open_platform_database
from aap.tenants import MAX_CONFIG_BYTES, TenantRegistry
from aap.work import Work
from http_helpers import LiveServer
from platform_support import PLATFORM_HOST, PlatformServer, eventually, platform_settings, tenant_config, tenant_stores

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

TOKEN = "t0k3n-" + "x" * 40
TENANTS = "/_platform/v1/tenants"


class Api:
    """A platform app on a live loopback server; ``call`` sends with the platform host's Host."""

    def __init__(self, server: LiveServer, registry: TenantRegistry, stores: Stores) -> None:
        self.server, self.registry, self.stores = server, registry, stores
        self.http = httpx.Client(base_url=server.base_url, timeout=30)
        self.document = self.http.get("/_platform/openapi.json", headers={"host": PLATFORM_HOST}).json()

    def call(self, method: str, path: str, *, host: str = PLATFORM_HOST, token: str | None = TOKEN, **kw) -> Any:
        headers = {"host": host, **kw.pop("headers", {})}
        if token is not None:
            headers.setdefault("authorization", f"Bearer {token}")
        return self.http.request(method, path, headers=headers, **kw)

    def close(self) -> None:
        self.http.close()


def start(
    database_url: str, routes: Callable[[PlatformContext], list], rate_limit: RateLimit | None = None, **platform: Any
) -> Iterator[Api]:
    deployment = platform_settings(database_url, **platform)
    if rate_limit is not None:  # the platform's own callers' limit (the API's 429)
        deployment = dataclasses.replace(deployment, rate_limit=rate_limit)
    stores = Stores(open_platform_database(database_url))
    app = create_platform_app(deployment, stores, platform_routes=[routes])
    server = LiveServer().start(app)
    registry = TenantRegistry(deployment, stores.db, environ={})
    api = Api(server, registry, stores)
    try:
        yield api
    finally:
        api.close()
        server.stop()
        stores.close()


@pytest.fixture
def api(database_url, tmp_path) -> Iterator[Api]:
    keys = tmp_path / "secret-keys"  # the platform's keys sealing tenant secrets (docs/platform.md)
    keys.write_text(new_key() + "\n")
    yield from start(database_url, provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN}), secret_keys_file=str(keys))


@pytest.fixture
def unlimited_api(database_url, tmp_path) -> Iterator[Api]:
    """The API with its callers' rate limit off: a generated run sends more requests than its
    burst, and each must reach the check it is about (the 429 is tested on its own)."""
    keys = tmp_path / "secret-keys"
    keys.write_text(new_key() + "\n")
    routes = provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN})
    yield from start(database_url, routes, rate_limit=RateLimit(enabled=False), secret_keys_file=str(keys))


def conforms(document: dict[str, Any], method: str, template: str, response: httpx.Response) -> Any:
    """``response`` as the document describes it for ``method template``; returns its JSON body."""
    operation = document["paths"][template][method.lower()]
    status = str(response.status_code)
    assert status in operation["responses"], (method, template, status, response.text)
    declared = operation["responses"][status]
    if "$ref" in declared:
        declared = document["components"]["responses"][declared["$ref"].rsplit("/", 1)[1]]
    for name, header in declared.get("headers", {}).items():
        if header.get("required"):
            assert name in response.headers, (name, status)
    content = declared.get("content")
    if content is None:
        assert response.content == b""
        return None
    assert response.headers["content-type"] == "application/json"
    schema = {**content["application/json"]["schema"], "components": document["components"]}
    body = response.json()
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    assert not errors, [e.message for e in errors]
    return body


def card_name(api: Api, host: str, prefix: str = "") -> str | int:
    answer = api.call("GET", prefix + "/.well-known/agent-card.json", host=host, token=None)
    return answer.json()["name"] if answer.status_code == 200 else answer.status_code


# -- the operations ----------------------------------------------------------------------------------


def test_create_read_list_update_domains_and_delete(api: Api) -> None:
    doc = api.document
    created = api.call(
        "POST", TENANTS, json={"id": "dealer-a", "config": tenant_config("Alpha Motors"), "domains": ["alpha.example"]}
    )
    body = conforms(doc, "POST", TENANTS, created)
    assert created.status_code == 201 and created.headers["location"] == f"{TENANTS}/dealer-a"
    assert body["revision"] == 1 and body["domains"] == ["alpha.example"]
    assert body["urls"] == ["https://alpha.example/", f"https://{PLATFORM_HOST}/t/dealer-a/"]
    assert body["config"] == tenant_config("Alpha Motors")
    # Served at once, at its domain and under its prefix, with its own documents.
    assert eventually(lambda: card_name(api, "alpha.example") == "Alpha Motors")
    assert card_name(api, PLATFORM_HOST, "/t/dealer-a") == "Alpha Motors"
    for tenant_id in ("dealer-b", "dealer-c"):
        assert api.call("POST", TENANTS, json={"id": tenant_id, "config": tenant_config(tenant_id)}).status_code == 201

    first = conforms(doc, "GET", TENANTS, api.call("GET", TENANTS, params={"limit": 2}))
    assert [t["id"] for t in first["tenants"]] == ["dealer-a", "dealer-b"] and first["next_after"] == "dealer-b"
    assert "config" not in first["tenants"][0]
    rest = conforms(doc, "GET", TENANTS, api.call("GET", TENANTS, params={"limit": 2, "after": "dealer-b"}))
    assert [t["id"] for t in rest["tenants"]] == ["dealer-c"] and rest["next_after"] is None
    whole = conforms(doc, "GET", TENANTS, api.call("GET", TENANTS))
    assert len(whole["tenants"]) == 3 and whole["next_after"] is None

    one = f"{TENANTS}/dealer-a"
    got = conforms(doc, "GET", TENANTS + "/{tenant_id}", api.call("GET", one))
    assert got["config"] == tenant_config("Alpha Motors")
    updated = conforms(
        doc, "PUT", TENANTS + "/{tenant_id}", api.call("PUT", one, json={"config": tenant_config("Alpha Group")})
    )
    assert updated["revision"] == 2 and updated["config"] == tenant_config("Alpha Group")
    assert eventually(lambda: card_name(api, "alpha.example") == "Alpha Group")  # no restart

    domains = TENANTS + "/{tenant_id}/domains"
    replaced = api.call("PUT", f"{one}/domains", json={"domains": ["www.alpha.example", "alpha.example"]})
    assert conforms(doc, "PUT", domains, replaced)["domains"] == ["alpha.example", "www.alpha.example"]
    assert eventually(lambda: card_name(api, "www.alpha.example") == "Alpha Group")
    changed = api.call("PATCH", f"{one}/domains", json={"add": ["alpha-cars.example"], "remove": ["alpha.example"]})
    assert conforms(doc, "PATCH", domains, changed)["domains"] == ["alpha-cars.example", "www.alpha.example"]
    assert eventually(lambda: card_name(api, "alpha.example") == 404)
    assert conforms(doc, "GET", TENANTS + "/{tenant_id}", api.call("GET", one))["revision"] == 4

    removed = api.call("DELETE", one)
    conforms(doc, "DELETE", TENANTS + "/{tenant_id}", removed)
    assert removed.status_code == 204
    assert eventually(lambda: card_name(api, "www.alpha.example") == 404)
    assert card_name(api, PLATFORM_HOST, "/t/dealer-a") == 404
    for method in ("GET", "DELETE"):
        gone = api.call(method, one)
        assert gone.status_code == 404
        assert conforms(doc, method, TENANTS + "/{tenant_id}", gone)["error"]["problems"] == ["no tenant 'dealer-a'"]
    assert api.registry.store.tenant("dealer-a") is None


def test_every_problem_is_answered_at_once_and_nothing_is_written(api: Api) -> None:
    doc = api.document
    assert api.call("POST", TENANTS, json={"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]})
    bad = tenant_config("B").replace('timezone = "America/Los_Angeles"', 'timezone = "Nowhere/City"')
    refused = api.call(
        "POST",
        TENANTS,
        json={"id": "dealer-b", "config": "id = 'b'\n" + bad, "domains": ["a.example", "[::1]", PLATFORM_HOST]},
    )
    problems = conforms(doc, "POST", TENANTS, refused)["error"]["problems"]
    assert refused.status_code == 400
    assert problems == [
        "domain '[::1]': is an IP address; a tenant is served at a domain name",
        f"domain '{PLATFORM_HOST}': is the platform's own host (tenants are served at /t/ID/ there)",
        "domain 'a.example': already served by tenant 'dealer-a'",
        "id: is the platform's, not a tenant's: the tenant id names the agent",
        "dealer.rooftops[0].timezone: unknown IANA timezone",
    ]
    shapes = api.call("POST", TENANTS, json={"id": 7, "config": ["x"], "domains": "a.example", "colour": "red"})
    assert conforms(doc, "POST", TENANTS, shapes)["error"]["problems"] == [
        "id: must be a string",
        "config: must be a string",
        "domains: must be an array of strings",
        "colour: not a field of this request (fields: id, config, domains)",
    ]
    long = api.call("POST", TENANTS, json={"id": "a" * 5000, "config": "", "domains": ["b" * 5000 + ".example"]})
    assert conforms(doc, "POST", TENANTS, long)["error"]["problems"] == [
        "id: at most 48 characters",
        "domains: a host name has at most 253 characters",
    ]
    assert len(long.content) < 1000  # neither is quoted back
    missing = api.call("POST", TENANTS, json={})
    assert conforms(doc, "POST", TENANTS, missing)["error"]["problems"] == ["id: required", "config: required"]
    again = api.call("POST", TENANTS, json={"id": "dealer-a", "config": tenant_config("A")})
    assert (
        again.status_code == 409 and "exists already" in conforms(doc, "POST", TENANTS, again)["error"]["problems"][0]
    )
    for content, media, status in (
        (b"{not json", "application/json", 400),
        (b"[1, 2]", "application/json", 400),
        (b"id=x", "application/x-www-form-urlencoded", 415),
        (b'{"id": "x"}', "text/plain", 415),
    ):
        answer = api.call("POST", TENANTS, content=content, headers={"content-type": media})
        assert answer.status_code == status
        conforms(doc, "POST", TENANTS, answer)
    update = api.call("PUT", f"{TENANTS}/dealer-a", json={"config": tenant_config("A"), "colour": "red"})
    assert update.status_code == 400 and "colour: not a field" in update.json()["error"]["problems"][0]
    empty = api.call("PATCH", f"{TENANTS}/dealer-a/domains", json={"add": [], "remove": []})
    assert conforms(doc, "PATCH", TENANTS + "/{tenant_id}/domains", empty)["error"]["problems"] == [
        "(body): give add and/or remove, each an array of host names"
    ]
    not_mine = api.call("PATCH", f"{TENANTS}/dealer-a/domains", json={"remove": ["b.example"]})
    assert not_mine.status_code == 400 and "not a domain of tenant 'dealer-a'" in not_mine.text
    unknown = api.call("PUT", f"{TENANTS}/dealer-z/domains", json={"domains": []})
    assert conforms(doc, "PUT", TENANTS + "/{tenant_id}/domains", unknown)["error"]["status"] == 404
    query = api.call("GET", TENANTS, params={"limit": "0", "sort": "id"})
    assert conforms(doc, "GET", TENANTS, query)["error"]["problems"] == [
        "sort: not a parameter of this request (parameters: after, limit)",
        "limit: must be a whole number from 1 to 1000",
    ]
    nul = api.call("GET", TENANTS, params={"after": "dealer\x00a"})  # PostgreSQL's text cannot hold NUL
    assert conforms(doc, "GET", TENANTS, nul)["error"]["problems"] == [
        "after: must be a tenant id (the previous page's next_after)"
    ]
    assert api.registry.list(matching="a\x00") == [] and api.registry.list(after="\x00") == []
    assert [t["id"] for t in api.call("GET", TENANTS).json()["tenants"]] == ["dealer-a"]
    assert api.registry.get("dealer-a").revision == 1


def test_bodies_are_bounded_before_they_are_read(api: Api) -> None:
    doc = api.document
    # A body announced larger than the API reads is refused before a byte of it is read.
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=30) as raw:
        raw.sendall(
            f"POST {TENANTS} HTTP/1.1\r\nHost: {PLATFORM_HOST}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n{".encode()
        )
        head = raw.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 413 "), head

    def chunks() -> Iterator[bytes]:
        yield b'{"id": "big", "config": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"#" * 65536
        yield b'"}'

    streamed = api.call("POST", TENANTS, content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    conforms(doc, "POST", TENANTS, streamed)
    large = api.call("POST", TENANTS, json={"id": "big", "config": "#" * (MAX_CONFIG_BYTES + 1)})
    assert large.status_code == 400 and "larger than 256 KiB" in large.text
    assert api.registry.store.tenant("big") is None


# -- who may call it ---------------------------------------------------------------------------------


def test_a_bearer_token_compared_to_the_configured_one(api: Api) -> None:
    doc = api.document
    missing = api.call("GET", TENANTS, token=None)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="aap-platform"'
    conforms(doc, "GET", TENANTS, missing)
    wrong = api.call("GET", TENANTS, token=TOKEN[:-1] + "y")
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == 'Bearer realm="aap-platform", error="invalid_token"'
    for header in (f"Basic {TOKEN}", TOKEN, "Bearer", f"Bearer  {TOKEN}x"):
        assert api.call("GET", TENANTS, headers={"authorization": header}).status_code == 401, header
    assert api.call("GET", TENANTS, headers={"authorization": f"bearer {TOKEN}"}).status_code == 200
    created = api.call("POST", TENANTS, token="nope", json={"id": "dealer-x", "config": tenant_config("X")})
    assert created.status_code == 401 and api.registry.store.tenant("dealer-x") is None
    assert api.call("GET", "/_platform/openapi.json", token=None).status_code == 200  # the document is public
    assert TOKEN not in api.call("GET", "/_platform/openapi.json").text


@pytest.mark.parametrize("environ", [{}, {"AAP_PLATFORM_TOKEN": ""}, {"AAP_PLATFORM_TOKEN": "short-token"}])
def test_without_a_token_configured_the_api_is_never_open(tmp_path, environ) -> None:
    for api in start(f"sqlite:///{tmp_path}/p.db", provisioning_routes(environ)):
        for method, path in (("GET", TENANTS), ("POST", TENANTS), ("DELETE", f"{TENANTS}/x")):
            for token in (None, "short-token", TOKEN):
                answer = api.call(method, path, token=token, json={"id": "x", "config": ""})
                assert answer.status_code == 503, (method, path, token)
                assert (
                    "not configured"
                    in conforms(api.document, method, path.replace("/x", "/{tenant_id}"), answer)["error"]["message"]
                )
        assert api.registry.store.count() == 0


def test_the_token_comes_from_the_variable_api_token_env_names(tmp_path, monkeypatch) -> None:
    """``runner.open_app``, as ``aap serve`` builds a platform's app, serves the API."""
    monkeypatch.setenv("PROVISIONING_SECRET", TOKEN)
    monkeypatch.setenv("AAP_PLATFORM_TOKEN", "the-default-variable-is-not-the-one-named-here")
    deployment = platform_settings(f"sqlite:///{tmp_path}/p.db", api_token_env="PROVISIONING_SECRET")
    app, stores = open_app(deployment)
    server = LiveServer().start(app)
    try:
        with httpx.Client(base_url=server.base_url) as http:
            host = {"host": PLATFORM_HOST}
            assert http.get(TENANTS, headers={**host, "authorization": f"Bearer {TOKEN}"}).status_code == 200
            other = "Bearer the-default-variable-is-not-the-one-named-here"
            assert http.get(TENANTS, headers={**host, "authorization": other}).status_code == 401
            document = http.get("/_platform/openapi.json", headers=host).json()
            assert "$PROVISIONING_SECRET" in document["components"]["securitySchemes"]["bearer"]["description"]
    finally:
        server.stop()
        stores.close()


def test_an_unexpected_failure_is_a_503_with_an_id_and_never_its_text(api: Api, monkeypatch, caplog) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("secret-detail of a customer")

    monkeypatch.setattr(api.registry.store.__class__, "tenants", broken)
    answer = api.call("GET", TENANTS)
    body = conforms(api.document, "GET", TENANTS, answer)
    assert answer.status_code == 503 and body["error"]["id"].startswith("err_")
    assert "secret-detail" not in answer.text and "RuntimeError" not in answer.text
    assert "secret-detail" not in caplog.text


def test_only_the_platform_host_serves_it(api: Api) -> None:
    assert api.call("POST", TENANTS, json={"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]})
    for host in ("a.example", "unknown.example", "127.0.0.1"):
        for path in (TENANTS, "/_platform/openapi.json", f"/t/dealer-a{TENANTS}"):
            answer = api.call("GET", path, host=host)
            assert answer.status_code == 404, (host, path)
            assert "dealer-a" not in answer.text
    assert api.call("GET", f"/t/dealer-a{TENANTS}").status_code == 404  # not under a tenant's prefix either


def test_rate_limited_per_client_address_in_the_platforms_own_buckets(database_url) -> None:
    def routes(context: PlatformContext) -> list:
        limiter = RateLimiter(context.stores.state, RateLimit(per_minute=1, burst=4))  # the document's read: 1
        gateway = Gateway(context.gateway.agent, limiter, context.work)
        return ProvisioningApi(context.registry, gateway.admit, TOKEN, work=WORK).routes()

    for api in start(database_url, routes):
        api.registry.add("dealer-a", tenant_config("Alpha"), ["alpha.example"])
        statuses = [api.call("GET", TENANTS, token=t).status_code for t in (TOKEN, "wrong", None)]
        assert statuses == [200, 401, 401]  # wrong tokens spend the same tokens as anything else
        limited = api.call("GET", TENANTS)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        conforms(api.document, "GET", TENANTS, limited)
        assert api.call("POST", TENANTS, json={"id": "dealer-b", "config": tenant_config("B")}).status_code == 429
        assert api.registry.store.tenant("dealer-b") is None
        # The address's bucket is the platform's; the tenant's agent has its own, untouched.
        with api.stores.db.read() as tx:
            keys = {k for (k,) in tx.fetchall("SELECT bucket_key FROM state_bucket WHERE tenant_id = ?", (tx.tenant,))}
        assert keys == {"rate:platform-api:" + anonymous_caller_key("127.0.0.1")}
        assert card_name(api, "alpha.example") == "Alpha"
        tenant = tenant_stores(api.registry, "dealer-a")
        try:
            with tenant.db.read() as tx:
                own = {
                    k for (k,) in tx.fetchall("SELECT bucket_key FROM state_bucket WHERE tenant_id = ?", (tx.tenant,))
                }
            assert not any("platform-api" in k for k in own)
        finally:
            tenant.close()


# -- the document ------------------------------------------------------------------------------------


def test_the_document_describes_every_route_served(api: Api) -> None:
    doc = api.document
    assert doc["openapi"] == "3.1.0" and doc["servers"] == [{"url": f"https://{PLATFORM_HOST}"}]
    operations = {
        (path, method): op["operationId"]
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method != "parameters"
    }
    assert operations == {
        ("/_platform/openapi.json", "get"): "openapi",
        (TENANTS, "get"): "listTenants",
        (TENANTS, "post"): "createTenant",
        (TENANTS + "/{tenant_id}", "get"): "getTenant",
        (TENANTS + "/{tenant_id}", "put"): "putTenant",
        (TENANTS + "/{tenant_id}", "delete"): "removeTenant",
        (TENANTS + "/{tenant_id}/domains", "put"): "replaceDomains",
        (TENANTS + "/{tenant_id}/domains", "patch"): "changeDomains",
        (TENANTS + "/{tenant_id}/secrets", "get"): "listSecrets",
        (TENANTS + "/{tenant_id}/secrets/{name}", "put"): "setSecret",
        (TENANTS + "/{tenant_id}/secrets/{name}", "delete"): "removeSecret",
        (TENANTS + "/{tenant_id}/suspend", "post"): "suspendTenant",
        (TENANTS + "/{tenant_id}/resume", "post"): "resumeTenant",
        (TENANTS + "/{tenant_id}/inventory", "put"): "replaceInventory",
        (TENANTS + "/{tenant_id}/inventory", "post"): "mergeInventory",
        (TENANTS + "/{tenant_id}/feeds/{name}/run", "post"): "runFeed",
        (TENANTS + "/{tenant_id}/erasures", "post"): "eraseCustomer",
    }
    # A method the document does not name is not served: 405 with every method of the resource.
    for method, path, allow in (
        ("PATCH", TENANTS + "/x", "DELETE, GET, HEAD, PUT"),
        ("DELETE", TENANTS, "GET, HEAD, POST"),
        ("GET", TENANTS + "/x/domains", "PATCH, PUT"),
        ("OPTIONS", TENANTS, "GET, HEAD, POST"),
        ("OPTIONS", TENANTS + "/x", "DELETE, GET, HEAD, PUT"),
        ("PROPFIND", TENANTS + "/x/domains", "PATCH, PUT"),
        ("POST", "/_platform/openapi.json", "GET, HEAD"),
        ("GET", TENANTS + "/x/secrets/token", "DELETE, PUT"),
        ("GET", TENANTS + "/x/suspend", "POST"),
        ("GET", TENANTS + "/x/inventory", "POST, PUT"),
        ("GET", TENANTS + "/x/feeds/daily/run", "POST"),
    ):
        refused = api.call(method, path)
        assert (refused.status_code, refused.headers.get("allow")) == (405, allow), (method, path)
        assert refused.json()["error"]["status"] == 405 and refused.json()["error"]["problems"] == []
    assert api.call("HEAD", TENANTS).status_code == 200
    schemathesis.openapi.from_dict(doc)  # loads as OpenAPI 3.1


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


#: Headers a generated case may not set: the server answers a malformed one itself, before the app.
FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection", "expect"})


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schemathesis_finds_every_answer_as_documented(unlimited_api: Api, mode) -> None:
    api = unlimited_api
    api.registry.add("dealer-a", tenant_config("Alpha"), ["alpha.example"])
    schema = schemathesis.openapi.from_dict(api.document)
    statuses: dict[str, set[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and operation.definition.raw["operationId"] == "openapi":
            continue  # nothing of its request can be made wrong

        @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case) -> None:
            for name in list(case.headers or {}):  # framing is the HTTP client's and server's, not the API's
                if name.lower() in FRAMING:
                    del case.headers[name]
            headers = {"host": PLATFORM_HOST, "authorization": f"Bearer {TOKEN}"}
            response = case.call(base_url=api.server.base_url, headers=headers)
            statuses.setdefault(operation.label, set()).add(response.status_code)
            case.validate_response(response, checks=CHECKS, headers=headers)

        exercise()
    assert len(statuses) == (17 if mode is GenerationMode.POSITIVE else 16), statuses
    assert all(code < 500 for found in statuses.values() for code in found), statuses
    if mode is GenerationMode.NEGATIVE:  # a body that breaks the document is refused, whatever it is
        with_bodies = [
            label
            for label in statuses
            if label.split()[0] in ("POST", "PUT", "PATCH")
            and not label.endswith(("/suspend", "/resume", "/inventory", "/run"))
        ]
        assert len(with_bodies) == 6 and all(400 in statuses[label] for label in with_bodies), statuses


# -- aap serve --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_aap_serve_with_two_workers_provisions_over_the_api(tmp_path, database_url) -> None:
    server = PlatformServer(tmp_path, database_url, workers=2, environ={"AAP_PLATFORM_TOKEN": TOKEN})
    try:
        with server.client() as http:
            auth = {"authorization": f"Bearer {TOKEN}"}
            base = f"https://{PLATFORM_HOST}{TENANTS}"
            body = {"id": "dealer-a", "config": tenant_config("Alpha Motors"), "domains": ["alpha.example"]}
            assert http.post(base, json=body, headers=auth).status_code == 201

            def served(status: int) -> bool:  # several requests: both workers answer the same
                answers = [http.get("https://alpha.example/.well-known/agent-card.json") for _ in range(6)]
                return all(a.status_code == status for a in answers)

            assert eventually(lambda: served(200), attempts=100)
            assert http.get(base + "/dealer-a", headers=auth).json()["urls"][0] == "https://alpha.example/"
            assert http.delete(base + "/dealer-a", headers=auth).status_code == 204
            assert eventually(lambda: served(404), attempts=100)
            assert http.get(base, headers={"authorization": "Bearer wrong"}).status_code == 401
    finally:
        server.stop()
