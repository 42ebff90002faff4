"""The durable outbox and its worker: delivery, retries, dead letters, consent expiry, claims."""

from __future__ import annotations

import asyncio
import copy
import email
import email.policy
import logging
import threading
import xml.etree.ElementTree as ET
from datetime import timedelta

import httpx
import orjson
import pytest
from aiosmtpd.controller import Controller

from aap.agent import CallContext, DealerAgent
from aap.config.leads import DeliverySettings, Route, SmtpTarget, WebhookTarget
from aap.leads.worker import DeliveryWorker, delivery_lifespan, run_delivery_worker
from aap.store import open_stores
from aap.util.rfc3339 import epoch_ms
from aap.work import Work
from lead_support import (
    CONSENT_TEXT,
    EMAIL,
    FIRST,
    LAST,
    MESSAGE,
    NOW,
    PHONE,
    free_port,
    http_route,
    lead_request,
    lead_settings,
)

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

PII = (FIRST, LAST, EMAIL, PHONE, PHONE[2:], "blue one", CONSENT_TEXT[:30])


class Clock:
    def __init__(self, start) -> None:
        self.t = start.timestamp()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def make_agent(database_url):
    opened = []

    def build(settings):
        stores = open_stores(database_url)
        opened.append(stores)
        return DealerAgent(settings, stores)

    yield build
    for stores in opened:
        stores.close()


def submit(agent, body=None, now=NOW):
    return agent.handle(copy.deepcopy(body or lead_request()), CallContext(binding="test", now=now))["data"]


def deliveries(agent, lead_id):
    return agent.stores.leads.get_lead(lead_id)["deliveries"]


async def once(worker) -> int:
    async with httpx.AsyncClient() as client:
        return await worker.run_once(client)


@pytest.mark.slow
async def test_a_lead_is_delivered_once_as_adf_with_its_id(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    lead_id = submit(agent)["lead_id"]
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK)
    assert await once(worker) == 1
    assert await once(worker) == 0
    (got,) = receiver.requests
    assert got["headers"]["X-AAP-Lead-Id"] == lead_id and got["headers"]["Idempotency-Key"] == lead_id
    root = ET.fromstring(got["body"])
    assert root.findtext("prospect/id") == lead_id
    assert root.find("prospect").get("status") == "new"
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "delivered" and row["attempts"] == 1 and row["delivered_ms"] is not None


@pytest.mark.slow
async def test_crm_down_then_back_is_delivered_with_backoff(make_agent, receiver):
    agent = make_agent(
        lead_settings(
            routes=[http_route(receiver.url)],
            delivery=DeliverySettings(base_backoff_seconds=30, max_backoff_seconds=600),
        )
    )
    lead_id = submit(agent)["lead_id"]
    clock = Clock(NOW + timedelta(minutes=1))
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    receiver.status = 503
    assert await once(worker) == 1
    (row,) = deliveries(agent, lead_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("pending", 1, "HTTP 503")
    assert row["next_attempt_ms"] == int(clock() * 1000) + 30_000
    assert await once(worker) == 0  # backing off
    clock.advance(30)
    assert await once(worker) == 1  # still down: the second wait doubles
    assert deliveries(agent, lead_id)[0]["next_attempt_ms"] == int(clock() * 1000) + 60_000
    receiver.status = 200
    clock.advance(60)
    assert await once(worker) == 1
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "delivered" and row["attempts"] == 3
    assert len(receiver.accepted()) == 1
    assert {r["headers"]["X-AAP-Lead-Id"] for r in receiver.requests} == {lead_id}
    assert ET.fromstring(receiver.requests[-1]["body"]).find("prospect").get("status") == "resend"


@pytest.mark.slow
async def test_dead_letter_after_max_attempts_and_operator_retry(make_agent, receiver):
    agent = make_agent(
        lead_settings(
            routes=[http_route(receiver.url)],
            delivery=DeliverySettings(max_attempts=3, base_backoff_seconds=1, max_backoff_seconds=1),
        )
    )
    lead_id = submit(agent)["lead_id"]
    clock = Clock(NOW + timedelta(minutes=1))
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    receiver.status = 502
    for _ in range(5):
        await once(worker)
        clock.advance(2)
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "dead" and row["attempts"] == 3 and len(receiver.requests) == 3
    assert agent.stores.leads.retry(lead_id, int(clock() * 1000)) == 1
    (row,) = deliveries(agent, lead_id)
    assert (row["status"], row["attempts"]) == ("pending", 3)  # re-queued; its history kept
    for _ in range(5):  # the retry policy starts again: three more tries, then dead
        await once(worker)
        clock.advance(2)
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "dead" and row["attempts"] == 6 and len(receiver.requests) == 6
    assert agent.stores.leads.retry(lead_id, int(clock() * 1000)) == 1
    receiver.status = 200
    assert await once(worker) == 1
    (row,) = deliveries(agent, lead_id)
    assert (row["status"], row["attempts"]) == ("delivered", 7)


@pytest.mark.slow
async def test_a_permanent_refusal_goes_straight_to_dead(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    lead_id = submit(agent)["lead_id"]
    receiver.status = 400
    await once(DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK))
    (row,) = deliveries(agent, lead_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("dead", 1, "HTTP 400")


@pytest.mark.slow
async def test_consent_expired_before_delivery_is_not_sent_and_is_marked(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    body = lead_request()
    body["consent"]["expires_at"] = "2026-03-02T17:10:00Z"
    lead_id = submit(agent, body)["lead_id"]
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=10)), work=WORK)
    assert await once(worker) == 1
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "expired_consent"
    assert receiver.requests == []


