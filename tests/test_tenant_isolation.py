"""Property tests: tenants that share one database never see each other's rows.

Random tenants on one database (each a view of it, as a platform's tenants are), whose
inventories are drawn from the same small pools of vehicle ids, VINs, stock numbers, makes and
rooftops, and who submit leads with the same idempotency key and the same customer: every
tenant's searches (walked page by page with cursors), totals, facets, counts and lookups equal a
plain-Python reading of its own inventory alone (:mod:`inventory_reference`), and its leads,
their idempotency, the console's lead list and export, and the outbox a delivery worker claims
are its own. On both backends; on PostgreSQL the role is bound by row-level security too, so a
leak would have to get past both walls (docs/architecture.md, "Storage").
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext, DealerAgent
from aap.store import Stores, open_database
from aap.store.lead_inbox import InboxFilter, LeadScope
from conftest import reset_database, snapshot_database
from inventory_reference import listings, normalise_facets, reference_facets, reference_search
from lead_support import http_route, lead_request, lead_settings
from test_search_properties import requests, walk

pytestmark = pytest.mark.slow

CTX = CallContext(binding="test")
TENANTS = ("alpha", "beta", "gamma")
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def shared(backend, request, pg_cluster_or_none):
    """One database for the whole test (emptied before every example), each tenant a view of it."""
    if backend == "postgresql":
        url = pg_cluster_or_none.create_database(role="aap_app")
    else:
        url = f"sqlite:///{request.getfixturevalue('tmp_path')}/shared.db"
    db = open_database(url)
    fresh = snapshot_database(db)

    def opened() -> Any:
        reset_database(db, fresh)
        return db

    yield opened
    db.close()
    if backend == "postgresql":
        pg_cluster_or_none.drop_database(url)


@pytest.fixture
def pg_cluster_or_none(backend, request):
    return request.getfixturevalue("pg_cluster") if backend == "postgresql" else None


def _agents(db: Any, settings_: Any, inventories: list[list[dict[str, Any]]]) -> dict[str, DealerAgent]:
    agents = {}
    for tenant, inventory in zip(TENANTS, inventories):
        stores = Stores(db.for_tenant(tenant))
        stores.inventory.import_listings(inventory)
        agents[tenant] = DealerAgent(settings_, stores)
    return agents


def _ids(item: dict[str, Any]) -> list[tuple[str, str]]:
    return [(key, item[key]) for key in ("vehicle_id", "vin", "stock") if key in item]


@PROPERTY
@given(inventories=st.lists(listings(max_size=8), min_size=2, max_size=3), request=requests())
def test_searches_totals_and_facets_are_each_tenants_own(
    inventories, request, shared, settings_factory, assert_valid
) -> None:
    settings_ = settings_factory()
    agents = _agents(shared(), settings_, inventories)
    for (_tenant, agent), inventory in zip(agents.items(), inventories):
        ids, totals = walk(agent, request, assert_valid)
        expected = reference_search(inventory, request, settings_)
        assert ids == expected
        assert set(totals) == {len(expected)}
        facets = {"type": "inventory.facets.request"}
        if "filters" in request:
            facets["filters"] = request["filters"]
        for key in ("currency", "mileage_unit"):
            if key in request:
                facets[key] = request[key]
        answer = assert_valid(agent.handle(facets, CTX), "inventory-facets-response")["data"]
        assert normalise_facets(answer) == reference_facets(inventory, facets, settings_)
        stores = agent.stores
        assert stores.inventory.count() == len({reference_key(i) for i in inventory})
        for item in inventory:
            for key, value in _ids(item):
                found = stores.inventory.find(**{"vehicle_id" if key == "vehicle_id" else key: value})
                own = {r.id for r in found}
                assert own <= {reference_key(i) for i in inventory}


def reference_key(item: dict[str, Any]) -> str:
    from inventory_reference import listing_id

    return listing_id(item)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(2, 3), same_key=st.booleans())
def test_leads_idempotency_and_the_outbox_are_each_tenants_own(count, same_key, shared) -> None:
    settings_ = lead_settings(routes=[http_route("https://crm.example/adf")])
    agents = _agents(shared(), settings_, [[] for _ in range(count)])
    key = "shared-idempotency-key"
    answers = {}
    for n, (tenant, agent) in enumerate(agents.items()):
        body = lead_request(idempotency_key=key if same_key else f"{key}-{n}")
        answers[tenant] = agent.handle(body, CTX)["data"]
        again = agent.handle(body, CTX)["data"]
        assert again["lead_id"] == answers[tenant]["lead_id"] and again.get("replayed") is True
    assert len({a["lead_id"] for a in answers.values()}) == count  # never the other tenant's replay
    for tenant, agent in agents.items():
        leads = agent.stores.leads
        assert leads.count_leads() == 1
        assert leads.get_lead(answers[tenant]["lead_id"]) is not None
        for other, answer in answers.items():
            if other != tenant:
                assert leads.get_lead(answer["lead_id"]) is None
        inbox = agent.stores.lead_inbox
        rows, _ = inbox.page(LeadScope(), InboxFilter())
        assert [row.lead_id for row in rows] == [answers[tenant]["lead_id"]]
        assert [row.lead_id for row in inbox.export(LeadScope(), InboxFilter())] == [answers[tenant]["lead_id"]]
        claimed = leads.claim_due(now_ms=4_102_444_800_000, lease_ms=60_000, limit=100)
        assert [d.lead_id for d in claimed] == [answers[tenant]["lead_id"]]


# -- every statement names its tenant ------------------------------------------------------------------

_TABLES = None


def _tenant_tables() -> list[str]:
    from aap.store.layout import tenant_tables
    from aap.store.migrations import DOMAINS

    return tenant_tables(DOMAINS)


@pytest.fixture(autouse=True)
def every_statement_names_its_tenant(monkeypatch):
    """The first wall, audited: every statement these tests run on a table keyed by tenant names
    ``tenant_id`` (a filter, a join, or the column it writes) — row-level security is the second."""
    import re

    from aap.store.db import Tx

    tables = re.compile(r"\b(" + "|".join(_tenant_tables()) + r")\b")
    seen: list[str] = []
    execute, executemany = Tx.execute, Tx.executemany

    def audited(self, sql, params=()):
        seen.append(sql)
        return execute(self, sql, params)

    def audited_many(self, sql, rows):
        seen.append(sql)
        return executemany(self, sql, rows)

    monkeypatch.setattr(Tx, "execute", audited)
    monkeypatch.setattr(Tx, "executemany", audited_many)
    yield
    blind = [
        sql
        for sql in seen
        if tables.search(sql)
        and "tenant_id" not in sql
        and not re.match(r"\s*(CREATE|ALTER|DROP|TRUNCATE|PRAGMA)\b", sql, re.IGNORECASE)
        # conftest's snapshot and reset of the tables between examples (the stores never quote a name)
        and not sql.startswith(('DELETE FROM "', 'SELECT * FROM "', 'INSERT INTO "'))
    ]
    assert blind == []
