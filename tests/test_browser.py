"""The public page and the staff console in a real browser: Debian's chromium, driven by Playwright.

One server for the module (uvicorn on loopback, the lead delivery worker in its
lifespan, a CRM stand-in that refuses until told otherwise, a local SMTP server
for the new-lead e-mails), 10,000 listings imported through the feed importer,
one browser. Scenarios: search, page and open a vehicle; sign in, find a lead
submitted over /a2a, open it, read its ADF, retry its failed delivery and watch
it turn delivered, export CSV; work a lead through the pipeline (owner, note,
status changes that persist and filter) from the link in its notification
e-mail, which carries no customer data; times in the rooftop's zone; page
through the whole inventory in the browser and filter "no photo"; run a feed
from the console and find it in its history; wrong passwords holding a stranger
back while the account's own browser signs in; a sign-out posted from another
site changing nothing; the conformance check run from the console; every page
free of Content-Security-Policy violations and usable at 390 px. The browser never
leaves loopback (every other request is answered here: photos get a
placeholder picture).

Screenshots of the pages (1280 px wide, and 390 px for phones) are written to a
temporary folder, or to ``docs/images/`` when ``AAP_UPDATE_SCREENSHOTS=1``
(docs/console.md shows them): ``AAP_UPDATE_SCREENSHOTS=1 pytest -q tests/test_browser.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
import os
import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import httpx
import orjson
import pytest
from aiosmtpd.controller import Controller
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from aap.accounts import Accounts
from aap.config.feeds import FeedSettings, Schedule
from aap.config.leads import DeliverySettings
from aap.config.notifications import NotificationSettings, Recipients
from aap.feeds.job import ImportRequest, run_import
from aap.inventory.demo import generate_listings
from aap.server.app import create_app
from aap.store import open_stores
from aap.work import Work
from console_support import PASSWORD, cheap_hashing, fast_web
from feed_samples import dealer_csv, vehicles
from http_helpers import AAP_HEADERS, LiveServer, send_message
from lead_support import ROOFTOPS, Receiver, free_port, http_route, lead_request, lead_settings

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow
#: The door for blocking work this module's feed import is given.
WORK = Work.for_database(True)

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
BDC = "bdc@baymotors.example"
SALES = "sales@baymotors.example"
LISTINGS = 10_000
WIDE = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
PACIFIC = ZoneInfo("America/Los_Angeles")
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


class Inbox:
    """The local SMTP server's mailbox (aiosmtpd)."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture(scope="module")
def dealer(tmp_path_factory) -> Iterator[dict]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)")
    crm = Receiver()
    crm.status = 503
    inbox = Inbox()
    smtp_port = free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    server = LiveServer()
    folder = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{folder}/browser.db"
    settings = lead_settings(
        routes=[http_route(crm.url)],
        database_url=url,
        delivery=DeliverySettings(max_attempts=1, poll_seconds=0.1, timeout_seconds=5, lease_seconds=30),
    )
    notifications = NotificationSettings(
        enabled=True,
        host="127.0.0.1",
        port=smtp_port,
        starttls=False,
        sender="aap@baymotors.example",
        recipients=(Recipients((SALES,)),),
    )
    rooftops = [
        dict(r, address={"address_line_1": f"{100 + i} Main Street", "city": city, "country": country})
        for i, (r, city, country) in enumerate(
            zip(ROOFTOPS, ("San Francisco", "Oakland", "Vancouver"), ("US", "US", "CA"))
        )
    ]
    # a website address longer than a phone is wide (it must wrap inside its location card)
    rooftops[0]["website"] = "https://www.baymotors-san-francisco.example/certified-pre-owned/inventory?utm_source=aap"
    dms = folder / "dms.csv"
    dms.write_bytes(dealer_csv(vehicles(8, seed=5)))  # http photos, unknown store codes: warnings
    settings = dataclasses.replace(
        settings,
        public_url=server.base_url,
        dealer=dataclasses.replace(settings.dealer, info={**settings.dealer.info, "rooftops": rooftops}),
        search=dataclasses.replace(settings.search, currencies=("USD", "CAD")),
        # the form's minimum age is pinned over HTTP with the agent's clock (tests/test_site_contact.py);
        # a browser driven by a test fills a form faster than any person
        web=fast_web(login_failures_per_account=3, contact_form_min_seconds=0),
        leads=dataclasses.replace(settings.leads, notifications=notifications),
        feeds=(
            FeedSettings("dms", str(dms), Schedule("every 24h", interval=86400), format="dealer-csv", replace=False),
        ),
    )
    stores = open_stores(url)
    feed = tmp_path_factory.mktemp("feed") / "inventory.jsonl"
    rows = [orjson.dumps(item).decode() for item in generate_listings(LISTINGS, settings=settings)]
    feed.write_text("\n".join(rows + ['{"vin": "NOT-A-VIN", "status": "available"}']) + "\n")
    imported = asyncio.run(run_import(stores, settings, ImportRequest(source=str(feed), partial=True), work=WORK))
    assert imported.run.outcome == "imported" and imported.run.rejected_lines == [LISTINGS + 1]
    stores.feeds.ensure(["dms"], int(time.time() * 1000) + 86_400_000)  # not due: it runs when asked to
    with cheap_hashing():
        accounts = Accounts(stores.console, settings)
        accounts.add(ADMIN, PASSWORD, role="admin")
        accounts.add(BDC, PASSWORD)
        server.start(create_app(settings, stores))
        try:
            yield {"base": server.base_url, "crm": crm, "stores": stores, "inbox": inbox, "settings": settings}
        finally:
            server.stop()
            smtp.stop()
            crm.close()
            stores.close()


