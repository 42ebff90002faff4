"""Two tenants' leads in one database: the same lead ids, idempotency keys, seats and delivery
targets, and neither ever sees, counts, changes or deletes the other's rows.

Each tenant is a view of one database (``db.for_tenant``), as a platform's tenants are; on
PostgreSQL the test role is the cluster's superuser, which row-level security does not bind, so
what keeps the tenants apart here is the stores' own SQL (docs/platform.md, "Isolation").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from aap.store import open_database
from aap.store.db import Database
from aap.store.lead_inbox import InboxFilter, LeadInbox, LeadScope
from aap.store.lead_pipeline import LeadPipeline, PipelineFilter
from aap.store.leads import Attempt, LeadStore, NewLead

LEAD_ID = "lead_shared"
RECEIVED_MS = 1_780_000_000_000
CONSENT = {
    "granted_at": "2026-05-01T00:00:00Z",
    "allowed_channels": ["email"],
    "scope": ["lead_submission"],
    "consent_text": "You may contact me about this vehicle.",
}
ALL = LeadScope()


class Tenant:
    """One tenant's lead stores, on its view of the shared database."""

    def __init__(self, db: Database, name: str) -> None:
        self.db = db.for_tenant(name)
        self.name = name
        self.leads = LeadStore(self.db)
        self.inbox = LeadInbox(self.db, self.leads)
        self.pipeline = LeadPipeline(self.db, self.inbox)


def new_lead(last_name: str, **changes: Any) -> NewLead:
    request = {
        "type": "lead.submit.request",
        "idempotency_key": "same-key",
        "customer": {"first_name": "Ada", "last_name": last_name, "email": f"ada@{last_name}.example"},
        "consent": CONSENT,
    }
    lead = NewLead(
        lead_id=LEAD_ID,
        dealer_id="dealer-1",
        rooftop="Main",
        status="received",
        caller_id="anonymous",
        binding="a2a",
        client_id=None,
        source_agent="agent",
        idempotency_key="same-key",
        vehicle_id=None,
        vehicle_link="none",
        listing=None,
        appointment_id="apt_shared",
        appointment_status="confirmed",
        appointment=None,
        request=request,
        response={"type": "lead.submit.response", "data": {"lead_id": LEAD_ID}},
        received_at="2026-05-30T00:00:00Z",
        received_ms=RECEIVED_MS,
        consent_expires_ms=None,
    )
    return replace(lead, **changes)


def submit(tenant: Tenant, last_name: str) -> None:
    """What lead.submit writes: the idempotency key, a seat, the lead with one outbox row."""
    with tenant.leads.transaction() as tx:
        assert tenant.leads.claim_key(tx, "dealer-1", "anonymous", "same-key", last_name, 1, 10**15) is None
        assert tenant.leads.take_seats(tx, "dealer-1", "Main", "sales", ["2026-06-01T10:00"], 1, "apt_shared", LEAD_ID)
        tenant.leads.insert_lead(tx, new_lead(last_name), CONSENT, [("crm", "adf_http")], RECEIVED_MS)
        tenant.leads.complete_key(tx, "dealer-1", "anonymous", "same-key", LEAD_ID, {"owner": tenant.name})


@pytest.fixture
def tenants(database_url):
    db = open_database(database_url)
    alpha, beta = Tenant(db, "alpha"), Tenant(db, "beta")
    submit(alpha, "Alphason")
    submit(beta, "Betason")
    yield alpha, beta
    db.close()


def test_the_same_ids_keys_and_seats_are_each_tenants_own(tenants):
    alpha, beta = tenants
    for tenant, name in ((alpha, "Alphason"), (beta, "Betason")):
        assert tenant.leads.count_leads() == 1
        lead = tenant.leads.get_lead(LEAD_ID)
        assert lead["request"]["customer"]["last_name"] == name
        assert [d["target"] for d in lead["deliveries"]] == ["crm"]
        assert [(row["lead_id"], row["deliveries"]) for row in tenant.leads.list_leads()] == [(LEAD_ID, {"pending": 1})]
        with tenant.leads.transaction() as tx:
            # The key is held by this tenant's lead: a replay finds this tenant's answer.
            record = tenant.leads.claim_key(tx, "dealer-1", "anonymous", "same-key", "other", 2, 10**15)
            assert record is not None and record.payload_hash == name
            assert record.response == {"owner": tenant.name}
            # The one seat of the slot is this tenant's; the other tenant's booking took its own.
            usage = tenant.leads.seat_usage(tx, "dealer-1", "Main", "sales", "2026-06-01", "2026-06-02")
            assert usage == {"2026-06-01T10:00": 1}
            assert not tenant.leads.take_seats(
                tx, "dealer-1", "Main", "sales", ["2026-06-01T10:00"], 1, "apt_other", "lead_other"
            )
        assert tenant.leads.delivery_counts() == {"pending": 1}


