"""The console as a dealership's daily tool, over HTTP (Starlette's test client): the lead pipeline,
local time, the inventory browser, the feeds pages with "run now", error pages by ``Accept``
(docs/console.md)."""

from __future__ import annotations

import asyncio
import copy
import csv
import dataclasses
import io
import re
import time
from datetime import UTC, datetime

import orjson
import pytest
from starlette.testclient import TestClient

from aap.accounts import Accounts
from aap.agent import CallContext
from aap.config.feeds import FeedSettings, Schedule
from aap.config.leads import DeliverySettings
from aap.feeds.scheduler import FeedScheduler
from aap.inventory.demo import generate_listings
from aap.server.app import create_app
from aap.store import open_stores
from aap.work import Work
from console_support import PASSWORD, cheap_hashing, csrf_of, fast_web, listings, post_sign_in, submit_customers
from feed_samples import dealer_csv, vehicles
from lead_support import http_route, lead_request, lead_settings

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

BASE = "https://dealer.example"
ADMIN, STAFF, OAKLAND = "admin@dealer.example", "staff@dealer.example", "oakland@dealer.example"
LISTINGS = 130


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    folder = tmp_path_factory.mktemp("work")
    url = f"sqlite:///{folder}/work.db"
    settings = lead_settings(
        routes=[http_route("http://127.0.0.1:9/adf")],
        database_url=url,
        delivery=DeliverySettings(max_attempts=1, in_process=False),
    )
    demo = list(generate_listings(LISTINGS, settings=settings))
    for i, item in enumerate(demo):
        if i % 9 == 0:
            item.pop("price", None)
        if i % 7 == 0:
            item.pop("photos", None)
    feed = folder / "inventory.jsonl"
    feed.write_text("\n".join(orjson.dumps(item).decode() for item in demo) + "\n")
    dms = folder / "dms.csv"
    dms.write_bytes(dealer_csv(vehicles(6, seed=5)))  # http photos and store codes: warnings
    settings = dataclasses.replace(
        settings,
        web=fast_web(),
        feeds=(
            FeedSettings("nightly", str(feed), Schedule("every 24h", interval=86400), replace=False),
            FeedSettings("dms", str(dms), Schedule("every 6h", interval=21600), format="dealer-csv", replace=False),
        ),
    )
    stores = open_stores(url)
    stores.inventory.import_listings(listings())
    nightly = asyncio.run(FeedScheduler(stores, settings, work=WORK).run_feed(settings.feeds[0], due_only=False))
    assert nightly is not None and nightly.run.outcome == "imported"
    with cheap_hashing():
        accounts = Accounts(stores.console, settings)
        accounts.add(ADMIN, PASSWORD, role="admin")
        accounts.add(STAFF, PASSWORD)
        accounts.add(OAKLAND, PASSWORD, rooftops=("Bay Motors Oakland",))
        app = create_app(settings, stores, services=[])
        with TestClient(app, base_url=BASE) as running:  # the app's lifespan and one event loop for it
            ids = submit_customers(app.state.agent)
            yield {"app": app, "ids": ids, "stores": stores, "demo": demo, "running": running}
    stores.close()


def sign_in(deployment, email: str, client: TestClient | None = None) -> TestClient:
    client = client or TestClient(deployment["app"], base_url=BASE)
    answer = post_sign_in(client, email)
    assert answer.status_code == 303, answer.text
    return client


def lead_ids(html: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r'href="/console/leads/(lead_[0-9a-f]+)"', html)))


def work(client, lead_id, **form):
    token = csrf_of(client.get(f"/console/leads/{lead_id}").text)
    return client.post(f"/console/leads/{lead_id}/pipeline", data={"csrf_token": token, **form}, follow_redirects=False)


