"""Erasing a customer's leads (a privacy request) and leads past ``[leads] retention_days``, on
both backends (docs/leads.md, "Erasure and retention").

Leads are made the way an agent makes them (``lead.submit`` through the core, deliveries sent to
a CRM stand-in on loopback, a note from staff, an appointment seat), then erased; the proof that
nothing of the customer is left is a scan of every column of every table of the agent.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from aap.agent import CallContext, DealerAgent
from aap.cli import leads as cli
from aap.config.leads import DeliverySettings, parse_leads_section
from aap.config.table import Problems, Table
from aap.errors import AapError
from aap.leads.erasure import DIGEST_SECRET, ErasureRefused, Subject, erase, plan, purge
from aap.leads.worker import DeliveryWorker
from aap.store import Stores, open_database
from aap.store import erasure as erasure_store
from aap.store.db import Database
from aap.store.lead_inbox import LeadScope
from aap.store.leads import Attempt
from aap.store.migrations import DOMAINS, PLATFORM_DOMAINS
from aap.util.rfc3339 import epoch_ms
from aap.work import Work
from lead_support import CONSENT_TEXT, EMAIL, FIRST, LAST, NOW, PHONE, Receiver, http_route, lead_request, lead_settings

OTHER_EMAIL = "someone.else.4410@example.net"
OTHER_PHONE = "+14155554410"
#: What must be gone from every column once the customer is erased.
TRACES = (EMAIL, PHONE, PHONE[1:], PHONE[1:][::-1], FIRST, LAST, CONSENT_TEXT)


@pytest.fixture
def db(database_url):
    opened = open_database(database_url)
    yield opened
    opened.close()


def agent_on(db: Database, receiver: Receiver, **leads: Any) -> DealerAgent:
    settings = lead_settings(
        routes=[http_route(receiver.url)],
        database_url=db.url,
        delivery=DeliverySettings(max_attempts=1),
        **leads,
    )
    return DealerAgent(settings, Stores(db))


def submit(agent: DealerAgent, at: datetime = NOW, *, email: str = EMAIL, phone: str = PHONE, **changes: Any) -> str:
    """A lead of the customer with ``email`` and ``phone`` (another customer's has other names too)."""
    body = lead_request(**changes)
    body["customer"] = {**body["customer"], "email": email, "phone": phone}
    if email != EMAIL and phone != PHONE:
        body["customer"].update(first_name="Other", last_name="Person")
        body["consent"] = {**body["consent"], "consent_text": "Other words of consent."}
    body["consent"] = {**body["consent"], "granted_at": (at - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    lead_id: str = agent.handle(copy.deepcopy(body), CallContext(binding="test", now=at))["data"]["lead_id"]
    return lead_id


def deliver(agent: DealerAgent, now: datetime = NOW + timedelta(minutes=1)) -> int:
    work = Work(inline=True)
    worker = DeliveryWorker(agent.stores.leads, agent.settings, work=work, clock=lambda: now.timestamp())

    async def run() -> int:
        async with worker.client() as client:
            return await worker.drain(client)

    try:
        return asyncio.run(run())
    finally:
        work.close()


def work_on(agent: DealerAgent, lead_id: str) -> None:
    """What staff and the booking add to a lead: a note naming the customer, an appointment seat."""
    customer = agent.stores.leads.get_lead(lead_id)["request"]["customer"]
    note = f"Called {customer['first_name']} {customer['last_name']} on {customer['phone']}"
    change = agent.stores.lead_pipeline.change(lead_id, LeadScope(), "ann@dealer.example", epoch_ms(NOW), note=note)
    assert change is not None
    with agent.stores.leads.transaction() as tx:
        assert agent.stores.leads.take_seats(
            tx, "bay-motors", "Main", "sales", [f"2026-04-01T{10 + len(lead_id) % 7}:00"], 5, "apt_" + lead_id, lead_id
        )


def rows_holding(db: Database, values: tuple[str, ...]) -> list[tuple[str, str]]:
    """(table, value) for every row of the database's tenant that holds one of ``values`` in any column."""
    found = []
    with db.read() as tx:
        for domain in DOMAINS:
            for table in domain.tables:
                for row in tx.fetchall(f"SELECT * FROM {table} WHERE tenant_id = ?", (tx.tenant,)):
                    text = " ".join(str(v) for v in row).casefold()
                    found += [(table, v) for v in values if v.casefold() in text]
    return found


def table_counts(db: Database) -> dict[str, int]:
    with db.read() as tx:
        return {
            table: int(tx.one(f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?", (tx.tenant,))[0])
            for domain in DOMAINS
            for table in domain.tables
        }


# -- the catalogue ---------------------------------------------------------------------------------


def test_every_table_of_an_agent_is_named_by_the_erasure():
    """A table added later must be placed: erased, anonymised, or kept with a reason."""
    tables = [t for d in PLATFORM_DOMAINS for t in d.tables]
    named = [*erasure_store.ERASED, *erasure_store.ANONYMISED, *erasure_store.KEPT]
    assert sorted(named) == sorted(set(named)), "a table is named twice"
    assert set(named) == set(tables)


def test_every_table_with_a_lead_column_is_erased_or_anonymised(db):
    """Whatever names a lead is a lead's data: it must not outlive the lead."""
    with db.read() as tx:
        for table in [t for d in DOMAINS for t in d.tables]:
            columns = set(db.dialect.columns(tx, table))
            if "lead_id" in columns:
                assert table in erasure_store.ERASED or table in erasure_store.ANONYMISED, table
            if any(c.startswith("customer_") for c in columns):
                assert table in erasure_store.ERASED, table
    for table, column in {**erasure_store.ERASED, **erasure_store.ANONYMISED}.items():
        with db.read() as tx:
            assert column in db.dialect.columns(tx, table)


# -- a customer's request --------------------------------------------------------------------------


@pytest.mark.slow
def test_erasing_by_email_leaves_nothing_of_the_customer_in_any_table(db, receiver):
    agent = agent_on(db, receiver)
    mine = [submit(agent), submit(agent, NOW + timedelta(seconds=1), phone=OTHER_PHONE)]
    other = submit(agent, NOW + timedelta(seconds=2), email=OTHER_EMAIL, phone=OTHER_PHONE)
    assert deliver(agent) == 3 and len(receiver.accepted()) == 3
    pending = submit(agent, NOW + timedelta(seconds=3))  # its delivery is not sent yet
    mine.append(pending)
    for lead_id in [*mine, other]:
        work_on(agent, lead_id)
    assert {t for t, _ in rows_holding(db, TRACES)} >= {
        "leads", "lead_consents", "lead_delivery_attempts", "lead_events",
    }  # fmt: skip
    before = table_counts(db)

    key = agent.stores.state.secret(DIGEST_SECRET)
    done = erase(agent.stores.erasure, Subject.parse(f"  {EMAIL.upper()} ", None), key=key, actor="cli:ann", now_ms=1)

    assert sorted(done.lead_ids) == sorted(mine)
    assert done.counts["leads"] == 3 and done.counts["lead_consents"] == 3 and done.counts["lead_events"] == 3
    assert done.counts["lead_deliveries"] == 3 and done.counts["cancelled_deliveries"] == 1
    assert done.counts["lead_delivery_attempts"] == 2 and done.counts["appointment_seats"] == 3
    assert done.counts["lead_idempotency"] == 3
    assert rows_holding(db, TRACES) == []  # nothing of the customer is left anywhere
    after = table_counts(db)
    for table in erasure_store.ERASED:
        assert after[table] == before[table] - done.counts[table], table
    # the other customer's lead is whole
    assert agent.stores.leads.get_lead(other)["request"]["customer"]["email"] == OTHER_EMAIL
    assert all(agent.stores.leads.get_lead(i) is None for i in mine)
    # the pending delivery was cancelled: nothing more reaches the CRM
    assert deliver(agent) == 0 and len(receiver.accepted()) == 3
    # the record and the audit row: ids, counts and a digest, never the address
    (record,) = agent.stores.erasure.records()
    assert record.erasure_id == done.erasure_id and record.reason == "request" and record.actor == "cli:ann"
    assert record.subject_digest == done.subject_digest and record.subject_digest.startswith("hmac-sha256:")
    assert sorted(record.lead_ids) == sorted(mine)
    (audit,) = [e for e in agent.stores.console.audit_entries() if e.action == "leads.erased"]
    assert audit.detail["leads"] == 3 and audit.subject == done.erasure_id
    text = orjson.dumps([record.view(), audit.detail]).decode().casefold()
    assert not [v for v in TRACES if v.casefold() in text]
    # the same request again: the same digest, nothing more to erase
    again = erase(agent.stores.erasure, Subject.parse(EMAIL, None), key=key, actor="cli:ann", now_ms=2)
    assert again.lead_ids == () and again.subject_digest == done.subject_digest


def test_a_resend_under_the_same_key_cannot_store_the_customer_again(db, receiver):
    agent = agent_on(db, receiver)
    body = lead_request()
    lead_id = agent.handle(copy.deepcopy(body), CallContext(binding="test", now=NOW))["data"]["lead_id"]
    key = agent.stores.state.secret(DIGEST_SECRET)
    erase(agent.stores.erasure, Subject.parse(EMAIL, None), key=key, actor="t", now_ms=1)
    with pytest.raises(AapError) as refused:
        agent.handle(copy.deepcopy(body), CallContext(binding="test", now=NOW + timedelta(seconds=5)))
    assert refused.value.code == "IDEMPOTENCY_CONFLICT"
    assert agent.stores.leads.get_lead(lead_id) is None and agent.stores.leads.count_leads() == 0
    assert rows_holding(db, TRACES) == []


def test_a_send_that_ends_after_the_erasure_records_nothing_of_it(db, receiver):
    """The worker held the claim while the lead was erased: its outcome finds no row, and the body
    it sent is not recorded (it would bring the customer back)."""
    agent = agent_on(db, receiver)
    submit(agent)
    now_ms = epoch_ms(NOW + timedelta(minutes=1))
    (claimed,) = agent.stores.leads.claim_due(now_ms, 30_000, 10)
    key = agent.stores.state.secret(DIGEST_SECRET)
    done = erase(agent.stores.erasure, Subject.parse(EMAIL, None), key=key, actor="t", now_ms=now_ms)
    assert done.counts["cancelled_deliveries"] == 1
    sent = Attempt(now_ms, "application/xml", f"<adf><email>{EMAIL}</email></adf>")
    assert agent.stores.leads.mark_delivered(claimed, now_ms + 5, sent) is False
    assert rows_holding(db, TRACES) == []


def test_erasing_by_phone_reads_the_number_as_the_lead_stores_it(db, receiver, caplog):
    caplog.set_level(logging.INFO, logger="aap")
    agent = agent_on(db, receiver)
    mine = submit(agent, email="first.address@example.org")
    other = submit(agent, NOW + timedelta(seconds=1), email=OTHER_EMAIL, phone=OTHER_PHONE)
    key = agent.stores.state.secret(DIGEST_SECRET)
    subject = Subject.parse(None, "(415) 555-7731")  # the national form of PHONE
    assert subject == Subject.parse(None, PHONE)
    done = erase(agent.stores.erasure, subject, key=key, actor="t", now_ms=1)
    assert done.lead_ids == (mine,)
    assert agent.stores.leads.get_lead(other) is not None
    # e-mail or phone: either matches
    third = submit(agent, NOW + timedelta(seconds=2), email=OTHER_EMAIL, phone=PHONE)
    both = erase(agent.stores.erasure, Subject.parse(OTHER_EMAIL, PHONE), key=key, actor="t", now_ms=2)
    assert sorted(both.lead_ids) == sorted([other, third])
    # the log says an erasure happened, with its id and count, and nothing of the customer
    erased = [r for r in caplog.records if r.getMessage() == "a customer's leads erased"]
    assert [r.fields["erasure_id"] for r in erased] == [done.erasure_id, both.erasure_id]
    logged = " ".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert not [v for v in (EMAIL, OTHER_EMAIL, PHONE, PHONE[1:], "5557731") if v in logged]


def test_a_request_names_the_customer_in_a_form_that_can_be_matched():
    with pytest.raises(ErasureRefused) as refused:
        Subject.parse(None, None)
    assert refused.value.problems == ["give the customer's e-mail address, phone number, or both"]
    with pytest.raises(ErasureRefused) as refused:
        Subject.parse("not-an-address", "12")
    assert len(refused.value.problems) == 2  # every problem at once
    with pytest.raises(ErasureRefused):
        Subject.parse("a@" + "b" * 400, None)


def test_a_dry_run_changes_nothing(db, receiver):
    agent = agent_on(db, receiver)
    lead_id = submit(agent)
    work_on(agent, lead_id)
    before = {t: sorted(map(tuple, r)) for t, r in _dump(db).items()}
    found = plan(agent.stores.erasure, Subject.parse(EMAIL, None), actor="t", now_ms=1)
    assert found.lead_ids == (lead_id,) and found.erasure_id is None and found.counts["leads"] == 1
    assert {t: sorted(map(tuple, r)) for t, r in _dump(db).items()} == before


def _dump(db: Database) -> dict[str, list[Any]]:
    with db.read() as tx:
        return {
            t: tx.fetchall(f"SELECT * FROM {t} WHERE tenant_id = ?", (tx.tenant,)) for d in DOMAINS for t in d.tables
        }


def test_two_tenants_whose_customers_share_an_address_are_erased_apart(db, receiver):
    alpha = agent_on(db.for_tenant("alpha"), receiver)
    beta = agent_on(db.for_tenant("beta"), receiver)
    a = submit(alpha)
    b = submit(beta)
    work_on(alpha, a)
    work_on(beta, b)
    key = alpha.stores.state.secret(DIGEST_SECRET)
    done = erase(alpha.stores.erasure, Subject.parse(EMAIL, PHONE), key=key, actor="t", now_ms=1)
    assert done.lead_ids == (a,)
    assert rows_holding(db.for_tenant("alpha"), TRACES) == []
    assert beta.stores.leads.get_lead(b)["request"]["customer"]["email"] == EMAIL
    assert beta.stores.erasure.records() == [] and len(alpha.stores.erasure.records()) == 1
    assert set(v for _, v in rows_holding(db.for_tenant("beta"), TRACES)) == set(TRACES)
    # each tenant's digest has its own key: one tenant's records say nothing of another's customers
    other = erase(beta.stores.erasure, Subject.parse(EMAIL, PHONE), key=beta.stores.state.secret(DIGEST_SECRET),
                  actor="t", now_ms=2)  # fmt: skip
    assert other.lead_ids == (b,) and other.subject_digest != done.subject_digest


# -- retention ---------------------------------------------------------------------------------------


def test_retention_is_absent_unless_set_and_bounded():
    def parse(data: dict[str, Any]) -> tuple[Any, list[str]]:
        problems = Problems()
        settings = parse_leads_section(Table(data, "leads", problems), problems)
        return settings.retention_days, problems.render()

    assert parse({}) == (None, [])
    assert parse({"retention_days": 730}) == (730, [])
    for wrong in (0, -1, 3651, "30", True):
        days, problems = parse({"retention_days": wrong})
        assert len(problems) == 1 and "leads.retention_days" in problems[0], (wrong, problems)


@pytest.mark.slow
def test_retention_erases_old_leads_whose_deliveries_are_done(db, receiver):
    agent = agent_on(db, receiver, retention_days=30)
    old = submit(agent)
    receiver.status = 400  # a refusal: dead at once (max_attempts = 1)
    old_dead = submit(agent, NOW + timedelta(seconds=1), email=OTHER_EMAIL)
    assert deliver(agent) == 2
    receiver.status = 200
    old_pending = submit(agent, NOW + timedelta(seconds=2))  # never delivered: kept
    later = NOW + timedelta(days=20)
    recent = submit(agent, later)
    assert agent.stores.leads.get_lead(old_pending)["deliveries"][0]["status"] == "pending"

    # 29 days after the old ones: nothing is due yet
    work = Work(inline=True)
    try:

        def retain(at: datetime) -> int:
            worker = DeliveryWorker(agent.stores.leads, agent.settings, work=work, clock=lambda: at.timestamp())
            return asyncio.run(worker.retain())

        assert retain(NOW + timedelta(days=29)) == 0
        assert retain(NOW + timedelta(days=31)) == 2
    finally:
        work.close()
    assert agent.stores.leads.get_lead(old) is None and agent.stores.leads.get_lead(old_dead) is None
    assert agent.stores.leads.get_lead(old_pending) is not None and agent.stores.leads.get_lead(recent) is not None
    (record,) = agent.stores.erasure.records()
    assert (
        record.reason == "retention"
        and record.subject_digest is None
        and sorted(record.lead_ids) == sorted([old, old_dead])
    )


def test_retention_goes_in_bounded_batches(db, receiver):
    agent = agent_on(db, receiver)
    ids = [submit(agent, NOW + timedelta(seconds=i), email=f"c{i}@example.org") for i in range(5)]
    deliver(agent)
    now_ms = epoch_ms(NOW + timedelta(days=2))
    dry = purge(agent.stores.erasure, 1, now_ms, dry_run=True, batch=2, batches=2)
    assert dry.lead_ids == ids[:4] and dry.more and dry.erasure_ids == [] and agent.stores.leads.count_leads() == 5
    first = purge(agent.stores.erasure, 1, now_ms, batch=2, batches=2)
    assert first.lead_ids == ids[:4] and first.more and len(first.erasure_ids) == 2
    second = purge(agent.stores.erasure, 1, now_ms, batch=2, batches=2)
    assert second.lead_ids == ids[4:] and not second.more
    assert agent.stores.leads.count_leads() == 0


def test_two_workers_purging_at_once_erase_and_record_each_lead_once(db, receiver):
    """Every worker of a platform runs the sweep: whichever order their transactions take, each lead
    is erased once and named by one record."""
    agent = agent_on(db, receiver)
    ids = [submit(agent, NOW + timedelta(seconds=i), email=f"c{i}@example.org") for i in range(6)]
    deliver(agent)
    now_ms = epoch_ms(NOW + timedelta(days=2))
    second = Stores(db)  # another worker's stores on the same database
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda s: purge(s.erasure, 1, now_ms, batch=2), [agent.stores, second]))
    assert sorted(i for run in runs for i in run.lead_ids) == sorted(ids)
    named = [i for record in agent.stores.erasure.records() for i in record.lead_ids]
    assert sorted(named) == sorted(ids)
    assert erasure_store.ErasureStore(db).erase(ids, actor="t", reason="retention", subject_digest=None,
                                                now_ms=now_ms, received_before_ms=now_ms).lead_ids == ()  # fmt: skip
    assert all(record.lead_ids for record in agent.stores.erasure.records())  # no empty retention record


# -- the command line --------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_erase_command_shows_every_id_whole_and_asks_first(db, receiver, tmp_path, monkeypatch):
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    agent = agent_on(db, receiver)
    ids = [submit(agent, NOW + timedelta(seconds=i)) for i in range(2)]
    other = submit(agent, NOW + timedelta(seconds=5), email=OTHER_EMAIL, phone=OTHER_PHONE)
    runner = CliRunner()
    args = ["erase", "--email", EMAIL, "--database", db.url]

    dry = runner.invoke(cli.leads, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert all(f"  {i}\n" in dry.output for i in ids) and "Dry run" in dry.output and other not in dry.output
    assert "…" not in dry.output and EMAIL not in dry.output
    asked = runner.invoke(cli.leads, args)  # not a terminal, no --yes: refused
    assert asked.exit_code == 1 and "--yes" in asked.output
    assert agent.stores.leads.count_leads() == 3

    done = runner.invoke(cli.leads, [*args, "--yes", "--json"])
    assert done.exit_code == 0, done.output
    record = orjson.loads(done.stdout)
    assert sorted(record["lead_ids"]) == sorted(ids) and record["erasure_id"].startswith("ers_")
    assert record["actor"].startswith("cli")
    assert agent.stores.leads.count_leads() == 1

    wrong = runner.invoke(cli.leads, ["erase", "--phone", "12", "--database", db.url])
    assert wrong.exit_code == 1 and "phone" in wrong.output


@pytest.mark.slow
def test_the_purge_command_uses_the_configured_retention(db, receiver, tmp_path, monkeypatch):
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    agent = agent_on(db, receiver)
    old = submit(agent, datetime.now(NOW.tzinfo) - timedelta(days=3))
    new = submit(agent, datetime.now(NOW.tzinfo))
    assert deliver(agent, datetime.now(NOW.tzinfo) + timedelta(minutes=1)) == 2  # only delivered leads go
    config = tmp_path / "aap.toml"
    base = '\nid = "t"\npublic_url = "https://dealer.example"\n[dealer]\nname = "T"\n[[dealer.rooftops]]\nname = "M"\n'
    config.write_text(base)
    runner = CliRunner()
    unset = runner.invoke(cli.leads, ["purge", "--config", str(config), "--database", db.url])
    assert unset.exit_code == 1 and "retention_days" in unset.output
    config.write_text(base + "[leads]\nretention_days = 2\n")
    dry = runner.invoke(cli.leads, ["purge", "--dry-run", "--config", str(config), "--database", db.url])
    assert dry.exit_code == 0, dry.output
    assert f"  {old}\n" in dry.output and new not in dry.output and agent.stores.leads.count_leads() == 2
    done = runner.invoke(cli.leads, ["purge", "--json", "--config", str(config), "--database", db.url])
    assert done.exit_code == 0, done.output
    assert orjson.loads(done.stdout)["lead_ids"] == [old]
    assert agent.stores.leads.get_lead(old) is None and agent.stores.leads.get_lead(new) is not None
