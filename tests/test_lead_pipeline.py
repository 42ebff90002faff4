"""The lead pipeline on both backends: statuses with their history, owners, follow-ups, notes,
first-response times, and the inbox in every sort, page by page, against a plain reference
(docs/console.md, "The lead pipeline")."""

from __future__ import annotations

import base64
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import DealerAgent
from aap.store import Stores, open_stores
from aap.store.db import connect
from aap.store.keyset import BadCursor, Cursor
from aap.store.lead_inbox import InboxFilter, LeadScope
from aap.store.lead_pipeline import SORTS, STAGES, PipelineFilter
from aap.store.migrations import DOMAINS, migrate
from console_support import CUSTOMERS, dealer, listings, submit_customers  # noqa: F401 (dealer: a fixture)
from lead_support import lead_settings

EVERYONE = LeadScope()
T0 = 1_800_000_000_000


def test_a_lead_starts_new_and_each_change_is_recorded_with_who_and_when(dealer):
    first, second, *_ = submit_customers(dealer)
    pipeline = dealer.stores.lead_pipeline
    standing = pipeline.standing(first, EVERYONE)
    assert standing.stage == "new" and standing.owner is None and standing.responded_ms is None
    before = dealer.stores.leads.get_lead(first)

    owned = pipeline.change(first, EVERYONE, "boss@dealer.example", T0, owner="bdc@dealer.example")
    assert [e.kind for e in owned.events] == ["owner"] and owned.standing.responded_ms is None  # not a response
    changed = pipeline.change(
        first, EVERYONE, "bdc@dealer.example", T0 + 60_000, stage="contacted", follow_up="2026-03-05", note="Called."
    )
    assert [(e.kind, e.old_value, e.new_value) for e in changed.events] == [
        ("stage", "new", "contacted"),
        ("follow_up", None, "2026-03-05"),
        ("note", None, None),
    ]
    standing = changed.standing
    assert standing.stage == "contacted" and standing.follow_up == "2026-03-05" and standing.notes == 1
    received_ms = dealer.stores.lead_inbox.lead(first, EVERYONE)["received_ms"]
    assert standing.responded_ms == T0 + 60_000 and standing.response_ms == T0 + 60_000 - received_ms
    again = pipeline.change(first, EVERYONE, "bdc@dealer.example", T0 + 120_000, stage="contacted", note="Again.")
    assert [e.kind for e in again.events] == ["note"]  # the same status is no change
    assert again.standing.responded_ms == T0 + 60_000  # the first response stays the first
    history = pipeline.history(first)
    assert [(e.actor, e.kind) for e in history] == [
        ("boss@dealer.example", "owner"),
        ("bdc@dealer.example", "stage"),
        ("bdc@dealer.example", "follow_up"),
        ("bdc@dealer.example", "note"),
        ("bdc@dealer.example", "note"),
    ]
    assert history[3].note == "Called." and history[0].at_ms == T0

    # What was stored for the CRM is untouched: request, result, outbox rows.
    after = dealer.stores.leads.get_lead(first)
    for key in ("request", "response", "deliveries", "consent", "status"):
        assert after[key] == before[key]
    assert pipeline.standing(second, EVERYONE).stage == "new"

    cleared = pipeline.change(first, EVERYONE, "bdc@dealer.example", T0 + 180_000, owner=None, follow_up=None)
    assert cleared.standing.owner is None and cleared.standing.follow_up is None
    with pytest.raises(ValueError):
        pipeline.change(first, EVERYONE, "x", T0, stage="won")
    with pytest.raises(ValueError):
        pipeline.change(first, EVERYONE, "x", T0, note="   ")


def test_a_change_outside_the_scope_is_refused_as_if_the_lead_did_not_exist(dealer):
    ids = submit_customers(dealer)
    pipeline = dealer.stores.lead_pipeline
    oakland = LeadScope(None, frozenset({("bay-motors", "Bay Motors Oakland")}))
    sf_lead = ids[0]  # CUSTOMERS[0] is at San Francisco
    assert pipeline.change(sf_lead, oakland, "oak@dealer.example", T0, stage="lost") is None
    assert pipeline.standing(sf_lead, oakland) is None
    assert pipeline.standing(sf_lead, EVERYONE).stage == "new" and pipeline.history(sf_lead) == []
    assert pipeline.change("lead_nope", EVERYONE, "x", T0, stage="lost") is None
    assert pipeline.change(ids[1], oakland, "oak@dealer.example", T0, stage="lost") is not None


def test_leads_stored_before_the_pipeline_existed_are_new(database_url):
    db = connect(database_url)
    migrate(db, tuple(d for d in DOMAINS if d.domain != "pipeline"))
    agent = DealerAgent(lead_settings(database_url=database_url), Stores(db))
    agent.stores.inventory.import_listings(listings())
    lead_id = submit_customers(agent, CUSTOMERS[:1])[0]
    db.close()
    upgraded = open_stores(database_url)
    try:
        assert upgraded.lead_pipeline.standing(lead_id, EVERYONE).stage == "new"
    finally:
        upgraded.close()


# -- the inbox in every sort -------------------------------------------------------------

