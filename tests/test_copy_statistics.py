"""A large copy into the shared tables checks its foreign keys by primary key, whatever the
connection planned before (PostgreSQL).

Every index of a tenant table leads with ``tenant_id``. On a table PostgreSQL has no statistics
for, an index such as ``leads (tenant_id, received_ms)`` costs the same as the primary key for
``tenant_id = $1 AND lead_id = $2``, and the plans a connection keeps (its foreign-key checks,
its prepared statements) may be such a plan, made while the tables held a few rows. A copy of a
large tenant through that connection — a restore, a dealer moving in, ``aap db upgrade`` moving
a schema — would then walk the tenant's rows once for every row it writes. The copies refresh
the statistics of what they filled (:func:`aap.store.layout.refresh_statistics`), which makes
the connection plan again. Measured by the rows the checks fetched, not by time.
"""

from __future__ import annotations

import pytest

from aap.store import open_database
from aap.store.db import connect
from aap.store.layout import STATISTICS_AFTER_ROWS
from aap.store.migrations import DOMAINS
from aap.store.transfer import copy_agent
from aap.store.upgrade import copy_rows

LEADS = 2 * STATISTICS_AFTER_ROWS

_LEAD_COLUMNS = (
    "lead_id, dealer_id, rooftop, status, caller_id, binding, source_agent, idempotency_key, vehicle_link,"
    " request_json, response_json, received_at, received_ms"
)


def add_leads(tx, count: int) -> None:
    """``count`` leads of ``tx``'s tenant, each with its consent and one delivery."""
    tx.execute(
        f"INSERT INTO leads (tenant_id, {_LEAD_COLUMNS}) SELECT ?, 'lead_' || g, 'dealer', 'main', 'received',"
        " 'caller', 'a2a', 'agent', 'key_' || g, 'none', '{}', '{}', '2026-01-01T00:00:00Z', g"
        " FROM generate_series(1, ?) AS g",
        (tx.tenant, count),
    )
    tx.execute(
        "INSERT INTO lead_consents (tenant_id, lead_id, granted_at, allowed_channels, scope, consent_text,"
        " grant_json) SELECT tenant_id, lead_id, '2026-01-01T00:00:00Z', '[]', '[]', 'yes', '{}' FROM leads"
        " WHERE tenant_id = ?",
        (tx.tenant,),
    )
    tx.execute(
        "INSERT INTO lead_deliveries (tenant_id, delivery_id, lead_id, target, kind, status, attempts,"
        " next_attempt_ms, created_ms, updated_ms) SELECT tenant_id, 'dlv_' || lead_id, lead_id, 'crm',"
        " 'adf_http', 'delivered', 1, 0, 0, 0 FROM leads WHERE tenant_id = ?",
        (tx.tenant,),
    )


def fetched_by_index(tx, table: str) -> int:
    """Rows of ``table`` fetched by index scans in this transaction so far (the checks' too)."""
    return int(tx.one("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = ?", (table,))[0])


@pytest.fixture
def database(pg_cluster):
    url = pg_cluster.create_database(role="aap_app")
    db = open_database(url)
    yield url, db
    db.close()
    pg_cluster.drop_database(url)


def warmed(url: str):
    """A connection whose foreign-key checks were planned on nearly empty tables: small
    tenants' leads written first, each in its own transaction."""
    target = connect(url)
    for index in range(8):
        with target.for_tenant(f"small-{index}").transaction() as tx:
            add_leads(tx, 3)
    return target


def test_a_large_copy_checks_each_row_by_its_key(database) -> None:
    url, db = database
    target = warmed(url)
    with db.for_tenant("alpha").transaction() as tx:
        add_leads(tx, LEADS)
    try:
        with db.for_tenant("alpha").read() as source, target.for_tenant("beta").transaction() as tx:
            copied = copy_agent(source, tx, DOMAINS)
            fetched = fetched_by_index(tx, "leads")
    finally:
        target.close()
    assert copied["leads"] == copied["lead_consents"] == copied["lead_deliveries"] == LEADS
    # One fetch per checked row (a consent and a delivery per lead), not the tenant's rows each.
    assert fetched <= 4 * LEADS, fetched


def test_a_large_schema_moved_checks_each_row_by_its_key(database) -> None:
    """``aap db upgrade``'s move of a schema's table (:func:`aap.store.upgrade.copy_rows`)."""
    url, db = database
    target = warmed(url)
    with db.for_tenant("alpha").transaction() as tx:
        add_leads(tx, LEADS)
        for table in ("leads", "lead_consents", "lead_deliveries"):
            tx.execute(f"CREATE TABLE old_{table} AS SELECT * FROM {table} WHERE tenant_id = ?", (tx.tenant,))
            tx.execute(f"ALTER TABLE old_{table} DROP COLUMN tenant_id")
    try:
        with target.for_tenant("beta").transaction() as tx:
            counts = [copy_rows(tx, table, f"old_{table}") for table in ("leads", "lead_consents", "lead_deliveries")]
            fetched = fetched_by_index(tx, "leads")
    finally:
        target.close()
    assert counts == [LEADS] * 3
    assert fetched <= 4 * LEADS, fetched
