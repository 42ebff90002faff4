"""The public page and the staff console in a real browser: Debian's chromium, driven by Playwright.

One server for the module (uvicorn on loopback, the lead delivery worker in its
lifespan, a CRM stand-in that refuses until told otherwise), one browser, the
scenarios docs/console.md describes: search, page and open a vehicle; sign in, find a lead
submitted over /a2a, open it, read its ADF, retry its failed delivery and watch
it turn delivered, export CSV; wrong passwords holding a stranger back while the
account's own browser signs in; no Content-Security-Policy violation on any page;
a sign-out posted from another site changing nothing; the conformance check run
from the console. The browser never leaves loopback
(every other request is answered here: photos get a placeholder picture).

Screenshots of the main pages are written to a temporary folder, or to
``docs/images/`` when ``AAP_UPDATE_SCREENSHOTS=1`` (docs/console.md shows them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from aap.accounts import Accounts
from aap.config.leads import DeliverySettings
from aap.feeds.job import ImportRequest, run_import
from aap.inventory.demo import generate_listings
from aap.server.app import create_app
from aap.store import open_stores
from console_support import PASSWORD, cheap_hashing, fast_web
from http_helpers import AAP_HEADERS, LiveServer, send_message
from lead_support import ROOFTOPS, Receiver, http_route, lead_request, lead_settings

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN = "manager@baymotors.example"
CUSTOMER = {
    "first_name": "Philippa",
    "last_name": "Quartermaine",
    "email": "philippa.q@example.org",
    "phone": "+14155550987",
    "preferred_contact": "email",
}
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "images"
PLACEHOLDER = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 400 300"><rect width="400" height="300" '
    b'fill="#cfd8e3"/><path d="M70 200 l40-60 h170 l50 60 z" fill="#9aa8b8"/><circle cx="130" cy="205" '
    b'r="24" fill="#5b6675"/><circle cx="290" cy="205" r="24" fill="#5b6675"/></svg>'
)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    if os.environ.get("AAP_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def dealer(tmp_path_factory) -> Iterator[dict]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)")
    crm = Receiver()
    crm.status = 503
    server = LiveServer()
    url = f"sqlite:///{tmp_path_factory.mktemp('browser')}/browser.db"
    settings = lead_settings(
        routes=[http_route(crm.url)],
        database_url=url,
        delivery=DeliverySettings(max_attempts=1, poll_seconds=0.1, timeout_seconds=5, lease_seconds=30),
    )
    rooftops = [
        dict(r, address={"address_line_1": f"{100 + i} Main Street", "city": city, "country": country})
        for i, (r, city, country) in enumerate(
            zip(ROOFTOPS, ("San Francisco", "Oakland", "Vancouver"), ("US", "US", "CA"))
        )
    ]
    settings = dataclasses.replace(
        settings,
        public_url=server.base_url,
        dealer=dataclasses.replace(settings.dealer, info={**settings.dealer.info, "rooftops": rooftops}),
        search=dataclasses.replace(settings.search, currencies=("USD", "CAD")),
        web=fast_web(login_failures_per_account=3),
    )
    stores = open_stores(url)
    feed = tmp_path_factory.mktemp("feed") / "inventory.jsonl"
    rows = [orjson.dumps(item).decode() for item in generate_listings(120, settings=settings)]
    feed.write_text("\n".join(rows + ['{"vin": "NOT-A-VIN", "status": "available"}']) + "\n")
    imported = asyncio.run(run_import(stores, settings, ImportRequest(source=str(feed), partial=True)))
    assert imported.run.outcome == "imported" and imported.run.rejected_lines == [121]
    with cheap_hashing():
        Accounts(stores.console, settings).add(ADMIN, PASSWORD, role="admin")
        server.start(create_app(settings, stores))
        try:
            yield {"base": server.base_url, "crm": crm, "stores": stores}
        finally:
            server.stop()
            crm.close()
            stores.close()


@pytest.fixture(scope="module")
def browser(dealer) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, dealer) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 820}, accept_downloads=True)
    loopback = urlsplit(dealer["base"]).netloc

    def only_loopback(route: Route) -> None:
        if urlsplit(route.request.url).netloc == loopback:
            route.continue_()
        elif route.request.resource_type == "image":
            route.fulfill(status=200, content_type="image/svg+xml", body=PLACEHOLDER)
        else:
            route.abort()

    context.route("**/*", only_loopback)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def sign_in(page: Page, base: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/console/login")
    page.get_by_label("E-mail address").fill(ADMIN)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_search_page_through_results_and_open_a_vehicle(page, dealer, shots):
    page.goto(dealer["base"] + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Bay Motors Group")
    page.screenshot(path=str(shots / "public-home.png"))
    page.get_by_label("Used", exact=True).check()
    page.get_by_label("Sort by").select_option("price:asc")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r"condition=used.*sort=price%3Aasc"))
    summary = page.locator("#results > p.muted").first.inner_text()
    assert "page 1 of" in summary
    first_titles = page.locator("article.card h3").all_inner_texts()
    page.get_by_role("link", name="Next page →").click()
    expect(page.locator("#results > p.muted").first).to_contain_text("page 2 of")
    assert not set(first_titles) & set(page.locator("article.card h3").all_inner_texts())
    title = page.locator("article.card h3 a").first.inner_text()
    page.locator("article.card h3 a").first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(title)
    expect(page.locator(".price").first).to_have_text(re.compile(r"^(CA)?\$[\d,]+$"))
    page.screenshot(path=str(shots / "public-vehicle.png"))
    page.get_by_role("link", name="← Back to the search").click()
    page.get_by_role("link", name="A2A API").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("A2A")


def test_find_a_lead_from_a2a_see_its_adf_retry_it_and_export(page, dealer, shots):
    answer = httpx.post(
        dealer["base"] + "/a2a", json=send_message(lead_request(customer=CUSTOMER)), headers=AAP_HEADERS, timeout=30
    )
    assert answer.status_code == 200 and "lead_" in answer.text
    sign_in(page, dealer["base"])
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")
    page.get_by_label("Name, e-mail or phone").fill("quarterm")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table tr", has_text="Quartermaine")
    expect(rows).to_have_count(1)
    page.screenshot(path=str(shots / "console-leads.png"))
    rows.get_by_role("link", name="Philippa Quartermaine").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Philippa Quartermaine")
    deliveries = page.locator("[data-delivery=crm]")
    expect(deliveries).to_have_text("failed", timeout=30_000)  # the CRM answers 503; one try allowed
    page.reload()
    adf = page.locator("section", has=page.get_by_role("heading", name="ADF/XML sent"))
    expect(adf.locator("pre")).to_contain_text("<adf>")
    expect(adf.locator("pre")).to_contain_text("Quartermaine")
    page.screenshot(path=str(shots / "console-lead.png"), full_page=True)

    dealer["crm"].status = 200
    page.get_by_role("button", name="Retry failed deliveries").click()
    expect(page.get_by_role("status").first).to_contain_text("queued")
    expect(page.locator("[data-delivery=crm]")).to_have_text("delivered", timeout=30_000)  # the page reloads itself
    assert any(r["headers"].get("X-AAP-Lead-Id") for r in dealer["crm"].accepted())

    page.get_by_role("link", name="← All leads").click()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export these leads as CSV").click()
    text = Path(download.value.path()).read_text(encoding="utf-8")
    assert text.startswith("lead_id,received_at,") and "Philippa,Quartermaine,philippa.q@example.org" in text


def test_wrong_passwords_hold_a_stranger_back_but_not_the_accounts_own_browser(browser, page, dealer):
    with dealer["stores"].db.transaction() as tx:
        tx.execute("DELETE FROM console_throttle")
    own = browser.new_context()  # the admin's own browser: it signed in before
    mine = own.new_page()
    sign_in(mine, dealer["base"])
    expect(mine.get_by_role("heading", level=1)).to_have_text("Leads")
    mine.get_by_role("button", name="Sign out").click()
    expect(mine.get_by_role("heading", level=1)).to_have_text("Sign in")

    for wrong in ("not my password", "still not my password", "third wrong password"):
        sign_in(page, dealer["base"], wrong)
        expect(page.get_by_role("alert")).to_have_text("The e-mail address or password is wrong.")
    sign_in(page, dealer["base"])  # the right password, from a stranger's browser: it must wait
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins. Try again in 5 seconds.")
    sign_in(mine, dealer["base"])  # the owner's browser is not held back by the stranger's guesses
    expect(mine.get_by_role("heading", level=1)).to_have_text("Leads")
    own.close()


def test_inventory_and_a_conformance_run_from_the_console(page, dealer, shots):
    sign_in(page, dealer["base"])
    page.get_by_role("link", name="Inventory").click()
    expect(page.get_by_role("heading", name="Listings by rooftop")).to_be_visible()
    history = page.locator("section", has=page.get_by_role("heading", name="Feed imports"))
    expect(history).to_contain_text("Last import:")
    expect(history).to_contain_text("Rejected rows: line 121")
    vin = dealer["stores"].inventory_summaries.lookup("1")[0].vin or ""
    page.get_by_label("VIN or stock number (or its beginning)").fill(vin[:8])
    page.get_by_role("button", name="Find").click()
    expect(page.locator("table code", has_text=vin).first).to_be_visible()
    page.screenshot(path=str(shots / "console-inventory.png"))

    page.get_by_role("link", name="Agent health").click()
    page.get_by_role("button", name="Run the conformance check").click()
    expect(page.locator("text=CONFORMANT").first).to_be_visible(timeout=120_000)  # the page reloads when done
    expect(page.locator("span.badge.done")).to_be_visible()
    assert page.locator("span.badge.fail").count() == 0
    page.screenshot(path=str(shots / "console-health.png"))


def test_the_pages_fit_a_phone(browser, dealer, shots):
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if dealer["base"] in route.request.url
            else route.fulfill(status=200, content_type="image/svg+xml", body=PLACEHOLDER)
        ),
    )
    page = context.new_page()
    page.goto(dealer["base"] + "/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at phone width ({width}px)"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.screenshot(path=str(shots / "public-phone.png"))
    context.close()
    if shots != SCREENSHOTS:
        shutil.rmtree(shots, ignore_errors=True)


CONSOLE_PAGES = (
    "/console/leads",
    "/console/inventory",
    "/console/health",
    "/console/users",
    "/console/audit",
    "/console/account",
)


def watch_csp(page: Page) -> list[str]:
    """Every Content-Security-Policy violation the page reports (the event, and Chromium's console)."""
    found: list[str] = []
    page.add_init_script(  # an init script runs outside the page's CSP
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'csp-violation ' + e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));"
    )
    page.on(
        "console",
        lambda message: (
            found.append(message.text)
            if "csp-violation" in message.text or "Content Security Policy" in message.text
            else None
        ),
    )
    return found