@pytest.mark.slow
async def test_a_target_removed_from_the_configuration_is_dead(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    lead_id = submit(agent)["lead_id"]
    worker = DeliveryWorker(
        agent.stores.leads,
        lead_settings(routes=[http_route(receiver.url, name="other")]),
        clock=Clock(NOW + timedelta(minutes=1)),
        work=WORK,
    )
    await once(worker)
    (row,) = deliveries(agent, lead_id)
    assert row["status"] == "dead" and "no longer configured" in row["last_error"]


@pytest.mark.slow
def test_several_workers_deliver_each_lead_exactly_once(make_agent, receiver):
    settings = lead_settings(routes=[http_route(receiver.url)], delivery=DeliverySettings(batch_size=3))
    agent = make_agent(settings)
    lead_ids = {submit(agent)["lead_id"] for _ in range(30)}
    workers = 4
    barrier = threading.Barrier(workers)
    errors = []

    def run() -> None:
        stores = open_stores(agent.stores.db.url)  # its own connections, like another process
        try:
            worker = DeliveryWorker(stores.leads, settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK)
            barrier.wait()

            async def drain():
                async with httpx.AsyncClient() as client:
                    await worker.drain(client)

            asyncio.run(drain())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            stores.close()

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    sent = [r["headers"]["X-AAP-Lead-Id"] for r in receiver.requests]
    assert sorted(sent) == sorted(lead_ids)  # every lead once, none twice
    assert agent.stores.leads.delivery_counts() == {"delivered": 30}


def test_a_lapsed_claim_is_taken_over_and_the_old_claim_cannot_finish(make_agent):
    agent = make_agent(lead_settings(routes=[http_route("http://127.0.0.1:9/adf")]))
    lead_id = submit(agent)["lead_id"]
    store = agent.stores.leads
    t0 = epoch_ms(NOW) + 60_000
    (first,) = store.claim_due(t0, 1_000, 10)
    assert store.claim_due(t0 + 500, 1_000, 10) == []  # still held
    (second,) = store.claim_due(t0 + 1_500, 1_000, 10)  # the first worker died
    assert second.delivery_id == first.delivery_id and second.attempts == 2
    assert second.claim_token != first.claim_token
    assert store.mark_delivered(first, t0 + 1_600) is False
    assert store.mark_delivered(second, t0 + 1_700) is True
    assert deliveries(agent, lead_id)[0]["status"] == "delivered"


class Inbox:
    def __init__(self) -> None:
        self.messages = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append(envelope.content)
        return "250 OK"


async def test_worker_delivers_by_smtp_to_a_local_server(make_agent):
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        target = SmtpTarget(
            "mail", "127.0.0.1", "aap@dealer.example", ("leads@dealer.example",), port=port, starttls=False
        )
        agent = make_agent(lead_settings(routes=[Route(targets=(target,))]))
        lead_id = submit(agent)["lead_id"]
        assert (
            await once(
                DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK)
            )
            == 1
        )
    finally:
        controller.stop()
    (content,) = inbox.messages
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert message["X-AAP-Lead-Id"] == lead_id
    assert lead_id in message["Subject"] and FIRST not in message["Subject"]
    root = ET.fromstring(message.get_content().encode())
    assert root.findtext("prospect/customer/contact/email") == EMAIL
    assert deliveries(agent, lead_id)[0]["status"] == "delivered"


