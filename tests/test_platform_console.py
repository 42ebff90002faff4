"""The platform console in one process: platform administrators manage tenants in the browser
and open any tenant's console under its prefix (docs/platform.md, "Platform administrators").

Driven through Starlette's test client with the host a proxy forwards (each request names its
https:// URL, so cookies keep to their host and path as a browser keeps them); the same over real
HTTP with two workers, on SQLite and PostgreSQL, is tests/test_platform_console_e2e.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import aap.platform.console as platform_console
from aap.accounts import PLATFORM_ADMIN, Accounts
from aap.secretbox import new_key
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database
from aap.store.lead_inbox import LeadScope
from aap.tenants import TenantRegistry
from console_support import PASSWORD, cheap_hashing, csrf_of, post_sign_in
from http_helpers import AAP_HEADERS, send_message
from lead_support import FIRST, lead_request
from platform_support import PLATFORM_HOST, eventually, listings, platform_settings, tenant_config, tenant_stores

OPS = "ops@platform.example"
OWNER = "owner@alpha.example"
STAFF = "sales@alpha.example"
PLATFORM = f"https://{PLATFORM_HOST}"
ALPHA = "https://alpha.example"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[dict[str, Any]]:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example"])
    registry.add("dealer-b", tenant_config("Beta Cars"), ["beta.example"])
    registry.add("gamma", tenant_config("Gamma Autos"))
    own = tenant_stores(registry, "dealer-a")
    own.inventory.import_listings(listings("dealer-a", "Honda", 2, "Alpha Motors Main"))
    alpha_settings = registry.settings_for(registry.get("dealer-a"), ALPHA)
    with cheap_hashing():
        Accounts(stores.console, settings).add(OPS, PASSWORD, role=PLATFORM_ADMIN)
        alpha = Accounts(own.console, alpha_settings)
        alpha.add(OWNER, PASSWORD, role="admin")
        alpha.add(STAFF, PASSWORD)
        app = create_platform_app(settings, stores)
        with TestClient(app, base_url=PLATFORM) as client:
            lead = lead_request(vehicle_of_interest={"vehicle_id": "dealer-a-1"})
            answer = client.post(f"{ALPHA}/a2a", json=send_message(lead), headers=AAP_HEADERS).json()
            lead_id = answer["result"]["message"]["parts"][0]["data"]["data"]["lead_id"]
            yield {"client": client, "registry": registry, "stores": stores, "alpha": own, "lead_id": lead_id}
    own.close()
    stores.close()


def browser(platform: dict[str, Any]) -> TestClient:
    """The one client (its event loop holds the tenants' runtimes) as a fresh browser."""
    client: TestClient = platform["client"]
    client.cookies.clear()
    return client


def sign_in(client: TestClient, base: str, email: str, password: str = PASSWORD) -> Any:
    return post_sign_in(client, email, password, base=base)


def signed_in(platform: dict[str, Any]) -> tuple[TestClient, str]:
    """A browser signed in to the platform console, and its CSRF token."""
    client = browser(platform)
    answer = sign_in(client, PLATFORM, OPS)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/tenants", answer.text
    return client, csrf_of(client.get(f"{PLATFORM}/console/tenants").text)


def cookie(answer: Any, name: str) -> str:
    found = [c for c in answer.headers.get_list("set-cookie") if c.startswith(name + "=")]
    assert found, (name, answer.headers.get_list("set-cookie"))
    return found[0]


def audit(stores: Stores) -> list[tuple[str, str, str | None]]:
    return [(e.actor, e.action, e.subject) for e in stores.console.audit_entries(limit=100)]


def listed(html: str) -> list[str]:
    """The tenant ids a tenants page lists, in order."""
    return re.findall(r'<td data-label="Tenant"><a href="/console/tenants/([a-z0-9-]+)"', html)


# -- signing in -----------------------------------------------------------------------------------


def test_a_platform_administrator_signs_in_and_out_with_the_platform_hosts_own_cookie(platform) -> None:
    client = browser(platform)
    away = client.get(f"{PLATFORM}/console/tenants", follow_redirects=False)
    assert away.status_code == 303 and away.headers["location"] == "/console/login?next=/console/tenants"
    answer = sign_in(client, PLATFORM, OPS)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/tenants"
    session = cookie(answer, "aap_platform")
    assert "Path=/;" in session and "HttpOnly" in session and "Secure" in session and "SameSite=lax" in session
    page = client.get(f"{PLATFORM}/console/tenants")
    assert page.status_code == 200 and "dealer-a" in page.text and OPS in page.text
    assert (
        page.headers["cache-control"] == "no-store"
        and "frame-ancestors 'none'" in page.headers["content-security-policy"]
    )
    assert ("ops@platform.example", "sign_in", None) in audit(platform["stores"])
    out = client.post(f"{PLATFORM}/console/logout", data={"csrf_token": csrf_of(page.text)}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    assert cookie(out, "aap_platform").count("Path=/;") == 1
    assert client.get(f"{PLATFORM}/console/tenants", follow_redirects=False).status_code == 303


def test_a_tenants_accounts_cannot_sign_in_to_the_platform_console(platform) -> None:
    client = browser(platform)
    for email in (OWNER, STAFF):
        refused = sign_in(client, PLATFORM, email)
        assert refused.status_code == 401 and "wrong" in refused.text
        assert "aap_platform=" not in " ".join(refused.headers.get_list("set-cookie"))
    wrong = sign_in(client, PLATFORM, OPS, "not the password at all")
    assert wrong.status_code == 401


def test_a_tenants_staff_session_opens_neither_the_platform_console_nor_another_tenant(platform) -> None:
    client = browser(platform)
    for base, root in ((ALPHA, ""), (PLATFORM, "/t/dealer-a")):
        client.cookies.clear()
        answer = sign_in(client, base + root, STAFF)
        assert answer.status_code == 303
        value = re.match(r"aap_console=([^;]+)", cookie(answer, "aap_console")).group(1)
        client.cookies.clear()
        # The staff's session cookie, under every name, at the platform console and at the other tenants.
        for name in ("aap_console", "aap_platform"):
            client.cookies.clear()
            client.cookies.set(name, value, domain=PLATFORM_HOST, path="/")
            client.cookies.set(name, value, domain="beta.example", path="/")
            for url in (
                f"{PLATFORM}/console/tenants",
                f"{PLATFORM}/console/open?tenant=dealer-a",
                f"{PLATFORM}/t/dealer-b/console/leads",
                "https://beta.example/console/leads",
            ):
                away = client.get(url, follow_redirects=False)
                assert away.status_code == 303 and "/console/login" in away.headers["location"], (base, name, url)


# -- the tenants ---------------------------------------------------------------------------------


def test_the_tenants_page_filters_by_id_or_domain_and_pages_by_id(platform, monkeypatch) -> None:
    monkeypatch.setattr(platform_console, "PAGE_SIZE", 2)
    client, _ = signed_in(platform)
    first = client.get(f"{PLATFORM}/console/tenants")
    assert listed(first.text) == ["dealer-a", "dealer-b"]
    assert "3 tenants in all" in first.text
    later = re.search(r'href="([^"]+)" rel="next"', first.text).group(1).replace("&amp;", "&")
    second = client.get(PLATFORM + later)
    assert listed(second.text) == ["gamma"]
    assert 'rel="next"' not in second.text and "First page" in second.text
    by_domain = client.get(f"{PLATFORM}/console/tenants", params={"q": "BETA.ex"})
    assert listed(by_domain.text) == ["dealer-b"]
    by_id = client.get(f"{PLATFORM}/console/tenants", params={"q": "amm"})
    assert listed(by_id.text) == ["gamma"]
    wildcard = client.get(f"{PLATFORM}/console/tenants", params={"q": "%"})
    assert listed(wildcard.text) == []  # a literal %, not "any"
    bad = client.get(f"{PLATFORM}/console/tenants", params={"after": "Not An Id"})
    assert bad.status_code == 400 and "not valid any more" in bad.text


def test_one_tenant_shows_its_configuration_as_stored_domains_urls_and_revision(platform) -> None:
    client, _ = signed_in(platform)
    page = client.get(f"{PLATFORM}/console/tenants/dealer-a")
    assert page.status_code == 200
    record = platform["registry"].get("dealer-a")
    assert "Alpha Motors" in page.text and "<code>alpha.example</code>" in page.text
    for url in ("https://alpha.example/", f"{PLATFORM}/t/dealer-a/"):
        assert f'href="{url}"' in page.text
    assert f"<dd>{record.revision}</dd>" in page.text
    assert 'href="/console/open?tenant=dealer-a"' in page.text
    missing = client.get(f"{PLATFORM}/console/tenants/nobody", headers={"accept": "text/html"})
    assert missing.status_code == 404 and "no such tenant" in missing.text


def test_adding_a_tenant_lists_every_problem_next_to_the_form_and_writes_nothing(platform) -> None:
    client, token = signed_in(platform)
    new = client.get(f"{PLATFORM}/console/tenants/new")
    assert new.status_code == 200 and "[dealer]" in new.text  # the form starts from the tenant template
    refused = client.post(
        f"{PLATFORM}/console/tenants",
        data={
            "csrf_token": token,
            "id": "delta",
            "domains": "alpha.example\nBad_Host!",
            "config": tenant_config("Delta", extra='[rate_limit]\nper_minute = "many"\n'),
        },
    )
    assert refused.status_code == 400
    problems = re.search(r'<div class="errors" role="alert" id="add-problems">(.*?)</div>', refused.text, re.S).group(1)
    for expected in (
        "domain &#39;alpha.example&#39;: already served",
        "Bad_Host!",
        "rate_limit.per_minute",
    ):
        assert expected in problems, (expected, problems)
    bad_id = client.post(
        f"{PLATFORM}/console/tenants",
        data={"csrf_token": token, "id": "Bad Id", "domains": "", "config": tenant_config("Delta")},
    )
    assert bad_id.status_code == 400 and "tenant id &#39;Bad Id&#39;" in bad_id.text and 'value="Bad Id"' in bad_id.text
    assert "Bad_Host!" in refused.text and 'value="delta"' in refused.text  # what was typed stays
    assert [r.tenant_id for r in platform["registry"].list()] == ["dealer-a", "dealer-b", "gamma"]
    taken = client.post(
        f"{PLATFORM}/console/tenants",
        data={"csrf_token": token, "id": "dealer-b", "domains": "", "config": tenant_config("Again")},
    )
    assert taken.status_code == 409 and "exists already" in taken.text


def test_a_tenant_added_in_the_console_is_served_and_audited(platform) -> None:
    client, token = signed_in(platform)
    config = tenant_config("Delta Autos").replace("\n", "\r\n")  # as a browser sends a text area
    added = client.post(
        f"{PLATFORM}/console/tenants",
        data={"csrf_token": token, "id": "delta", "domains": "delta.example, www.delta.example", "config": config},
        follow_redirects=False,
    )
    assert added.status_code == 303 and added.headers["location"] == "/console/tenants/delta?done=added"
    record = platform["registry"].get("delta")
    assert record.domains == ("delta.example", "www.delta.example") and "\r" not in record.config
    assert "Tenant delta added" in client.get(PLATFORM + added.headers["location"]).text
    assert (OPS, "tenant.add", "delta") in audit(platform["stores"])

    def served() -> bool:
        return client.get("https://delta.example/.well-known/agent-card.json").status_code == 200

    assert eventually(served)


def test_configuration_and_domains_are_changed_with_every_problem_listed(platform) -> None:
    client, token = signed_in(platform)
    registry = platform["registry"]
    before = registry.get("dealer-b")
    bad = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/config",
        data={"csrf_token": token, "config": "[dealer]\nname = 7\nunknown_table = {}\n"},
    )
    assert bad.status_code == 400 and 'id="config-problems"' in bad.text and "dealer.name" in bad.text
    assert "unknown_table = {}" in bad.text  # the text typed stays in the form
    assert registry.get("dealer-b").revision == before.revision
    good = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/config",
        data={"csrf_token": token, "config": tenant_config("Beta Cars Renamed")},
        follow_redirects=False,
    )
    assert good.status_code == 303 and good.headers["location"].endswith("?done=updated")
    assert registry.get("dealer-b").revision == before.revision + 1
    assert "Beta Cars Renamed" in registry.get("dealer-b").config

    taken = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/domains", data={"csrf_token": token, "add": "alpha.example"}
    )
    assert (
        taken.status_code == 409 and 'id="domain-problems"' in taken.text and "already served by tenant" in taken.text
    )
    mine = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/domains", data={"csrf_token": token, "remove": "alpha.example"}
    )
    assert mine.status_code == 400 and "not a domain of tenant" in mine.text
    empty = client.post(f"{PLATFORM}/console/tenants/dealer-b/domains", data={"csrf_token": token, "add": " "})
    assert empty.status_code == 400
    added = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/domains", data={"csrf_token": token, "add": "www.beta.example"}
    )
    assert added.status_code == 200 and registry.get("dealer-b").domains == ("beta.example", "www.beta.example")
    removed = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/domains", data={"csrf_token": token, "remove": "beta.example"}
    )
    assert removed.status_code == 200 and registry.get("dealer-b").domains == ("www.beta.example",)
    actions = [a for _, a, s in audit(platform["stores"]) if s == "dealer-b"]
    assert actions.count("tenant.domains") == 2 and actions.count("tenant.update") == 1