OWNERS = ("ann@dealer.example", "bob@dealer.example", "cy@dealer.example")


@pytest.fixture
def worked(dealer):
    """Thirty leads (the five customers six times over), in random places of the pipeline."""
    ids = []
    for _ in range(6):
        ids += submit_customers(dealer)
    rnd = random.Random(7)
    pipeline = dealer.stores.lead_pipeline
    for i, lead_id in enumerate(ids):
        pipeline.change(
            lead_id,
            EVERYONE,
            "boss@dealer.example",
            T0 + i,
            stage=rnd.choice(STAGES),
            owner=rnd.choice((None,) + OWNERS),
            follow_up=rnd.choice((None, "2026-03-01", "2026-03-05", "2026-03-09")),
        )
    return dealer


def _reference(dealer, sort, wanted, pipeline):
    """Every lead the filter keeps, in ``sort`` order, worked out in Python from plain reads."""
    with dealer.stores.db.read() as tx:
        rows = tx.fetchall("SELECT lead_id, received_ms, rooftop, stage, owner, follow_up FROM leads")
    kept = []
    for lead_id, received, rooftop, stage, owner, follow_up in rows:
        if wanted.rooftop and rooftop != wanted.rooftop:
            continue
        if pipeline.stage and stage not in {"open": STAGES[:4], "closed": STAGES[4:]}.get(
            pipeline.stage, (pipeline.stage,)
        ):
            continue
        if pipeline.owner is not None and owner != (pipeline.owner or None):
            continue
        if pipeline.follow_up == "none" and follow_up is not None:
            continue
        if pipeline.follow_up == "due" and not (follow_up and follow_up <= pipeline.today):
            continue
        if pipeline.follow_up == "upcoming" and not (follow_up and follow_up > pipeline.today):
            continue
        kept.append((lead_id, received, stage, owner, follow_up))
    newest = sorted(kept, key=lambda r: (r[1], r[0]), reverse=True)
    if sort == "newest":
        return [r[0] for r in newest]
    if sort == "oldest":
        return [r[0] for r in reversed(newest)]
    if sort == "follow_up":
        dated = sorted((r for r in kept if r[4]), key=lambda r: (r[4], r[1], r[0]))
        return [r[0] for r in dated] + [r[0] for r in newest if not r[4]]
    if sort == "status":
        return [r[0] for stage in STAGES for r in newest if r[2] == stage]
    owned = sorted((r for r in kept if r[3]), key=lambda r: (r[3], -r[1], _desc(r[0])))
    return [r[0] for r in owned] + [r[0] for r in newest if not r[3]]


def _desc(text):
    return [-ord(c) for c in text]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sort=st.sampled_from(sorted(SORTS)),
    stage=st.sampled_from([None, "open", "closed", *STAGES]),
    owner=st.sampled_from([None, "", *OWNERS]),
    follow_up=st.sampled_from([None, "due", "upcoming", "none"]),
    rooftop=st.sampled_from([None, "Bay Motors Oakland"]),
    size=st.integers(1, 7),
)
def test_every_sort_pages_through_each_matching_lead_once_in_order(
    worked, sort, stage, owner, follow_up, rooftop, size
):
    wanted = InboxFilter(rooftop=rooftop)
    pipeline = PipelineFilter(stage, owner, follow_up, "2026-03-05")
    seen, after = [], None
    for _ in range(40):
        rows, after = worked.stores.lead_pipeline.page(EVERYONE, wanted, pipeline, sort=sort, cursor=after, limit=size)
        seen += [r.lead.lead_id for r in rows]
        if after is None:
            break
        after = Cursor.decode(after.encode(), SORTS[sort])  # through the text a link carries
    assert seen == _reference(worked, sort, wanted, pipeline)


def test_a_cursor_not_made_by_the_store_is_refused():
    good = Cursor(0, (1_800_000_000_000, "lead_x")).encode()
    assert Cursor.decode(good, SORTS["newest"]) == Cursor(0, (1_800_000_000_000, "lead_x"))
    for bad in ("", "%%%", good + "x" * 2000, Cursor(5, (1, "x")).encode()):
        with pytest.raises(BadCursor):
            Cursor.decode(bad, SORTS["newest"])
    wrong = orjson.dumps([0, "not a number", "lead_x"])
    with pytest.raises(BadCursor):
        Cursor.decode(base64.urlsafe_b64encode(wrong).decode(), SORTS["newest"])
    with pytest.raises(BadCursor):
        Cursor.decode(good, SORTS["owner"])  # the owner sort's first segment has three keys


def test_the_median_first_response_per_rooftop(worked):
    stats = worked.stores.lead_pipeline.first_response(EVERYONE, 0)
    with worked.stores.db.read() as tx:
        rows = tx.fetchall("SELECT rooftop, response_ms FROM leads")
    for rooftop in {r[0] for r in rows}:
        answered = sorted(r[1] for r in rows if r[0] == rooftop and r[1] is not None)
        mid = len(answered) // 2
        median = answered[mid] if len(answered) % 2 else (answered[mid - 1] + answered[mid]) // 2
        assert stats[rooftop]["median_ms"] == median
        assert stats[rooftop]["answered"] == len(answered)