# -- the lead pipeline ---------------------------------------------------------------------


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_a_lead_gets_a_status_an_owner_a_follow_up_and_notes_that_persist_and_filter(deployment):
    admin = sign_in(deployment, ADMIN)
    oakland_lead = deployment["ids"][1]  # CUSTOMERS[1] is at Oakland
    page = admin.get(f"/console/leads/{oakland_lead}").text
    owners = re.findall(r'<option value="([^"]+@dealer\.example)"', page.split('id="owner"')[1].split("</select>")[0])
    assert set(owners) == {ADMIN, STAFF, OAKLAND}  # whose scope includes Oakland
    sf_page = admin.get(f"/console/leads/{deployment['ids'][0]}").text
    assert OAKLAND not in sf_page.split('id="owner"')[1].split("</select>")[0]

    answer = work(
        admin, oakland_lead, stage="contacted", owner=OAKLAND, follow_up="2026-03-04", note="Left a voicemail."
    )
    assert answer.status_code == 303 and answer.headers["location"].endswith("?notice=saved#pipeline")
    page = admin.get(f"/console/leads/{oakland_lead}?notice=saved").text
    assert "Left a voicemail." in page and '<div class="notice" role="status">Saved.</div>' in page
    assert "Ha!" not in admin.get(f"/console/leads/{oakland_lead}?notice=Ha!").text  # never text from a link
    assert "Status New → <strong>Contacted</strong>" in page and "Wed 4 Mar 2026" in page

    refused = work(admin, oakland_lead, stage="won", owner="someone@else.example", follow_up="soon")
    assert refused.status_code == 400
    for part in ("Status", "Owner", "Follow-up"):
        assert part in refused.text  # every problem at once

    oakland = sign_in(deployment, OAKLAND)
    mine = oakland.get("/console/leads?owner=me").text
    assert lead_ids(mine) == [oakland_lead]
    due = oakland.get("/console/leads?follow_up=due").text
    assert lead_ids(due) == [oakland_lead]  # 4 March is long past
    assert lead_ids(admin.get("/console/leads?stage=contacted").text) == [oakland_lead]
    assert oakland_lead not in lead_ids(admin.get("/console/leads?stage=new").text)
    assert work(oakland, deployment["ids"][0], stage="lost").status_code == 404  # San Francisco's

    entries = deployment["stores"].console.audit_entries(subject=oakland_lead)
    change = next(e for e in entries if e.action == "lead.pipeline")
    assert change.detail == {"stage": "contacted", "owner": OAKLAND, "follow_up": "2026-03-04", "note": True}

    token = csrf_of(admin.get("/console/leads").text)
    exported = admin.post("/console/leads.csv", data={"csrf_token": token, "stage": "contacted"})
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["lead_id"] for r in rows] == [oakland_lead]
    assert rows[0]["pipeline_status"] == "contacted" and rows[0]["owner"] == OAKLAND


def test_every_inbox_sort_pages_through_every_lead(deployment):
    admin = sign_in(deployment, ADMIN)
    everyone = set(deployment["ids"])
    for sort in ("newest", "oldest", "follow_up", "status", "owner"):
        seen, url = [], f"/console/leads?sort={sort}"
        while url:
            page = admin.get(url).text
            seen += lead_ids(page)
            found = re.search(r'href="([^"]+)" rel="next"', page)
            url = found.group(1).replace("&amp;", "&") if found else None
        assert sorted(seen) == sorted(everyone), sort
    assert admin.get("/console/leads?after=not-a-cursor").status_code == 400
    assert admin.get("/console/leads?sort=random").status_code == 400


def test_times_are_local_to_the_rooftop_and_date_filters_read_its_days(deployment):
    agent = deployment["app"].state.agent
    late = datetime(2026, 3, 3, 7, 30, tzinfo=UTC)  # 23:30 on 2 March in Los Angeles
    lead_id = agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=late))["data"]["lead_id"]
    admin = sign_in(deployment, ADMIN)
    row = admin.get("/console/leads").text
    assert "Mon 2 Mar 2026, 23:30 (PST)" in row
    assert lead_id in lead_ids(admin.get("/console/leads?from=2026-03-02&to=2026-03-02").text)
    assert lead_id not in lead_ids(admin.get("/console/leads?from=2026-03-03").text)
    vancouver = admin.get(f"/console/leads/{deployment['ids'][2]}").text  # Vancouver keeps Pacific time too
    assert "received Mon 2 Mar 2026, 09:00 (PST)" in vancouver