def test_a_tenants_outbox_claims_retries_and_sweeps_only_its_rows(tenants):
    alpha, beta = tenants
    with beta.leads.transaction() as tx:  # due before alpha's: first in any order of all rows
        beta.leads.insert_lead(tx, new_lead("Early", lead_id="lead_early"), CONSENT, [("crm", "adf_http")], 5)
    assert alpha.leads.next_due_ms() == RECEIVED_MS
    assert beta.leads.next_due_ms() == 5
    (claimed,) = alpha.leads.claim_due(RECEIVED_MS, 60_000, 1)
    assert claimed.request["customer"]["last_name"] == "Alphason"
    assert alpha.leads.claim_due(RECEIVED_MS, 60_000, 10) == []
    assert beta.leads.delivery_counts() == {"pending": 2}  # untouched by alpha's claim
    with beta.leads.transaction() as tx:
        tx.execute("DELETE FROM lead_deliveries WHERE tenant_id = ? AND lead_id = 'lead_early'", (tx.tenant,))
        tx.execute("DELETE FROM lead_consents WHERE tenant_id = ? AND lead_id = 'lead_early'", (tx.tenant,))
        tx.execute("DELETE FROM leads WHERE tenant_id = ? AND lead_id = 'lead_early'", (tx.tenant,))
    assert alpha.leads.mark_dead(claimed, RECEIVED_MS + 1, "HTTP 500", Attempt(RECEIVED_MS, "text/xml", "<adf/>"))
    assert alpha.leads.delivery_counts() == {"dead": 1}
    assert beta.leads.delivery_counts() == {"pending": 1}
    assert [r.lead_id for r in alpha.inbox.page(ALL, InboxFilter(delivery="dead"))[0]] == [LEAD_ID]
    assert beta.inbox.page(ALL, InboxFilter(delivery="dead"))[0] == []
    assert beta.inbox.page(ALL, InboxFilter(delivery="dead", query="Ada"))[0] == []
    assert [r.deliveries for r in beta.inbox.page(ALL, InboxFilter())[0]] == [{"pending": 1}]
    assert beta.leads.retry(LEAD_ID, RECEIVED_MS + 2) == 1  # its own pending row only
    assert alpha.leads.delivery_counts() == {"dead": 1}
    assert beta.inbox.lead(LEAD_ID, ALL)["attempts"] == []
    assert [a["payload"] for a in alpha.inbox.lead(LEAD_ID, ALL)["attempts"]] == ["<adf/>"]
    # Another tenant's claim token finishes nothing here.
    (theirs,) = beta.leads.claim_due(RECEIVED_MS + 2, 60_000, 10)
    assert not alpha.leads.mark_delivered(theirs, RECEIVED_MS + 3)
    assert beta.leads.delivery_counts() == {"delivering": 1}
    assert beta.leads.mark_delivered(theirs, RECEIVED_MS + 3)
    assert alpha.leads.delivery_counts() == {"dead": 1}
    # Sweeping expired keys is per tenant too.
    assert alpha.leads.sweep_idempotency(10**16) == 1
    with beta.leads.transaction() as tx:
        assert beta.leads.claim_key(tx, "dealer-1", "anonymous", "same-key", "x", 3, 10**15) is not None


