"""Platform hosting end to end: ``aap serve`` with two workers, on SQLite and on PostgreSQL.

Requests carry each tenant's ``Host`` header, as the platform's proxy forwards it; the test
clients keep the tenants' own https:// URLs (aap.client.via), so documents, cookies and DPoP
proofs are exactly what buyers and staff would see. Two tenants each have their own
inventory, CRM stand-in and staff account; every check that a request reaches only its own
tenant is made on both views of a tenant (its domain, and /t/ID/ on the platform host).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from aap.agent import DealerAgent
from aap.client.poppy_auth import DpopKey
from aap.gateway import Gateway
from aap.poppy import tokens
from aap.poppy.context import PoppyContext
from aap.spec import validate
from aap.store import open_platform_database
from aap.tenants import TenantRegistry
from console_support import csrf_of, post_sign_in
from http_helpers import AAP_HEADERS, aap_error_of, send_message
from lead_support import Receiver, lead_request
from platform_support import (
    LOOPBACK_DESTINATIONS,
    PLATFORM_HOST,
    PlatformServer,
    eventually,
    listings,
    platform_settings,
    tenant_config,
    tenant_stores,
)

pytestmark = pytest.mark.slow

SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 50}}
PASSWORD = "correct horse battery staple 42"


def crm(receiver: Receiver) -> str:
    """Lead routes to ``receiver``, and a rate limit that the checker's hundreds of requests from
    this one address (``aap check`` runs first) leave room in."""
    return f"""
[rate_limit]
per_minute = 60000
burst = 5000

