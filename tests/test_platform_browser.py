"""The platform console in a real browser: Debian's chromium, driven by Playwright.

A platform deployment served by uvicorn over TLS on loopback (a certificate made here for the
platform host, which the browser resolves to 127.0.0.1), so that its cookies are ``Secure`` and its
URLs ``https://PLATFORM_HOST`` as behind the platform's proxy. A platform administrator signs in,
adds a tenant from the form, opens its console under ``/t/ID/``, follows every menu link — each
stays under the prefix — switches to another tenant and signs out; no page reports a
Content-Security-Policy violation. Screenshots go to a temporary folder, or to ``docs/images/``
with ``AAP_UPDATE_SCREENSHOTS=1`` (docs/platform.md shows them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from aap.accounts import PLATFORM_ADMIN, Accounts
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database
from aap.tenants import TenantRegistry
from certs import self_signed
from console_support import PASSWORD, cheap_hashing
from http_helpers import LiveServer
from platform_support import PLATFORM_HOST, listings, platform_settings, tenant_config, tenant_stores
from test_browser import CHROMIUM, FLAGS, SCREENSHOTS, WIDE, csp_violations, new_page

pytestmark = pytest.mark.slow

OPS = "ops@platform.example"


def certificate(directory: Path) -> tuple[str, str]:
    """A self-signed certificate for the platform host (the browser is told to accept it)."""
    cert, key = self_signed(directory, PLATFORM_HOST, ca=False)
    return str(cert), str(key)


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Iterator[dict[str, Any]]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)")
    directory = tmp_path_factory.mktemp("platform-browser")
    settings = platform_settings(f"sqlite:///{directory}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example"])
    own = tenant_stores(registry, "dealer-a")
    own.inventory.import_listings(listings("dealer-a", "Honda", 3, "Alpha Motors Main"))
    own.close()
    cert, key = certificate(directory)
    with cheap_hashing():
        Accounts(stores.console, settings).add(OPS, PASSWORD, role=PLATFORM_ADMIN)
        server = LiveServer().start(create_platform_app(settings, stores), certificate=(cert, key))
        try:
            yield {"base": f"https://{PLATFORM_HOST}:{server.port}", "registry": registry}
        finally:
            server.stop()
            stores.close()


@pytest.fixture(scope="module")
def browser(platform) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*FLAGS, f"--host-resolver-rules=MAP {PLATFORM_HOST} 127.0.0.1"]
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, platform) -> Iterator[Page]:
    """A page in a fresh context that never leaves the platform's server, watching for CSP violations
    (as tests/test_browser.py's, with the certificate made here accepted)."""
    page = new_page(browser, platform, WIDE, ignore_https_errors=True)
    yield page
    assert csp_violations(page) == []
    page.context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    if os.environ.get("AAP_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


#: The platform console's own paths, which a platform administrator's menu in a tenant's console links to.
PLATFORM_CONSOLE = {"/console/tenants", "/console/open", "/console/login"}


def links_leaving(page: Page, base: str, prefix: str) -> list[str]:
    """Every link and form target of the page, on this origin, outside ``prefix`` (but the platform console's)."""
    targets = page.evaluate(
        "() => [...document.querySelectorAll('a[href]')].map(a => a.href)"
        ".concat([...document.querySelectorAll('form')].map(f => f.action))"
        ".concat([...document.querySelectorAll('link[href], script[src]')].map(e => e.href || e.src))"
    )
    origin = urlsplit(base).netloc
    return [
        t
        for t in targets
        if urlsplit(t).netloc == origin
        and not urlsplit(t).path.startswith(prefix + "/")
        and urlsplit(t).path not in PLATFORM_CONSOLE
    ]


def test_a_platform_administrator_adds_a_tenant_and_works_in_its_console_under_its_prefix(
    page, platform, shots
) -> None:
    base = platform["base"]
    page.goto(base + "/console/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    with cheap_hashing():
        page.get_by_label("E-mail address").fill(OPS)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Tenants")
    page.screenshot(path=str(shots / "platform-tenants.png"))
    page.get_by_role("link", name="Add a tenant").first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Add a tenant")
    page.get_by_label("Tenant id").fill("delta")
    page.get_by_label("Configuration").fill(tenant_config("Delta Autos") + "\n[rate_limit]\nper_minute = -1\n")
    page.get_by_role("button", name="Add the tenant").click()
    expect(page.get_by_role("alert")).to_contain_text("rate_limit.per_minute")  # listed next to the form
    assert platform["registry"].store.tenant("delta") is None
    page.get_by_label("Configuration").fill(tenant_config("Delta Autos"))
    page.get_by_role("button", name="Add the tenant").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Tenant delta")
    expect(page.get_by_role("status")).to_contain_text("Tenant delta added")
    page.screenshot(path=str(shots / "platform-tenant.png"), full_page=True)

    page.get_by_role("link", name="Open its console").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")
    assert urlsplit(page.url).path == "/t/delta/console/leads"
    page.screenshot(path=str(shots / "platform-tenant-console.png"))
    for name, heading in (
        ("Inventory", "Inventory"),
        ("Feeds", "Feeds"),
        ("Agent health", "Agent health"),
        ("Users", "Users"),
        ("Audit log", "Audit log"),
        ("Leads", "Leads"),
    ):
        page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
        assert urlsplit(page.url).path.startswith("/t/delta/console/"), (name, page.url)
        assert links_leaving(page, base, "/t/delta") == [], name
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    expect(page.locator("table")).to_contain_text(f"platform:{OPS}")  # the tenant's own log names them
    page.get_by_role("link", name="Delta Autos · Console").click()  # the brand: the tenant's inbox
    assert urlsplit(page.url).path == "/t/delta/console/leads"

    switch = page.get_by_label("Tenant", exact=True)
    switch.fill("dealer-a")
    page.get_by_role("button", name="Switch").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")
    assert urlsplit(page.url).path == "/t/dealer-a/console/leads"
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Inventory", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Inventory")
    assert links_leaving(page, base, "/t/dealer-a") == []

    page.get_by_role("link", name="Platform console").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Tenants")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    expect(page.locator("table")).to_contain_text("tenant.open")
    page.goto(base + "/t/delta/console/leads")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    assert urlsplit(page.url).path == "/console/login"
    page.goto(base + "/t/delta/console/leads")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")  # the tenant's own: signed out everywhere
