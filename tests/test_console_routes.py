"""The staff console over HTTP (Starlette's test client): sign-in, CSRF, roles and scopes, the audit
log, CSV export, retry, lockout, and no customer data outside the console (docs/console.md)."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import logging
import re
import sys
import time

import pytest
from starlette.testclient import TestClient

from aap.accounts import Accounts
from aap.config.leads import DeliverySettings
from aap.console.health import CheckRunner, counters
from aap.server.app import create_app
from aap.store import open_stores
from aap.web.metrics import Metrics
from console_support import (
    CUSTOMERS,
    PASSWORD,
    cheap_hashing,
    csrf_of,
    fast_web,
    listings,
    post_sign_in,
    submit_customers,
)
from lead_support import Receiver, http_route, lead_request, lead_settings

BASE = "https://dealer.example"
ADMIN, STAFF, OAKLAND = "admin@dealer.example", "staff@dealer.example", "oakland@dealer.example"
CUSTOMER_VALUES = [value for customer in CUSTOMERS for value in customer[:4]]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    receiver = Receiver()
    receiver.status = 500
    url = f"sqlite:///{tmp_path_factory.mktemp('console')}/console.db"
    settings = lead_settings(
        routes=[http_route(receiver.url)],
        database_url=url,
        delivery=DeliverySettings(
            max_attempts=1,
            poll_seconds=0.05,
            base_backoff_seconds=0.05,
            max_backoff_seconds=0.1,
            timeout_seconds=5,
            lease_seconds=30,
        ),
    )
    settings = dataclasses.replace(settings, web=fast_web(login_failures_per_account=3))
    stores = open_stores(url)
    stores.inventory.import_listings(listings())
    with cheap_hashing():
        accounts = Accounts(stores.console, settings)
        accounts.add(ADMIN, PASSWORD, role="admin")
        accounts.add(STAFF, PASSWORD)
        accounts.add(OAKLAND, PASSWORD, rooftops=("Bay Motors Oakland",))
        app = create_app(settings, stores)
        with TestClient(app, base_url=BASE) as main:
            ids = submit_customers(app.state.agent)
            yield {"app": app, "client": main, "ids": ids, "receiver": receiver, "stores": stores}
    receiver.close()
    stores.close()


def browser(deployment) -> TestClient:
    """A client with its own cookies, on the running app."""
    return TestClient(deployment["app"], base_url=BASE)


def sign_in(deployment, email: str, password: str = PASSWORD) -> TestClient:
    client = browser(deployment)
    answer = post_sign_in(client, email, password)
    assert answer.status_code == 303, answer.text
    return client


def audit(deployment, **kw):
    return deployment["stores"].console.audit_entries(**kw)


def test_every_page_needs_a_session(deployment):
    client = browser(deployment)
    for path in (
        "/console/leads",
        f"/console/leads/{deployment['ids'][0]}",
        "/console/inventory",
        "/console/health",
        "/console/users",
        "/console/audit",
        "/console/account",
    ):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == f"/console/login?next={path}", path
    for path in ("/console/leads.csv", f"/console/leads/{deployment['ids'][0]}/retry", "/console/health/check"):
        assert client.post(path, data={"csrf_token": "x"}).status_code == 401
    assert client.get("/console/assets/aap.css").status_code == 200


def test_signing_in_sets_a_hardened_session_cookie_and_signing_out_ends_it(deployment):
    client = browser(deployment)
    form = client.get("/console/login")
    assert "Set-Cookie" in form.headers and form.headers["cache-control"] == "no-store"
    wrong = client.post(
        "/console/login", data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": "not the password"}
    )
    unknown = client.post(
        "/console/login",
        data={"csrf_token": csrf_of(wrong.text), "email": "who@dealer.example", "password": "not the password"},
    )
    assert wrong.status_code == unknown.status_code == 401
    assert "The e-mail address or password is wrong." in wrong.text and "wrong." in unknown.text
    answer = client.post(
        "/console/login",
        data={"csrf_token": csrf_of(unknown.text), "email": STAFF, "password": PASSWORD, "next": "/console/inventory"},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/console/inventory"
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("aap_console="))
    flags = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite", "path", "max-age"} <= flags and "SameSite=lax" in cookie
    assert "Path=/console/" in cookie
    page = client.get("/console/leads")
    assert page.status_code == 200 and STAFF in page.text
    client.post("/console/logout", data={"csrf_token": csrf_of(page.text)})
    assert client.get("/console/leads", follow_redirects=False).status_code == 303


def test_the_sign_in_form_refuses_a_missing_token_and_a_foreign_site(deployment):
    client = browser(deployment)
    form = client.get("/console/login")
    other = browser(deployment)  # a token from another browser's form
    assert (
        other.post(
            "/console/login", data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD}
        ).status_code
        == 403
    )
    page = client.post("/console/login", data={"email": STAFF, "password": PASSWORD})
    assert page.status_code == 403
    page = client.post(
        "/console/login",
        data={"csrf_token": csrf_of(page.text), "email": STAFF, "password": PASSWORD},
        headers={"Origin": "https://evil.example"},
    )
    assert page.status_code == 403
    answer = client.post(
        "/console/login",
        data={"csrf_token": csrf_of(page.text), "email": STAFF, "password": PASSWORD, "next": "https://evil.example/"},
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/console/leads"  # never to another site


def test_every_form_refuses_a_missing_or_wrong_csrf_token_and_a_foreign_origin(deployment):
    admin = sign_in(deployment, ADMIN)
    token = csrf_of(admin.get("/console/leads").text)
    lead_id = deployment["ids"][0]
    users = {u.email: u.user_id for u in deployment["stores"].console.users()}
    posts = {
        "/console/leads.csv": {},
        f"/console/leads/{lead_id}/retry": {},
        f"/console/leads/{lead_id}/handled": {"handled": "1"},
        "/console/health/check": {},
        "/console/users": {"email": "new@dealer.example", "password": PASSWORD},
        f"/console/users/{users[STAFF]}/remove": {},
        f"/console/users/{users[STAFF]}/password": {"password": "another long password"},
        "/console/account": {"current": PASSWORD, "password": "x" * 20, "again": "x" * 20},
        "/console/account/sessions": {"which": "all"},
        f"/console/users/{users[STAFF]}/unlock": {},
        "/console/logout": {},
    }
    before = len(audit(deployment, limit=1000))
    for path, data in posts.items():
        assert admin.post(path, data=data).status_code == 403, path
        assert admin.post(path, data={**data, "csrf_token": "forged"}).status_code == 403, path
        assert (
            admin.post(path, data={**data, "csrf_token": token}, headers={"Origin": "https://evil.example"}).status_code
            == 403
        ), path
    assert len(audit(deployment, limit=1000)) == before  # nothing happened
    assert deployment["stores"].lead_inbox.lead(lead_id, _all())["handled_ms"] is None
    assert admin.get("/console/leads").status_code == 200  # still signed in


def _all():
    from aap.store.lead_inbox import LeadScope

    return LeadScope()


def test_staff_see_the_leads_of_their_rooftops_and_only_admins_manage_users(deployment):
    ids = deployment["ids"]
    oakland = sign_in(deployment, OAKLAND)
    inbox = oakland.get("/console/leads").text
    assert "Hopperwick" in inbox and "Yonathar" in inbox and "Lovelacqua" not in inbox and "Turingsby" not in inbox
    assert oakland.get(f"/console/leads/{ids[0]}").status_code == 404  # San Francisco's lead
    assert oakland.get(f"/console/leads/{ids[1]}").status_code == 200
    token = csrf_of(inbox)
    assert (
        oakland.post(f"/console/leads/{ids[0]}/handled", data={"csrf_token": token, "handled": "1"}).status_code == 404
    )
    assert oakland.post(f"/console/leads/{ids[0]}/retry", data={"csrf_token": token}).status_code == 404
    exported = oakland.post("/console/leads.csv", data={"csrf_token": token})
    assert {line.split(",")[6] for line in exported.text.splitlines()[1:]} == {"Hopperwick", "Yonathar"}
    for path in ("/console/users", "/console/audit"):
        assert oakland.get(path).status_code == 403
    assert "/console/users" not in inbox  # not offered either
    everyone = sign_in(deployment, STAFF).get("/console/leads").text
    assert all(c[1] in everyone for c in CUSTOMERS)


def test_viewing_searching_and_exporting_are_in_the_audit_log(deployment):
    admin = sign_in(deployment, ADMIN)
    lead_id = deployment["ids"][3]
    admin.get(f"/console/leads/{lead_id}")
    found = admin.get("/console/leads", params={"q": "Yonathar", "rooftop": "Bay Motors Oakland"})
    assert "Yonathar" in found.text and "Hopperwick" not in found.text
    admin.post("/console/leads.csv", data={"csrf_token": csrf_of(found.text), "q": "Yonathar"})
    entries = audit(deployment, limit=3)
    assert [(e.actor, e.action) for e in entries] == [
        (ADMIN, "leads.export"),
        (ADMIN, "leads.list"),
        (ADMIN, "lead.view"),
    ]
    assert entries[2].subject == lead_id
    assert entries[1].detail == {"rooftop": "Bay Motors Oakland", "search": True, "rows": 1, "older": False}
    assert "Yonathar" not in str([e.detail for e in entries])  # what was searched for is not kept
    page = admin.get("/console/audit")
    assert f'href="/console/leads/{lead_id}"' in page.text and "leads.export" in page.text


def test_the_csv_export_has_every_filtered_lead_and_no_formula(deployment):
    agent = deployment["app"].state.agent
    from aap.agent import CallContext

    body = lead_request(
        customer={
            "first_name": '=HYPERLINK("http://x")',
            "last_name": "@SUM(A1)",
            "email": "formula@example.org",
            "phone": "+14155550199",
        }
    )
    agent.handle(body, CallContext(binding="test"))
    admin = sign_in(deployment, ADMIN)
    token = csrf_of(admin.get("/console/leads").text)
    answer = admin.post("/console/leads.csv", data={"csrf_token": token})
    assert answer.headers["content-type"] == "text/csv; charset=utf-8"
    assert answer.headers["content-disposition"].startswith('attachment; filename="leads-')
    lines = answer.text.splitlines()
    assert lines[0].startswith("lead_id,received_at,dealer_id,rooftop,status,first_name,last_name,email,phone")
    assert len(lines) == 1 + len(CUSTOMERS) + 1
    assert "'=HYPERLINK" in answer.text and ",'@SUM(A1)," in answer.text and ",+14155550199," in answer.text
    only = admin.post("/console/leads.csv", data={"csrf_token": token, "q": "formula@"})
    assert len(only.text.splitlines()) == 2


def test_failed_sign_ins_hold_strangers_back_but_not_the_accounts_known_browser(deployment):
    with deployment["stores"].db.transaction() as tx:
        tx.execute("DELETE FROM console_throttle")
    known = sign_in(deployment, STAFF)  # signed in before: this browser carries a device cookie
    assert "aap_console_device" in known.cookies
    client = browser(deployment)
    page = client.get("/console/login")
    for _ in range(3):
        page = client.post(
            "/console/login", data={"csrf_token": csrf_of(page.text), "email": STAFF, "password": "guessing wrong"}
        )
        assert page.status_code == 401
    right = client.post("/console/login", data={"csrf_token": csrf_of(page.text), "email": STAFF, "password": PASSWORD})
    assert right.status_code == 429 and "Too many failed sign-ins" in right.text
    assert int(right.headers["retry-after"]) == 5  # login_delay_seconds, doubled after each failure
    forged = browser(deployment)
    forged.cookies.set("aap_console_device", "forged.value.sig", domain="dealer.example", path="/console/")
    form = forged.get("/console/login")
    refused = forged.post(
        "/console/login", data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD}
    )
    assert refused.status_code == 429  # a cookie that is not the server's is no device
    form = known.get("/console/login")
    again = known.post(
        "/console/login",
        data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD},
        follow_redirects=False,
    )
    assert again.status_code == 303  # the owner's own browser is not held back by strangers' guesses
    with deployment["stores"].db.transaction() as tx:
        tx.execute("DELETE FROM console_throttle")
    sign_in(deployment, STAFF)


def test_an_idle_session_ends(deployment):
    client = sign_in(deployment, STAFF)
    assert client.get("/console/leads").status_code == 200
    with deployment["stores"].db.transaction() as tx:
        tx.execute("UPDATE console_sessions SET seen_ms = seen_ms - ?", (31 * 60_000,))
    assert client.get("/console/leads", follow_redirects=False).status_code == 303


def test_retry_goes_through_the_shared_rules_and_the_worker_delivers(deployment):
    ids, receiver, inbox = deployment["ids"], deployment["receiver"], deployment["stores"].lead_inbox
    lead_id = ids[4]
    for _ in range(500):  # the first (failing) attempts have been made: bounded by count
        if inbox.lead(lead_id, _all())["deliveries"][0]["status"] == "dead":
            break
        time.sleep(0.02)
    admin = sign_in(deployment, ADMIN)
    page = admin.get(f"/console/leads/{lead_id}")
    assert "Retry failed deliveries" in page.text and "HTTP 500" in page.text
    assert '<h2 id="adf-h">ADF/XML sent</h2>' in page.text and "&lt;adf&gt;" in page.text
    receiver.status = 200
    answer = admin.post(
        f"/console/leads/{lead_id}/retry", data={"csrf_token": csrf_of(page.text)}, follow_redirects=False
    )
    assert answer.status_code == 303 and "queued" in answer.headers["location"]
    for _ in range(500):
        state = admin.get(f"/console/leads/{lead_id}/state").json()["state"]
        if ":delivered:" in state:
            break
        time.sleep(0.02)
    assert ":delivered:2" in state
    assert any(r["headers"].get("X-AAP-Lead-Id") == lead_id for r in receiver.accepted())
    nothing = admin.post(f"/console/leads/{lead_id}/retry", data={"csrf_token": csrf_of(page.text)})
    assert nothing.status_code == 409 and "no failed or waiting delivery" in nothing.text
    receiver.status = 500


def test_a_lead_whose_consent_expired_is_never_re_sent(deployment):
    from datetime import timedelta

    from aap.agent import CallContext
    from lead_support import NOW

    agent = deployment["app"].state.agent
    body = lead_request(
        consent={
            "granted_at": "2026-03-02T16:55:00Z",
            "expires_at": "2026-03-02T18:00:00Z",
            "allowed_channels": ["email"],
            "consent_text": "ok",
            "scope": ["lead_submission"],
        }
    )
    lead_id = agent.handle(body, CallContext(binding="test", now=NOW + timedelta(minutes=1)))["data"]["lead_id"]
    admin = sign_in(deployment, ADMIN)
    page = admin.get(f"/console/leads/{lead_id}")
    assert "never sent again" in page.text and "Retry failed deliveries" not in page.text
    refused = admin.post(f"/console/leads/{lead_id}/retry", data={"csrf_token": csrf_of(page.text)})
    assert refused.status_code == 409 and "consent expired at 2026-03-02T18:00:00Z" in refused.text


def test_admins_add_and_remove_accounts_but_not_their_own(deployment):
    admin = sign_in(deployment, ADMIN)
    token = csrf_of(admin.get("/console/users").text)
    short = admin.post("/console/users", data={"csrf_token": token, "email": "new@dealer.example", "password": "short"})
    assert short.status_code == 400 and "at least 12 characters" in short.text
    added = admin.post(
        "/console/users",
        data={
            "csrf_token": token,
            "email": "new@dealer.example",
            "password": PASSWORD,
            "role": "staff",
            "rooftops": ['[null, "Bay Motors Vancouver"]'],
        },
    )
    assert added.status_code == 200 and "Account new@dealer.example added." in added.text
    new = sign_in(deployment, "new@dealer.example")
    assert "Turingsby" in new.get("/console/leads").text and "Hopperwick" not in new.get("/console/leads").text
    users = {u.email: u.user_id for u in deployment["stores"].console.users()}
    assert admin.post(f"/console/users/{users[ADMIN]}/remove", data={"csrf_token": token}).status_code == 409
    assert (
        admin.post(f"/console/users/{users['new@dealer.example']}/remove", data={"csrf_token": token}).status_code
        == 200
    )
    assert new.get("/console/leads", follow_redirects=False).status_code == 303  # its session ended
    assert [(e.action, e.subject) for e in audit(deployment, limit=1)] == [("user.remove", "new@dealer.example")]
    assert ("user.add", "new@dealer.example") in [(e.action, e.subject) for e in audit(deployment, limit=10)]


def test_no_customer_data_on_the_public_page_in_logs_or_in_metrics(deployment, caplog):
    caplog.set_level(logging.DEBUG)
    admin = sign_in(deployment, ADMIN)
    for lead_id in deployment["ids"]:
        admin.get(f"/console/leads/{lead_id}")
    page = admin.get("/console/leads", params={"q": "Lovelacqua"})
    admin.post("/console/leads.csv", data={"csrf_token": csrf_of(page.text)})
    public = browser(deployment)
    pages = [
        public.get(path).text
        for path in ("/", "/api-docs/a2a", "/api-docs/poppy", "/llms.txt", "/.well-known/agent-card.json")
    ]
    vehicle = re.search(r'href="(/vehicles/[^"]+)"', pages[0]).group(1)
    pages.append(public.get(vehicle).text)
    metrics = public.get("/metrics").text
    server = [r for r in caplog.records if r.name.split(".")[0] in ("aap", "uvicorn", "starlette")]
    logged = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in server)  # not the test's client
    assert "aap.access" in {r.name for r in caplog.records}
    for value in CUSTOMER_VALUES:
        assert all(value not in text for text in pages), value
        assert value not in metrics and value not in logged, value


def test_the_health_page_reads_the_counters_and_the_backlog(deployment):
    staff = sign_in(deployment, STAFF)
    browser(deployment).get("/console/nowhere")
    page = staff.get("/console/health")
    assert page.status_code == 200
    assert re.search(r"<tr><td>console</td><td class=\"num\">\d+</td>", page.text)
    assert (
        "Lead delivery backlog" in page.text
        and 'href="https://dealer.example/.well-known/agent-card.json"' in page.text
    )


def test_counters_are_read_from_the_exposition_by_name():
    metrics = Metrics()
    metrics.observe(binding="a2a", skill="inventory.search", status=200, code=None, seconds=0.01)
    metrics.observe(binding="a2a", skill="inventory.search", status=429, code="RATE_LIMITED", seconds=0.001)
    metrics.observe(binding="poppy", skill="lead.submit", status=500, code="INTERNAL_ERROR", seconds=0.2)
    read = counters(metrics.render())
    assert read["requests"] == [
        ("a2a", {"total": 2, "2xx": 1, "4xx": 1, "429": 1, "5xx": 0}),
        ("poppy", {"total": 1, "2xx": 0, "4xx": 0, "429": 0, "5xx": 1}),
    ]
    assert dict(read["errors"]) == {"RATE_LIMITED": 1, "INTERNAL_ERROR": 1}
    assert read["rate_limited"] == 1 and read["server_errors"] == 1


class _Runner(CheckRunner):
    def __init__(self, console, script: str, timeout: int) -> None:
        super().__init__(console)
        self.script = script
        self._timeout = timeout

    @property
    def timeout(self) -> int:
        return self._timeout

    def command(self, target: str) -> list[str]:
        return [sys.executable, "-c", self.script]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "state"),
    [
        ("import time; time.sleep(60)", "timeout"),
        ("print('not json')", "failed"),
        ("import json; print(json.dumps({'ok': True, 'summary': {'pass': 1}, 'results': []}))", "done"),
    ],
)
def test_a_conformance_run_is_bounded_in_time_and_its_outcome_recorded(deployment, script, state):
    from aap.console import Console

    console = Console(deployment["app"].state.gateway)
    runner = _Runner(console, script, timeout=1)

    async def run() -> None:
        with deployment["stores"].db.transaction() as tx:
            tx.execute("DELETE FROM console_checks")
        assert await runner.start("admin@dealer.example") is not None
        assert await runner.start("admin@dealer.example") is None  # one at a time
        await asyncio.wait(list(runner.tasks), timeout=30)

    asyncio.run(run())
    latest = deployment["stores"].console.latest_check()
    assert latest.state == state and (latest.report is not None) == (state == "done")
    assert not runner.processes


def test_the_inventory_page_shows_counts_a_lookup_and_the_import_history(deployment):
    from aap.store.feeds import FeedRun

    now = int(time.time() * 1000)
    deployment["stores"].feeds.record(
        FeedRun(
            "schedule",
            "https://feeds.example/inventory.csv",
            now - 5000,
            now - 4000,
            "imported",
            feed="nightly",
            rows=4,
            inserted=3,
            skipped=1,
            warnings=2,
            total=3,
            rejected_lines=[4],
            problems=[
                {
                    "line": 4,
                    "column": "vin",
                    "value": "XYZ",
                    "location": "/vin",
                    "message": "not a VIN",
                    "text": "line 4: not a VIN",
                }
            ],
        )
    )
    staff = sign_in(deployment, STAFF)
    page = staff.get("/console/inventory", params={"q": "1hgcv1f30na0002"})
    assert page.status_code == 200
    assert re.search(
        r"<td>Bay Motors Oakland</td>\s*(<td class=\"num\">\d+</td>){6}<td class=\"num\">1</td>", page.text
    )
    assert "<code>1HGCV1F30NA000202</code>" in page.text
    assert "Last import:" in page.text and "<code>nightly</code>" in page.text
    assert "line 4, vin: not a VIN" in page.text and "Rejected rows: line 4" in page.text
    assert "2 warnings" in page.text


# -- sessions ------------------------------------------------------------------------------------


def _new_account(deployment, email: str) -> None:
    accounts = Accounts(deployment["stores"].console, deployment["app"].state.agent.settings)
    accounts.add(email, PASSWORD)


def _signed_in(client: TestClient) -> bool:
    return client.get("/console/leads", follow_redirects=False).status_code == 200


def test_changing_ones_password_signs_out_every_other_session(deployment):
    _new_account(deployment, "pat@dealer.example")
    mine, other = sign_in(deployment, "pat@dealer.example"), sign_in(deployment, "pat@dealer.example")
    page = mine.get("/console/account")
    assert page.text.count('name="which" value="') == 3  # the other session, "others", "all"
    token = csrf_of(page.text)
    own_email = mine.post(
        "/console/account",
        data={
            "csrf_token": token,
            "current": PASSWORD,
            "password": "pat@dealer.example1",
            "again": "pat@dealer.example1",
        },
    )
    assert own_email.status_code == 400 and "e-mail address" in own_email.text and _signed_in(other)
    wrong = mine.post(
        "/console/account",
        data={
            "csrf_token": token,
            "current": "not it at all",
            "password": "a new passphrase",
            "again": "a new passphrase",
        },
    )
    assert wrong.status_code == 400 and "current password is wrong" in wrong.text and _signed_in(other)
    changed = mine.post(
        "/console/account",
        data={"csrf_token": token, "current": PASSWORD, "password": "a new passphrase", "again": "a new passphrase"},
    )
    assert changed.status_code == 200 and "every other session of your account was signed out" in changed.text
    assert _signed_in(mine) and not _signed_in(other)
    assert re.findall(r'name="which" value="([0-9a-f]{16})"', changed.text) == []  # no other session listed


def test_an_admins_reset_signs_the_account_out_everywhere(deployment):
    _new_account(deployment, "quin@dealer.example")
    quin = sign_in(deployment, "quin@dealer.example")
    admin = sign_in(deployment, ADMIN)
    users = {u.email: u.user_id for u in deployment["stores"].console.users()}
    token = csrf_of(admin.get("/console/users").text)
    common = admin.post(
        f"/console/users/{users['quin@dealer.example']}/password",
        data={"csrf_token": token, "password": "password1234"},
    )
    assert common.status_code == 400 and "most common passwords" in common.text and _signed_in(quin)
    reset = admin.post(
        f"/console/users/{users['quin@dealer.example']}/password",
        data={"csrf_token": token, "password": "another long passphrase"},
    )
    assert reset.status_code == 200 and "Password of quin@dealer.example changed" in reset.text
    assert not _signed_in(quin) and _signed_in(admin)
    assert (
        "notice"
        not in admin.get("/console/users", params={"done": "added", "account": "evil text"}).text.split("<h1>")[1][:200]
    )


def test_a_sign_out_needs_the_sessions_form_and_a_forged_one_changes_nothing(deployment):
    client = sign_in(deployment, STAFF)
    token = csrf_of(client.get("/console/leads").text)
    cookie = client.cookies["aap_console"]
    for forged in (
        {"data": {}},
        {"data": {"csrf_token": "forged"}},
        {"data": {"csrf_token": token}, "headers": {"Origin": "https://evil.example"}},
    ):
        answer = client.post("/console/logout", follow_redirects=False, **forged)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers
        assert _signed_in(client)
    stranger = browser(deployment)  # a cross-site form: SameSite=Lax keeps the cookie from it
    answer = stranger.post("/console/logout", follow_redirects=False)
    assert answer.status_code == 303 and "set-cookie" not in answer.headers and _signed_in(client)
    out = client.post("/console/logout", data={"csrf_token": token}, follow_redirects=False)
    assert out.status_code == 303 and "aap_console=" in out.headers["set-cookie"]
    replayed = browser(deployment)
    replayed.cookies.set("aap_console", cookie, domain="dealer.example", path="/console/")
    assert not _signed_in(replayed)  # ended on the server, not only in the browser


def test_sessions_are_listed_and_signed_out_from_the_account_page(deployment):
    _new_account(deployment, "rue@dealer.example")
    phone, laptop, tablet = (browser(deployment) for _ in range(3))
    for client, agent in ((phone, "Phone Browser/1.0"), (laptop, "Laptop Browser/2.0"), (tablet, "Tablet Browser/3.0")):
        client.headers["User-Agent"] = agent
        form = client.get("/console/login")
        client.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": "rue@dealer.example", "password": PASSWORD},
        )
    page = laptop.get("/console/account").text
    assert all(name in page for name in ("Phone Browser/1.0", "Laptop Browser/2.0", "Tablet Browser/3.0"))
    ids = re.findall(r'name="which" value="([0-9a-f]{16})"', page)
    assert len(ids) == 2
    token = csrf_of(page)
    phone_id = next(i for i in ids if "Phone Browser" in page.split(i)[0].rsplit("<tr>", 1)[1])
    laptop.post("/console/account/sessions", data={"csrf_token": token, "which": phone_id})
    assert not _signed_in(phone) and _signed_in(tablet) and _signed_in(laptop)
    laptop.post("/console/account/sessions", data={"csrf_token": token, "which": "others"})
    assert not _signed_in(tablet) and _signed_in(laptop)
    everywhere = laptop.post(
        "/console/account/sessions", data={"csrf_token": token, "which": "all"}, follow_redirects=False
    )
    assert everywhere.status_code == 303 and not _signed_in(laptop)


# -- bounds: hashes at once, rate limit, query values ------------------------------------------------


def test_a_sign_in_that_cannot_get_a_hash_in_time_is_refused_busy_and_not_counted(deployment, tmp_path):

    import aap.console
    from aap.console import Console
    from aap.server.app import SURFACES

    agent_settings = dataclasses.replace(
        deployment["app"].state.agent.settings, web=fast_web(login_hash_concurrency=1, login_hash_wait_ms=0)
    )
    stores = open_stores(agent_settings.database_url)
    held: list[Console] = []

    def console_surface(gateway):
        held.append(Console(gateway))
        return aap.console.build(gateway, console=held[0])

    surfaces = tuple(
        dataclasses.replace(s, build=console_surface) if s.build is aap.console.build else s for s in SURFACES
    )
    app = create_app(agent_settings, stores, surfaces=surfaces, services=())
    client = TestClient(app, base_url=BASE)
    gate = held[0].accounts.gate

    async def hold_and_try() -> int:
        async with gate.slot():  # every hash of this process is taken
            form = await asyncio.to_thread(client.get, "/console/login")
            answer = await asyncio.to_thread(
                client.post,
                "/console/login",
                data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD},
            )
            assert answer.headers.get("retry-after") == "2" and "busy" in answer.text
            return answer.status_code

    with deployment["stores"].db.transaction() as tx:
        tx.execute("DELETE FROM console_throttle")
    assert asyncio.run(hold_and_try()) == 503
    assert deployment["stores"].console.throttle(["x"]) == {}
    with deployment["stores"].db.read() as tx:
        assert tx.one("SELECT COALESCE(SUM(attempts), 0) FROM console_throttle")[0] == 0  # given back
    form = client.get("/console/login")
    ok = client.post(
        "/console/login",
        data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD},
        follow_redirects=False,
    )
    assert ok.status_code == 303 and gate.in_use == 0
    stores.close()


def test_console_pages_take_from_the_rate_limit_of_their_session_and_of_the_address_before(deployment, tmp_path):
    from aap.config.model import RateLimit

    url = f"sqlite:///{tmp_path}/limited.db"
    settings = dataclasses.replace(
        deployment["app"].state.agent.settings, rate_limit=RateLimit(per_minute=1, burst=6), database_url=url
    )
    stores = open_stores(url)
    Accounts(stores.console, settings).add(STAFF, PASSWORD)
    app = create_app(settings, stores, services=())
    one, two = TestClient(app, base_url=BASE), TestClient(app, base_url=BASE)
    for client in (one, two):  # two tokens of the address each: the form and the sign-in
        form = client.get("/console/login")
        client.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": STAFF, "password": PASSWORD},
            follow_redirects=False,
        )
    statuses = [one.get("/console/inventory").status_code for _ in range(7)]
    assert statuses == [200] * 6 + [429]
    limited = one.get("/console/inventory")
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    assert two.get("/console/inventory").status_code == 200  # another session: its own bucket
    assert [one.get("/console/login").status_code for _ in range(3)][-1] == 429  # the address's
    stores.close()


@pytest.mark.parametrize(
    "path",
    [
        "/console/leads?before=99999999999999999999999999.lead_x",
        "/console/leads?before=garbage",
        "/console/leads?q=%00",
        "/console/leads?rooftop=" + "x" * 2000,
        "/console/audit?before=99999999999999999999999",
        "/console/audit?subject=%00",
        "/console/leads/lead_%00",
        "/console/inventory?q=%01",
    ],
)
def test_a_console_value_no_page_takes_is_answered_400(deployment, path):
    admin = sign_in(deployment, ADMIN)
    answer = admin.get(path)
    assert answer.status_code == 400, answer.text


def test_the_csv_export_neutralises_a_formula_after_a_separator(deployment):
    from aap.agent import CallContext

    agent = deployment["app"].state.agent
    body = lead_request(
        customer={
            "first_name": "x;=cmd|' /C calc'!A0",
            "last_name": "-2+3",
            "email": "separator@example.org",
            "phone": "+14155550177",
        }
    )
    agent.handle(body, CallContext(binding="test"))
    admin = sign_in(deployment, ADMIN)
    token = csrf_of(admin.get("/console/leads").text)
    text = admin.post("/console/leads.csv", data={"csrf_token": token, "q": "separator@"}).text
    row = next(csv.reader(io.StringIO(text.splitlines()[1])))
    assert row[5:9] == ["x;'=cmd|' /C calc'!A0", "'-2+3", "separator@example.org", "+14155550177"]


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+SUM(A1)", "'+SUM(A1)"),
        ("-1+2", "'-1+2"),
        ("@cmd", "'@cmd"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a,=b", "a,'=b"),
        ("a; -b", "a; '-b"),
        ("a;b", "a;b"),
        ("+14155550123", "+14155550123"),
        ("-5", "-5"),
        ("2.5", "2.5"),
        ("Ada Lovelace", "Ada Lovelace"),
    ],
)
def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(cell, written):
    from aap.console.leads import _csv_cell

    assert _csv_cell(cell) == written


@pytest.mark.parametrize("path", ["/console/audit?before=%C2%B2", "/console/leads/nolead?queued=%C2%B2"])
def test_non_ascii_digits_in_a_link_are_refused_not_crashed_on(path, deployment) -> None:
    client = sign_in(deployment, ADMIN)
    answer = client.get(path)
    assert answer.status_code in (200, 400, 404), answer.text
