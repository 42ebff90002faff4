"""What a platform's operators see and do (docs/platform.md, "Operating tenants"), on SQLite and
PostgreSQL, over real HTTP on loopback: a tenant whose stored configuration does not load is
reported (log line once, ``aap tenants show/list``, ``/metrics``, the platform console); every
change through ``aap tenants`` and the provisioning API, and a platform administrator's visit
to a tenant's console, is in the platform's audit log; a suspended tenant answers 503 with
``Retry-After`` on every surface and its deliveries wait, and is served again once resumed."""

from __future__ import annotations

import copy
import getpass
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from aap.accounts import PLATFORM_ADMIN, Accounts
from aap.agent import CallContext, DealerAgent
from aap.cli.main import main
from aap.client.via import ViaSyncTransport
from aap.server.logconfig import JsonFormatter
from aap.server.platform import create_platform_app
from aap.server.platform_api import provisioning_routes
from aap.server.platform_services import SERVICES
from aap.store import Stores, open_platform_database
from aap.store.platform import DELIVERIES
from aap.telemetry.logfields import working_for
from aap.tenants import TenantRegistry
from console_support import PASSWORD, cheap_hashing, csrf_of
from http_helpers import AAP_HEADERS, LiveServer, send_message
from lead_support import NOW, Receiver, lead_request
from platform_support import (
    LOOPBACK_DESTINATIONS,
    PLATFORM_HOST,
    UNLOADABLE,
    crm_route,
    eventually,
    listings,
    platform_settings,
    tenant_config,
    tenant_stores,
    write,
)

pytestmark = pytest.mark.slow  # a live platform server and the CLI, on both backends: seconds each

TOKEN = "op-t0k3n-" + "y" * 40
TENANTS = "/_platform/v1/tenants"
OPS = "ops@platform.example"
SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 5}}


class Platform:
    """A platform app on a live loopback server (with its background runner), the CLI on the same
    database, and an httpx client whose ``https://ANY-HOST/...`` requests reach the server."""

    def __init__(self, directory: Path, database_url: str, server: LiveServer, stores: Stores) -> None:
        self.directory, self.url, self.server, self.stores = directory, database_url, server, stores
        self.registry = TenantRegistry(
            platform_settings(database_url, allow_loopback_destinations=True), stores.db, environ={}
        )
        self.http = httpx.Client(transport=ViaSyncTransport(server.base_url), timeout=30)
        self.runner = CliRunner()

    def aap(self, *args: str) -> Any:
        return self.runner.invoke(main, list(args))

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}
        return self.http.request(method, f"https://{PLATFORM_HOST}{path}", headers=headers, **kw)

    def metrics(self) -> str:
        answer = httpx.get(f"{self.server.base_url}/metrics", headers={"host": PLATFORM_HOST}, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.text

    def a2a(self, base: str) -> httpx.Response:
        return self.http.post(f"{base}/a2a", json=send_message(SEARCH), headers=AAP_HEADERS)

    def tenant_file(self, name: str, extra: str = "") -> str:
        return write(self.directory / f"{name.split()[0].lower()}.toml", tenant_config(name, extra=extra))


@pytest.fixture
def platform(tmp_path: Path, database_url: str, monkeypatch) -> Iterator[Platform]:
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "aap.toml",
        f'database = "{database_url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n{LOOPBACK_DESTINATIONS}',
    )
    logger = logging.getLogger("aap")  # a command may configure logging, as a command does
    saved = (logger.handlers[:], logger.propagate, logger.level)
    deployment = platform_settings(database_url, allow_loopback_destinations=True)
    stores = Stores(open_platform_database(database_url))
    with cheap_hashing():
        Accounts(stores.console, deployment).add(OPS, PASSWORD, role=PLATFORM_ADMIN)
        app = create_platform_app(
            deployment,
            stores,
            services=SERVICES,
            platform_routes=[provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN})],
        )
        server = LiveServer().start(app)
        platform = Platform(tmp_path, database_url, server, stores)
        try:
            yield platform
        finally:
            platform.http.close()
            server.stop()
            stores.close()
            logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


