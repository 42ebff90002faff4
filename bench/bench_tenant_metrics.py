"""What counting a platform's tenants costs a worker: memory, a request's count, a scrape.

Counts one request for each of ``--tenants`` tenants, then one more each, then renders
``/metrics``, in a fresh process per way of counting:

- ``table``: how a worker counts them (``aap.web.metrics.Metrics``, records of a table,
  src/aap/web/tenant_counts.py);
- ``labels``: the library's labelled counter (``prometheus_client.Counter`` with ``tenant`` and
  ``status`` labels), what the tables replace, for the comparison;

each with a multi-process directory (several workers; the default) or without (``--in-memory``).
Prints the RSS the counts added, the CPU of a tenant's first and next count, and the scrape's
CPU and size. Run: ``python bench/bench_tenant_metrics.py [--tenants 100000] [--in-memory]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(way: str, tenants: int) -> None:
    """In this process (the directory, if any, already in the environment)."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from aap.web.metrics import Metrics, multiprocess_directory

    ids = [f"t{i:06d}" for i in range(tenants)]
    if way == "table":
        metrics = Metrics()

        def count(tenant: str) -> None:
            metrics.observe_tenant(tenant, 200)

        render = metrics.render
    else:
        registry = CollectorRegistry(auto_describe=False)
        counter = Counter("aap_tenant_requests", "HTTP requests by tenant.", ("tenant", "status"), registry=registry)

        def count(tenant: str) -> None:
            counter.labels(tenant, "2xx").inc()

        def render() -> str:
            if multiprocess_directory():
                from prometheus_client.multiprocess import MultiProcessCollector

                scrape = CollectorRegistry(auto_describe=False)
                MultiProcessCollector(scrape)
                return generate_latest(scrape).decode()
            return generate_latest(registry).decode()

    before = rss_mib()
    began = time.process_time()
    for tenant in ids:
        count(tenant)
    first = time.process_time() - began
    added = rss_mib() - before
    began = time.process_time()
    for tenant in ids:
        count(tenant)
    again = time.process_time() - began
    began = time.process_time()
    text = render()
    scrape = time.process_time() - began
    print(
        f"{way:>6}: RSS +{added:.1f} MiB ({added * 1024 * 1024 / tenants:.0f} bytes a tenant); "
        f"a tenant's first count {first / tenants * 1e6:.1f} µs, the next {again / tenants * 1e6:.1f} µs; "
        f"scrape {scrape:.2f} s of CPU, {len(text) / 1e6:.1f} MB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--in-memory", action="store_true", help="without a multi-process directory")
    parser.add_argument("--way", choices=("table", "labels"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:
        measure(args.way, args.tenants)
        return
    print(f"{args.tenants:,} tenants, {'in memory' if args.in_memory else 'a multi-process directory'}", flush=True)
    for way in ("table", "labels"):
        with tempfile.TemporaryDirectory(prefix="aap-bench-metrics-") as directory:
            env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
            if not args.in_memory:
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            command = [sys.executable, __file__, "--way", way, "--tenants", str(args.tenants)]
            subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
