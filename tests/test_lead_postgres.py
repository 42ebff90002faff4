"""The lead SQL is portable: the same races on PostgreSQL (a throwaway local cluster).

Idempotency claims, seat bookings and outbox claims rely on row locks and
``INSERT ... ON CONFLICT DO NOTHING`` there instead of SQLite's single writer.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta

import httpx
import pytest

from aap.agent import CallContext, DealerAgent
from aap.config.leads import DeliverySettings
from aap.leads.worker import DeliveryWorker
from aap.store import open_stores
from aap.work import Work
from lead_support import NOW, Receiver, http_route, lead_request, lead_settings, race

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)


@pytest.fixture
def pg_url(pg_cluster):
    return pg_cluster.create_database()


def test_concurrent_identical_submissions_make_one_lead_on_postgres(pg_url):
    settings = lead_settings(routes=[http_route("http://127.0.0.1:9/adf")], database_url=pg_url)
    agents = [DealerAgent(settings, open_stores(pg_url)) for _ in range(6)]
    body = lead_request(appointment={"appointment_type": "sales", "appointment_at": "2026-03-03T10:00:00-08:00"})
    try:
        results = race(6, lambda i: agents[i].handle(copy.deepcopy(body), CallContext(binding="t", now=NOW)))
        assert len({r["data"]["lead_id"] for r in results}) == 1
        assert sum(1 for r in results if r["data"].get("replayed")) == 5
        assert agents[0].stores.leads.count_leads() == 1
        assert agents[0].stores.leads.delivery_counts() == {"pending": 1}
    finally:
        for agent in agents:
            agent.stores.close()


def test_the_last_seat_goes_to_one_lead_on_postgres(pg_url):
    settings = lead_settings(database_url=pg_url)
    agents = [DealerAgent(settings, open_stores(pg_url)) for _ in range(4)]
    wanted = "2026-03-03T10:00:00-08:00"
    try:
        results = race(
            4,
            lambda i: agents[i].handle(
                lead_request(appointment={"appointment_type": "sales", "appointment_at": wanted}),
                CallContext(binding="t", now=NOW),
            )["data"]["appointment"]["status"],
        )
        assert sorted(results) == ["confirmed", "proposed", "proposed", "proposed"]
    finally:
        for agent in agents:
            agent.stores.close()


@pytest.mark.slow
def test_outbox_workers_deliver_each_lead_once_on_postgres(pg_url):
    receiver = Receiver()
    settings = lead_settings(
        routes=[http_route(receiver.url)], database_url=pg_url, delivery=DeliverySettings(batch_size=2)
    )
    agent = DealerAgent(settings, open_stores(pg_url))
    try:
        lead_ids = {
            agent.handle(lead_request(), CallContext(binding="t", now=NOW))["data"]["lead_id"] for _ in range(12)
        }

        def drain(_):
            stores = open_stores(pg_url)
            try:
                worker = DeliveryWorker(
                    stores.leads, settings, clock=lambda: (NOW + timedelta(minutes=1)).timestamp(), work=WORK
                )

                async def go():
                    async with httpx.AsyncClient() as client:
                        return await worker.drain(client)

                return asyncio.run(go())
            finally:
                stores.close()

        race(3, drain)
        sent = sorted(r["headers"]["X-AAP-Lead-Id"] for r in receiver.requests)
        assert sent == sorted(lead_ids)
        assert agent.stores.leads.delivery_counts() == {"delivered": 12}
    finally:
        agent.stores.close()
        receiver.close()
