"""What one built tenant costs a worker: objects, memory, build time, and the collector's pauses.

    python bench/bench_tenant_memory.py [--tenants 5000] [--postgres] [--database URL]
        [--search] [--tracemalloc] [--top 15] [--kept N]

Registers ``--tenants`` tenants of one platform (SQLite in a temporary file by default; a
throwaway PostgreSQL cluster with ``--postgres``; ``--database`` an existing platform
database), their registry rows written in bulk as :meth:`PlatformStore.add` writes them, then
builds every tenant's runtime in one process as a worker does on an ``/a2a`` request it has
not served yet (``Runtimes.get``, then the A2A surface; with ``--search`` one
``inventory.search`` through the tenant's gateway too), ``tenants_in_memory`` large enough to
keep them all (``--kept N``: N of them, as a worker serving more tenants than it keeps does, so
that the figures are what a tenant served and pushed out leaves behind: its packed settings, its
kept secrets). It prints, per built tenant: the objects the garbage collector tracks, the
Python heap (``--tracemalloc``; it slows the builds), the RSS, the build time (p50/p99); the
types that make up the tracked objects (``--top``); and the time of a full collection with
every tenant built (what start-up made frozen first, as a worker does).

Deterministic figures (objects, heap) are what to compare between trees; times on a shared
machine are floors.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster
sys.path.insert(0, str(ROOT / "bench"))

from aap.config.loader import parse_settings  # noqa: E402
from aap.store import Stores, open_platform_database  # noqa: E402
from bench_platform import PLATFORM_HOST, tenant_config  # noqa: E402  (the same platform and tenants)
from common import percentile  # noqa: E402


def tenant_id(i: int) -> str:
    return f"t{i:05d}"


def domain(i: int) -> str:
    return f"t{i:05d}.example"


def register(db: Any, tenants: int) -> None:
    """The registry rows of ``tenants`` tenants, as :meth:`PlatformStore.add` writes them (in bulk)."""
    now_ms = int(time.time() * 1000)
    with db.transaction() as tx:
        have = tx.fetchone("SELECT COUNT(*) FROM platform_tenants")[0]
        for i in range(have, tenants):
            tx.execute(
                "INSERT INTO platform_tenants (tenant_id, config, a2a_tenant, revision, created_ms, updated_ms)"
                " VALUES (?, ?, ?, 1, ?, ?)",
                (tenant_id(i), tenant_config(i), None, now_ms, now_ms),
            )
            tx.execute(
                "INSERT INTO platform_domains (host, tenant_id, added_ms) VALUES (?, ?, ?)",
                (domain(i), tenant_id(i), now_ms),
            )


def tracked() -> int:
    return len(gc.get_objects())


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def type_counts() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def measure(url: str, tenants: int, *, search: bool, trace: bool, top: int, lines: int, kept: int | None) -> None:
    from aap.gateway import Caller
    from aap.server.platform import create_platform_app
    from aap.server.runner import settled
    from aap.skills.catalog import SKILLS

    doc = {"database": url, "platform": {"host": PLATFORM_HOST, "tenants_in_memory": kept or tenants + 10}}
    settings = parse_settings(doc, environ={})
    db = open_platform_database(url)
    register(db, tenants)
    stores = Stores(db)
    app = create_platform_app(settings, stores)
    context = app.state.platform
    runtimes = context.runtimes
    a2a = next(i for i, s in enumerate(runtimes.surfaces) if s.name == "a2a")
    skill = SKILLS["inventory.search"]
    caller = Caller("bench", "bench-client")
    payload = {"type": "inventory.search.request", "filters": {"make": ["Honda"]}, "pagination": {"limit": 10}}

    async def build(i: int) -> None:
        runtime = await runtimes.get(tenant_id(i), f"https://{domain(i)}")
        assert runtime is not None
        await runtime.surface(a2a, app)
        if search:
            await runtime.gateway.call(caller, skill, payload)

    async def run() -> None:
        # Warm every code path and module-level cache on tenants the figures leave out.
        warm = min(20, tenants // 10)
        for i in range(warm):
            await build(i)
        settled(app)  # as a worker does before serving: what start-up made is frozen
        objects0, rss0, types0 = tracked(), rss_kib(), type_counts()
        if trace:
            tracemalloc.start()
        heap0 = tracemalloc.get_traced_memory()[0] if trace else 0
        start = tracemalloc.take_snapshot() if trace and lines else None
        times: list[float] = []
        cpu0 = time.process_time()
        for i in range(warm, tenants):
            t0 = time.perf_counter()
            await build(i)
            times.append((time.perf_counter() - t0) * 1000)
        cpu = (time.process_time() - cpu0) * 1000 / max(1, tenants - warm)
        heap1 = tracemalloc.get_traced_memory()[0] if trace else 0
        if trace:
            if lines:
                stats = tracemalloc.take_snapshot().compare_to(start, "lineno")
                print(f"[probe] Python heap per tenant by line (top {lines}):")
                for stat in stats[:lines]:
                    print(f"    {stat.size_diff / max(1, tenants - warm):7.0f} B  {stat.traceback}")
            tracemalloc.stop()
        gc.collect()
        built = tenants - warm
        objects1, rss1 = tracked(), rss_kib()
        print(f"[probe] {built:,} tenants built ({len(runtimes):,} runtimes held), {'with' if search else 'no'} search")
        label = "built tenant" if kept is None else f"tenant served ({kept:,} kept built)"
        print(
            f"[probe] per {label}: {(objects1 - objects0) / built:.1f} GC-tracked objects, "
            + (f"{(heap1 - heap0) / built / 1024:.2f} KiB Python heap (tracemalloc), " if trace else "")
            + f"{(rss1 - rss0) / built:.1f} KiB RSS"
        )
        print(
            f"[probe] build (runtime + A2A surface{' + search' if search else ''}): "
            f"p50 {percentile(times, 0.5):.2f} ms, p99 {percentile(times, 0.99):.2f} ms; "
            f"{cpu:.2f} ms of CPU a tenant (every thread)"
        )
        grown = type_counts() - types0
        print(f"[probe] tracked objects per tenant by type (top {top}):")
        for name, count in grown.most_common(top):
            print(f"    {count / built:7.2f}  {name}")
        pauses = []
        for _ in range(3):
            t0 = time.perf_counter()
            gc.collect()
            pauses.append((time.perf_counter() - t0) * 1000)
        print(
            f"[probe] full collection with {len(runtimes):,} built: {min(pauses):.0f} ms (best of 3), "
            f"{tracked():,} objects tracked besides the {gc.get_freeze_count():,} frozen at start-up"
        )
        await runtimes.close()

    asyncio.run(run())
    context.work.close()
    stores.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=5000)
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster")
    parser.add_argument("--database", default=None, help="an existing platform database (its tenants kept)")
    parser.add_argument("--search", action="store_true", help="one inventory.search per tenant too")
    parser.add_argument(
        "--kept", type=int, default=None, help="[platform] tenants_in_memory (default: every tenant kept built)"
    )
    parser.add_argument("--tracemalloc", action="store_true", help="the Python heap per tenant (slower)")
    parser.add_argument("--top", type=int, default=15, help="types of tracked objects listed")
    parser.add_argument("--lines", type=int, default=0, help="with --tracemalloc: source lines of the heap listed")
    args = parser.parse_args()
    with platform_database(args.database, postgres=args.postgres, prefix="aap-tenant-memory-") as url:
        measure(
            url,
            args.tenants,
            search=args.search,
            trace=args.tracemalloc,
            top=args.top,
            lines=args.lines,
            kept=args.kept,
        )


@contextlib.contextmanager
def platform_database(database: str | None, *, postgres: bool, prefix: str) -> Iterator[str]:
    """The URL of the platform database to measure on: ``database`` as it is, else one on a
    throwaway PostgreSQL cluster (``postgres``; stopped after), else a temporary SQLite file."""
    if database:
        yield database
        return
    if not postgres:
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            yield f"sqlite:///{folder}/platform.db"
        return
    from pg_cluster import PostgresCluster

    cluster = PostgresCluster().start(in_memory=True)
    try:
        yield cluster.create_database(role="aap_bench")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
