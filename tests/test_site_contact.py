"""The public page's contact forms over real HTTP: a shopper's message becomes a real lead.

A uvicorn server on loopback with the lead delivery worker in its lifespan and a CRM
stand-in (``lead_support.Receiver``); the agent's clock is the test's, so the form
token's minimum age and expiry are checked without waiting (docs/console.md, "Contact
forms"). Every refusal — honeypot, a token too young or too old, another site, a missing
cookie, the rate limit, validation — stores nothing; a double submit replays.
"""

from __future__ import annotations

import dataclasses
import html
import re
import time
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext
from aap.config.loader import ConfigError, parse_settings
from aap.config.model import RateLimit
from aap.config.web import DEFAULT_CONSENT_TEXT, WebSettings
from aap.server.app import create_app
from aap.site.contact import SOURCE_AGENT_NAME, ContactValues, FormClaims, FormTokens, ReadToken, lead_request
from aap.store import open_stores
from console_support import listings
from http_helpers import LiveServer
from lead_support import ROOFTOPS, Receiver, http_route, lead_settings

VIN_OAKLAND = "1HGCV1F30NA000202"
TOKEN = re.compile(r'name="form_token" value="([^"]+)"')
CONSENT = re.compile(r'<p class="consent" id="c-consent">(.*?)</p>', re.S)


class Clock:
    """The agent's clock: the real time, or as long ago as the test says. The lead's own times
    (and the outbox's) stay real; only when a form was shown, or sent, is moved."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclasses.dataclass
class Site:
    base: str
    stores: Any
    crm: Receiver
    clock: Clock
    vehicle_id: str

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30, **kw)

    def open_form(
        self, client: httpx.Client, path: str | None = None, ago: timedelta = timedelta(seconds=30)
    ) -> tuple[str, str]:
        """The form of a page (the vehicle page by default) as shown ``ago``: its token and consent."""
        self.clock.offset = -ago
        try:
            page = client.get(path or f"/vehicles/{self.vehicle_id}")
        finally:
            self.clock.offset = timedelta(0)
        assert page.status_code == 200, page.text
        assert page.headers["cache-control"] == "no-store"
        return TOKEN.search(page.text).group(1), html.unescape(CONSENT.search(page.text).group(1))


def contact_settings(crm_url: str, database_url: str, public_url: str, **web: Any):
    rooftops = [
        dict(r, address={"address_line_1": "1 Main Street", "city": "Oakland", "country": "US"}) for r in ROOFTOPS
    ]
    settings = lead_settings(routes=[http_route(crm_url)], rooftops=rooftops, database_url=database_url)
    return dataclasses.replace(settings, public_url=public_url, web=dataclasses.replace(WebSettings(), **web))


@pytest.fixture
def make_site(tmp_path) -> Iterator[Any]:
    started: list[tuple[LiveServer, Receiver, Any]] = []

    def make(name: str = "site", rate_limit: RateLimit | None = None, **web: Any) -> Site:
        crm = Receiver()
        server = LiveServer()
        url = f"sqlite:///{tmp_path}/{name}.db"
        settings = contact_settings(crm.url, url, server.base_url, **web)
        if rate_limit is not None:
            settings = dataclasses.replace(settings, rate_limit=rate_limit)
        stores = open_stores(url)
        stores.inventory.import_listings(listings())
        app = create_app(settings, stores)
        clock = Clock()
        app.state.agent.deps.clock = clock
        server.start(app)
        started.append((server, crm, stores))
        found = app.state.agent.handle(
            {"type": "inventory.search.request", "filters": {"vin": VIN_OAKLAND}}, CallContext(binding="test")
        )
        vehicle_id = found["data"]["vehicles"][0]["vehicle_id"]
        return Site(server.base_url, stores, crm, clock, vehicle_id)

    yield make
    for server, crm, stores in started:
        server.stop()
        crm.close()
        stores.close()


def filled(token: str, **changes: Any) -> dict[str, Any]:
    form = {
        "form_token": token,
        "first_name": "Marisol",
        "last_name": "Okonkwo-Reyes",
        "email": "marisol.or@example.org",
        "phone": "(510) 555-0142",
        "channels": ["email", "sms"],
        "preferred": "sms",
        "message": "Is it still available?\r\nCould I see it on Saturday?",
        "website": "",
    }
    form.update(changes)
    return form


def delivered(crm: Receiver, count: int) -> list[dict[str, Any]]:
    """The CRM's accepted deliveries once there are ``count`` (bounded by tries, not by time)."""
    for _ in range(600):
        accepted = crm.accepted()
        if len(accepted) >= count:
            return accepted
        time.sleep(0.05)
    raise AssertionError(f"the CRM received {len(crm.accepted())} leads, not {count}")