@pytest.fixture(scope="module")
def browser(dealer) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


#: Records every Content-Security-Policy violation of a page (the browser's own event).
CSP_WATCH = (
    "window.__csp = [];"
    "document.addEventListener('securitypolicyviolation', function (e) {"
    " window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline')); });"
)


def new_page(
    browser: Browser, dealer: dict, viewport: dict, *, images: bool = True, ignore_https_errors: bool = False
) -> Page:
    """A page in a fresh context that never leaves loopback, watching for CSP violations
    (``ignore_https_errors``: a server whose certificate the test made)."""
    context = browser.new_context(
        viewport=viewport, accept_downloads=True, device_scale_factor=1, ignore_https_errors=ignore_https_errors
    )
    loopback = urlsplit(dealer["base"]).netloc

    def elsewhere(route: Route) -> None:
        if route.request.resource_type == "image" and images:
            route.fulfill(status=200, content_type="image/svg+xml", body=PLACEHOLDER)
        else:
            route.abort()

    # Only what is not on loopback goes through Python (a photo gets a placeholder, the rest is refused).
    context.route(lambda url: urlsplit(url).netloc != loopback, elsewhere)
    context.add_init_script(CSP_WATCH)
    page = context.new_page()
    page.set_default_timeout(20_000)
    violations: list[str] = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text or "Refused to" in m.text else None,
    )
    page.csp_console = violations  # type: ignore[attr-defined]
    return page


def csp_violations(page: Page) -> list[str]:
    """What the current document and the console reported against the Content-Security-Policy."""
    return list(page.evaluate("window.__csp || []")) + list(page.csp_console)  # type: ignore[attr-defined]


@pytest.fixture
def page(browser, dealer) -> Iterator[Page]:
    page = new_page(browser, dealer, WIDE)
    yield page
    assert csp_violations(page) == []
    page.context.close()


def sign_in(page: Page, base: str, password: str = PASSWORD, *, email: str = ADMIN, go: bool = True) -> None:
    if go:
        page.goto(f"{base}/console/login")
    page.get_by_label("E-mail address").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def local(ms_or_moment, zone=PACIFIC) -> str:
    """How a person reads an instant in ``zone``: ``Thu 3 Dec 2026, 09:00 (PST)`` (strftime's C locale,
    independent of the console's own formatter)."""
    moment = ms_or_moment if isinstance(ms_or_moment, datetime) else datetime.fromtimestamp(ms_or_moment / 1000, UTC)
    moment = moment.astimezone(zone)
    return f"{moment:%a} {moment.day} {moment:%b} {moment.year}, {moment:%H:%M} ({moment:%Z})"


def shot(page: Page, shots: Path, name: str, *, full: bool = False) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=full)


