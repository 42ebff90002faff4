"""Marketplace scale: an aggregate endpoint on PostgreSQL, next to SQLite.

    python bench/bench_postgres.py [--listings 1000000] [--dealers 1000]
        [--sqlite-listings 100000] [--runs 200] [--requests 2000] [--concurrency 16]
        [--count-budget-ms 10] [--shared-buffers 1GB]
        [--postgres-url postgresql://...]

Writes an aggregate-scope configuration with ``--dealers`` sellers (one rooftop
each, spread over the continental US), generates ``--listings`` listings across
them with the demo generator (deterministic), and on PostgreSQL measures:

* import rate (one transaction, the whole feed);
* ``inventory.search`` p50/p99 through ``DealerAgent.handle`` (schema validation
  included) for the benchmark queries: (a) make + price_max, sort price;
  (b) near 50 mi, sort distance; (c) query tokens; (d) features_all — three ways:
  an exact count on every request (remembered totals dropped before each one),
  with the total remembered (next pages, other workers), and with a count budget
  (``--count-budget-ms``; the first request after an import answers ``total: null``);
* facets time: unfiltered and filtered, cold (after an import) and cached;
* HTTP throughput of ``POST /a2a`` (query a) with 1, 2 and 4 ``aap serve`` workers.

Then the same in-process figures on SQLite with ``--sqlite-listings`` listings,
in the same run. PostgreSQL comes from ``--postgres-url`` (an empty database
is created next to it) or, by default, a throwaway local cluster started from
the Debian server binaries (``tests/pg_cluster.py``; fsync off, so import rates
are an upper bound for a durable server). Client and server share the machine;
bounded by counts, never by time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster
sys.path.insert(0, str(ROOT / "bench"))  # bench_http helpers

from bench_http import free_port, request_body  # noqa: E402
from common import benchmark_searches, forget_counts, percentile, post_a2a, timed, wait_healthy  # noqa: E402


def write_config(path: Path, dealers: int, database: str, seed: int = 7) -> None:
    """An aggregate configuration: the demo's search settings and features, ``dealers`` sellers."""
    from aap.config.loader import DEMO_CONFIG, packaged_toml

    demo = packaged_toml(DEMO_CONFIG)
    head = demo[: demo.index("[rate_limit]")]
    from aap.config.model import ALL_FILTERS

    filters = ", ".join(f'"{f}"' for f in ALL_FILTERS if f != "rooftops")  # ambiguous across sellers
    head = head.replace('scope = "dealer"', f'scope = "aggregate"\nfilters = [{filters}]')
    # The demo names its own database file; the benchmark's replaces it (or the run would
    # silently measure that SQLite file).
    head, swapped = re.subn(r'(?m)^database = ".*"$', f'database = "{database}"', head)
    assert swapped == 1, "the demo configuration has no database line to replace"
    rnd = random.Random(seed)
    lines = [
        head,
        "[rate_limit]\nenabled = false\n",
        '[dealer]\nname = "Bench Marketplace"\n[[dealer.rooftops]]\nname = "Bench Marketplace HQ"\n',
    ]
    for i in range(dealers):
        lat, lon = rnd.uniform(30.0, 47.0), rnd.uniform(-120.0, -75.0)
        lines.append(
            f'[[dealers]]\ndealer_id = "dealer-{i:05d}"\nname = "Dealer {i:05d}"\n'
            f'[[dealers.rooftops]]\nname = "Dealer {i:05d} Main"\ntimezone = "America/Chicago"\n'
            f"geo = {{ latitude = {lat:.5f}, longitude = {lon:.5f} }}\n"
        )
    path.write_text("\n".join(lines))


