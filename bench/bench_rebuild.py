"""What a request spread over more tenants than a worker keeps built costs, part by part, in one process.

    python bench/bench_rebuild.py [--tenants 3000] [--kept 300] [--listings 0] [--limit 10]
        [--requests 6000] [--block 300] [--alternations 3] [--postgres | --database URL]

Registers ``--tenants`` tenants of one platform (SQLite in a temporary file by default; a
throwaway PostgreSQL cluster with ``--postgres``), each with ``--listings`` listings imported,
and serves every one of them once, so that each tenant's settings are packed as a worker keeps
them. Then, ``--alternations`` times, it runs ``--requests`` requests of each of two kinds, in
blocks of ``--block`` that take turns (so that a machine that slows down for a few seconds slows
both kinds alike), each as a worker serves an ``/a2a`` search without its HTTP parts: the tenant's runtime
(``Runtimes.get``), its A2A surface, one ``inventory.search`` through its gateway (Hondas,
``--limit`` a page: a page that is not the last carries a cursor) —

* **spread**: each request is the next of the other tenants, in turn; ``tenants_in_memory`` is
  ``--kept``, fewer than the tenants, so nearly every request builds its tenant again;
* **one**: every request is the first tenant's (built again by the first request of each of its
  blocks, when the spread block before it pushed it out).

It prints each kind's time a request, the difference, and the parts of it: the packed settings
unpacked, the agent and gateway assembled, the runtime pushed out retired, the surface, the
search. This is the cost ``bench_platform``'s spread rounds pay in a serving worker, apart from
HTTP and PostgreSQL (docs/benchmarks.md, "Platform"). Times on a shared machine are floors;
compare the two kinds within one alternation.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster
sys.path.insert(0, str(ROOT / "bench"))

from aap.config.loader import parse_settings  # noqa: E402
from aap.server import runtime as runtime_module  # noqa: E402
from aap.store import Stores, open_platform_database  # noqa: E402
from bench_platform import PLATFORM_HOST, listings  # noqa: E402
from bench_tenant_memory import domain, platform_database, register, tenant_id  # noqa: E402

PARTS = ("unpack", "assemble", "retire", "surface", "search")


class Parts:
    """Time spent in each part, and how often, since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def waited(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self.spent[name] += time.perf_counter() - t0
                    self.calls[name] += 1

            return waited

        @functools.wraps(fn)
        def called(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter() - t0
                self.calls[name] += 1

        return called

    def take(self, requests: int) -> dict[str, float]:
        """Microseconds a request in each part (spread over every request, built or not)."""
        each = {name: self.spent[name] / requests * 1e6 for name in PARTS}
        self.spent.clear()
        self.calls.clear()
        return each


def measure(
    url: str, tenants: int, kept: int, count: int, limit: int, requests: int, block: int, alternations: int
) -> None:
    from aap.gateway import Caller
    from aap.server.platform import create_platform_app
    from aap.server.runner import settled
    from aap.skills.catalog import SKILLS

    doc = {"database": url, "platform": {"host": PLATFORM_HOST, "tenants_in_memory": kept}}
    settings = parse_settings(doc, environ={})
    db = open_platform_database(url)
    register(db, tenants)
    stores = Stores(db)
    if count:
        for i in range(tenants):
            tenant = Stores(db.for_tenant(tenant_id(i)))
            tenant.inventory.import_listings(listings(i, count), replace=True)
    app = create_platform_app(settings, stores)
    runtimes = app.state.platform.runtimes
    a2a = next(i for i, s in enumerate(runtimes.surfaces) if s.name == "a2a")
    skill = SKILLS["inventory.search"]
    caller = Caller("bench", "bench-client")
    payload = {"type": "inventory.search.request", "filters": {"make": ["Honda"]}, "pagination": {"limit": limit}}
    parts = Parts()
    runtimes.packer.unpack = parts.timed("unpack", runtimes.packer.unpack)  # type: ignore[method-assign]
    runtimes._assemble = parts.timed("assemble", runtimes._assemble)  # type: ignore[method-assign]
    runtimes._retire = parts.timed("retire", runtimes._retire)  # type: ignore[method-assign]
    surface = runtime_module.AgentRuntime.surface
    runtime_module.AgentRuntime.surface = parts.timed("surface", surface)  # type: ignore[method-assign]

    async def serve(i: int) -> None:
        runtime = await runtimes.get(tenant_id(i), f"https://{domain(i)}")
        assert runtime is not None
        await runtime.surface(a2a, app)
        t0 = time.perf_counter()
        answer = await runtime.gateway.call(caller, skill, payload)
        parts.spent["search"] += time.perf_counter() - t0
        assert answer["type"] == "inventory.search.response", answer

    others = itertools.cycle(range(1, tenants))

    async def run() -> tuple[tuple[float, dict[str, float]], tuple[float, dict[str, float]]]:
        """``requests`` of each kind, in blocks taking turns: each kind's µs a request, and its parts."""
        spent = {True: 0.0, False: 0.0}
        each: dict[bool, collections.Counter[str]] = {True: collections.Counter(), False: collections.Counter()}
        for start in range(0, requests, block):
            size = min(block, requests - start)
            for spread in (True, False):
                t0 = time.perf_counter()
                for _ in range(size):
                    await serve(next(others) if spread else 0)
                spent[spread] += time.perf_counter() - t0
                each[spread].update(parts.take(requests))
        return tuple((spent[kind] / requests * 1e6, dict(each[kind])) for kind in (True, False))  # type: ignore[return-value]

    async def main() -> None:
        for i in range(tenants):  # every tenant served once: its settings packed, every code path warm
            await serve(i)
        settled(app)  # as a worker does before serving
        await run()
        print(
            f"[rebuild] {tenants:,} tenants, {kept:,} kept built, {count} listings each, pages of {limit}, "
            f"{requests:,} requests of each kind a run, in blocks of {block}"
        )
        print(f"[rebuild] µs a request: total, then {', '.join(PARTS)}")
        for _ in range(max(1, alternations)):
            (spread, spread_parts), (one, one_parts) = await run()
            for label, total, each in (("spread", spread, spread_parts), ("one", one, one_parts)):
                print(f"    {label:6s} {total:7.1f}  " + "  ".join(f"{each[name]:6.1f}" for name in PARTS))
            print(
                f"    extra  {spread - one:7.1f}  "
                + "  ".join(f"{spread_parts[name] - one_parts[name]:6.1f}" for name in PARTS)
                + f"   (one / spread {one / spread:.2f})"
            )
        await runtimes.close()

    asyncio.run(main())
    app.state.platform.work.close()
    stores.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=3000)
    parser.add_argument("--kept", type=int, default=300, help="[platform] tenants_in_memory (fewer than --tenants)")
    parser.add_argument("--listings", type=int, default=0, help="listings imported for each tenant")
    parser.add_argument("--limit", type=int, default=10, help="the search's page size")
    parser.add_argument("--requests", type=int, default=6000, help="requests of each kind a run")
    parser.add_argument("--block", type=int, default=300, help="requests of one kind before the other's turn")
    parser.add_argument("--alternations", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster")
    parser.add_argument("--database", default=None, help="an existing platform database (its tenants kept)")
    args = parser.parse_args()
    if args.kept >= args.tenants - 1:
        parser.error("--kept must be fewer than the other tenants, or no spread request builds its tenant again")
    if args.block < 1 or args.requests < 1:
        parser.error("--block and --requests are at least 1")
    with platform_database(args.database, postgres=args.postgres, prefix="aap-rebuild-") as url:
        measure(url, args.tenants, args.kept, args.listings, args.limit, args.requests, args.block, args.alternations)


if __name__ == "__main__":
    main()
