"""What a request spread over more tenants than a worker keeps built costs, part by part, in one process.

    python bench/bench_rebuild.py [--tenants 3000] [--kept 300] [--listings 0] [--limit 10]
        [--requests 6000] [--alternations 3] [--postgres | --database URL]

Registers ``--tenants`` tenants of one platform (SQLite in a temporary file by default; a
throwaway PostgreSQL cluster with ``--postgres``), each with ``--listings`` listings imported,
and serves every one of them once, so that each tenant's settings are packed as a worker keeps
them. Then, ``--alternations`` times, it runs ``--requests`` requests of two kinds one after the
other, each as a worker serves an ``/a2a`` search without its HTTP parts: the tenant's runtime
(``Runtimes.get``), its A2A surface, one ``inventory.search`` through its gateway (Hondas,
``--limit`` a page: a page that is not the last carries a cursor) —

* **spread**: request ``n`` is tenant ``n mod --tenants``'s; ``tenants_in_memory`` is ``--kept``,
  fewer than the tenants, so nearly every request builds its tenant again;
* **one**: every request is the first tenant's, built once.

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


def measure(url: str, tenants: int, kept: int, count: int, limit: int, requests: int, alternations: int) -> None:
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

    async def run(spread: bool) -> tuple[float, dict[str, float]]:
        t0 = time.perf_counter()
        for n in range(requests):
            await serve(n % tenants if spread else 0)
        return (time.perf_counter() - t0) / requests * 1e6, parts.take(requests)

    async def main() -> None:
        for i in range(tenants):  # every tenant served once: its settings packed, every code path warm
            await serve(i)
        settled(app)  # as a worker does before serving
        await run(True)
        await run(False)
        print(
            f"[rebuild] {tenants:,} tenants, {kept:,} kept built, {count} listings each, pages of {limit}, "
            f"{requests:,} requests a run"
        )
        print(f"[rebuild] µs a request: total, then {', '.join(PARTS)}")
        for _ in range(max(1, alternations)):
            spread, spread_parts = await run(True)
            one, one_parts = await run(False)
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
    parser.add_argument("--alternations", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster")
    parser.add_argument("--database", default=None, help="an existing platform database (its tenants kept)")
    args = parser.parse_args()
    if args.kept >= args.tenants:
        parser.error("--kept must be fewer than --tenants, or no request builds its tenant again")
    with platform_database(args.database, postgres=args.postgres, prefix="aap-rebuild-") as url:
        measure(url, args.tenants, args.kept, args.listings, args.limit, args.requests, args.alternations)


if __name__ == "__main__":
    main()