def in_process(label: str, config: Path, count: int, runs: int, count_budget_ms: int) -> dict[str, Any]:
    """Import ``count`` listings and time searches and facets; returns the (a) query's make/price."""
    from aap.agent import CallContext, DealerAgent
    from aap.config.loader import load_settings
    from aap.inventory.demo import generate_listings
    from aap.store import open_stores

    settings = load_settings(str(config), environ={})
    started = time.perf_counter()
    feed = list(generate_listings(count, seed=0, settings=settings))
    print(
        f"[{label}] generated {count:,} listings across {len(settings.dealers):,} dealers "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    stores = open_stores(settings.database_url)
    agent = DealerAgent(settings, stores)
    ctx = CallContext(binding="bench")
    started = time.perf_counter()
    stats = stores.inventory.import_listings(feed)
    elapsed = time.perf_counter() - started
    print(
        f"[{label}] import: {stats.total:,} listings in {elapsed:.1f} s = {count / elapsed:,.0f} listings/s", flush=True
    )
    dealer_feeds: dict[str, list[dict[str, Any]]] = {}
    for item in feed:
        dealer_feeds.setdefault(item["dealer_id"], []).append(item)
    del feed
    started = time.perf_counter()
    stores.inventory.build_index()
    print(
        f"[{label}] posting index built in {time.perf_counter() - started:.1f} s (per process, "
        f"at start-up or in the background)",
        flush=True,
    )
    replaced = sorted(dealer_feeds)[:5]
    times = []
    for dealer in replaced:
        started = time.perf_counter()
        stores.inventory.import_listings(dealer_feeds[dealer], dealer_id=dealer, replace=True)
        times.append((time.perf_counter() - started) * 1000)
    print(
        f"[{label}] replace one dealer's inventory ({len(dealer_feeds[replaced[0]])} listings): "
        f"median {statistics.median(times):.0f} ms (of {len(times)} dealers: "
        f"{', '.join(f'{t:.0f}' for t in times)} ms)",
        flush=True,
    )

    geo = settings.dealers[0].rooftops[0]["geo"]
    makes = [m["value"] for m in agent.handle({"type": "inventory.facets.request"}, ctx)["data"]["makes"]]
    codes = [f.code for f in settings.features][:2]
    searches = benchmark_searches(makes, geo, codes)
    budgeted = DealerAgent(dataclasses.replace(settings, count_timeout_ms=count_budget_ms), stores)
    for name, body in searches.items():
        request = {"type": "inventory.search.request", "pagination": {"limit": 20}, **body}
        result = agent.handle(request, ctx)
        assert result["type"] == "inventory.search.response", result
        # Exact counts every time: the remembered totals are dropped before each request.
        cold = []
        for _ in range(runs):
            forget_counts(stores)
            stores.inventory.wait_for_background()  # the previous request's remembering, off the clock
            start = time.perf_counter()
            agent.handle(request, ctx)
            cold.append((time.perf_counter() - start) * 1000)
        # What clients see once a slow count was made: the next pages, other workers.
        forget_counts(stores)
        agent.handle(request, ctx)
        stores.inventory.wait_for_background()
        warm = timed(lambda: agent.handle(request, ctx), runs, warm=False)
        # With a count budget: the first request after an import (the count runs out).
        first, nulls = [], 0
        for _ in range(min(runs, 5)):
            forget_counts(stores)
            start = time.perf_counter()
            answer = budgeted.handle(request, ctx)
            first.append((time.perf_counter() - start) * 1000)
            nulls += answer["data"]["total"] is None
            stores.inventory.wait_for_background()
        print(
            f"[{label}] search {name} (total {result['data']['total']:,}): exact count p50 "
            f"{percentile(cold, 0.5):.2f} ms, p99 {percentile(cold, 0.99):.2f} ms; remembered total p50 "
            f"{percentile(warm, 0.5):.2f} ms, p99 {percentile(warm, 0.99):.2f} ms; "
            f"{count_budget_ms} ms budget p50 {percentile(first, 0.5):.2f} ms "
            f"({nulls}/{len(first)} total null)",
            flush=True,
        )
    after_replace(label, stores, agent, ctx, settings, dealer_feeds, searches, runs)
    rotation = iter(sorted(dealer_feeds)[10:])
    for name, facets_request in (
        ("unfiltered", {"type": "inventory.facets.request"}),
        (f"make={makes[0]}", {"type": "inventory.facets.request", "filters": {"make": [makes[0]]}}),
        ("condition=used", {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}),
    ):
        cold = []
        for _ in range(3):
            dealer = next(rotation)  # one dealer's import: a new inventory version, facet caches miss
            stores.inventory.import_listings(dealer_feeds[dealer], dealer_id=dealer, replace=True)
            start = time.perf_counter()
            agent.handle(facets_request, ctx)
            cold.append((time.perf_counter() - start) * 1000)
        warm = timed(lambda: agent.handle(facets_request, ctx), min(runs, 50), warm=False)
        print(
            f"[{label}] facets {name}: cold median {statistics.median(cold):.0f} ms "
            f"(max {max(cold):.0f} ms), cached p50 {percentile(warm, 0.5):.2f} ms",
            flush=True,
        )
    stores.close()
    return {"make": makes[0]}


def after_replace(
    label: str,
    stores: Any,
    agent: Any,
    ctx: Any,
    settings: Any,
    dealer_feeds: dict[str, list[dict[str, Any]]],
    searches: dict[str, dict[str, Any]],
    runs: int,
) -> None:
    """The first search (c) and facets condition=used right after one dealer's replace, checked
    against a fresh exact count in SQL (a store without the posting index)."""
    from aap.agent import DealerAgent
    from aap.store import Stores

    reference = Stores(stores.db)
    reference.inventory.postings.enabled = False
    checker = DealerAgent(settings, reference)
    keyword = {"type": "inventory.search.request", "pagination": {"limit": 20}, **searches["(c) query tokens"]}
    used = {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}
    search_ms, facets_ms = [], []
    for dealer in sorted(dealer_feeds)[5 : 5 + min(runs, 5)]:
        feed = dealer_feeds[dealer][: max(1, len(dealer_feeds[dealer]) - 3)]  # three units sold
        stores.inventory.import_listings(feed, dealer_id=dealer, replace=True)
        forget_counts(stores)
        start = time.perf_counter()
        answer = agent.handle(keyword, ctx)
        search_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        facets = agent.handle(used, ctx)
        facets_ms.append((time.perf_counter() - start) * 1000)
        exact = checker.handle(keyword, ctx)["data"]["total"]
        assert answer["data"]["total"] == exact, (answer["data"]["total"], exact)
        assert facets["data"] == checker.handle(used, ctx)["data"], "facets differ from a fresh count"
        forget_counts(stores)
    print(
        f"[{label}] after one dealer's replace: search (c) p50 {statistics.median(search_ms):.1f} ms "
        f"(max {max(search_ms):.1f}), facets condition=used p50 {statistics.median(facets_ms):.1f} ms "
        f"(max {max(facets_ms):.1f}); totals and facets equal a fresh SQL count",
        flush=True,
    )


async def drive(
    base: str, make: str, requests: int, concurrency: int, distinct: bool
) -> tuple[list[float], float, int]:
    """``distinct``: every request a new price bound, so no request reuses a remembered total."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120, headers={"A2A-Version": "1.0"}) as client:
        for i in range(concurrency):  # warm every worker's pool and caches
            await client.post("/a2a", json=request_body(make, 40000, -i - 1))
        bodies = (request_body(make, 40000 - i * distinct, i) for i in range(requests))
        return await post_a2a(client, bodies, concurrency)


def http_throughput(config: Path, make: str, workers: int, requests: int, concurrency: int) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL")}
    log_path = config.with_name(f"serve-{workers}.log")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aap",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.perf_counter()
        wait_healthy(base, proc)
        # Measure the workers as they serve, not while each builds its posting index (about
        # 24 s of one core per worker at 1M listings, in the background after start-up).
        for _ in range(6000):  # at most ten minutes, bounded by count
            if log_path.read_bytes().count(b'"posting index built"') >= workers:
                break
            time.sleep(0.1)
        print(
            f"[postgresql] {workers} worker(s) serving with their posting indexes "
            f"{time.perf_counter() - started:.0f} s after start",
            flush=True,
        )
        for distinct in (False, True):
            latencies, elapsed, failures = asyncio.run(drive(base, make, requests, concurrency, distinct))
            kind = "a new price_max each request" if distinct else "one query repeated"
            print(
                f"[postgresql] HTTP /a2a query (a), {kind}, {workers} worker(s): "
                f"{requests / elapsed:,.0f} req/s, p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
                f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, {failures} failures "
                f"({requests} requests, concurrency {concurrency})",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listings", type=int, default=1_000_000)
    parser.add_argument("--dealers", type=int, default=1_000)
    parser.add_argument("--sqlite-listings", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", default="1,2,4", help="HTTP worker counts to measure")
    parser.add_argument(
        "--count-budget-ms", type=int, default=10, help="server.count_timeout_ms for the budgeted search figures"
    )
    parser.add_argument("--shared-buffers", default="1GB", help="PostgreSQL shared_buffers of the throwaway cluster")
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="A server to create the benchmark database on (default: a throwaway cluster)",
    )
    args = parser.parse_args()

    from pg_cluster import PostgresCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the cluster is stopped on kill
    work = Path(tempfile.mkdtemp(prefix="aap-bench-pg-"))
    if args.postgres_url:
        os.environ["AAP_TEST_POSTGRES_URL"] = args.postgres_url
    cluster = PostgresCluster().start(extra_conf=f"shared_buffers = '{args.shared_buffers}'\n")
    try:
        pg_config = work / "postgres.toml"
        write_config(pg_config, args.dealers, cluster.create_database())
        query = in_process("postgresql", pg_config, args.listings, args.runs, args.count_budget_ms)
        for workers in (int(w) for w in args.workers.split(",") if w):
            http_throughput(pg_config, query["make"], workers, args.requests, args.concurrency)
        if args.sqlite_listings:
            sqlite_config = work / "sqlite.toml"
            write_config(sqlite_config, args.dealers, f"sqlite:///{work}/bench.db")
            in_process("sqlite", sqlite_config, args.sqlite_listings, args.runs, args.count_budget_ms)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