def test_search_page_through_results_and_open_a_vehicle(page, dealer, shots):
    page.goto(dealer["base"] + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Bay Motors Group")
    page.screenshot(path=str(shots / "public-home.png"))
    page.get_by_role("checkbox", name=re.compile(r"^Used \([\d,]+\)$")).check()  # with its count in the inventory
    page.get_by_label("Sort by").select_option("price:asc")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r"condition=used.*sort=price%3Aasc"))
    summary = page.locator("#results > p.muted").first.inner_text()
    assert "page 1 of" in summary
    links = "links => links.map(a => a.pathname)"
    first_page = page.locator("article.card h3 a").evaluate_all(links)
    page.get_by_role("link", name="Next page →").click()
    expect(page.locator("#results > p.muted").first).to_contain_text("page 2 of")
    assert not set(first_page) & set(page.locator("article.card h3 a").evaluate_all(links))
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


def test_a_shopper_asks_about_a_car_and_staff_find_the_lead_delivered(page, dealer, shots):
    dealer["crm"].status = 200
    violations = watch_csp(page)
    page.goto(dealer["base"] + "/")
    page.locator("article.card h3 a").first.click()
    title = page.get_by_role("heading", level=1).inner_text()
    page.get_by_role("link", name=re.compile(r"^Ask about this")).click()
    form = page.locator("form.contact")
    form.get_by_label("First name").fill("Theodora")
    form.get_by_role("textbox", name="E-mail").fill("not an address")
    form.get_by_role("checkbox", name="E-mail").check()
    form.get_by_role("button", name=re.compile("^Send to")).click()
    # every problem at once, each next to its field; what was typed is kept
    expect(page.locator("#c-last_name-error")).to_have_text("Enter your last name.")
    expect(page.locator("#c-email-error")).to_have_text("Enter an e-mail address like name@example.com.")
    expect(page.get_by_role("alert")).to_contain_text("Last name: Enter your last name.")
    page.screenshot(path=str(shots / "public-contact-problems.png"), full_page=True)
    form = page.locator("form.contact")
    expect(form.get_by_label("First name")).to_have_value("Theodora")
    form.get_by_label("Last name").fill("Vantongeren")
    form.get_by_role("textbox", name="E-mail").fill("theodora.v@example.org")
    form.get_by_label("Phone", exact=True).fill("(415) 555-0161")
    form.get_by_role("checkbox", name="Text message").check()
    form.get_by_role("textbox", name="Message").fill("Is it still available? I could come by on Saturday.")
    form.get_by_role("button", name=re.compile("^Send to")).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Thank you, your message is on its way")
    expect(page.get_by_role("status")).to_contain_text(f"about the {title}")
    reference = page.locator(".notice code").inner_text()
    assert reference.startswith("lead_")
    page.screenshot(path=str(shots / "public-contact-sent.png"))
    page.reload()  # the browser sends the form again: the first answer, no second lead
    expect(page.get_by_role("heading", level=1)).to_have_text("Your message was already sent")
    assert page.locator(".notice code").inner_text() == reference
    assert violations == []

    sign_in(page, dealer["base"])
    page.get_by_label("Name, e-mail or phone").fill("vantongeren")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table tr", has_text="Vantongeren")
    expect(rows).to_have_count(1)
    rows.get_by_role("link", name="Theodora Vantongeren").click()
    expect(page.locator("main")).to_contain_text(f"Lead {reference}")
    expect(page.locator("main")).to_contain_text("over web from public-page")
    expect(page.locator("[data-delivery=crm]")).to_have_text("delivered", timeout=30_000)  # the page reloads itself
    sent = [r for r in dealer["crm"].accepted() if r["headers"].get("X-AAP-Lead-Id") == reference]
    assert len(sent) == 1 and b"Vantongeren" in sent[0]["body"]


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
    # The wait counts down from the configured delay (5 s) while the page loads.
    expect(page.get_by_role("alert")).to_contain_text(
        re.compile(r"Too many failed sign-ins\. Try again in [1-5] seconds?\.")
    )
    sign_in(mine, dealer["base"])  # the owner's browser is not held back by the stranger's guesses
    expect(mine.get_by_role("heading", level=1)).to_have_text("Leads")
    own.close()


def test_inventory_and_a_conformance_run_from_the_console(page, dealer, shots):
    sign_in(page, dealer["base"])
    page.get_by_role("link", name="Inventory").click()
    expect(page.get_by_role("heading", name="Listings by rooftop")).to_be_visible()
    history = page.locator("section", has=page.get_by_role("heading", name="Feed imports"))
    expect(history).to_contain_text("Last import:")
    expect(history).to_contain_text(f"Rejected rows: line {LISTINGS + 1}")
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