def test_removing_a_tenant_asks_first_then_it_is_gone_everywhere(platform) -> None:
    client, token = signed_in(platform)
    confirm = client.get(f"{PLATFORM}/console/tenants/dealer-b/remove")
    assert confirm.status_code == 200 and "Type <code>dealer-b</code> to confirm" in confirm.text
    kept = client.post(f"{PLATFORM}/console/tenants/dealer-b/remove", data={"csrf_token": token, "confirm": "dealer"})
    assert kept.status_code == 400 and "nothing was removed" in kept.text
    assert platform["registry"].store.tenant("dealer-b") is not None
    gone = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/remove",
        data={"csrf_token": token, "confirm": "dealer-b"},
        follow_redirects=False,
    )
    assert gone.status_code == 303 and gone.headers["location"] == "/console/tenants?done=removed"
    assert platform["registry"].store.tenant("dealer-b") is None
    assert (OPS, "tenant.remove", "dealer-b") in audit(platform["stores"])
    assert eventually(lambda: client.get("https://beta.example/.well-known/agent-card.json").status_code == 404)


def test_secrets_are_set_and_removed_by_name_and_their_values_never_shown(platform, monkeypatch, caplog) -> None:
    """docs/platform.md, "Secrets": the tenant page lists names; the audit log records names."""
    keys = new_key()
    monkeypatch.setenv("AAP_SECRET_KEYS", keys)  # the app's registry reads them on first use
    caplog.set_level(logging.DEBUG)
    client, token = signed_in(platform)
    value = "console-VALUE-7f3a9"
    refused = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/secrets", data={"csrf_token": token, "name": "Bad Name", "value": value}
    )
    assert refused.status_code == 400 and 'id="secret-problems"' in refused.text and value not in refused.text
    done = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/secrets",
        data={"csrf_token": token, "name": "crm-token", "value": value},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"].endswith("?done=secret")
    page = client.get(f"{PLATFORM}/console/tenants/dealer-b?done=secret")
    assert "<code>crm-token</code>" in page.text and "The secret was set" in page.text and value not in page.text
    registry = TenantRegistry(platform["registry"].deployment, platform["stores"].db, environ={"AAP_SECRET_KEYS": keys})
    assert registry.secrets.values("dealer-b", {"crm-token"}).get("crm-token") == value
    removed = client.post(
        f"{PLATFORM}/console/tenants/dealer-b/secrets/remove",
        data={"csrf_token": token, "name": "crm-token"},
        follow_redirects=False,
    )
    assert removed.status_code == 303 and registry.secret_list("dealer-b") == []
    actions = [a for _, a, s in audit(platform["stores"]) if s == "dealer-b"]
    assert actions.count("tenant.secret.set") == 1 and actions.count("tenant.secret.remove") == 1
    entries = platform["stores"].console.audit_entries(limit=100)
    assert all(value not in repr(e) for e in entries) and value not in caplog.text