def test_a_lead_the_crm_received_says_so(deployment):
    lead_id = deployment["ids"][3]
    stores = deployment["stores"]
    with stores.db.transaction() as tx:
        tx.execute(
            "UPDATE lead_deliveries SET status = 'delivered', delivered_ms = ? WHERE lead_id = ?",
            (int(time.time() * 1000), lead_id),
        )
    admin = sign_in(deployment, ADMIN)
    assert "in CRM: crm" in admin.get(f"/console/leads?q={'Yonathar'}").text
    page = admin.get(f"/console/leads/{lead_id}").text
    assert "This lead is in the CRM too" in page
    before = stores.leads.get_lead(lead_id)
    assert work(admin, lead_id, stage="sold", note="Sold it.").status_code == 303
    after = stores.leads.get_lead(lead_id)
    assert after["deliveries"] == before["deliveries"] and after["request"] == before["request"]


# -- the inventory browser -------------------------------------------------------------------


def browse(client, query: str) -> list[str]:
    """Every listing id the browser shows for ``query``, following "Next page" to the end."""
    seen, url = [], f"/console/inventory?{query}"
    while url:
        page = client.get(url)
        assert page.status_code == 200, page.text
        seen += re.findall(r'<a href="/console/inventory/([^"#]+)">', page.text)
        found = re.search(r'href="([^"]+)" rel="next"', page.text)
        url = found.group(1).replace("&amp;", "&") if found else None
    return seen


def test_the_inventory_browser_pages_sorts_and_filters(deployment):
    admin = sign_in(deployment, ADMIN)
    stores = deployment["stores"]
    with stores.db.read() as tx:
        rows = tx.fetchall("SELECT id, price, odometer_mm, in_stock_day, photos FROM inv_listing")
    everything = browse(admin, "sort=price")
    assert sorted(everything) == sorted(r[0] for r in rows) and len(everything) == len(rows)
    priced = sorted((r for r in rows if r[1] is not None), key=lambda r: (r[1], r[0]))
    assert everything == [r[0] for r in priced] + sorted(r[0] for r in rows if r[1] is None)
    by_mileage = browse(admin, "sort=mileage_desc")
    known = sorted((r for r in rows if r[2] is not None), key=lambda r: (r[2], r[0]), reverse=True)
    assert by_mileage[: len(known)] == [r[0] for r in known]
    assert browse(admin, "no_photo=1") and set(browse(admin, "no_photo=1")) == {r[0] for r in rows if r[4] == 0}
    assert set(browse(admin, "no_price=1&sort=mileage")) == {r[0] for r in rows if r[1] is None}
    page = admin.get("/console/inventory").text
    assert re.search(r'<option value="used">Used \(\d+\)</option>', page)
    assert admin.get("/console/inventory?condition=excellent").status_code == 400
    # Only the vehicle types the inventory has: cars only, no choice to make; a motorcycle, a choice of two.
    assert 'id="vehicle_type"' not in page
    bike = dict(listings()[0], vin="JYARN23E0AA000001", stock="M1", vehicle_type="motorcycle", make="Yamaha")
    stores.inventory.import_listings([bike])
    page = admin.get("/console/inventory").text
    offered = re.findall(r'<option value="([a-z]+)"', page.split('id="vehicle_type"')[1].split("</select>")[0])
    assert offered == ["car", "motorcycle"] and "Motorcycle (1)" in page
    assert [admin.get("/console/inventory?vehicle_type=motorcycle").text.count('class="photo-cell"')] == [1]
    stores.inventory.import_listings([dict(bike, status="sold")])