# -- a tenant whose configuration does not load ---------------------------------------------------


def test_a_broken_tenant_is_reported_once_in_the_log_and_in_show_list_console_and_metrics(platform, caplog) -> None:
    caplog.set_level(logging.INFO, logger="aap")
    for tenant_id, name, host in (
        ("dealer-a", "Alpha Motors", "alpha.example"),
        ("dealer-b", "Beta Cars", "beta.example"),
    ):
        added = platform.aap("tenants", "add", tenant_id, "--config", platform.tenant_file(name), "--domain", host)
        assert added.exit_code == 0, added.output
    record = platform.registry.get("dealer-b")
    platform.registry.store.update("dealer-b", UNLOADABLE, None, int(time.time() * 1000))
    # Found by the workers as the change reaches them, before any request for it.
    assert eventually(lambda: platform.registry.get("dealer-b").broken is not None)
    assert platform.a2a("https://beta.example").status_code == 503

    for _ in range(3):  # every request: 503 with Retry-After, the reason never told to the caller
        answer = platform.http.get("https://beta.example/", headers={"accept": "application/json"})
        assert answer.status_code == 503 and answer.headers["retry-after"] == "60"
        assert answer.json()["error"]["code"] == "TENANT_UNAVAILABLE"
        assert "no_such_key" not in answer.text
    assert platform.a2a("https://alpha.example").status_code == 200  # the others serve

    lines = [r for r in caplog.records if r.getMessage() == "tenant configuration does not load"]
    assert len(lines) == 1, [r.fields for r in lines]  # once per change, not per request
    assert lines[0].fields["tenant"] == "dealer-b" and lines[0].fields["revision"] == record.revision + 1
    assert "no_such_key" in lines[0].fields["reason"]
    assert orjson.loads(JsonFormatter().format(lines[0]))["tenant"] == "dealer-b"

    shown = platform.aap("tenants", "show", "dealer-b")
    assert shown.exit_code == 0 and "state       broken" in shown.output and "no_such_key" in shown.output
    as_json = orjson.loads(platform.aap("tenants", "show", "dealer-b", "--json").stdout)
    assert as_json["state"] == "broken" and "no_such_key" in as_json["broken_reason"] and as_json["broken_at"]
    listed = platform.aap("tenants", "list").stdout.splitlines()
    assert listed[0].endswith("\tserved") and listed[1].startswith("dealer-b\t")
    assert "\tbroken: " in listed[1] and "no_such_key" in listed[1]
    over_api = platform.api("GET", f"{TENANTS}/dealer-b").json()
    assert over_api["state"] == "broken" and over_api["broken_reason"] == as_json["broken_reason"]

    metrics = platform.metrics()
    assert 'aap_tenant_broken{tenant="dealer-b"} 1.0' in metrics
    assert 'aap_tenant_broken{tenant="dealer-a"}' not in metrics
    assert 'aap_tenant_requests_total{status="5xx",tenant="dealer-b"}' in metrics

    with cheap_hashing():
        console = _signed_in(platform)
        page = console.get(f"https://{PLATFORM_HOST}/console/tenants/dealer-b")
        assert page.status_code == 200 and "Its configuration does not load" in page.text and "no_such_key" in page.text
        assert "<strong>broken</strong>" in console.get(f"https://{PLATFORM_HOST}/console/tenants").text
        console.close()

    fixed = platform.aap("tenants", "update", "dealer-b", "--config", platform.tenant_file("Beta Cars"))
    assert fixed.exit_code == 0, fixed.output
    assert "state       served" in platform.aap("tenants", "show", "dealer-b").output
    assert eventually(lambda: platform.a2a("https://beta.example").status_code == 200)
    assert 'aap_tenant_broken{tenant="dealer-b"}' not in platform.metrics()


