"""New-lead e-mails to a rooftop's sales people: through the outbox, to a real local SMTP server,
carrying no customer data beyond what ``[leads.notifications] include`` allows (docs/leads.md)."""

from __future__ import annotations

import copy
import dataclasses
import email
import email.policy
import tomllib
from datetime import timedelta

import httpx
import pytest
from aiosmtpd.controller import Controller

from aap.agent import CallContext, DealerAgent
from aap.config.loader import parse_settings
from aap.config.notifications import NOTIFY_KIND, NOTIFY_TARGET, NotificationSettings, Recipients
from aap.leads.worker import DeliveryWorker
from aap.store import open_stores
from aap.work import Work
from lead_support import (
    CONSENT_TEXT,
    EMAIL,
    FIRST,
    LAST,
    NOW,
    PHONE,
    Receiver,
    free_port,
    http_route,
    lead_request,
    lead_settings,
    listing,
)

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

PII = (FIRST, LAST, EMAIL, PHONE, PHONE[2:], "blue one", CONSENT_TEXT[:30])
OAKLAND_VIN = "1HGCV1F30NA000202"
SF_VIN = "1HGCV1F30NA000101"


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


class Clock:
    def __init__(self, start) -> None:
        self.t = start.timestamp()

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def smtp():
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    inbox.port = port
    yield inbox
    controller.stop()


@pytest.fixture
def make_agent(database_url):
    opened = []

    def build(notifications, **options):
        settings = lead_settings(database_url=database_url, **options)
        settings = dataclasses.replace(settings, leads=dataclasses.replace(settings.leads, notifications=notifications))
        stores = open_stores(database_url)
        opened.append(stores)
        agent = DealerAgent(settings, stores)
        stores.inventory.import_listings([listing(OAKLAND_VIN), listing(SF_VIN, rooftop="Bay Motors San Francisco")])
        return agent

    yield build
    for stores in opened:
        stores.close()


def notifications(port, **changes):
    base = NotificationSettings(
        enabled=True,
        host="127.0.0.1",
        sender="aap@baymotors.example",
        port=port,
        starttls=False,
        recipients=(Recipients(("sales@oakland.example", "bdc@baymotors.example"), rooftop="Bay Motors Oakland"),),
    )
    return dataclasses.replace(base, **changes)


def submit(agent, **changes):
    body = lead_request(**{"vehicle_of_interest": {"vin": OAKLAND_VIN}, **changes})
    return agent.handle(copy.deepcopy(body), CallContext(binding="test", now=NOW))["data"]["lead_id"]


async def deliver(agent) -> int:
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK)
    async with httpx.AsyncClient() as client:
        return await worker.drain(client)


def received(inbox):
    (rcpt, content), *_ = inbox.messages
    return rcpt, email.message_from_bytes(content, policy=email.policy.default)


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_the_sales_people_get_a_link_and_nothing_about_the_customer(make_agent, smtp):
    crm = Receiver()
    try:
        agent = make_agent(notifications(smtp.port), routes=[http_route(crm.url)])
        lead_id = submit(agent)
        kinds = {d["target"]: d["kind"] for d in agent.stores.leads.get_lead(lead_id)["deliveries"]}
        assert kinds == {"crm": "adf_http", NOTIFY_TARGET: NOTIFY_KIND}  # one more outbox row, next to the CRM's
        assert await deliver(agent) == 2
    finally:
        crm.close()
    rcpt, message = received(smtp)
    assert rcpt == ["sales@oakland.example", "bdc@baymotors.example"]
    assert message["Subject"] == "New lead at Bay Motors Oakland"
    assert message["X-AAP-Lead-Id"] == lead_id
    text = message.get_content()
    assert f"https://dealer.example/console/leads/{lead_id}" in text
    assert "Mon 2 Mar 2026, 09:00 (PST)" in text  # received at 17:00 UTC, read in Oakland's zone
    raw = smtp.messages[0][1].decode("utf-8", "replace")
    for value in PII + ("CR-V", OAKLAND_VIN, "example-buyer"):
        assert value not in raw, value
    states = {d["target"]: d["status"] for d in agent.stores.leads.get_lead(lead_id)["deliveries"]}
    assert states == {"crm": "delivered", NOTIFY_TARGET: "delivered"}
    attempts = agent.stores.lead_inbox.lead(lead_id, _everyone())["attempts"]
    sent = [a["payload"] for a in attempts if a["payload"] and "console/leads" in a["payload"]]
    assert [p.splitlines() for p in sent] == [text.splitlines()]  # what was sent, kept for the console