[[leads.routes]]
rooftop = "*"
[[leads.routes.targets]]
type = "webhook"
name = "crm"
url = "{receiver.url}"
"""


@dataclasses.dataclass
class Platform:
    server: PlatformServer
    registry: TenantRegistry
    crms: dict[str, Receiver]

    def views(self, tenant_id: str) -> list[str]:
        record = self.registry.get(tenant_id)
        return [f"https://{record.domains[0]}", f"https://{PLATFORM_HOST}/t/{tenant_id}"]


def aap(*args: str) -> subprocess.CompletedProcess[str]:
    """``aap ARGS`` as an operator runs it (the environment's AAP_* variables left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
    done = subprocess.run([sys.executable, "-m", "aap", *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def platform(request, tmp_path_factory) -> Iterator[Platform]:
    """Two tenants made with ``aap tenants add`` and filled with ``aap import --tenant``, then served."""
    directory = tmp_path_factory.mktemp(f"platform-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{directory}/platform.db"
    else:
        url = request.getfixturevalue("pg_cluster").create_database()
    config = directory / "platform.toml"
    config.write_text(
        f'database = "{url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\n{LOOPBACK_DESTINATIONS}', encoding="utf-8"
    )
    crms = {"dealer-a": Receiver(), "dealer-b": Receiver()}
    for tenant_id, name, host, make, count in (
        ("dealer-a", "Alpha Motors", "alpha.example", "Honda", 3),
        ("dealer-b", "Beta Cars", "beta.example", "Kia", 5),
    ):
        document = directory / f"{tenant_id}.toml"
        document.write_text(tenant_config(name, extra=crm(crms[tenant_id])), encoding="utf-8")
        aap("tenants", "--config", str(config), "add", tenant_id, "--config", str(document), "--domain", host)
        feed = directory / f"{tenant_id}.jsonl"
        feed.write_bytes(b"\n".join(orjson.dumps(x) for x in listings(tenant_id, make, count, f"{name} Main")))
        aap("import", str(feed), "--tenant", tenant_id, "--config", str(config), "--replace")
    db = open_platform_database(url)
    registry = TenantRegistry(platform_settings(url, allow_loopback_destinations=True), db, environ={})
    server = PlatformServer(directory, url, workers=2, platform=LOOPBACK_DESTINATIONS)
    try:
        yield Platform(server, registry, crms)
    finally:
        server.stop()
        for receiver in crms.values():
            receiver.close()
        db.close()


def data_of(answer: Any, server: PlatformServer | None = None) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text + ("\n--- server log ---\n" + server.log_tail() if server else "")
    body = answer.json()
    assert "result" in body, body
    return body["result"]["message"]["parts"][0]["data"]


# -- every tenant is its own conformant agent, on both views ----------------------------------------


@pytest.mark.parametrize("tenant_id", ["dealer-a", "dealer-b"])
def test_each_view_publishes_documents_naming_its_own_urls(platform: Platform, tenant_id: str) -> None:
    with platform.server.client() as http:
        for base in platform.views(tenant_id):
            card = http.get(base + "/.well-known/agent-card.json").json()
            assert validate(card, "agent-card") == []
            assert {i["url"] for i in card["supportedInterfaces"]} == {base + "/a2a"}
            poppy = http.get(base + "/.well-known/poppy.json").json()
            assert validate(poppy, "poppy-document") == []
            assert poppy["auth"]["issuer"] == base
            llms = http.get(base + "/llms.txt").text
            assert base + "/a2a" in llms and base + "/mcp" in llms
            for path in ("/a2a/openapi.json", "/poppy/openapi.json"):
                document = http.get(base + path).json()
                assert document["servers"][0]["url"].startswith(base), (base, path)
            other = "Beta" if tenant_id == "dealer-a" else "Alpha"
            assert other not in str(card) + str(poppy) + llms


@pytest.mark.parametrize("view", [0, 1])
def test_aap_check_passes_against_each_tenant(platform: Platform, view: int) -> None:
    for tenant_id in ("dealer-a", "dealer-b"):
        base = platform.views(tenant_id)[view]
        checked = subprocess.run(
            [sys.executable, "-m", "aap", "check", base, "--via", platform.server.origin, "--binding", "a2a"]
            + ["--binding", "mcp", "--json"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]


def test_searches_answer_only_the_tenants_own_listings(platform: Platform) -> None:
    with platform.server.client() as http:
        for tenant_id, make, count in (("dealer-a", "Honda", 3), ("dealer-b", "Kia", 5)):
            for base in platform.views(tenant_id):
                data = data_of(http.post(base + "/a2a", json=send_message(SEARCH), headers=AAP_HEADERS))["data"]
                assert data["total"] == count and {v["make"] for v in data["vehicles"]} == {make}
                assert {v["vehicle_id"].rsplit("-", 1)[0] for v in data["vehicles"]} == {tenant_id}


# -- leads: each to its own tenant and CRM, idempotency per tenant --------------------------------------


def test_a_lead_and_its_replay_land_in_their_tenant_and_its_crm(platform: Platform) -> None:
    key = "idem-" + uuid.uuid4().hex
    lead = lead_request(idempotency_key=key, vehicle_of_interest={"vehicle_id": "dealer-a-1"})
    with platform.server.client() as http:
        alpha = "https://alpha.example/a2a"
        first = data_of(http.post(alpha, json=send_message(lead), headers=AAP_HEADERS), platform.server)["data"]
        again = data_of(http.post(alpha, json=send_message(lead), headers=AAP_HEADERS), platform.server)["data"]
        assert again["lead_id"] == first["lead_id"] and again["replayed"] is True
        # The same key at another tenant is another lead (its own idempotency scope).
        beta_url = f"https://{PLATFORM_HOST}/t/dealer-b/a2a"
        other = data_of(http.post(beta_url, json=send_message(lead), headers=AAP_HEADERS), platform.server)["data"]
        assert other["lead_id"] != first["lead_id"] and other.get("replayed") is not True
    assert eventually(
        lambda: len(platform.crms["dealer-a"].accepted()) >= 1 and len(platform.crms["dealer-b"].accepted()) >= 1
    )
    alpha_leads = [orjson.loads(r["body"])["lead_id"] for r in platform.crms["dealer-a"].accepted()]
    beta_leads = [orjson.loads(r["body"])["lead_id"] for r in platform.crms["dealer-b"].accepted()]
    assert first["lead_id"] in alpha_leads and first["lead_id"] not in beta_leads
    assert other["lead_id"] in beta_leads and other["lead_id"] not in alpha_leads
    assert alpha_leads.count(first["lead_id"]) == 1  # the replay was not delivered again


# -- nothing crosses tenants ------------------------------------------------------------------------------


def poppy_token(platform: Platform, tenant_id: str, base: str) -> tuple[str, DpopKey]:
    """A Session token of ``tenant_id``'s issuer (as served at ``base``), with its DPoP key."""
    registry = platform.registry
    settings = registry.settings_for(registry.get(tenant_id), base)
    stores = tenant_stores(registry, tenant_id)
    try:
        ctx = PoppyContext(Gateway.of(DealerAgent(settings, stores)), settings.poppy, stores.poppy, None)
        key = DpopKey()
        token, expires_at = tokens.mint(ctx, jkt=key.thumbprint, resource=None, now=time.time())
        ctx.store.start_session(
            jkt=key.thumbprint,
            client_id="https://agent.example/e2e",
            sub="usr_e2e",
            agent_id=None,
            token=token,
            token_type="DPoP",
            resource=None,
            expires_at=expires_at,
            idle_ttl=settings.poppy.session_idle_ttl,
            consumed=[],
        )
    finally:
        stores.close()
    return token, key


def poppy_search(http: Any, base: str, token: str, key: DpopKey) -> Any:
    url = base + "/poppy/v1/inventory.search"
    headers = {"Authorization": f"DPoP {token}", "DPoP": key.proof("POST", url, access_token=token)}
    return http.post(url, json={"type": "inventory.search.request"}, headers=headers)


def test_a_token_of_one_tenants_issuer_is_refused_by_every_other(platform: Platform) -> None:
    alpha = "https://alpha.example"
    token, key = poppy_token(platform, "dealer-a", alpha)
    with platform.server.client() as http:
        assert poppy_search(http, alpha, token, key).status_code == 200
        for base in (*platform.views("dealer-b"), platform.views("dealer-a")[1]):  # another issuer each
            refused = poppy_search(http, base, token, key)
            assert refused.status_code == 401, (base, refused.text)
            assert "Honda" not in refused.text


def sign_in(http: Any, base: str, email: str) -> Any:
    answer = post_sign_in(http, email, PASSWORD, base=base)
    assert answer.status_code == 303, answer.text
    return answer


def test_a_tenants_console_session_opens_no_other_tenants_console(platform: Platform) -> None:
    from aap.accounts import Accounts

    registry = platform.registry
    stores = tenant_stores(registry, "dealer-a")
    settings = registry.settings_for(registry.get("dealer-a"), "https://alpha.example")
    try:
        Accounts(stores.console, settings).add("owner@alpha.example", PASSWORD, role="admin")
    finally:
        stores.close()
    with platform.server.client() as http:
        sign_in(http, "https://alpha.example", "owner@alpha.example")
        assert http.get("https://alpha.example/console/leads", follow_redirects=False).status_code == 200
        stolen = {c.name: c.value for c in http.cookies.jar}
    with platform.server.client() as other:
        for name, value in stolen.items():  # a session cookie replayed at another tenant's host
            other.cookies.set(name, value, domain="beta.example")
        answer = other.get("https://beta.example/console/leads", follow_redirects=False)
        assert answer.status_code == 303 and "/console/login" in answer.headers["location"]
        # The account does not exist at the other tenant either.
        form = other.get("https://beta.example/console/login")
        refused = other.post(
            "https://beta.example/console/login",
            data={"csrf_token": csrf_of(form.text), "email": "owner@alpha.example", "password": PASSWORD},
            follow_redirects=False,
        )
        assert refused.status_code != 303


def test_a_listing_of_one_tenant_is_not_found_at_another(platform: Platform) -> None:
    vehicle = {"type": "inventory.vehicle.request", "vehicle_id": "dealer-a-0"}
    with platform.server.client() as http:
        assert data_of(http.post("https://alpha.example/a2a", json=send_message(vehicle), headers=AAP_HEADERS))
        for base in platform.views("dealer-b"):
            answer = http.post(base + "/a2a", json=send_message(vehicle), headers=AAP_HEADERS).json()
            assert (aap_error_of(answer) or {}).get("code") == "VEHICLE_NOT_FOUND", answer
            assert http.get(base + "/vehicles/dealer-a-0").status_code == 404


# -- tenants come and go while the platform serves ------------------------------------------------------


def test_a_tenant_added_while_serving_is_served_by_every_worker_and_a_removed_one_is_gone(platform: Platform) -> None:
    registry = platform.registry
    registry.add("dealer-c", tenant_config("Gamma Autos"), ["gamma.example"])
    card_urls = ["https://gamma.example/.well-known/agent-card.json", f"https://{PLATFORM_HOST}/t/dealer-c/llms.txt"]

    def everywhere(status: int) -> bool:
        # New connections each time: the two workers take turns accepting them.
        for url in card_urls * 4:
            with platform.server.client() as http:
                if http.get(url).status_code != status:
                    return False
        return True

    assert eventually(lambda: everywhere(200), attempts=400)
    registry.remove("dealer-c")
    assert eventually(lambda: everywhere(404), attempts=400)


def test_a_removed_tenant_added_again_under_its_id_serves_none_of_its_old_data(platform: Platform) -> None:
    """Both workers served the removed tenant; the one added again under its id starts empty
    on every worker (its rows were deleted with it, and no worker keeps a handle on them)."""
    registry = platform.registry
    registry.add("dealer-d", tenant_config("Delta Motors"), ["delta.example"])
    feed = platform.server.config.parent / "dealer-d.jsonl"
    feed.write_bytes(b"\n".join(orjson.dumps(x) for x in listings("dealer-d", "Mazda", 4, "Delta Motors Main")))
    aap("import", str(feed), "--tenant", "dealer-d", "--config", str(platform.server.config), "--replace")

    def totals() -> set[int]:
        found = set()
        for _ in range(8):  # new connections: the two workers take turns accepting them
            with platform.server.client() as http:
                answer = http.post("https://delta.example/a2a", json=send_message(SEARCH), headers=AAP_HEADERS)
                if answer.status_code != 200 or "result" not in answer.json():
                    return {-1}
                found.add(data_of(answer)["data"]["total"])
        return found

    assert eventually(lambda: totals() == {4}, attempts=400)
    registry.remove("dealer-d")
    registry.add("dealer-d", tenant_config("Delta Motors"), ["delta.example"])
    assert eventually(lambda: totals() == {0}, attempts=400)
    registry.remove("dealer-d")