def test_a_log_line_written_for_a_tenants_work_names_it() -> None:
    record = logging.LogRecord("aap.leads", logging.INFO, "", 0, "delivery delivered", (), None)
    record.fields = {"delivery_id": "d1"}
    assert "tenant" not in orjson.loads(JsonFormatter().format(record))
    with working_for("dealer-a"):
        line = orjson.loads(JsonFormatter().format(record))
    assert line["tenant"] == "dealer-a" and line["delivery_id"] == "d1"


# -- audit ----------------------------------------------------------------------------------------


def _signed_in(platform: Platform) -> httpx.Client:
    """A browser signed in to the platform console (cookies kept, https:// URLs reach the server)."""
    browser = httpx.Client(transport=ViaSyncTransport(platform.server.base_url), timeout=30)
    base = f"https://{PLATFORM_HOST}/console"
    form = browser.get(f"{base}/login")
    answer = browser.post(f"{base}/login", data={"csrf_token": csrf_of(form.text), "email": OPS, "password": PASSWORD})
    assert answer.status_code == 303, answer.text
    return browser


def _audit(platform: Platform, *args: str) -> list[dict[str, Any]]:
    shown = platform.aap("tenants", "audit", *args, "--json", "--limit", "100")
    assert shown.exit_code == 0, shown.output
    return [orjson.loads(line) for line in shown.stdout.splitlines()]


def test_every_change_through_the_cli_and_the_api_and_a_console_visit_is_audited(platform) -> None:
    alpha = platform.tenant_file("Alpha Motors", extra='# token: "s3cr3t-in-a-comment"\n')
    assert platform.aap("tenants", "add", "dealer-a", "--config", alpha, "--domain", "alpha.example").exit_code == 0
    assert platform.aap("tenants", "update", "dealer-a", "--config", alpha).exit_code == 0
    assert platform.aap("tenants", "domains", "dealer-a", "--add", "www.alpha.example").exit_code == 0
    assert platform.aap("tenants", "suspend", "dealer-a").exit_code == 0
    assert platform.aap("tenants", "resume", "dealer-a").exit_code == 0
    assert platform.aap("tenants", "remove", "dealer-a", "--yes").exit_code == 0
    refused = platform.aap("tenants", "update", "dealer-a", "--config", alpha)
    assert refused.exit_code == 1  # a refused change writes no row

    cli = f"cli:{getpass.getuser()}"
    assert [(e["actor"], e["action"], e["tenant"]) for e in reversed(_audit(platform, "dealer-a"))] == [
        (cli, "tenant.add", "dealer-a"),
        (cli, "tenant.update", "dealer-a"),
        (cli, "tenant.domains", "dealer-a"),
        (cli, "tenant.suspend", "dealer-a"),
        (cli, "tenant.resume", "dealer-a"),
        (cli, "tenant.remove", "dealer-a"),
    ]
    first = _audit(platform, "dealer-a")[-1]
    assert first["detail"] == {"domains": ["alpha.example"]} and first["at"].endswith("Z")

    config = tenant_config("Beta Cars", extra='# token: "s3cr3t-in-a-comment"\n')
    made = platform.api("POST", TENANTS, json={"id": "dealer-b", "config": config, "domains": ["beta.example"]})
    assert made.status_code == 201, made.text
    assert platform.api("PUT", f"{TENANTS}/dealer-b", json={"config": config}).status_code == 200  # as it is: no row
    assert platform.api("PUT", f"{TENANTS}/dealer-b", json={"config": config + "# changed\n"}).status_code == 200
    assert platform.api("PATCH", f"{TENANTS}/dealer-b/domains", json={"add": ["www.beta.example"]}).status_code == 200
    assert platform.api("PUT", f"{TENANTS}/dealer-b/domains", json={"domains": ["beta.example"]}).status_code == 200
    assert platform.api("POST", f"{TENANTS}/dealer-b/suspend").json()["state"] == "suspended"
    assert platform.api("POST", f"{TENANTS}/dealer-b/resume").json()["state"] == "served"
    assert platform.api("POST", f"{TENANTS}/dealer-z/suspend").status_code == 404
    assert platform.api("POST", f"{TENANTS}/dealer-b/suspend", headers={"authorization": "Bearer x"}).status_code == 401

    with cheap_hashing():
        browser = _signed_in(platform)
        for _ in range(2):  # a visit is audited once per session, however many pages it opens
            page = browser.get(f"https://{PLATFORM_HOST}/t/dealer-b/console/", follow_redirects=True)
            assert page.status_code == 200, page.text
        tenant_page = f"https://{PLATFORM_HOST}/console/tenants/dealer-b"
        for verb in ("suspend", "resume"):  # the platform console's buttons, audited as the administrator
            token = csrf_of(browser.get(tenant_page).text)
            done = browser.post(f"{tenant_page}/{verb}", data={"csrf_token": token})
            assert done.status_code == 303, done.text
        assert "State: served" in browser.get(tenant_page).text
        browser.close()

    api = "api:AAP_PLATFORM_TOKEN"
    entries = _audit(platform, "dealer-b")
    assert [(e["actor"], e["action"]) for e in reversed(entries)] == [
        (api, "tenant.add"),
        (api, "tenant.update"),
        (api, "tenant.domains"),
        (api, "tenant.domains"),
        (api, "tenant.suspend"),
        (api, "tenant.resume"),
        (OPS, "tenant.visit"),
        (OPS, "tenant.suspend"),
        (OPS, "tenant.resume"),
    ]
    everything = platform.aap("tenants", "audit", "--limit", "100").stdout
    assert "s3cr3t" not in everything and "Beta Cars" not in everything  # never a configuration's text
    assert "tenant.add\tdealer-a" in everything and "tenant.visit\tdealer-b" in everything