def test_a_run_now_from_the_console_is_recorded_and_its_warnings_mark_listings(deployment):
    admin = sign_in(deployment, ADMIN, deployment["running"])  # "run now" imports on the app's own loop
    staff = sign_in(deployment, STAFF)
    feeds = admin.get("/console/feeds").text
    assert "nightly" in feeds and "dms" in feeds and "Run dms now" in feeds
    assert "Run dms now" not in staff.get("/console/feeds").text
    token = csrf_of(staff.get("/console/feeds").text)
    assert staff.post("/console/feeds/dms/run", data={"csrf_token": token}).status_code == 403

    stores = deployment["stores"]
    held = stores.feeds.claim("dms", int(time.time() * 1000), 60_000, due_only=False)  # another worker's run
    token = csrf_of(feeds)
    busy = admin.post("/console/feeds/dms/run", data={"csrf_token": token}, follow_redirects=False)
    assert busy.status_code == 303 and "notice=busy" in busy.headers["location"]
    assert stores.feeds.runs(feed="dms") == []
    stores.feeds.release("dms", held, now_ms=0, next_run_ms=0, outcome="failed", success=False, failures=0)

    started = admin.post("/console/feeds/dms/run", data={"csrf_token": token}, follow_redirects=False)
    assert started.status_code == 303 and "notice=started" in started.headers["location"]
    for _ in range(500):  # the import runs in the app's background: bounded by count
        if stores.feeds.runs(feed="dms"):
            break
        time.sleep(0.02)
    (run,) = stores.feeds.runs(feed="dms")
    assert run.trigger == "console" and run.outcome == "imported" and run.warnings
    assert any(e.action == "feed.run" and e.subject == "dms" for e in stores.console.audit_entries())
    assert f"/console/feeds/runs/{run.run_id}" in admin.get("/console/feeds").text
    page = admin.get(f"/console/feeds/runs/{run.run_id}").text
    for label, count in (("New", run.inserted), ("Updated", run.updated), ("Unchanged", run.unchanged)):
        assert f"<dt>{label}</dt><dd>{count:,}</dd>" in page

    warned = browse(admin, "warned=1")
    assert warned and all(i.startswith("veh_") for i in warned)
    notes = stores.feeds.notes(run.run_id, kind="warning")
    assert set(warned) == {n.listing_id for n in notes if n.listing_id}
    download = admin.get(f"/console/feeds/runs/{run.run_id}/notes.csv?kind=warning")
    lines = list(csv.DictReader(io.StringIO(download.text)))
    assert download.headers["content-type"].startswith("text/csv") and len(lines) == len(notes)
    listing = admin.get(f"/console/inventory/{warned[0]}").text
    assert "What the imports said about this listing" in listing and run.run_id in listing


# -- error pages -------------------------------------------------------------------------------


def test_unknown_pages_answer_a_page_to_browsers_and_json_to_scripts(deployment):
    admin = sign_in(deployment, ADMIN)
    html = admin.get("/console/no-such-page", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert html.status_code == 404 and html.headers["content-type"].startswith("text/html")
    assert "Not found" in html.text and "Content-Security-Policy" in html.headers
    as_json = admin.get("/console/no-such-page", headers={"Accept": "application/json"})
    assert as_json.status_code == 404 and as_json.json()["error"]["status"] == 404
    forbidden = sign_in(deployment, STAFF).get("/console/users", headers={"Accept": "text/html"})
    assert forbidden.status_code == 403 and "<h1>Not allowed</h1>" in forbidden.text
    site = admin.get("/no-such-page", headers={"Accept": "text/html"})
    assert site.status_code == 404 and "Page not found" in site.text
    api = admin.get("/no-such-page")
    assert api.status_code == 404 and api.json()["error"]["status"] == 404
    assert admin.get(f"/console/leads/{deployment['ids'][0]}/state", headers={"Accept": "application/json"}).json()