def _next_thursday_nine() -> datetime:
    """09:00 in San Francisco on the next Thursday at least three days away (within the booking horizon)."""
    day = datetime.now(PACIFIC).date() + timedelta(days=3)
    while day.weekday() != 3:
        day += timedelta(days=1)
    return datetime(day.year, day.month, day.day, 9, 0, tzinfo=PACIFIC)


def _lead_with_appointment(dealer) -> tuple[str, datetime]:
    at = _next_thursday_nine()
    customer = {**CUSTOMER, "first_name": "Ottoline", "last_name": "Featherstonehaugh", "email": "ottoline@example.org"}
    body = lead_request(
        customer=customer,
        appointment={"appointment_type": "sales", "appointment_at": at.isoformat()},
        message="Could I see it on Thursday morning?",
    )
    answer = httpx.post(dealer["base"] + "/a2a", json=send_message(body), headers=AAP_HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    return re.search(r'"lead_id":\s*"(lead_[0-9a-f]+)"', answer.text).group(1), at


def test_a_lead_from_a2a_is_worked_through_the_pipeline_from_its_notification(page, dealer, shots):
    lead_id, appointment_at = _lead_with_appointment(dealer)
    inbox = dealer["inbox"]
    for _ in range(600):  # the delivery worker sends the notification: bounded by count, ~60 s at most
        if any(lead_id.encode() in content for _, content in inbox.messages):
            break
        time.sleep(0.1)
    rcpt, content = next((r, c) for r, c in inbox.messages if lead_id.encode() in c)
    assert rcpt == [SALES]
    message = email.message_from_bytes(content, policy=email.policy.default)
    text = message.get_content()
    raw = content.decode("utf-8", "replace")
    for value in ("Ottoline", "Featherstonehaugh", "ottoline@example.org", CUSTOMER["phone"], "Thursday morning"):
        assert value not in raw, value  # the default: a link, the rooftop, the time; no customer data
    link = re.search(r"(http://\S+/console/leads/lead_[0-9a-f]+)", text).group(1)
    assert link.endswith(lead_id)

    page.goto(link)  # signed out: the sign-in page, then the lead itself
    sign_in(page, dealer["base"], go=False)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Ottoline Featherstonehaugh")
    lead = dealer["stores"].leads.get_lead(lead_id)
    expect(page.locator("main")).to_contain_text(f"received {local(lead['received_ms'])}")  # the rooftop's zone
    appointment = page.locator("section", has=page.get_by_role("heading", name="Appointment"))
    expect(appointment).to_contain_text(local(appointment_at))  # "Thu 3 Dec 2026, 09:00 (PST)"
    pipeline = page.locator("#pipeline")
    expect(pipeline).to_contain_text("waiting")

    pipeline.get_by_label("Status").select_option("contacted")
    pipeline.get_by_label("Owner").select_option(BDC)
    pipeline.get_by_label("Follow-up date").fill((appointment_at.date() - timedelta(days=1)).isoformat())
    pipeline.get_by_label("Add a note").fill("Called: confirmed the Thursday visit.\nBring the trade-in papers.")
    pipeline.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_have_text("Saved.")
    page.reload()  # persisted, not just shown
    history = page.locator("ol.history")
    expect(history).to_contain_text("Status New → Contacted")
    expect(history).to_contain_text(f"Owner nobody → {BDC}")
    expect(history).to_contain_text("Bring the trade-in papers.")
    expect(page.locator("#pipeline")).to_contain_text("First response")
    page.locator("#pipeline").get_by_label("Status").select_option("appointment_set")
    page.locator("#pipeline").get_by_role("button", name="Save").click()
    expect(page.locator("ol.history")).to_contain_text("Status Contacted → Appointment set")
    page.goto(f"{dealer['base']}/console/leads/{lead_id}")
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDE["width"]  # nothing sideways
    shot(page, shots, "console-pipeline", full=True)

    page.get_by_role("link", name="← All leads").click()
    filters = page.locator("details.collapsible")
    filters.get_by_label("Pipeline status").select_option("appointment_set")
    filters.get_by_label("Owner").select_option(BDC)
    filters.get_by_role("button", name="Filter").click()
    rows = page.locator("table.inbox tr", has_text="Featherstonehaugh")
    expect(rows).to_have_count(1)
    expect(rows.locator("[data-stage]")).to_have_text("Appointment set")
    shot(page, shots, "console-leads")
    page.goto(dealer["base"] + "/console/leads?stage=new")
    expect(page.locator("table.inbox")).not_to_contain_text("Featherstonehaugh")
    entries = dealer["stores"].console.audit_entries(subject=lead_id)
    assert [e.action for e in entries if e.action == "lead.pipeline"] == ["lead.pipeline"] * 2

    page.get_by_role("link", name="Agent health").click()
    response = page.locator("section", has=page.get_by_role("heading", name="Time to first response"))
    expect(response).to_contain_text(lead["rooftop"] or "(no rooftop)")


def test_the_inventory_browser_pages_through_every_listing_and_filters_no_photo(browser, dealer, shots):
    page = new_page(browser, dealer, WIDE, images=False)  # 200 pages: their photos are not the point here
    sign_in(page, dealer["base"])
    page.goto(dealer["base"] + "/console/inventory?sort=price")
    with dealer["stores"].db.read() as tx:
        total = tx.one("SELECT COUNT(*) FROM inv_listing")[0]
        no_photo = tx.one("SELECT COUNT(*) FROM inv_listing WHERE photos = 0")[0]
    assert total >= LISTINGS
    expect(page.locator("#matches")).to_have_text(f"{total:,} listings match.")
    seen: list[str] = []
    for _ in range(total // 50 + 2):  # bounded by count
        seen += page.locator("table.listings td.lead-cell > a").evaluate_all("links => links.map(a => a.pathname)")
        following = page.get_by_role("link", name="Next page →")
        if following.count() == 0:
            break
        # the link as a person follows it, without waiting for the page's last image and style
        page.goto(dealer["base"] + following.get_attribute("href"), wait_until="domcontentloaded")
    assert len(seen) == total and len(set(seen)) == total  # every listing once, in 50s, by keyset
    assert csp_violations(page) == []
    page.context.close()

    page = new_page(browser, dealer, WIDE)
    sign_in(page, dealer["base"])
    page.get_by_role("link", name="Inventory").click()
    page.get_by_label("with no photo").check()
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#matches")).to_have_text(f"{no_photo:,} listing{'' if no_photo == 1 else 's'} match.")
    shown = page.locator("table.listings tr:has(td)")
    expect(shown.first).to_be_visible()
    assert shown.count() == min(50, no_photo) and page.locator("table.listings .photo-none").count() == shown.count()
    shot(page, shots, "console-inventory-no-photo")
    page.locator("table.listings td.lead-cell > a").first.click()
    expect(page.get_by_role("heading", name="Import history")).to_be_visible()
    expect(page.locator("main")).to_contain_text("no photo")
    shot(page, shots, "console-listing")
    assert csp_violations(page) == []
    page.context.close()


def test_a_feed_run_from_the_console_appears_in_its_history(page, dealer, shots):
    sign_in(page, dealer["base"])
    page.get_by_role("link", name="Feeds").click()
    section = page.locator("#feed-dms")
    expect(section).to_contain_text("No run yet.")
    section.get_by_role("button", name="Run dms now").click()
    expect(page.get_by_role("status").first).to_contain_text("import started")
    latest = page.locator("#feed-dms table tr:has(td)").first
    expect(latest).to_contain_text("the console", timeout=60_000)  # the page reloads when the run is recorded
    expect(latest).to_contain_text("imported")
    (run,) = dealer["stores"].feeds.runs(feed="dms")
    assert run.trigger == "console" and run.warnings > 0
    assert any(e.action == "feed.run" for e in dealer["stores"].console.audit_entries(subject="dms"))
    shot(page, shots, "console-feeds")
    latest.get_by_role("link").first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Import of dms")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the warnings (CSV)").click()
    lines = Path(download.value.path()).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "line,kind,listing,location,column,value,message" and len(lines) > 1
    shot(page, shots, "console-feed-run", full=True)
    page.goto(dealer["base"] + "/console/inventory?warned=1")
    expect(page.locator("table.listings .badge.warned").first).to_be_visible()


PAGES = (
    "/",
    "/console/leads",
    "/console/inventory",
    "/console/feeds",
    "/console/health",
    "/console/users",
    "/console/audit",
    "/console/account",
    "/console/no-such-page",
)


def test_every_page_keeps_the_csp_and_works_at_phone_width(browser, dealer, shots):
    page = new_page(browser, dealer, PHONE)
    sign_in(page, dealer["base"])
    stores = dealer["stores"]
    lead_id = stores.leads.list_leads(limit=1)[0]["lead_id"]
    vehicle_id = stores.inventory_summaries.lookup("1")[0].vehicle_id
    run_id = stores.feeds.runs(limit=1)[0].run_id
    extra = (f"/console/leads/{lead_id}", f"/console/inventory/{vehicle_id}", f"/vehicles/{vehicle_id}")
    for path in PAGES + extra + (f"/console/feeds/runs/{run_id}", "/api-docs/a2a"):
        page.goto(dealer["base"] + path)
        assert csp_violations(page) == [], path
        if path.startswith("/console/") or path == "/":
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{path} scrolls sideways at phone width ({width}px)"
        folded = page.locator("details[data-open-wide]")
        if folded.count():
            assert not folded.first.evaluate("d => d.open"), f"{path}: the filters fill a phone's first screen"
    for name, path in (
        ("console-leads-phone", "/console/leads"),
        ("console-lead-phone", f"/console/leads/{lead_id}"),
        ("console-inventory-phone", "/console/inventory"),
        ("console-feeds-phone", "/console/feeds"),
    ):
        page.goto(dealer["base"] + path)
        shot(page, shots, name)
    page.goto(dealer["base"] + "/console/inventory")
    first = page.locator("table.listings td.lead-cell").first
    assert first.bounding_box()["y"] < PHONE["height"], "the first listing starts below the first screen"
    page.goto(dealer["base"] + "/console/leads")
    page.locator("details.collapsible summary").click()  # folded, one tap away
    expect(page.get_by_label("Pipeline status")).to_be_visible()
    page.context.close()


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
    violations = watch_csp(page)
    page.goto(dealer["base"] + "/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at phone width ({width}px)"
    # the first vehicle starts on the first screen: the filters are folded away
    top = page.evaluate("document.querySelector('article.card').getBoundingClientRect().top")
    assert top < 844, f"the first vehicle starts {top:.0f}px down, below the first screen"
    expect(page.get_by_label("Make")).to_be_hidden()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.screenshot(path=str(shots / "public-phone.png"))
    page.get_by_text("Filters and sort").click()
    expect(page.get_by_label("Make")).to_be_visible()
    for link in page.locator("#locations a.long-link").all():  # a long website wraps inside its card
        box, card = link.bounding_box(), link.locator("xpath=ancestor::article").bounding_box()
        assert box and card and box["x"] + box["width"] <= card["x"] + card["width"] + 0.5
    with page.expect_navigation(wait_until="load"):  # its stylesheet too: before it, a photo is 400 px wide
        page.locator("article.card h3 a").first.click()
    expect(page.locator("form.contact")).to_be_attached()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the vehicle page scrolls sideways at phone width ({width}px)"
    page.screenshot(path=str(shots / "public-phone-vehicle.png"), full_page=True)
    assert violations == []
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
    for path in ("/", vehicle, "/contact", "/api-docs/a2a", "/api-docs/poppy", "/console/login"):
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


def test_a_contact_form_posted_from_another_site_makes_no_lead(page, dealer):
    """A page elsewhere posts a contact form with a token it fetched itself: the browser sends no
    form cookie with it (SameSite=Lax) and names the other site as ``Origin``; nothing is stored."""
    with httpx.Client(base_url=dealer["base"], timeout=30) as attacker:
        token = re.search(r'name="form_token" value="([^"]+)"', attacker.get("/contact").text).group(1)
    evil = "http://evil.example/"
    fields = {"form_token": token, "first_name": "Mallory", "last_name": "Forger", "email": "m@evil.example"}
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in fields.items())
    forged = (
        f'<form id="f" method="post" action="{dealer["base"]}/contact">{inputs}'
        '<input name="channels" value="email"></form><script>document.getElementById("f").submit()</script>'
    ).encode()
    page.context.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=forged))
    before = dealer["stores"].leads.count_leads()
    page.goto(dealer["base"] + "/contact")  # the shopper's own browser has a form cookie of its own
    page.goto(evil)
    page.wait_for_url(re.compile(r"/contact$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("The form was not sent")
    assert dealer["stores"].leads.count_leads() == before


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
