"""Server time of the staff console and the public page with 100k leads and 100k listings.

    python bench/bench_console.py [--leads 100000] [--listings 100000] [--runs 200]
        [--backends sqlite,postgresql] [--postgres-url postgresql://...]

For each backend: imports ``--listings`` demo listings (the demo dealer group,
four rooftops), stores ``--leads`` leads straight through the lead store (the
rows ``lead.submit`` writes: lead, consent record, one outbox row; about 97 %
delivered, 2 % waiting, 1 % failed with a recorded attempt and its ADF), signs
an admin in, and times whole requests through the ASGI app in this process
(routing, middleware, the session check, the query, the template and, on
console pages, the audit-log write; no network): p50 and p99 of

* the inbox: first page; a rooftop and delivery-state filter (failed leads);
  a customer-name search; the 40th page (keyset);
* the lead detail page;
* the public page: the default search; make + sort by price; the 40th page, reached by
  "next page" links (the agent's cursor) and asked for by number (an offset).

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
PASSWORD = "benchmark password"


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
    batch = 5000
    for offset in range(0, count, batch):
        with stores.leads.transaction() as tx:
            for i in range(offset, min(count, offset + batch)):
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
                    "UPDATE lead_deliveries SET status = ?, attempts = 1, delivered_ms = ? WHERE lead_id = ?",
                    (state, received_ms + 500 if state == "delivered" else None, lead_id),
                )
                if state == "dead":
                    failed = lead_id
                    row = tx.one("SELECT delivery_id FROM lead_deliveries WHERE lead_id = ?", (lead_id,))
                    adf = '<?xml version="1.0"?><adf><prospect>' + "<comments>x</comments>" * 60 + "</prospect></adf>"
                    tx.execute(
                        "INSERT INTO lead_delivery_attempts (attempt_id, delivery_id, lead_id, attempt, started_ms,"
                        " finished_ms, outcome, error, content_type, payload) VALUES (?, ?, ?, 1, ?, ?, 'dead',"
                        " 'HTTP 500', 'application/xml', ?)",
                        (f"att_{i}", row[0], lead_id, received_ms, received_ms + 300, adf),
                    )
    stores.db.maintain(("leads", "lead_deliveries", "lead_consents", "lead_delivery_attempts"))
    return failed


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


def run_backend(name: str, url: str, leads: int, listings: int, runs: int) -> list[tuple[str, float, float]]:
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
    Accounts(stores.console, settings).add("bench@dealer.example", PASSWORD, role="admin")
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
        cursor = "/console/leads"
        for _ in range(39):
            page = client.get(cursor).text
            cursor = re.search(r'<a href="([^"]+)" rel="next">Older', page).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        measure("inbox: 40th page (keyset)", lambda: client.get(cursor), runs, results)
        measure(
            "lead detail (failed delivery, ADF shown)", lambda: client.get(f"/console/leads/{failed}"), runs, results
        )
        measure("public: default search", lambda: client.get("/"), runs, results)
        measure(
            "public: make + sort by price",
            lambda: client.get("/", params={"make": "Honda", "sort": "price:asc"}),
            runs,
            results,
        )
        link = "/"
        for _ in range(39):  # "next page" links follow the agent's cursor
            page = client.get(link).text
            link = re.search(r'<a href="([^"]+)" rel="next">', page).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
        measure("public: 40th page (cursor)", lambda: client.get(link), runs, results)
        measure("public: 40th page by number (offset)", lambda: client.get("/", params={"page": "40"}), runs, results)
    stores.close()
    for label, p50, p99 in results:
        print(f"[{name}] {label:45s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=100_000)
    parser.add_argument("--listings", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="aap-bench-console-"))
    backends = [b for b in args.backends.split(",") if b]
    if "sqlite" in backends:
        run_backend("sqlite", f"sqlite:///{work}/console.db", args.leads, args.listings, args.runs)
    if "postgresql" in backends:
        from pg_cluster import PostgresCluster

        if args.postgres_url:
            os.environ["AAP_TEST_POSTGRES_URL"] = args.postgres_url
        cluster = PostgresCluster().start()
        try:
            run_backend("postgresql", cluster.create_database(), args.leads, args.listings, args.runs)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
