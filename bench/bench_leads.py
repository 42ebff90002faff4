"""Sustained ``lead.submit`` throughput on SQLite, and its latency.

Two ways in, both with every lead committed (lead, consent record, idempotency
record, appointment seat when confirmed, outbox row) before its answer:

* ``inprocess``: ``DealerAgent.handle`` from ``--concurrency`` threads on one
  SQLite file (each thread has its own connection);
* ``a2a``: ``POST /a2a`` against ``aap.server.runner.run`` started as a subprocess on
  127.0.0.1, from a concurrent httpx client.

Each lead is distinct (its own idempotency key, name and e-mail) and valid; a
fraction ``--appointments`` asks for a test drive at a time spread over the
booking horizon (so some are confirmed, some proposed). Delivery is not part of
the measurement: the outbox rows stay pending (``in_process = false``).

The database runs as configured by ``aap.store.db`` (WAL, ``synchronous=NORMAL``:
a commit survives a process crash; ``--synchronous full`` also makes it survive
power loss, in-process mode only). Bounded by lead counts, not by time. Client
and server share the machine: on a small machine the figures are a floor.

    python bench/bench_leads.py --mode inprocess --leads 3000 --concurrency 8
    python bench/bench_leads.py --mode a2a --leads 3000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from aap.client.a2a import envelope
from aap.skills.catalog import SKILLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, percentile, post_a2a, wait_healthy  # noqa: E402


def with_leads(settings: Any, leads: Any) -> Any:
    """``settings`` carrying ``leads`` (a subclass until Settings has the field itself)."""
    names = {f.name for f in dataclasses.fields(settings)}
    if "leads" in names:
        return dataclasses.replace(settings, leads=leads)
    cls = dataclasses.make_dataclass(
        "BenchSettings",
        [("leads", type(leads), dataclasses.field(default=leads))],
        bases=(type(settings),),
        frozen=True,
    )
    return cls(**{name: getattr(settings, name) for name in names})


def bench_settings(database_url: str, public_url: str = "http://127.0.0.1:8000") -> Any:
    from aap.config.leads import AdfHttpTarget, AppointmentSettings, DeliverySettings, LeadSettings, Route
    from aap.config.loader import load_settings

    settings = load_settings(
        None, overrides={"database": database_url, "public_url": public_url, "rate_limit.enabled": False}, environ={}
    )
    leads = LeadSettings(
        routes=(Route(targets=(AdfHttpTarget("crm", "https://crm.example.com/adf"),)),),
        appointments=AppointmentSettings(capacity_per_slot=4, horizon_days=30),
        delivery=DeliverySettings(in_process=False),
    )
    return with_leads(settings, leads)


def lead(index: int, appointments: float, now: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "lead.submit.request",
        "customer": {
            "first_name": f"Bench{index}",
            "last_name": "Buyer",
            "email": f"buyer{index}@example.com",
            "phone": "+14155550123",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": (now - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "allowed_channels": ["email", "phone"],
            "scope": ["lead_submission"],
            "consent_text": "I agree that the dealer may contact me about this vehicle.",
        },
        "source_agent": {"name": "bench-buyer"},
        "idempotency_key": str(uuid.uuid4()),
        "vehicle_of_interest": {"year": 2024, "make": "Honda", "model": "CR-V"},
        "message": "Is this still available? Can I see it this week?",
    }
    if appointments and (index % 1000) < appointments * 1000:
        day = 1 + index % 20
        slot = (index // 20) % 16
        at = (now + timedelta(days=day)).replace(hour=16 + slot // 2, minute=30 * (slot % 2), second=0, microsecond=0)
        body["appointment"] = {"appointment_type": "test_drive", "appointment_at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return body


def report(mode: str, latencies: list[float], elapsed: float, failures: int, stores_url: str) -> None:
    from aap.store import open_stores

    stores = open_stores(stores_url)
    try:
        stored = stores.leads.count_leads()
        outbox = stores.leads.delivery_counts()
    finally:
        stores.close()
    n = len(latencies)
    print(
        f"{mode}: {n} leads in {elapsed:.2f} s = {n / elapsed:,.0f} leads/s; "
        f"p50 {percentile(latencies, 0.50) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
        f"mean {statistics.fmean(latencies) * 1000:.1f} ms; failures {failures}; "
        f"stored {stored} leads, outbox {outbox}"
    )


# -- in-process ----------------------------------------------------------------------------------


def run_inprocess(
    database_url: str, leads: int, concurrency: int, appointments: float, warmup: int, synchronous: str
) -> None:
    from aap.agent import CallContext, DealerAgent
    from aap.store import open_stores

    settings = bench_settings(database_url)
    stores = open_stores(database_url)
    agent = DealerAgent(settings, stores)
    now = datetime.now(UTC)
    for i in range(warmup):
        agent.handle(lead(-i - 1, appointments, now), CallContext(binding="bench"))
    bodies = [lead(i, appointments, now) for i in range(leads)]
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    cursor = iter(range(leads))
    barrier = threading.Barrier(concurrency + 1)

    def worker() -> None:
        nonlocal failures
        if synchronous != "normal":
            stores.db._conn().execute(f"PRAGMA synchronous={synchronous.upper()}")
        barrier.wait()
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                return
            started = time.perf_counter()
            try:
                response = agent.handle(bodies[i], CallContext(binding="bench"))
                ok = response["data"]["status"] == "received"
            except Exception:  # noqa: BLE001 - counted
                ok = False
            spent = time.perf_counter() - started
            with lock:
                latencies.append(spent)
                failures += 0 if ok else 1

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    stores.close()
    report(f"inprocess (synchronous={synchronous}, {concurrency} threads)", latencies, elapsed, failures, database_url)


# -- over /a2a ---------------------------------------------------------------------------------------


def start_server(database_url: str, port: int) -> subprocess.Popen:
    here = Path(__file__).resolve().parent
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(here)!r})
        from bench_leads import bench_settings
        from aap.server.runner import run
        run(bench_settings({database_url!r}, "http://127.0.0.1:{port}"), host="127.0.0.1", port={port},
            log_level="warning")
        """
    )
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)