@pytest.mark.slow
async def test_webhook_carries_the_aap_lead_limited_to_consented_channels(make_agent, receiver):
    hook = WebhookTarget("hook", receiver.url)
    agent = make_agent(lead_settings(routes=[Route(targets=(hook,))]))
    body = lead_request()
    body["consent"]["allowed_channels"] = ["email"]
    data = submit(agent, body)
    assert (
        await once(
            DeliveryWorker(agent.stores.leads, agent.settings, clock=Clock(NOW + timedelta(minutes=1)), work=WORK)
        )
        == 1
    )
    (got,) = receiver.requests
    document = orjson.loads(got["body"])
    assert document["type"] == "aap.lead" and document["lead_id"] == data["lead_id"]
    assert document["response"]["data"] == data
    assert document["request"]["customer"]["email"] == EMAIL
    assert "phone" not in document["request"]["customer"]  # given, but not consented
    assert document["request"]["consent"]["consent_text"] == CONSENT_TEXT


@pytest.mark.slow
async def test_run_delivery_worker_until_stopped(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    stop = asyncio.Event()
    task = asyncio.create_task(run_delivery_worker(agent.stores, agent.settings, stop, WORK))
    lead_id = submit(agent)["lead_id"]
    for _ in range(400):  # bounded: poll_seconds is 0.05
        if receiver.accepted():
            break
        await asyncio.sleep(0.025)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert [r["headers"]["X-AAP-Lead-Id"] for r in receiver.accepted()] == [lead_id]


@pytest.mark.slow
async def test_delivery_lifespan_runs_the_worker_with_the_app(make_agent, receiver):
    agent = make_agent(lead_settings(routes=[http_route(receiver.url)]))
    lead_id = submit(agent)["lead_id"]
    async with delivery_lifespan(agent.stores, agent.settings, WORK):
        for _ in range(400):
            if receiver.accepted():
                break
            await asyncio.sleep(0.025)
    assert deliveries(agent, lead_id)[0]["status"] == "delivered"


@pytest.mark.slow
async def test_delivery_lifespan_stays_out_when_delivery_runs_elsewhere(make_agent, receiver):
    settings = lead_settings(routes=[http_route(receiver.url)], delivery=DeliverySettings(in_process=False))
    agent = make_agent(settings)
    lead_id = submit(agent)["lead_id"]
    tasks_before = len(asyncio.all_tasks())
    async with delivery_lifespan(agent.stores, settings, WORK):
        assert len(asyncio.all_tasks()) == tasks_before  # no worker task was started
    assert deliveries(agent, lead_id)[0]["status"] == "pending"


@pytest.mark.slow
async def test_delivery_logs_carry_no_customer_value(make_agent, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    agent = make_agent(
        lead_settings(
            routes=[http_route(receiver.url)], delivery=DeliverySettings(max_attempts=2, base_backoff_seconds=1)
        )
    )
    body = lead_request(appointment={"appointment_type": "sales", "notes": MESSAGE})
    expiring = lead_request()
    expiring["consent"]["expires_at"] = "2026-03-02T17:05:00Z"
    submit(agent, body)
    submit(agent, expiring)
    clock = Clock(NOW + timedelta(minutes=10))
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    receiver.status = 500
    for _ in range(3):
        await once(worker)
        clock.advance(5)
    text = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    dead = [r for r in caplog.records if r.getMessage() == "delivery dead"]
    assert dead and dead[0].fields["attempt"] == 2 and dead[0].fields["lead_id"].startswith("lead_")
    assert dead[0].fields["lead_id"] not in dead[0].getMessage()  # ids are fields, not words
    assert "consent expired" in text
    for value in PII:
        assert value not in text