def lead_id_of(page: str) -> str:
    return re.search(r"<code>(lead_[0-9a-f]+)</code>", page).group(1)


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_a_shopper_asks_about_a_car_and_a_real_lead_reaches_the_crm(make_site):
    site = make_site()
    with site.client() as client:
        before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
        token, consent = site.open_form(client)
        after = datetime.now(UTC) - timedelta(seconds=30)
        assert consent == DEFAULT_CONSENT_TEXT.replace("{dealer}", "Bay Motors Group")
        sent = client.post("/contact", data=filled(token), headers={"Origin": site.base})
    assert sent.status_code == 200, sent.text
    assert "Thank you, your message is on its way" in sent.text and "What happens next" in sent.text
    assert "may contact you by e-mail or text message" in sent.text
    lead = site.stores.leads.get_lead(lead_id_of(sent.text))
    assert lead["binding"] == "web" and lead["source_agent"] == SOURCE_AGENT_NAME
    request = lead["request"]
    assert request["source_agent"] == {"name": SOURCE_AGENT_NAME, "url": site.base + "/"}
    assert request["customer"] == {
        "first_name": "Marisol",
        "last_name": "Okonkwo-Reyes",
        "email": "marisol.or@example.org",
        "phone": "+15105550142",  # read in the rooftop's country
        "preferred_contact": "sms",
    }
    assert request["message"] == "Is it still available?\nCould I see it on Saturday?"
    assert request["vehicle_of_interest"] == {"vehicle_id": site.vehicle_id}
    assert request["idempotency_key"].startswith("web-")
    # the consent: verbatim what the page showed, dated when it was shown, the channels ticked
    assert lead["consent"]["consent_text"] == consent
    assert lead["consent"]["allowed_channels"] == ["email", "sms"]
    granted = datetime.fromisoformat(request["consent"]["granted_at"])
    assert before <= granted <= after and request["consent"]["granted_at"].endswith("Z")
    assert lead["vehicle_link"] == "linked" and lead["rooftop"] == "Bay Motors Oakland"
    sent_to_crm = delivered(site.crm, 1)
    assert sent_to_crm[0]["headers"]["X-AAP-Lead-Id"] == lead["lead_id"]
    assert b"Okonkwo-Reyes" in sent_to_crm[0]["body"] and b"public-page" in sent_to_crm[0]["body"]


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_a_double_submit_or_a_reload_replays_the_first_answer(make_site):
    site = make_site()
    with site.client() as client:
        token, _ = site.open_form(client)
        first = client.post("/contact", data=filled(token))
        again = client.post("/contact", data=filled(token))
    assert first.status_code == again.status_code == 200
    assert lead_id_of(first.text) == lead_id_of(again.text)
    assert "Your message was already sent" in again.text and "nothing was sent twice" in again.text
    assert site.stores.leads.count_leads() == 1
    assert len(delivered(site.crm, 1)) == 1


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_the_same_form_with_other_details_is_not_a_second_lead_until_sent_afresh(make_site):
    site = make_site()
    with site.client() as client:
        token, _ = site.open_form(client)
        assert client.post("/contact", data=filled(token)).status_code == 200
        changed = client.post("/contact", data=filled(token, message="Actually, the blue one."))
        assert changed.status_code == 409
        assert "You already sent this form, with other details" in changed.text
        assert "Actually, the blue one." in changed.text  # kept for sending afresh
        fresh = TOKEN.search(changed.text).group(1)
        assert fresh != token
        site.clock.offset = timedelta(seconds=30)
        second = client.post("/contact", data=filled(fresh, message="Actually, the blue one."))
        site.clock.offset = timedelta(0)
    assert second.status_code == 200 and site.stores.leads.count_leads() == 2


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_every_problem_is_listed_at_once_next_to_its_field_and_nothing_is_stored(make_site):
    site = make_site()
    with site.client() as client:
        token, _ = site.open_form(client)
        bad = client.post(
            "/contact",
            data=filled(token, first_name=" ", last_name="", email="not-an-address", phone="555", channels=[]),
        )
        assert bad.status_code == 400
        text = bad.text
        for field, words in (
            ("first_name", "Enter your first name."),
            ("last_name", "Enter your last name."),
            ("email", "Enter an e-mail address like name@example.com."),
            ("phone", "Enter a phone number with its area code."),
            ("channels", "Tick at least one way Bay Motors Group may contact you."),
            ("preferred", "Tick Text message above too, or choose another preference."),
        ):
            assert f'<p class="field-error" id="c-{field}-error">{words}</p>' in text, field
            assert f'<a href="#c-{field}">' in text, field
        assert 'aria-invalid="true" aria-describedby="c-email-error"' in text
        assert 'value="not-an-address"' in text  # what was typed stays in the form
        assert TOKEN.search(text).group(1) == token  # the same form, corrected, sends the lead
        assert site.stores.leads.count_leads() == 0
        channel_without_contact = client.post("/contact", data=filled(token, email="", phone="", channels=["email"]))
        assert (
            'id="c-email-error">Enter your e-mail address, or untick E-mail below.</p>' in channel_without_contact.text
        )
        assert "Enter an e-mail address or a phone number" not in channel_without_contact.text
        long = client.post("/contact", data=filled(token, message="x" * 4001))
        assert 'id="c-message-error">Shorten the message to 4,000 characters or fewer.</p>' in long.text
        assert site.stores.leads.count_leads() == 0
        fixed = client.post("/contact", data=filled(token))
    assert fixed.status_code == 200 and site.stores.leads.count_leads() == 1


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_the_honeypot_a_young_or_old_token_and_a_forged_one_are_refused(make_site):
    site = make_site()
    with site.client() as client:
        token, _ = site.open_form(client, ago=timedelta(seconds=1))
        too_soon = client.post("/contact", data=filled(token))
        assert too_soon.status_code == 400 and "sent very quickly" in too_soon.text
        assert TOKEN.search(too_soon.text).group(1) == token
        token, _ = site.open_form(client)
        trap = client.post("/contact", data=filled(token, website="https://spam.example"))
        assert trap.status_code == 400 and "could not be sent as it was" in trap.text
        assert "spam.example" not in trap.text
        forged = client.post("/contact", data=filled(token[:-3] + "abc"))
        assert forged.status_code == 400 and "could not be read" in forged.text
        token, _ = site.open_form(client, ago=timedelta(hours=12, seconds=5))
        stale = client.post("/contact", data=filled(token))
        assert stale.status_code == 400 and "open for more than 12 hours" in stale.text
        renewed = TOKEN.search(stale.text).group(1)
        assert renewed != token and 'value="Marisol"' in stale.text
        assert site.stores.leads.count_leads() == 0
        site.clock.offset = timedelta(seconds=30)  # sent half a minute after it was shown again
        assert client.post("/contact", data=filled(renewed)).status_code == 200
        site.clock.offset = timedelta(0)
    assert site.stores.leads.count_leads() == 1


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_a_form_from_another_site_or_another_browser_is_refused(make_site):
    site = make_site()
    with site.client() as client:
        token, _ = site.open_form(client)
        foreign = client.post("/contact", data=filled(token), headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403 and "sent from another site" in foreign.text
        cross = client.post("/contact", data=filled(token), headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
    with site.client() as other:  # the token, without the browser cookie it was shown with
        elsewhere = other.post("/contact", data=filled(token))
        assert elsewhere.status_code == 403 and "did not send back this site's cookie" in html.unescape(elsewhere.text)
        assert "aap_contact=" in elsewhere.headers["set-cookie"]
        assert 'value="Marisol"' not in elsewhere.text  # no Origin: the values may be another site's
        said = other.post("/contact", data=filled(token), headers={"Origin": site.base})
        assert said.status_code == 403 and 'value="Marisol"' in said.text  # this site's form: kept
        site.clock.offset = timedelta(seconds=30)
        assert other.post("/contact", data=filled(TOKEN.search(elsewhere.text).group(1))).status_code == 200
        site.clock.offset = timedelta(0)
    assert site.stores.leads.count_leads() == 1


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_the_per_address_rate_limit_applies_to_the_form(make_site):
    site = make_site(rate_limit=RateLimit(per_minute=1, burst=12))
    with site.client() as client:
        token, _ = site.open_form(client)
        answers = []
        for _ in range(4):  # the page took at least 1 token, each lead takes 4: the third cannot be paid
            answers.append(client.post("/contact", data=filled(token)))
            if answers[-1].status_code == 429:
                break
    refused = answers[-1]
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    assert "Too many requests came from your network" in refused.text and 'value="Marisol"' in refused.text
    assert [a.status_code for a in answers[:-1]] and all(a.status_code == 200 for a in answers[:-1])
    assert site.stores.leads.count_leads() == 1


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_the_general_form_and_turning_the_forms_off(make_site):
    site = make_site()
    with site.client() as client:
        token, consent = site.open_form(client, "/contact")
        sent = client.post("/contact", data=filled(token, channels=["phone"], preferred="phone", email=""))
    assert sent.status_code == 200
    lead = site.stores.leads.get_lead(lead_id_of(sent.text))
    assert "vehicle_of_interest" not in lead["request"] and lead["consent"]["allowed_channels"] == ["phone"]
    assert lead["consent"]["consent_text"] == consent

    off = make_site("off", contact_form=False)
    with off.client() as client:
        page = client.get(f"/vehicles/{off.vehicle_id}")
        assert (
            page.status_code == 200
            and "form_token" not in page.text
            and "aap_contact" not in page.headers.get("set-cookie", "")
        )
        assert client.get("/contact").status_code == 404
        assert client.post("/contact", data={"form_token": "x"}).status_code in (404, 405)


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_the_configured_consent_text_is_what_the_shopper_reads_and_what_is_recorded(make_site):
    site = make_site(contact_consent_text="I agree that {dealer} may reach me about this car. Reply STOP to stop.")
    with site.client() as client:
        token, consent = site.open_form(client)
        assert consent == "I agree that Bay Motors Group may reach me about this car. Reply STOP to stop."
        sent = client.post("/contact", data=filled(token))
    assert site.stores.leads.get_lead(lead_id_of(sent.text))["consent"]["consent_text"] == consent


def test_a_request_is_the_same_for_every_submission_of_one_form():
    """The payload depends only on the form and what was typed: a resubmission is the same request."""
    tokens = FormTokens(b"k" * 32, lambda: datetime(2026, 3, 2, 17, 0, 5, tzinfo=UTC))
    claims = FormClaims("nonce", "browser", "Bay Motors", "I agree.", "CA", vehicle_id="veh_1")
    read = tokens.read(tokens.issue(claims))
    assert read == ReadToken(claims, datetime(2026, 3, 2, 17, 0, 5, tzinfo=UTC))
    values = ContactValues(first_name="A", last_name="B", phone="604 555 0100", channels=["phone"])
    first = lead_request(values, read, "https://dealer.example/")
    assert first == lead_request(values, tokens.read(tokens.issue(claims)), "https://dealer.example/")
    assert first["customer"]["phone"] == "+16045550100"
    assert first["consent"]["granted_at"] == "2026-03-02T17:00:05Z"
    assert first["idempotency_key"] == "web-nonce"
    assert tokens.read("x" * 5000) is None and tokens.read(None) is None
    other = FormTokens(b"o" * 32, lambda: datetime(2026, 3, 2, tzinfo=UTC))
    assert other.read(tokens.issue(claims)) is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('contact_consent_text = "  "', "web.contact_consent_text: must not be empty"),
        (f'contact_consent_text = "{"x" * 2001}"', "web.contact_consent_text: must be at most 2000"),
        ("contact_form_max_hours = 48", "web.contact_form_max_hours"),
        ("contact_form_min_seconds = -1", "web.contact_form_min_seconds"),
    ],
)
def test_the_contact_form_settings_are_checked(line, problem):
    text = f"""
id = "t"
public_url = "https://dealer.example"
[dealer]
name = "Test Motors"
[[dealer.rooftops]]
name = "Test Motors Main"
[web]
{line}
"""
    with pytest.raises(ConfigError) as info:
        parse_settings(tomllib.loads(text), environ={})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