def test_a_visit_is_audited_once_even_when_the_tenants_runtime_is_built_again_between_two_pages(platform) -> None:
    made = platform.api("POST", TENANTS, json={"id": "dealer-c", "config": tenant_config("Gamma Cars"), "domains": []})
    assert made.status_code == 201, made.text
    prefixed = f"https://{PLATFORM_HOST}/t/dealer-c"

    def card_name() -> str:
        return platform.http.get(f"{prefixed}/.well-known/agent-card.json").json()["name"]

    with cheap_hashing():
        browser = _signed_in(platform)
        assert browser.get(f"{prefixed}/console/", follow_redirects=True).status_code == 200
        assert card_name() == "Gamma Cars"
        renamed = platform.api("PUT", f"{TENANTS}/dealer-c", json={"config": tenant_config("Gamma Group")})
        assert renamed.status_code == 200, renamed.text
        assert eventually(lambda: card_name() == "Gamma Group")  # the runtime under the prefix, built again
        assert browser.get(f"{prefixed}/console/", follow_redirects=True).status_code == 200
        browser.close()
    visits = [e for e in _audit(platform, "dealer-c") if e["action"] == "tenant.visit"]
    assert [(e["actor"], e["tenant"]) for e in visits] == [(OPS, "dealer-c")]


# -- suspension -----------------------------------------------------------------------------------


def _surfaces(platform: Platform) -> dict[str, httpx.Response]:
    """One request per surface of dealer-a, at its domain and under its prefix."""
    alpha, prefixed = "https://alpha.example", f"https://{PLATFORM_HOST}/t/dealer-a"
    http = platform.http
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return {
        "a2a": platform.a2a(alpha),
        "a2a prefixed": platform.a2a(prefixed),
        "a2a shared": http.post(
            f"https://{PLATFORM_HOST}/a2a", json=send_message(SEARCH, tenant="alpha-motors"), headers=AAP_HEADERS
        ),
        "mcp": http.post(f"{alpha}/mcp", json=mcp, headers={"accept": "application/json, text/event-stream"}),
        "poppy": http.post(f"{alpha}/poppy/v1/inventory.search", json={"pagination": {"limit": 5}}),
        "page": http.get(f"{alpha}/", headers={"accept": "text/html"}),
        "page json": http.get(f"{prefixed}/", headers={"accept": "application/json"}),
        "console": http.get(f"{alpha}/console/", headers={"accept": "text/html"}),
        "discovery": http.get(f"{alpha}/.well-known/agent-card.json"),
    }


