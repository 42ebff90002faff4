"""The platform console end to end: ``aap serve`` with two workers, on SQLite and on PostgreSQL.

Accounts are made as an operator makes them (``aap users add --platform-admin``, ``--tenant ID``);
every request goes over real HTTP with the ``Host`` header a proxy forwards, from clients that keep
each URL's own host and scheme (aap.client.via), so cookies keep to their host, path and
``Secure`` as a browser keeps them (docs/platform.md, "Platform administrators").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from aap.store import Stores, open_platform_database
from aap.tenants import TenantRegistry
from console_support import csrf_of, post_sign_in
from http_helpers import AAP_HEADERS, send_message
from lead_support import lead_request
from platform_support import PLATFORM_HOST, PlatformServer, eventually, platform_settings, tenant_config, tenant_stores

pytestmark = pytest.mark.slow

PASSWORD = "correct horse battery staple 42"
OPS = "ops@platform.example"
STAFF = "sales@alpha.example"
PLATFORM = f"https://{PLATFORM_HOST}"


def aap(*args: str, password: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
    done = subprocess.run(
        [sys.executable, "-m", "aap", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        input=PASSWORD + "\n" if password else None,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def platform(request, tmp_path_factory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp(f"platform-console-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{directory}/platform.db"
    else:
        url = request.getfixturevalue("pg_cluster").create_database()
    config = directory / "platform.toml"
    config.write_text(f'database = "{url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\n', encoding="utf-8")
    for tenant_id, name, host in (
        ("dealer-a", "Alpha Motors", "alpha.example"),
        ("dealer-b", "Beta Cars", "beta.example"),
    ):
        document = directory / f"{tenant_id}.toml"
        document.write_text(tenant_config(name), encoding="utf-8")
        aap("tenants", "--config", str(config), "add", tenant_id, "--config", str(document), "--domain", host)
    aap("users", "add", OPS, "--platform-admin", "--password-stdin", "--config", str(config), password=True)
    aap(
        "users",
        "add",
        STAFF,
        "--tenant",
        "dealer-a",
        "--role",
        "staff",
        "--password-stdin",
        "--config",
        str(config),
        password=True,
    )
    db = open_platform_database(url)
    registry = TenantRegistry(platform_settings(url), db, environ={})
    server = PlatformServer(directory, url, workers=2)
    try:
        yield {"server": server, "registry": registry, "stores": Stores(db)}
    finally:
        server.stop()
        db.close()


def sign_in(http: Any, base: str, email: str) -> Any:
    return post_sign_in(http, email, PASSWORD, base=base)


def test_a_platform_administrator_adds_a_tenant_and_works_in_its_console(platform) -> None:
    server: PlatformServer = platform["server"]
    with server.client() as http:
        signed = sign_in(http, PLATFORM, OPS)
        assert signed.status_code == 303 and signed.headers["location"] == "/console/tenants", server.log_tail()
        page = http.get(f"{PLATFORM}/console/tenants")
        assert page.status_code == 200 and "dealer-a" in page.text and "dealer-b" in page.text
        token = csrf_of(page.text)
        added = http.post(
            f"{PLATFORM}/console/tenants",
            data={"csrf_token": token, "id": "gamma", "domains": "gamma.example", "config": tenant_config("Gamma")},
            follow_redirects=False,
        )
        assert added.status_code == 303, added.text

    def served() -> bool:
        with server.client() as fresh:  # a new connection each time: either worker
            return fresh.get("https://gamma.example/.well-known/agent-card.json").status_code == 200

    assert eventually(served)
    with server.client() as buyer:  # a lead at the new tenant, for its console to show
        lead = buyer.post("https://gamma.example/a2a", json=send_message(lead_request()), headers=AAP_HEADERS)
        lead_id = lead.json()["result"]["message"]["parts"][0]["data"]["data"]["lead_id"]
    with server.client() as http:
        assert sign_in(http, PLATFORM, OPS).status_code == 303
        opened = http.get(f"{PLATFORM}/console/open?tenant=gamma", follow_redirects=False)
        assert opened.headers["location"] == "/t/gamma/console/"
        leads = http.get(f"{PLATFORM}/t/gamma/console/leads")
        assert leads.status_code == 200 and lead_id in leads.text, server.log_tail()
        token = csrf_of(leads.text)
        handled = http.post(
            f"{PLATFORM}/t/gamma/console/leads/{lead_id}/handled",
            data={"csrf_token": token, "handled": "1"},
            follow_redirects=False,
        )
        assert handled.status_code == 303 and handled.headers["location"] == f"/t/gamma/console/leads/{lead_id}"
        # As the tenant's admin: its first account, made by the platform's administrator.
        made = http.post(
            f"{PLATFORM}/t/gamma/console/users",
            data={"csrf_token": token, "email": "owner@gamma.example", "password": PASSWORD, "role": "admin"},
            follow_redirects=True,
        )
        assert made.status_code == 200 and "Account owner@gamma.example added" in made.text
        assert str(made.url).startswith(f"{PLATFORM}/t/gamma/console/users?")
    registry: TenantRegistry = platform["registry"]
    own = tenant_stores(registry, "gamma")
    try:
        log = [(e.actor, e.action, e.subject) for e in own.console.audit_entries(limit=50)]
        assert (f"platform:{OPS}", "lead.handled", lead_id) in log
        assert (f"platform:{OPS}", "user.add", "owner@gamma.example") in log
    finally:
        own.close()
    platform_log = [(e.actor, e.action, e.subject) for e in platform["stores"].console.audit_entries(limit=50)]
    assert (OPS, "tenant.add", "gamma") in platform_log and (OPS, "tenant.open", "gamma") in platform_log
    # The tenant's own admin signs in at its own domain; the platform's session is not needed there.
    with server.client() as owner:
        assert sign_in(owner, "https://gamma.example", "owner@gamma.example").status_code == 303


def test_a_platform_session_is_never_accepted_at_a_tenants_own_domain(platform) -> None:
    server: PlatformServer = platform["server"]
    with server.client() as http:
        assert sign_in(http, PLATFORM, OPS).status_code == 303
        assert http.get(f"{PLATFORM}/t/dealer-a/console/leads", follow_redirects=False).status_code == 200
        value = http.cookies.get("aap_platform", domain=PLATFORM_HOST)
        assert value
    with server.client() as replayed:
        for name in ("aap_platform", "aap_console"):
            replayed.cookies.set(name, value, domain="alpha.example", path="/")
        away = replayed.get("https://alpha.example/console/leads", follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == "/console/login?next=/console/leads"


def test_a_tenants_staff_never_opens_the_platform_console_or_another_tenant(platform) -> None:
    server: PlatformServer = platform["server"]
    with server.client() as http:
        refused = sign_in(http, PLATFORM, STAFF)  # not an account of the platform
        assert refused.status_code == 401 and "aap_platform=" not in " ".join(refused.headers.get_list("set-cookie"))
    for base in ("https://alpha.example", f"{PLATFORM}/t/dealer-a"):
        with server.client() as http:
            signed = sign_in(http, base, STAFF)
            assert signed.status_code == 303, signed.text
            assert http.get(f"{base}/console/leads").status_code == 200
            value = re.search(r"aap_console=([^;]+)", signed.headers["set-cookie"]).group(1)
        for name in ("aap_console", "aap_platform"):
            with server.client() as thief:
                thief.cookies.set(name, value, domain=PLATFORM_HOST, path="/")
                thief.cookies.set(name, value, domain="beta.example", path="/")
                for url in (
                    f"{PLATFORM}/console/tenants",
                    f"{PLATFORM}/t/dealer-b/console/leads",
                    "https://beta.example/console/leads",
                ):
                    away = thief.get(url, follow_redirects=False)
                    assert away.status_code == 303 and "/console/login" in away.headers["location"], (base, name, url)
