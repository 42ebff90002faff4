"""In-process inventory benchmark: import rate, search latencies, facets time.

    python bench/bench_search.py [--count 100000] [--runs 200] [--db PATH]

Generates ``count`` listings with the demo generator (deterministic), imports
them into a fresh SQLite file, then times ``inventory.search`` through
``DealerAgent.handle`` (schema validation included) for four query shapes — as a
first request (an exact count, nothing remembered) and repeated (a count that
took 20 ms or more is remembered for the inventory version) — and
``inventory.facets`` (unfiltered and two filtered), cold (first call after an
import) and cached (served from the per-version cache); also a full-replace
re-import and a 1,000-listing upsert. Prints one line per figure. Targets
(docs/benchmarks.md, "Core"): search (a) p50 <= 5 ms, facets <= 150 ms, import >= 20k listings/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aap.agent import CallContext, DealerAgent
from aap.store import open_stores

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import benchmark_searches, forget_counts, percentile, timed  # noqa: E402


def demo_settings() -> Any:
    from aap.config.loader import load_settings

    return load_settings(None, environ={})


def listings(count: int, settings: Any) -> list[dict[str, Any]]:
    from aap.inventory.demo import generate_listings

    return list(generate_listings(count, seed=0, settings=settings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--db", help="SQLite file to create (default: a temporary file)")
    args = parser.parse_args()

    settings = demo_settings()
    feed = listings(args.count, settings)
    workdir = tempfile.TemporaryDirectory(prefix="aap-bench-")  # removed when the benchmark ends
    path = args.db or os.path.join(workdir.name, "bench.db")
    if os.path.exists(path):
        sys.exit(f"{path} exists; choose a new file")
    stores = open_stores(f"sqlite:///{path}")
    agent = DealerAgent(settings, stores)
    ctx = CallContext(binding="bench")

    start = time.perf_counter()
    stats = stores.inventory.import_listings(feed)
    elapsed = time.perf_counter() - start
    print(f"import: {stats.total} listings in {elapsed:.2f} s = {args.count / elapsed:,.0f} listings/s")
    start = time.perf_counter()
    stores.inventory.import_listings(feed, replace=True)
    elapsed = time.perf_counter() - start
    print(f"re-import, full replace: {elapsed:.2f} s = {args.count / elapsed:,.0f} listings/s")
    changed = [dict(item, price=(item.get("price") or 10_000) + 1) for item in feed[:1000]]
    start = time.perf_counter()
    stores.inventory.import_listings(changed)
    print(f"upsert of 1,000 changed listings: {(time.perf_counter() - start) * 1000:.0f} ms")

    # A server builds its posting index in the background at start; measure once it has one.
    start = time.perf_counter()
    stores.inventory.postings.build_now()
    print(f"posting index built in {time.perf_counter() - start:.2f} s (per process, at start-up)")

    geo = settings.dealer.rooftops[0]["geo"]
    makes = [m["value"] for m in agent.handle({"type": "inventory.facets.request"}, ctx)["data"]["makes"]]
    codes = [f.code for f in settings.features][:2] or [code for code, _ in stores.inventory.feature_vocabulary()][:2]
    searches = benchmark_searches(makes, geo, codes)
    for label, body in searches.items():
        request = {"type": "inventory.search.request", "pagination": {"limit": 20}, **body}
        result = agent.handle(request, ctx)

        def first_request() -> None:  # as after an import: no remembered total
            forget_counts(stores)
            start = time.perf_counter()
            agent.handle(request, ctx)
            exact.append((time.perf_counter() - start) * 1000)

        exact: list[float] = []
        for _ in range(min(args.runs, 50)):
            first_request()
        agent.handle(request, ctx)
        stores.inventory.wait_for_background()
        samples = timed(lambda: agent.handle(request, ctx), args.runs)
        print(
            f"search {label}: exact count p50 {percentile(exact, 0.5):.2f} ms, p99 {percentile(exact, 0.99):.2f} ms;"
            f" repeated p50 {percentile(samples, 0.5):.2f} ms, p99 {percentile(samples, 0.99):.2f} ms"
            f" (total {result['data']['total']})"
        )

    for label, facets_request in (
        ("unfiltered", {"type": "inventory.facets.request"}),
        (f"make={makes[0]}", {"type": "inventory.facets.request", "filters": {"make": [makes[0]]}}),
        ("condition=used", {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}),
    ):
        cold = []
        for _ in range(5):
            stores.inventory.import_listings([])  # bumps the inventory version: cache miss
            start = time.perf_counter()
            agent.handle(facets_request, ctx)
            cold.append((time.perf_counter() - start) * 1000)
        warm = timed(lambda: agent.handle(facets_request, ctx), args.runs)
        print(
            f"facets {label}: cold median {statistics.median(cold):.1f} ms (max {max(cold):.1f} ms), "
            f"cached p50 {percentile(warm, 0.5):.2f} ms"
        )
    stores.close()


if __name__ == "__main__":
    main()