def test_every_form_needs_the_sessions_csrf_token_and_this_sites_origin(platform) -> None:
    client, token = signed_in(platform)
    forms = {
        "/console/tenants": {"id": "epsilon", "domains": "", "config": tenant_config("Epsilon")},
        "/console/tenants/gamma/config": {"config": tenant_config("Gamma Renamed")},
        "/console/tenants/gamma/domains": {"add": "gamma.example"},
        "/console/tenants/gamma/secrets": {"name": "crm-token", "value": "forged-value"},
        "/console/tenants/gamma/remove": {"confirm": "gamma"},
    }
    for path, form in forms.items():
        assert client.post(PLATFORM + path, data=form).status_code == 403, path
        assert client.post(PLATFORM + path, data={**form, "csrf_token": "forged"}).status_code == 403, path
        foreign = client.post(
            PLATFORM + path, data={**form, "csrf_token": token}, headers={"origin": "https://evil.example"}
        )
        assert foreign.status_code == 403, path
    assert [r.tenant_id for r in platform["registry"].list()] == ["dealer-a", "dealer-b", "gamma"]
    assert platform["registry"].get("gamma").revision == 1 and platform["registry"].get("gamma").domains == ()


def test_a_form_over_the_limit_is_refused_before_it_is_read(platform) -> None:
    client, token = signed_in(platform)
    huge = "x" * (platform_console.FORM_LIMIT + 1)
    answer = client.post(f"{PLATFORM}/console/tenants", data={"csrf_token": token, "config": huge})
    assert answer.status_code == 413
    login = client.post(f"{PLATFORM}/console/login", content=b"a" * (platform_console.FORM_LIMIT + 1))
    assert login.status_code == 413