def lead_envelope(body: dict[str, Any], index: int) -> dict[str, Any]:
    return envelope(SKILLS["lead.submit"], body, request_id=index)


async def drive(base: str, leads: int, concurrency: int, appointments: float, warmup: int):
    now = datetime.now(UTC)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60, headers={"A2A-Version": "1.0"}) as client:
        for i in range(warmup):
            reply = (await client.post("/a2a", json=lead_envelope(lead(-i - 1, appointments, now), -i - 1))).json()
            if "result" not in reply:
                raise SystemExit(f"warm-up lead failed: {json.dumps(reply.get('error'))[:500]}")
        bodies = [lead_envelope(lead(i, appointments, now), i) for i in range(leads)]
        return await post_a2a(client, bodies, concurrency)


def run_a2a(database_url: str, leads: int, concurrency: int, appointments: float, warmup: int) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(database_url, port)
    try:
        wait_healthy(base, proc)
        latencies, elapsed, failures = asyncio.run(drive(base, leads, concurrency, appointments, warmup))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    report(f"a2a ({concurrency} concurrent clients)", latencies, elapsed, failures, database_url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["inprocess", "a2a", "both"], default="both")
    parser.add_argument("--leads", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--appointments", type=float, default=0.3, help="fraction of leads with a test drive time")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--synchronous", choices=["normal", "full"], default="normal")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aap-bench-leads-") as workdir:
        if args.mode in ("inprocess", "both"):
            run_inprocess(
                f"sqlite:///{workdir}/inprocess.db",
                args.leads,
                args.concurrency,
                args.appointments,
                args.warmup,
                args.synchronous,
            )
        if args.mode in ("a2a", "both"):
            run_a2a(f"sqlite:///{workdir}/a2a.db", args.leads, args.concurrency, args.appointments, args.warmup)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")


if __name__ == "__main__":
    main()
