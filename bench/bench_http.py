"""HTTP throughput of ``inventory.search`` through ``POST /a2a`` on loopback.

Builds (or reuses) a SQLite database with a generated inventory, starts
``aap.server.runner.run`` as a subprocess on 127.0.0.1, sends a fixed number of
identical-shape search requests (make + price_max + sort by price) from a
concurrent httpx client, and prints requests/s, p50/p99 latency and the server's
peak resident memory (VmHWM from /proc) while serving that inventory.

Rate limiting is switched off for the run (it would otherwise be the thing
measured). The client shares the machine with the server: on a small machine
the figures are a floor, not a ceiling.

    python bench/bench_http.py --listings 100000 --requests 2000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from aap.client.a2a import envelope
from aap.skills.catalog import SKILLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_seconds, free_port, percentile, post_a2a, stop_process, wait_healthy  # noqa: E402


def build_database(path: Path, listings: int, seed: int) -> tuple[float, str]:
    """Import ``listings`` generated listings into ``path``; return (seconds, most common make)."""
    from aap.config.loader import load_settings
    from aap.inventory.demo import generate_listings
    from aap.store import open_stores

    settings = load_settings(None, overrides={"database": f"sqlite:///{path}"}, environ={})
    stores = open_stores(settings.database_url)
    try:
        feed = list(generate_listings(listings, seed, settings=settings))
        started = time.perf_counter()
        stores.inventory.import_listings(feed, replace=True)
        seconds = time.perf_counter() - started
    finally:
        stores.close()
    makes = collections.Counter(
        item.get("make") for item in feed if item.get("make") and item.get("currency", "USD") == "USD"
    )
    return seconds, makes.most_common(1)[0][0]


def start_server(database: Path, port: int, workers: int) -> subprocess.Popen:
    script = textwrap.dedent(
        f"""
        from aap.server.runner import SettingsSource, run
        source = SettingsSource(None, {{
            "public_url": "http://127.0.0.1:{port}",
            "database": "sqlite:///{database}",
            "rate_limit.enabled": False,
        }}, environ={{}})
        run(source, host="127.0.0.1", port={port}, workers={workers}, log_level="warning")
        """
    )
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)


def peak_rss_kib(pid: int) -> dict[int, int]:
    """VmHWM of ``pid`` and of its children (the uvicorn workers when workers > 1)."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if f"\nPPid:\t{pid}\n" in Path(f"/proc/{entry}/status").read_text():
                    pids.append(int(entry))
            except OSError:
                continue
    peaks = {}
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[p] = int(line.split()[1])
        except OSError:
            continue
    return peaks


def request_body(make: str, price_max: int, index: int) -> dict:
    search = {
        "type": "inventory.search.request",
        "filters": {"make": [make], "price_max": price_max},
        "sort": {"field": "price", "order": "asc"},
        "pagination": {"limit": 20},
    }
    return envelope(SKILLS["inventory.search"], search, request_id=index)


async def drive(base: str, make: str, price_max: int, requests: int, concurrency: int, warmup: int):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60, headers=headers) as client:
        for i in range(warmup):
            response = await client.post("/a2a", json=request_body(make, price_max, -i - 1))
            payload = response.json()
            if "result" not in payload:
                raise SystemExit(f"warm-up request failed: {payload.get('error')}")
        total = payload["result"]["message"]["parts"][0]["data"]["data"]["total"]
        bodies = (request_body(make, price_max, i) for i in range(requests))
        latencies, elapsed, failures = await post_a2a(client, bodies, concurrency)
    return latencies, elapsed, failures, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listings", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--price-max", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database", type=Path, help="reuse or create this SQLite file (default: a temp file)")
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory(prefix="aap-bench-")
    database = args.database or Path(workdir.name) / "bench.db"
    import_seconds, make = build_database(database, args.listings, args.seed)
    print(
        f"inventory: {args.listings} listings imported in {import_seconds:.1f} s "
        f"({args.listings / import_seconds:,.0f} listings/s); query make={make!r} price_max={args.price_max}"
    )

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(database, port, args.workers)
    try:
        wait_healthy(base, proc)
        cpu_before = cpu_seconds(proc.pid)
        latencies, elapsed, failures, total = asyncio.run(
            drive(base, make, args.price_max, args.requests, args.concurrency, args.warmup)
        )
        server_cpu = cpu_seconds(proc.pid) - cpu_before
        peaks = peak_rss_kib(proc.pid)
    finally:
        stop_process(proc)
        workdir.cleanup()

    print(f"matching listings per query: {total}")
    print(
        f"requests: {len(latencies)} ({failures} failed), concurrency {args.concurrency}, server workers {args.workers}"
    )
    print(f"throughput: {len(latencies) / elapsed:,.0f} req/s over {elapsed:.2f} s")
    print(
        f"latency: p50 {percentile(latencies, 0.50) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, mean {statistics.fmean(latencies) * 1000:.1f} ms"
    )
    measured = args.warmup + len(latencies)
    print(
        f"server CPU: {server_cpu * 1000 / measured:.2f} ms per request "
        f"(~{measured / server_cpu if server_cpu else float('inf'):,.0f} req/s per fully used core; "
        f"machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    for pid, kib in sorted(peaks.items()):
        role = "server" if pid == proc.pid else "worker"
        print(f"peak RSS ({role} pid {pid}): {kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