@pytest.mark.slow  # a live server with the delivery worker (CONTRIBUTING.md, "The fast lane")
def test_no_form_body_makes_a_server_error_or_a_half_written_lead(make_site):
    """Generated form bodies (any text, any channels, any token) against a live server: a lead, a
    replay, a conflict or a page of problems, never a 5xx; a lead is stored whole or not at all."""
    site = make_site(rate_limit=RateLimit(enabled=False))
    client = site.client()
    token, _ = site.open_form(client)
    text = st.text(st.characters(codec="utf-8"), max_size=120) | st.sampled_from(["", " ", "x" * 5000, "+1", "a@b.c"])
    bodies = st.fixed_dictionaries(
        {
            "first_name": text,
            "last_name": text,
            "email": text,
            "phone": text,
            "message": text,
            "preferred": st.sampled_from(["", "email", "phone", "sms", "any", "fax", "\x00"]),
            "channels": st.lists(st.sampled_from(["email", "phone", "sms", "fax", ""]), max_size=4),
            "website": st.sampled_from(["", "", "", "x"]),
            "form_token": st.sampled_from([token, token, token, "", token[:-1], "a.b.c"]),
        }
    )

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(body=bodies)
    def exercise(body):
        answer = client.post("/contact", data=body)
        assert answer.status_code in (200, 400, 403, 409), answer.status_code
        if answer.status_code == 400 and "form_token" in answer.text:
            assert '<div class="errors" role="alert"' in answer.text

    try:
        exercise()
    finally:
        client.close()
    with site.stores.db.read() as tx:  # every stored lead has its consent record
        orphans = tx.fetchone(
            "SELECT COUNT(*) FROM leads l WHERE NOT EXISTS (SELECT 1 FROM lead_consents c WHERE c.lead_id = l.lead_id)"
        )
    assert orphans[0] == 0 and site.stores.leads.count_leads() <= 1  # one form, at most one lead