# -- a tenant's console, as a platform administrator ----------------------------------------------------


def test_a_platform_administrator_opens_a_tenants_console_and_acts_there_as_its_admin(platform) -> None:
    client, _ = signed_in(platform)
    opened = client.get(f"{PLATFORM}/console/open?tenant=dealer-a", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/t/dealer-a/console/"
    assert (OPS, "tenant.open", "dealer-a") in audit(platform["stores"])
    leads = client.get(f"{PLATFORM}/t/dealer-a/console/leads")
    assert leads.status_code == 200 and FIRST in leads.text
    # The switch control lists the tenants; the menu has the admin pages and the platform console.
    choices = re.search(r'<datalist id="switch-tenants">(.*?)</datalist>', leads.text).group(1)
    assert re.findall(r'<option value="([a-z-]+)">', choices) == ["dealer-a", "dealer-b", "gamma"]
    assert 'action="/console/open"' in leads.text and 'href="/console/tenants"' in leads.text
    assert 'href="/t/dealer-a/console/users"' in leads.text and f"{OPS} (platform)" in leads.text
    lead_id = platform["lead_id"]
    token = csrf_of(leads.text)
    handled = client.post(
        f"{PLATFORM}/t/dealer-a/console/leads/{lead_id}/handled", data={"csrf_token": token, "handled": "1"}
    )
    assert handled.status_code == 200
    assert client.get(f"{PLATFORM}/t/dealer-a/console/users").status_code == 200
    tenant_log = audit(platform["alpha"])
    assert (f"platform:{OPS}", "lead.handled", lead_id) in tenant_log
    assert (f"platform:{OPS}", "leads.list", None) in tenant_log
    assert platform["alpha"].lead_inbox.lead(lead_id, LeadScope())["handled_ms"] is not None
    # Their account is the platform's: the tenant's account pages have nothing for them.
    account = client.get(f"{PLATFORM}/t/dealer-a/console/account", headers={"accept": "text/html"})
    assert account.status_code == 403 and "platform administrator" in account.text
    # Switching: to another tenant's console in one step.
    switched = client.get(f"{PLATFORM}/console/open", params={"tenant": "dealer-b"}, follow_redirects=False)
    assert switched.headers["location"] == "/t/dealer-b/console/"
    assert client.get(f"{PLATFORM}/t/dealer-b/console/leads").status_code == 200
    unknown = client.get(f"{PLATFORM}/console/open", params={"tenant": "nobody"}, headers={"accept": "text/html"})
    assert unknown.status_code == 404


def test_a_platform_session_is_never_accepted_at_a_tenants_own_domain(platform) -> None:
    client, _ = signed_in(platform)
    value = client.cookies.get("aap_platform", domain=PLATFORM_HOST)
    assert value
    client.cookies.clear()
    for name in ("aap_platform", "aap_console"):
        client.cookies.set(name, value, domain="alpha.example", path="/")
    away = client.get(f"{ALPHA}/console/leads", follow_redirects=False)
    assert away.status_code == 303 and away.headers["location"] == "/console/login?next=/console/leads"
    # Nor by a request for the tenant's prefix that names another host.
    client.cookies.clear()
    client.cookies.set("aap_platform", value, domain="beta.example", path="/")
    assert client.get("https://beta.example/t/dealer-a/console/leads", follow_redirects=False).status_code == 404


def test_signing_out_in_a_tenants_console_ends_the_platform_session(platform) -> None:
    client, _ = signed_in(platform)
    page = client.get(f"{PLATFORM}/t/dealer-a/console/leads")
    out = client.post(
        f"{PLATFORM}/t/dealer-a/console/logout", data={"csrf_token": csrf_of(page.text)}, follow_redirects=False
    )
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    assert "Path=/;" in cookie(out, "aap_platform")
    for url in (f"{PLATFORM}/console/tenants", f"{PLATFORM}/t/dealer-a/console/leads"):
        assert client.get(url, follow_redirects=False).status_code == 303


def test_a_tenants_own_admin_keeps_their_console_and_sees_no_platform_control(platform) -> None:
    client = browser(platform)
    assert sign_in(client, f"{PLATFORM}/t/dealer-a", OWNER).status_code == 303
    page = client.get(f"{PLATFORM}/t/dealer-a/console/leads")
    assert page.status_code == 200 and "switch-tenant" not in page.text and 'href="/console/tenants"' not in page.text
    assert client.get(f"{PLATFORM}/console/tenants", follow_redirects=False).status_code == 303
