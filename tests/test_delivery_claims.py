"""Delivery claims (docs/leads.md, "Claims"): renewed while sending, lapsing ``lease_seconds``
after the last renewal, handed back at once by a stopping worker; and every resend of one
delivery carries the same identity (at least once). The clock is the test's: nothing waits
for a lease to run out."""

from __future__ import annotations

import asyncio
import copy
import re

import pytest

from aap.agent import CallContext, DealerAgent
from aap.config.leads import AdfHttpTarget, DeliverySettings, Route
from aap.leads.worker import DeliveryWorker
from aap.store import open_stores
from aap.work import Work
from lead_support import NOW, Receiver, lead_request, lead_settings

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

LEASE = 30.0


class Clock:
    def __init__(self) -> None:
        self.t = NOW.timestamp() + 60

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def outbox(database_url):
    """(agent, clock, receiver) of a deployment whose two CRM targets are one stand-in."""
    receiver = Receiver()
    routes = [
        Route(
            targets=(
                AdfHttpTarget(name="crm", url=receiver.url),
                AdfHttpTarget(name="crm-copy", url=receiver.url + "?copy=1"),
            )
        )
    ]
    delivery = DeliverySettings(base_backoff_seconds=10, timeout_seconds=60, lease_seconds=LEASE, max_attempts=20)
    settings = lead_settings(routes=routes, database_url=database_url, delivery=delivery)
    stores = open_stores(database_url)
    agent = DealerAgent(settings, stores)
    try:
        yield agent, Clock(), receiver
    finally:
        receiver.release.set()
        receiver.close()
        stores.close()


def submit(agent) -> str:
    return agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=NOW))["data"]["lead_id"]


def rows(agent, lead_id: str) -> dict[str, tuple]:
    """target → (status, attempts, reached, next_attempt_ms, claimed_until_ms)."""
    with agent.stores.db.read() as tx:
        found = tx.fetchall(
            "SELECT target, status, attempts, reached, next_attempt_ms, claimed_until_ms"
            " FROM lead_deliveries WHERE lead_id = ?",
            (lead_id,),
        )
    return {r[0]: (r[1], int(r[2]), bool(r[3]), r[4], r[5]) for r in found}


def ms(clock: Clock) -> int:
    return int(clock() * 1000)


def test_a_claim_lapses_lease_seconds_after_its_last_renewal(outbox):
    agent, clock, _ = outbox
    submit(agent)
    store = agent.stores.leads
    lease_ms = int(LEASE * 1000)
    held = store.claim_due(ms(clock), lease_ms, 10)
    assert len(held) == 2
    worker = DeliveryWorker(store, agent.settings, clock=clock, work=WORK)
    clock.t += LEASE - 1
    assert store.claim_due(ms(clock), lease_ms, 10) == []  # still held
    assert asyncio.run(worker.renew(held[0].claim_token)) == 2  # the sending worker's heartbeat
    clock.t += LEASE - 1
    assert store.claim_due(ms(clock), lease_ms, 10) == []  # renewed: held again
    clock.t += 2  # no renewal since: the worker is gone
    taken = store.claim_due(ms(clock), lease_ms, 10)
    assert len(taken) == 2 and all(d.reached for d in taken)  # it may have sent them: resends
    assert asyncio.run(worker.renew(held[0].claim_token)) == 0  # the old claim holds nothing now


def test_a_released_claim_is_due_at_once_and_an_untried_row_gets_its_attempt_back(outbox):
    agent, clock, _ = outbox
    lead_id = submit(agent)
    store = agent.stores.leads
    tried, untried = sorted(store.claim_due(ms(clock), int(LEASE * 1000), 10), key=lambda d: d.target)
    assert store.release(tried.claim_token, ms(clock), [tried.delivery_id]) == 2
    now = ms(clock)
    assert rows(agent, lead_id) == {
        "crm": ("pending", 1, True, now, None),
        "crm-copy": ("pending", 0, False, now, None),
    }
    assert len(store.claim_due(now, int(LEASE * 1000), 10)) == 2  # no lease to wait for


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_a_stopping_worker_hands_its_claims_back_and_the_resend_is_the_same_delivery(outbox):
    agent, clock, receiver = outbox
    lead_id = submit(agent)
    receiver.hang.set()  # the CRM takes the requests and does not answer
    first = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    async with first.client() as client:
        sending = asyncio.create_task(first.run_once(client))
        for _ in range(2000):  # bounded by count: until both requests are at the CRM
            if len(receiver.requests) == 2:
                break
            await asyncio.sleep(0.005)
        assert len(receiver.requests) == 2
        sending.cancel()  # the worker stops
        with pytest.raises(asyncio.CancelledError):
            await sending
    now = ms(clock)
    assert rows(agent, lead_id) == {
        "crm": ("pending", 1, True, now, None),
        "crm-copy": ("pending", 1, True, now, None),
    }
    receiver.hang.clear()
    receiver.release.set()
    second = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    async with second.client() as client:
        assert await second.run_once(client) == 2  # at once: no lease to wait for
    assert {status for status, *_ in rows(agent, lead_id).values()} == {"delivered"}
    assert_same_identity(receiver.requests, lead_id, resend_after=1)


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_every_resend_carries_the_same_idempotency_key_and_adf_id(outbox):
    agent, clock, receiver = outbox
    lead_id = submit(agent)
    worker = DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)
    async with worker.client() as client:
        receiver.status = 500  # the CRM failed while handling it: it may have stored the lead
        assert await worker.run_once(client) == 2
        receiver.status = 200
        clock.t += 60
        assert await worker.run_once(client) == 2
        assert agent.stores.leads.retry(lead_id, ms(clock), include_delivered=True) == 2  # aap leads retry --all
        assert await worker.run_once(client) == 2
    assert_same_identity(receiver.requests, lead_id, resend_after=1)


def assert_same_identity(requests: list[dict], lead_id: str, *, resend_after: int) -> None:
    """Every request of one target: the same Idempotency-Key, lead and delivery ids, ADF id."""
    by_target: dict[str, list[dict]] = {}
    for request in requests:
        by_target.setdefault(request["path"], []).append(request)
    for sent in by_target.values():
        assert len(sent) >= 2
        identity = {
            (
                r["headers"]["Idempotency-Key"],
                r["headers"]["X-AAP-Lead-Id"],
                r["headers"]["X-AAP-Delivery-Id"],
                re.search(rb'<id sequence="1" source="AAP [^"]+">([^<]+)</id>', r["body"]).group(1),
            )
            for r in sent
        }
        assert len(identity) == 1 and next(iter(identity))[0] == lead_id, identity
        statuses = [re.search(rb'<prospect status="(\w+)">', r["body"]).group(1) for r in sent]
        assert statuses == [b"new"] * resend_after + [b"resend"] * (len(sent) - resend_after), statuses