async def test_include_adds_only_the_fields_it_names_and_contact_only_as_consented(make_agent, smtp):
    agent = make_agent(notifications(smtp.port, include=("customer_name", "customer_contact", "vehicle")))
    body_consent = lead_request()["consent"]
    submit(agent, consent={**body_consent, "allowed_channels": ["email"]})
    assert await deliver(agent) == 1
    _, message = received(smtp)
    text = message.get_content()
    assert f"Customer: {FIRST} {LAST}" in text and f"E-mail: {EMAIL}" in text
    assert "2024 Honda CR-V EX-L (VIN 1HGCV1F30NA000202" in text
    for value in (PHONE, PHONE[2:], "blue one", CONSENT_TEXT[:30], "example-buyer"):
        assert value not in text, value  # the phone was not consented; the message was not included


async def test_a_rooftop_without_an_entry_falls_back_to_its_published_sales_addresses(make_agent, smtp):
    agent = make_agent(notifications(smtp.port, recipients=()))
    submit(agent, vehicle_of_interest={"vin": SF_VIN})  # San Francisco publishes a Sales e-mail
    assert await deliver(agent) == 1
    rcpt, _ = received(smtp)
    assert rcpt == ["sales@sf.baymotors.example"]
    oakland = submit(agent)  # Oakland publishes no e-mail: nobody to tell, no outbox row
    assert all(d["kind"] != NOTIFY_KIND for d in agent.stores.leads.get_lead(oakland)["deliveries"])


async def test_no_notification_without_the_section_and_a_refused_recipient_is_a_failed_delivery(make_agent, smtp):
    agent = make_agent(NotificationSettings())
    lead_id = submit(agent)
    assert agent.stores.leads.get_lead(lead_id)["deliveries"] == []
    assert await deliver(agent) == 0 and smtp.messages == []

    closed = make_agent(notifications(free_port()))  # nobody listens there
    lead_id = submit(closed)
    assert await deliver(closed) == 1
    (row,) = closed.stores.leads.get_lead(lead_id)["deliveries"]
    assert row["status"] == "pending" and "SMTP" in (row["last_error"] or "")  # retried later, like a CRM


def test_the_section_is_read_and_checked():
    doc = tomllib.loads(
        """
id = "bay"
public_url = "https://dealer.example"
[dealer]
name = "Bay Motors"
[[dealer.rooftops]]
name = "Oakland"
[leads.notifications]
host = "smtp.example.com"
from = "aap@dealer.example"
include = ["vehicle", "customer_name"]
[[leads.notifications.recipients]]
rooftop = "Oakland"
to = ["sales@oakland.example"]
"""
    )
    settings = parse_settings(doc, environ={})
    found = settings.leads.notifications
    assert found.enabled and found.include == ("vehicle", "customer_name")
    assert found.recipients_for(settings.dealer, None, "Oakland") == ("sales@oakland.example",)
    bad = tomllib.loads(
        """
id = "bay"
public_url = "https://dealer.example"
[dealer]
name = "Bay Motors"
[[dealer.rooftops]]
name = "Oakland"
[leads.notifications]
host = "smtp.example.com"
starttls = false
include = ["customer_ssn"]
subject = "two\\nlines"
[[leads.notifications.recipients]]
to = ["not an address"]
"""
    )
    with pytest.raises(Exception) as refused:
        parse_settings(bad, environ={})
    text = str(refused.value)
    for expected in (
        "leads.notifications.from: is required",
        "leads.notifications.starttls",
        "customer_ssn",
        "leads.notifications.subject",
        "leads.notifications.recipients[0].to[0]",
    ):
        assert expected in text, expected


def _everyone():
    from aap.store.lead_inbox import LeadScope

    return LeadScope()