def test_a_suspended_tenant_answers_503_everywhere_its_deliveries_wait_and_resume_restores_it(platform) -> None:
    receiver = Receiver()
    try:
        # Its card declares an A2A routing value: the platform host's one /a2a serves it too.
        alpha = write(
            platform.directory / "alpha.toml",
            'tenant = "alpha-motors"\n' + tenant_config("Alpha Motors", extra=crm_route(receiver.url)),
        )
        added = platform.aap("tenants", "add", "dealer-a", "--config", alpha, "--domain", "alpha.example")
        assert added.exit_code == 0, added.output
        own = tenant_stores(platform.registry, "dealer-a")
        own.inventory.import_listings(listings("dealer-a", "Honda", 3, "Alpha Motors Main"))
        served = _surfaces(platform)
        assert all(served[s].status_code == 200 for s in ("a2a", "a2a shared", "discovery")), served

        assert platform.aap("tenants", "suspend", "dealer-a").exit_code == 0
        assert eventually(lambda: platform.a2a("https://alpha.example").status_code == 503)
        answers = _surfaces(platform)
        for surface, answer in answers.items():
            assert answer.status_code == 503, (surface, answer.text)
            assert answer.headers["retry-after"] == "300", surface
        for surface in ("a2a", "a2a prefixed", "a2a shared", "mcp"):  # JSON-RPC, with the aap.error detail
            error = answers[surface].json()["error"]
            assert "suspended" in error["message"] or "suspended" in orjson.dumps(error).decode(), surface
            assert b"retry_after_ms" in answers[surface].content, surface
        assert b"retry_after_ms" in answers["poppy"].content and b"suspended" in answers["poppy"].content
        assert answers["page json"].json()["error"]["code"] == "TENANT_SUSPENDED"
        assert answers["discovery"].json()["error"]["retry_after_seconds"] == 300
        assert answers["page"].headers["content-type"].startswith("text/html")
        shown = platform.aap("tenants", "show", "dealer-a")
        assert "state       suspended since" in shown.output
        assert "\tsuspended" in platform.aap("tenants", "list").stdout
        metrics = platform.metrics()
        assert 'aap_tenant_suspended{tenant="dealer-a"} 1.0' in metrics
        assert 'aap_tenant_errors_total{code="TENANT_SUSPENDED",tenant="dealer-a"}' in metrics

        # A lead stored while suspended (as `aap import`-style tools still may: its data is kept)
        # waits: the background runner lets the tenant go instead of delivering.
        record = platform.registry.get("dealer-a")
        agent = DealerAgent(platform.registry.settings_for(record, platform.registry.public_url(record)), own)
        answer = agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=NOW))
        assert answer["data"]["lead_id"]
        store = platform.registry.store
        store.set_due("dealer-a", DELIVERIES, int(time.time() * 1000))
        far = int(time.time() * 1000) + 10**9
        assert eventually(lambda: "dealer-a" not in store.due(DELIVERIES, far))
        assert receiver.accepted() == []
        assert own.leads.next_due_ms() is not None  # still in its outbox
        refused = platform.aap("deliver", "--once", "--tenant", "dealer-a")
        assert refused.exit_code == 1 and "is suspended" in refused.output and receiver.accepted() == []

        resumed = platform.api("POST", f"{TENANTS}/dealer-a/resume")
        assert resumed.status_code == 200 and resumed.json()["state"] == "served"
        assert eventually(lambda: platform.a2a("https://alpha.example").status_code == 200)
        assert all(a.status_code != 503 for a in _surfaces(platform).values())
        assert eventually(lambda: len(receiver.accepted()) == 1)  # what waited goes out
        assert "state       served" in platform.aap("tenants", "show", "dealer-a").output
        assert 'aap_tenant_suspended{tenant="dealer-a"}' not in platform.metrics()
        own.close()
    finally:
        receiver.close()
