"""When a platform tenant's deliveries are due: noted in the transaction that makes them due.

A platform's runner finds the tenants with work in ``platform_due`` instead of reading every
tenant's outbox. Each write that makes a delivery due (a lead stored, a lead retried, rows
restored or moved in) notes it in its own transaction, so no worker stopping in between
loses it and no pass over every tenant has to look for it again. A runner settling the next
time after a pass holds the note's row first, so a note written meanwhile lands after its
write, not under it.
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import psycopg

from aap.agent import CallContext, DealerAgent
from aap.store import open_database, open_platform_database
from aap.store.platform import DELIVERIES, note_due
from aap.store.transfer import copy_agent
from aap.tenants import TenantRegistry
from lead_support import NOW, lead_request
from platform_support import crm_route, eventually, platform_settings, tenant_config, tenant_stores

HOUR_MS = 3_600_000
FAR_MS = 2**62


def _platform(database_url: str) -> TenantRegistry:
    db = open_platform_database(database_url)
    registry = TenantRegistry(platform_settings(database_url, allow_loopback_destinations=True), db, environ={})
    registry.add(
        "dealer-a", tenant_config("Alpha Motors", extra=crm_route("http://127.0.0.1:9/crm")), ["alpha.example"]
    )
    registry.store.set_due("dealer-a", DELIVERIES, None)  # nothing due before the lead
    return registry


def _submit(registry: TenantRegistry, tenant_id: str) -> str:
    """A lead stored by the tenant's agent, as a request stores it (no runner, no background task)."""
    record = registry.get(tenant_id)
    stores = tenant_stores(registry, tenant_id)
    agent = DealerAgent(registry.settings_for(record, registry.public_url(record)), stores)
    answer = agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=NOW))
    return str(answer["data"]["lead_id"])


def _due(registry: TenantRegistry) -> dict[str, int]:
    with registry.store.db.read() as tx:
        return {
            r[0]: int(r[1])
            for r in tx.fetchall("SELECT tenant_id, due_ms FROM platform_due WHERE work = ?", (DELIVERIES,))
        }


def test_a_stored_lead_is_noted_due_with_it_and_an_earlier_note_stays(database_url) -> None:
    registry = _platform(database_url)
    try:
        _submit(registry, "dealer-a")
        assert _due(registry) == {"dealer-a": int(NOW.timestamp() * 1000)}  # the time the lead was stored
        assert registry.store.due(DELIVERIES, FAR_MS) == ["dealer-a"]

        registry.store.set_due("dealer-a", DELIVERIES, 5)  # due long ago, not served yet
        _submit(registry, "dealer-a")
        assert _due(registry) == {"dealer-a": 5}  # a lead never pushes a due tenant back
    finally:
        registry.store.db.close()


def test_a_runner_settles_the_outbox_next_time_and_a_retry_notes_itself(database_url) -> None:
    registry = _platform(database_url)
    stores = tenant_stores(registry, "dealer-a")
    try:
        lead_id = _submit(registry, "dealer-a")
        pending = stores.leads.next_due_ms()
        assert pending is not None
        registry.store.set_due("dealer-a", DELIVERIES, pending + HOUR_MS)  # a stale note, later than the outbox
        assert stores.leads.settle_due() == pending and _due(registry) == {"dealer-a": pending}

        with stores.db.transaction() as tx:  # as a pass that delivered every row leaves it
            tx.execute("UPDATE lead_deliveries SET status = 'delivered' WHERE tenant_id = ?", (tx.tenant,))
        assert stores.leads.settle_due() is None and _due(registry) == {}

        assert stores.leads.retry(lead_id, 1234, include_delivered=True) == 1
        assert _due(registry) == {"dealer-a": 1234}
    finally:
        registry.store.db.close()


def test_an_outbox_restored_into_a_tenant_is_noted_in_the_restore(database_url, tmp_path: Path) -> None:
    registry = _platform(database_url)
    backup = open_database(f"sqlite:///{tmp_path}/backup.db")
    try:
        _submit(registry, "dealer-a")
        pending = tenant_stores(registry, "dealer-a").leads.next_due_ms()
        with tenant_stores(registry, "dealer-a").db.read() as reading, backup.transaction() as into:
            copy_agent(reading, into)  # a single deployment's database: nothing to note there
        registry.add("dealer-b", tenant_config("Beta Cars"), ["beta.example"])
        with backup.read() as reading, registry.data.open("dealer-b").transaction() as into:
            copy_agent(reading, into)
        assert _due(registry) == {"dealer-a": pending, "dealer-b": pending}
    finally:
        backup.close()
        registry.store.db.close()


def test_a_note_written_while_a_runner_settles_lands_after_its_write(pg_cluster) -> None:
    """The runner holds the note's row before it reads the outbox: a retry committing meanwhile
    is read by it, and is not overwritten by the later time the runner had seen."""
    url = pg_cluster.create_database()
    registry = _platform(url)
    stores = tenant_stores(registry, "dealer-a")
    try:
        _submit(registry, "dealer-a")
        later = int(time.time() * 1000) + HOUR_MS
        with stores.db.transaction() as tx:  # a retry's backoff: due in an hour
            tx.execute("UPDATE lead_deliveries SET next_attempt_ms = ? WHERE tenant_id = ?", (later, tx.tenant))
        assert stores.leads.settle_due() == later

        settled: list[int | None] = []
        runner = threading.Thread(target=lambda: settled.append(stores.leads.settle_due()))
        with stores.db.transaction() as tx:  # a lead retried now, committed while the runner waits
            tx.execute("UPDATE lead_deliveries SET next_attempt_ms = 77 WHERE tenant_id = ?", (tx.tenant,))
            note_due(tx, DELIVERIES, 77)
            runner.start()
            with psycopg.connect(url, autocommit=True) as watcher:
                waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                assert eventually(lambda: watcher.execute(waiting).fetchone() == (1,))
        runner.join()
        assert settled == [77] and _due(registry) == {"dealer-a": 77}
    finally:
        registry.store.db.close()