def test_no_page_breaks_its_content_security_policy_and_a_message_keeps_its_lines(page, dealer):
    violations = watch_csp(page)
    message = "First line of the customer's message.\nSecond line.\n\nAfter a blank line."
    answer = httpx.post(
        dealer["base"] + "/a2a",
        json=send_message(lead_request(customer=dict(CUSTOMER, last_name="Linebreaker"), message=message)),
        headers=AAP_HEADERS,
        timeout=30,
    )
    lead_id = re.search(r'"lead_id":\s*"(lead_[0-9a-f]+)"', answer.text).group(1)
    page.goto(dealer["base"] + "/")
    vehicle = page.locator("article.card h3 a").first.get_attribute("href")
    for path in ("/", vehicle, "/api-docs/a2a", "/api-docs/poppy", "/console/login"):
        page.goto(dealer["base"] + path)
    sign_in(page, dealer["base"])
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")
    for path in (*CONSOLE_PAGES, f"/console/leads/{lead_id}", "/console/leads?delivery=dead&handled=open"):
        page.goto(dealer["base"] + path)
        expect(page.locator("h1")).to_be_visible()
    page.goto(f"{dealer['base']}/console/leads/{lead_id}")
    shown = page.locator("p.message")
    assert shown.evaluate("element => getComputedStyle(element).whiteSpace") == "pre-wrap"
    assert shown.evaluate("element => element.innerText") == message
    assert violations == []


def test_a_sign_out_from_another_site_leaves_the_session_signed_in(page, dealer):
    """A page elsewhere posts a form to /console/logout: the browser sends no session cookie with
    it (SameSite=Lax) and the server changes nothing; the console's own sign-out still works."""
    evil = "http://evil.example/"
    forged = (
        f'<form id="f" method="post" action="{dealer["base"]}/console/logout"><input name="csrf_token" value="x"></form>'
        '<script>document.getElementById("f").submit()</script>'
    ).encode()
    page.context.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=forged))
    sign_in(page, dealer["base"])
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")
    page.goto(evil)
    page.wait_for_url(re.compile(r"/console/"))
    page.goto(dealer["base"] + "/console/leads")
    expect(page.get_by_role("heading", level=1)).to_have_text("Leads")  # still signed in
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.goto(dealer["base"] + "/console/leads")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
