"""Server time of the staff console and the public page with 100k leads and 100k listings.

    python bench/bench_console.py [--leads 100000] [--listings 100000] [--runs 200]
        [--backends sqlite,postgresql] [--postgres-url postgresql://...] [--budget-ms 100]

For each backend: imports ``--listings`` demo listings (the demo dealer group,
four rooftops; a listing in twenty without a price, about one in nine without
a photo, as the demo generator makes them), stores ``--leads`` leads straight
through the lead store (the rows ``lead.submit`` writes: lead, consent record,
one outbox row; about 97 % delivered, 2 % waiting, 1 % failed with a recorded
attempt and its ADF) and spreads them over the pipeline (statuses, ten
owners, follow-up dates around today, first responses), records an import
that warned about 500 listings, signs an admin in, and times whole requests
through the ASGI app in this process (routing, middleware, the session check,
the query, the template and, on console pages, the audit-log write; no
network): p50 and p99 of

* the inbox: first page; a rooftop and delivery-state filter (failed leads);
  a customer-name search; the 40th page (keyset);
* the pipeline: my open leads by follow-up date; follow-ups due; new leads
  nobody owns; one rooftop's contacted leads; the 40th page by status and by
  owner (keysets across segments);
* the lead detail page; the agent-health page (time to first response);
* the inventory browser: the first page (days in stock), by price, the 40th page
  (keyset), no photo, no price by mileage, one rooftop's used cars by price
  (high to low), warned by the last import;
* the public page: the default search; make + sort by price; the 40th page, reached by
  "next page" links (the agent's cursor) and asked for by number (an offset).

A p99 above ``--budget-ms`` (100) is marked ``OVER``: the console's pages are
meant to answer within it at this scale.

The rate limit is off (one client makes every request). PostgreSQL comes from
``--postgres-url`` or a throwaway local cluster (``tests/pg_cluster.py``,
fsync off). Bounded by counts. Client and server share the machine, and the
machine may be shared with other work: compare figures within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster

from common import percentile  # noqa: E402

FIRST = (
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Donald",
    "Frances",
    "John",
    "Margaret",
    "Ken",
    "Radia",
    "Tim",
    "Vint",
    "Katherine",
    "Dennis",
    "Hedy",
    "Claude",
    "Sophie",
    "Niklaus",
    "Leslie",
)
LAST = (
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Knuth",
    "Allen",
    "McCarthy",
    "Hamilton",
    "Thompson",
    "Perlman",
    "Berners-Lee",
    "Cerf",
    "Johnson",
    "Ritchie",
    "Lamarr",
    "Shannon",
    "Wilson",
    "Wirth",
    "Lamport",
    "Kay",
    "Backus",
    "Codd",
    "Floyd",
    "Hoare",
    "Iverson",
    "Kahn",
    "Milner",
    "Naur",
    "Pnueli",
    "Rabin",
    "Scott",
    "Stearns",
    "Sutherland",
    "Tarjan",
    "Ullman",
    "Valiant",
    "Yao",
)
PASSWORD = "benchmark-Pa55word-for-the-console"
OWNERS = tuple(f"bdc{i}@dealer.example" for i in range(10))
STAGES_BY_SHARE = (
    ("new",) * 6 + ("contacted",) * 5 + ("appointment_set",) * 3 + ("showed",) * 2 + ("sold", "sold", "lost", "lost")
)


#: The tables a lead writes, analysed after the first batch and after the last.
LEAD_TABLES = ("leads", "lead_deliveries", "lead_consents", "lead_delivery_attempts")
#: Leads stored before the first statistics (see :func:`store_leads`).
FIRST_BATCH = 500


def store_leads(stores: Any, settings: Any, count: int) -> str:
    """``count`` leads through the lead store, in batches; returns the id of a failed one."""
    from aap.store.leads import NewLead

    rooftops = [r["name"] for r in settings.dealer.rooftops]
    start_ms = int(time.time() * 1000) - count * 20_000
    consent = {
        "granted_at": "2026-01-01T00:00:00Z",
        "allowed_channels": ["email", "phone"],
        "consent_text": "You may contact me about this vehicle.",
        "scope": ["lead_submission"],
    }
    failed = ""
    # A first small batch, then statistics: on PostgreSQL the plans of the first rows are made on
    # empty tables with no statistics, where every index that leads with ``tenant_id`` costs the
    # same as the primary key, and a plan kept for a whole batch would then walk the tenant's rows
    # for each lead. A live deployment gets its statistics from autovacuum after a few rows.
    bounds = [0, *range(min(count, FIRST_BATCH), count, 5000), count]
    for first_row, end in zip(bounds, bounds[1:]):
        if first_row == FIRST_BATCH:
            stores.db.maintain(LEAD_TABLES)
        with stores.leads.transaction() as tx:
            for i in range(first_row, end):
                first, last = FIRST[i % len(FIRST)], LAST[(i // len(FIRST)) % len(LAST)]
                request = {
                    "type": "lead.submit.request",
                    "idempotency_key": f"bench-{i}",
                    "customer": {
                        "first_name": first,
                        "last_name": last,
                        "email": f"{first}.{last}.{i}@example.org".lower(),
                        "phone": f"+1415{i % 10_000_000:07d}",
                    },
                    "consent": consent,
                    "source_agent": {"name": "bench"},
                    "vehicle_of_interest": {"year": 2020 + i % 6, "make": "Honda", "model": "CR-V"},
                    "message": "Is it still available?",
                }
                lead_id = f"lead_{i:032x}"
                received_ms = start_ms + i * 20_000
                lead = NewLead(
                    lead_id=lead_id,
                    dealer_id=settings.deployment_id,
                    rooftop=rooftops[i % len(rooftops)],
                    status="received",
                    caller_id="anonymous",
                    binding="a2a",
                    client_id=None,
                    source_agent="bench",
                    idempotency_key=f"bench-{i}",
                    vehicle_id=None,
                    vehicle_link="none",
                    listing=None,
                    appointment_id=None,
                    appointment_status=None,
                    appointment=None,
                    request=request,
                    response={"type": "lead.submit.response", "data": {"lead_id": lead_id}},
                    received_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(received_ms / 1000)),
                    received_ms=received_ms,
                    consent_expires_ms=None,
                )
                stores.leads.insert_lead(tx, lead, consent, [("crm", "adf_http")], received_ms)
                state = "dead" if i % 100 == 7 else ("pending" if i % 50 == 3 else "delivered")
                tx.execute(
                    "UPDATE lead_deliveries SET status = ?, attempts = 1, delivered_ms = ? WHERE tenant_id = ?"
                    " AND lead_id = ?",
                    (state, received_ms + 500 if state == "delivered" else None, tx.tenant, lead_id),
                )
                if state == "dead":
                    failed = lead_id
                    row = tx.one(
                        "SELECT delivery_id FROM lead_deliveries WHERE tenant_id = ? AND lead_id = ?",
                        (tx.tenant, lead_id),
                    )
                    adf = '<?xml version="1.0"?><adf><prospect>' + "<comments>x</comments>" * 60 + "</prospect></adf>"
                    tx.execute(
                        "INSERT INTO lead_delivery_attempts (tenant_id, attempt_id, delivery_id, lead_id, attempt,"
                        " started_ms, finished_ms, outcome, error, content_type, payload)"
                        " VALUES (?, ?, ?, ?, 1, ?, ?, 'dead', 'HTTP 500', 'application/xml', ?)",
                        (tx.tenant, f"att_{i}", row[0], lead_id, received_ms, received_ms + 300, adf),
                    )
    stores.db.maintain(LEAD_TABLES)
    return failed


def work_leads(stores: Any, count: int, me: str) -> str:
    """Spread the stored leads over the pipeline (one write per lead, in batches); a worked lead's id.

    Statuses by the shares of :data:`STAGES_BY_SHARE`; new leads mostly unowned, the others owned
    by one of ten accounts and the signed-in admin; a follow-up date on most open leads (from a
    month ago to a month ahead); a first response between two minutes and two days."""
    today = time.time() // 86_400
    updates = []
    with stores.db.read() as tx:
        rows = tx.fetchall(
            "SELECT lead_id, received_ms FROM leads WHERE tenant_id = ? ORDER BY received_ms", (tx.tenant,)
        )
    for i, (lead_id, received_ms) in enumerate(rows):
        stage = STAGES_BY_SHARE[(i * 7) % len(STAGES_BY_SHARE)]
        owner = None if stage == "new" and i % 5 else (OWNERS + (me,))[i % (len(OWNERS) + 1)]
        follow = None
        if stage in ("contacted", "appointment_set", "showed") and i % 4:
            follow = time.strftime("%Y-%m-%d", time.gmtime((today + (i % 61) - 30) * 86_400))
        response = None if stage == "new" else 120_000 + (i * 7919) % 172_800_000
        updates.append((stage, owner, follow, None if response is None else received_ms + response, response, lead_id))
    for start in range(0, len(updates), 5000):
        with stores.db.transaction() as tx:
            tx.executemany(
                "UPDATE leads SET stage = ?, owner = ?, follow_up = ?, responded_ms = ?, response_ms = ?,"
                " stage_ms = responded_ms WHERE tenant_id = ? AND lead_id = ?",
                [(*u[:-1], tx.tenant, u[-1]) for u in updates[start : start + 5000]],
            )
    worked = rows[len(rows) // 2][0]
    from aap.store.lead_inbox import LeadScope

    for n, note in enumerate(("Called, no answer.", "Called back: wants a test drive.", "Booked Thursday.")):
        stores.lead_pipeline.change(worked, LeadScope(), me, int(time.time() * 1000) + n, note=note)
    stores.db.maintain(("leads", "lead_events"))
    return worked


def warn_listings(stores: Any, count: int) -> None:
    """One recorded import that warned about ``count`` listings (the browser's "warned" filter)."""
    from aap.store.feeds import FeedNote, FeedRun

    with stores.db.read() as tx:
        ids = [r[0] for r in tx.fetchall(f"SELECT id FROM inv_listing ORDER BY rid LIMIT {int(count) * 7}")][::7]
    now = int(time.time() * 1000)
    run = FeedRun(trigger="schedule", source="bench.csv", started_ms=now, finished_ms=now, outcome="imported")
    run.warnings = len(ids)
    run.notes = [
        FeedNote("warning", i + 2, "photo URL over http://; published as https://", v) for i, v in enumerate(ids)
    ]
    stores.feeds.record(run)


def measure(label: str, get: Callable[[], Any], runs: int, results: list[tuple[str, float, float]]) -> None:
    answer = get()  # warm: caches, prepared statements
    assert answer.status_code == 200, (label, answer.status_code, answer.text[:300])
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = get()
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (label, answer.status_code)
    results.append((label, percentile(times, 0.5), percentile(times, 0.99)))


def fortieth(client: Any, start: str) -> str:
    """The 40th page of a list, reached by its "Next page" links (the last page of a shorter one)."""
    link = start
    for _ in range(39):
        page = client.get(link).text
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        if found is None:
            return link
        link = found.group(1).replace("&amp;", "&")
    return link


def run_backend(
    name: str, url: str, leads: int, listings: int, runs: int, budget_ms: float = 100.0
) -> list[tuple[str, float, float]]:
    from starlette.testclient import TestClient

    from aap.accounts import Accounts
    from aap.config.loader import load_settings
    from aap.config.model import RateLimit
    from aap.inventory.demo import generate_listings
    from aap.server.app import create_app
    from aap.store import open_stores

    settings = load_settings(None, overrides={"database": url, "public_url": "http://127.0.0.1:8000"}, environ={})
    settings = dataclasses.replace(settings, rate_limit=RateLimit(enabled=False))
    stores = open_stores(url)
    started = time.perf_counter()
    stores.inventory.import_listings(generate_listings(listings, settings=settings))
    print(f"[{name}] {listings:,} listings imported in {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    failed = store_leads(stores, settings, leads)
    print(f"[{name}] {leads:,} leads stored in {time.perf_counter() - started:.1f} s", flush=True)
    accounts = Accounts(stores.console, settings)
    accounts.add("bench@dealer.example", PASSWORD, role="admin")
    for owner in OWNERS:
        accounts.add(owner, PASSWORD)
    started = time.perf_counter()
    worked = work_leads(stores, leads, "bench@dealer.example")
    warn_listings(stores, 500)
    print(f"[{name}] the pipeline spread and an import's warnings in {time.perf_counter() - started:.1f} s", flush=True)
    app = create_app(settings, stores, services=())
    results: list[tuple[str, float, float]] = []
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        form = client.get("/console/login").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
        client.post("/console/login", data={"csrf_token": token, "email": "bench@dealer.example", "password": PASSWORD})
        rooftop = settings.dealer.rooftops[1]["name"]
        measure("inbox: first page", lambda: client.get("/console/leads"), runs, results)
        measure(
            "inbox: rooftop + failed deliveries",
            lambda: client.get("/console/leads", params={"rooftop": rooftop, "delivery": "dead"}),
            runs,
            results,
        )
        measure(
            "inbox: customer name search",
            lambda: client.get("/console/leads", params={"q": "grace hop"}),
            runs,
            results,
        )
        deep_inbox = fortieth(client, "/console/leads")
        measure("inbox: 40th page (keyset)", lambda: client.get(deep_inbox), runs, results)
        measure(
            "lead detail (failed delivery, ADF shown)", lambda: client.get(f"/console/leads/{failed}"), runs, results
        )
        # -- the pipeline
        mine = "/console/leads?owner=me&stage=open&sort=follow_up"
        measure("pipeline: my open leads by follow-up", lambda: client.get(mine), runs, results)
        due = "/console/leads?follow_up=due&stage=open&sort=follow_up"
        measure("pipeline: follow-ups due", lambda: client.get(due), runs, results)
        measure("pipeline: new, nobody on it", lambda: client.get("/console/leads?stage=new&owner=none"), runs, results)
        measure(
            "pipeline: a rooftop's contacted leads",
            lambda: client.get("/console/leads", params={"rooftop": rooftop, "stage": "contacted"}),
            runs,
            results,
        )
        by_status = fortieth(client, "/console/leads?sort=status")
        measure("pipeline: 40th page by status (keyset)", lambda: client.get(by_status), runs, results)
        by_owner = fortieth(client, "/console/leads?sort=owner")
        measure("pipeline: 40th page by owner (keyset)", lambda: client.get(by_owner), runs, results)
        measure("lead detail with its history", lambda: client.get(f"/console/leads/{worked}"), runs, results)
        measure("agent health (time to first response)", lambda: client.get("/console/health"), runs, results)
        # -- the inventory browser
        measure("inventory: first page (days in stock)", lambda: client.get("/console/inventory"), runs, results)
        measure("inventory: by price", lambda: client.get("/console/inventory?sort=price"), runs, results)
        deep = fortieth(client, "/console/inventory?sort=price")
        measure("inventory: 40th page by price (keyset)", lambda: client.get(deep), runs, results)
        measure("inventory: no photo", lambda: client.get("/console/inventory?no_photo=1"), runs, results)
        measure(
            "inventory: no price, by mileage",
            lambda: client.get("/console/inventory?no_price=1&sort=mileage"),
            runs,
            results,
        )
        measure(
            "inventory: a rooftop's used cars by price desc",
            lambda: client.get(
                "/console/inventory", params={"rooftop": rooftop, "condition": "used", "sort": "price_desc"}
            ),
            runs,
            results,
        )
        measure(
            "inventory: warned by the last import", lambda: client.get("/console/inventory?warned=1"), runs, results
        )
        measure("public: default search", lambda: client.get("/"), runs, results)
        measure(
            "public: make + sort by price",
            lambda: client.get("/", params={"make": "Honda", "sort": "price:asc"}),
            runs,
            results,
        )
        link = fortieth(client, "/")  # "next page" links follow the agent's cursor
        measure("public: 40th page (cursor)", lambda: client.get(link), runs, results)
        measure("public: 40th page by number (offset)", lambda: client.get("/", params={"page": "40"}), runs, results)
    stores.close()
    for label, p50, p99 in results:
        over = "  OVER" if p99 > budget_ms else ""
        print(f"[{name}] {label:48s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms{over}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=100_000)
    parser.add_argument("--listings", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--budget-ms", type=float, default=100.0, help="p99 above this is marked OVER")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = tempfile.TemporaryDirectory(prefix="aap-bench-console-")  # removed when the benchmark ends
    work = Path(workdir.name)
    backends = [b for b in args.backends.split(",") if b]
    if "sqlite" in backends:
        run_backend("sqlite", f"sqlite:///{work}/console.db", args.leads, args.listings, args.runs, args.budget_ms)
    if "postgresql" in backends:
        from pg_cluster import PostgresCluster

        if args.postgres_url:
            os.environ["AAP_TEST_POSTGRES_URL"] = args.postgres_url
        cluster = PostgresCluster().start()
        try:
            run_backend("postgresql", cluster.create_database(), args.leads, args.listings, args.runs, args.budget_ms)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