def test_the_inbox_finds_counts_and_marks_only_its_tenants_leads(tenants):
    alpha, beta = tenants
    rows, _ = alpha.inbox.page(ALL, InboxFilter())
    assert [(r.lead_id, r.last_name) for r in rows] == [(LEAD_ID, "Alphason")]
    assert alpha.inbox.page(ALL, InboxFilter(query="Betason"))[0] == []
    assert alpha.inbox.page(ALL, InboxFilter(query="ada@betason.example"))[0] == []
    assert [r.last_name for r in beta.inbox.page(ALL, InboxFilter(query="Betason"))[0]] == ["Betason"]
    for tenant, name in ((alpha, "Alphason"), (beta, "Betason")):
        assert [r.last_name for r in tenant.inbox.page(ALL, InboxFilter(delivery="pending"))[0]] == [name]
        assert [r.last_name for r in tenant.inbox.page(ALL, InboxFilter(delivery="delivered"))[0]] == []
        assert tenant.inbox.page(ALL, InboxFilter(delivery="none"))[0] == []
        assert tenant.inbox.page(ALL, InboxFilter(rooftop="Main", delivery="dead"))[0] == []
    assert alpha.inbox.mark_handled(LEAD_ID, ALL, "staff@alpha.example", RECEIVED_MS)
    assert alpha.inbox.lead(LEAD_ID, ALL)["handled_by"] == "staff@alpha.example"
    assert beta.inbox.lead(LEAD_ID, ALL)["handled_by"] is None
    assert beta.inbox.page(ALL, InboxFilter(handled=True))[0] == []
    assert [r.lead_id for r in alpha.inbox.export(ALL, InboxFilter())] == [LEAD_ID]
    assert alpha.inbox.backlog(RECEIVED_MS)["counts"] == {"pending": 1}
    assert alpha.inbox.backlog(RECEIVED_MS, LeadScope(dealer_id="dealer-1"))["counts"] == {"pending": 1}
    # A lead only the other tenant has is not there at all.
    with beta.leads.transaction() as tx:
        beta.leads.insert_lead(tx, new_lead("Betason", lead_id="lead_only_beta"), CONSENT, [], RECEIVED_MS + 1)
    assert beta.inbox.in_scope("lead_only_beta", ALL)
    assert not alpha.inbox.in_scope("lead_only_beta", ALL)
    assert alpha.inbox.lead("lead_only_beta", ALL) is None
    assert alpha.leads.get_lead("lead_only_beta") is None
    assert not alpha.inbox.mark_handled("lead_only_beta", ALL, "staff@alpha.example", RECEIVED_MS)
    with alpha.db.read() as tx:
        assert alpha.inbox.rows(tx, ["lead_only_beta", LEAD_ID])[0].last_name == "Alphason"
    assert alpha.leads.count_leads() == 1 and beta.leads.count_leads() == 2
    assert [r.lead_id for r in beta.inbox.page(ALL, InboxFilter(delivery="none"))[0]] == ["lead_only_beta"]


def test_a_tenants_pipeline_changes_and_reads_only_its_leads(tenants):
    alpha, beta = tenants
    change = alpha.pipeline.change(LEAD_ID, ALL, "staff@alpha.example", RECEIVED_MS + 60_000, stage="contacted")
    assert change is not None and change.standing.stage == "contacted"
    alpha.pipeline.change(LEAD_ID, ALL, "staff@alpha.example", RECEIVED_MS + 61_000, note="Called back.")
    assert beta.pipeline.standing(LEAD_ID, ALL).stage == "new"
    assert beta.pipeline.standing(LEAD_ID, ALL).notes == 0
    assert beta.pipeline.history(LEAD_ID) == []
    assert [e.kind for e in alpha.pipeline.history(LEAD_ID)] == ["stage", "note"]
    assert beta.pipeline.page(ALL, InboxFilter(), PipelineFilter(stage="contacted"))[0] == []
    for tenant, stage in ((alpha, "contacted"), (beta, "new")):
        (row,) = tenant.pipeline.page(ALL, InboxFilter(), PipelineFilter())[0]
        assert (row.standing.stage, row.lead.deliveries) == (stage, {"pending": 1})
        assert [s["stage"] for s in tenant.pipeline.summaries([LEAD_ID])] == [stage]
    (row,) = alpha.pipeline.page(ALL, InboxFilter(), PipelineFilter(stage="contacted"), sort="status")[0]
    assert row.lead.last_name == "Alphason"
    assert [s["stage"] for s in beta.pipeline.summaries([LEAD_ID])] == ["new"]
    assert alpha.pipeline.first_response(ALL, 0) == {"Main": {"median_ms": 60_000, "answered": 1, "waiting": 0}}
    assert beta.pipeline.first_response(ALL, 0) == {"Main": {"median_ms": None, "answered": 0, "waiting": 1}}
    # A tenant's change never reaches a lead id only the other has.
    with beta.leads.transaction() as tx:
        beta.leads.insert_lead(tx, new_lead("Betason", lead_id="lead_only_beta"), CONSENT, [], RECEIVED_MS)
    assert alpha.pipeline.change("lead_only_beta", ALL, "staff@alpha.example", RECEIVED_MS, stage="lost") is None
    assert beta.pipeline.standing("lead_only_beta", ALL).stage == "new"
