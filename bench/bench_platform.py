"""Platform scale: a hundred thousand tenants, each its own agent, in one PostgreSQL deployment.

    python bench/bench_platform.py [--tenants 100000] [--listings 50] [--registered 1000]
        [--workers 2] [--seconds 10] [--rounds 3] [--warm-seconds 120] [--connections 16]
        [--samples 300] [--tenants-in-memory N] [--cluster-dir DIR]
        [--database URL --admin-database URL] [--cold] [--no-one-worker] [--every-tenant-kept]

Each tenant is a dealer with one rooftop, a domain ``tNNNNN.example`` and ``--listings``
listings of its own (5M listings at the defaults), on a throwaway PostgreSQL cluster
(``tests/pg_cluster.py``; fsync off, so setup rates are an upper bound), reached as a role
without superuser or BYPASSRLS so that row-level security binds every statement timed.

**Loading.** The first ``--registered`` tenants are added through the tenant registry and
imported one by one, as ``aap tenants add`` and ``aap import --tenant`` do (the mean time of
each is printed). The rest are made in bulk from them (:func:`clone`): their registry rows
written with ``COPY`` and every tenant table's rows of a prototype tenant copied under their
own ``tenant_id`` with ``INSERT … SELECT``, thousands of tenants a transaction — the rows the
import path wrote, at a bulk loader's speed. Relations in the database and its size are
printed after each part: they must not depend on the number of tenants.

Then it measures the targets of docs/platform.md, "Sizing":

* **in-process**, through the platform's own runtimes and each tenant's gateway (schema
  validation, rate limit, placement included): the first ``inventory.search`` of a tenant
  this process has not served yet (its registry row read, its Settings parsed, its agent and
  gateway built, the search run), and ``inventory.search`` p50 with an exact total for
  tenants already served; what a process holds after starting with every tenant registered;
* **over HTTP**, ``aap serve --workers N`` behind nothing (requests carry the tenant's
  ``Host``, as a proxy forwards it), wrk for ``--seconds`` per round: requests spread
  uniformly over every tenant next to the same requests to one tenant, interleaved for
  ``--rounds`` rounds (the kinds taking turns at going first) after a warm-up over every
  tenant (at most ``--warm-seconds``), with each round's CPU a request of the server and of
  PostgreSQL (read from ``/proc``: which side a spread request costs more, if it does); then
  each worker's RSS, and the private memory of the PostgreSQL backends serving them;
* a tenant added, with its listings, while the server runs: the time until it answers on
  every worker (a run of new connections all served), and its removal;
* **one worker serving every tenant** (``--workers 1``, a search of each tenant once, in
  order): its RSS after, and after a ``/metrics`` scrape, then the rounds on that one worker
  (``--no-one-worker`` skips it);
* with ``--every-tenant-kept``, the same once more with ``tenants_in_memory`` = ``--tenants``: a
  worker that has built every tenant and keeps them, so that its rounds build nothing again —
  the part of the spread requests' cost that is building tenants again, and the part that is
  PostgreSQL reading pages of every tenant (it needs memory for every tenant built).

``--database`` (with ``--admin-database``, the same database as a superuser) reuses a database
an earlier run loaded. Client and server share the machine; compare the ratios within one
run. Bounded by counts and wrk's fixed round length, never by waiting for a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster
sys.path.insert(0, str(ROOT / "bench"))

from aap.config.loader import parse_settings  # noqa: E402
from aap.store import Stores, open_platform_database  # noqa: E402
from aap.tenants import TenantRegistry  # noqa: E402
from aap.web.tenant_counts import TenantCounts, read_records  # noqa: E402
from common import cpu_seconds, percentile, start_platform, stop_process  # noqa: E402

PLATFORM_HOST = "agents.platform.example"
MAKES = ("Honda", "Toyota", "Ford", "Kia", "Mazda", "Subaru", "Hyundai", "Nissan")
MODELS = ("Alpha", "Beta", "Gamma", "Delta")
#: Distinct inventories: tenant ``i`` holds prototype ``i % PROTOTYPES``'s listings.
PROTOTYPES = 50


def tenant_config(i: int) -> str:
    # No rate limit: the comparison is of the platform's routing and runtimes, and one client
    # address sending every request would be refused at one tenant and not at 5,000.
    return f"""
[rate_limit]
enabled = false

[dealer]
name = "Dealer {i:05d} Motors"
[[dealer.rooftops]]
name = "Main lot"
timezone = "America/Chicago"
address = {{ city = "Springfield", state = "IL", country = "US" }}
phones = [{{ name = "Sales", value = "+12175550100" }}]
"""


def listings(i: int, count: int) -> list[dict[str, Any]]:
    """Tenant ``i``'s listings: prototype ``i % PROTOTYPES``'s (ids are a tenant's own, so
    tenants sharing them is what the layout keyed by tenant is for)."""
    proto = i % PROTOTYPES
    rnd = random.Random(proto)
    return [
        {
            "vehicle_id": f"p{proto}-{n}",
            "status": "available",
            "updated_at": "2026-11-30T08:00:00Z",
            "make": rnd.choice(MAKES),
            "model": rnd.choice(MODELS),
            "year": rnd.randint(2016, 2026),
            "price": rnd.randrange(12_000, 80_000, 100),
            "mileage": rnd.randrange(0, 120_000, 10),
            "condition": rnd.choice(("new", "used")),
            "rooftop": "Main lot",
        }
        for n in range(count)
    ]


def domain(i: int) -> str:
    return f"t{i:05d}.example"


def search_body(make: str) -> bytes:
    data = {"type": "inventory.search.request", "filters": {"make": [make]}, "pagination": {"limit": 10}}
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "bench",
                    "role": "ROLE_USER",
                    "parts": [{"data": data, "mediaType": "application/vnd.autoagent.inventory-search-request+json"}],
                }
            },
        }
    )


# -- setup ---------------------------------------------------------------------------------------------


def tenant_id(i: int) -> str:
    return f"t{i:05d}"


def add_tenants(settings: Any, url: str, first: int, last: int, count: int) -> tuple[float, float]:
    """Register and import tenants ``first`` .. ``last - 1`` (one setup process's share) as
    ``aap tenants add`` and ``aap import --tenant`` do; the seconds spent adding and importing."""
    db = open_platform_database(url)
    registry = TenantRegistry(settings, db, environ={})
    adding = importing = 0.0
    try:
        for i in range(first, last):
            t0 = time.perf_counter()
            registry.add(tenant_id(i), tenant_config(i), [domain(i)])
            t1 = time.perf_counter()
            stores = Stores(registry.data.open(tenant_id(i)))
            try:
                stores.inventory.import_listings(listings(i, count))
            finally:
                stores.close()
            adding += t1 - t0
            importing += time.perf_counter() - t1
    finally:
        db.close()
    return adding, importing


def setup(settings: Any, url: str, tenants: int, count: int, processes: int, *, first: int = 0) -> None:
    """Tenants ``first`` .. ``tenants - 1`` registered and imported, by ``processes`` processes side by side."""
    import multiprocessing

    started = time.perf_counter()
    step = 100
    chunks = [(i, min(tenants, i + step)) for i in range(first, tenants, step)]
    adding = importing = 0.0
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        done = 0
        for n, (add_s, import_s) in pool.imap_unordered(_add_chunk, [(settings, url, a, b, count) for a, b in chunks]):
            done += n
            adding += add_s
            importing += import_s
            if done % 1000 == 0 or first + done == tenants:
                rate = done / (time.perf_counter() - started)
                print(
                    f"[setup] {first + done:,} tenants registered and imported ({rate:.1f} tenants/s; "
                    f"a tenant added in {adding / done * 1000:.1f} ms, its {count} listings imported in "
                    f"{importing / done * 1000:.1f} ms, mean)",
                    flush=True,
                )


def _add_chunk(job: tuple[Any, str, int, int, int]) -> tuple[int, tuple[float, float]]:
    return job[3] - job[2], add_tenants(*job)


def clone(admin_url: str, first: int, last: int, *, batch: int = 5000) -> None:
    """Tenants ``first`` .. ``last - 1`` made in bulk from the tenants imported through the
    registry: each one's registry rows written as :meth:`PlatformStore.add` writes them, and
    every tenant table's rows of its prototype (tenant ``i % PROTOTYPES``, imported from the
    same listings) copied under its own ``tenant_id`` with ``INSERT … SELECT``, ``batch``
    tenants a transaction. Rows are the ones the import path wrote, so the database is the one
    ``aap tenants add`` and ``aap import --tenant`` would leave, at a bulk loader's speed.
    Runs as the cluster's superuser (row-level security would admit one tenant a transaction)."""
    import psycopg

    from aap.store import layout
    from aap.store.migrations import DOMAINS

    tables = layout.tenant_tables(DOMAINS)
    started = time.perf_counter()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        columns = {
            table: [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                    " AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            ]
            for table in tables
        }
        conn.execute("CREATE TEMP TABLE bench_clone (tenant_id TEXT PRIMARY KEY, proto TEXT NOT NULL)")
        for a in range(first, last, batch):
            b = min(last, a + batch)
            now_ms = int(time.time() * 1000)
            with conn.transaction():
                conn.execute("TRUNCATE bench_clone")
                with conn.cursor().copy("COPY bench_clone (tenant_id, proto) FROM STDIN") as copy:
                    for i in range(a, b):
                        copy.write_row((tenant_id(i), tenant_id(i % PROTOTYPES)))
                cur = conn.cursor()
                with cur.copy(
                    "COPY platform_tenants (tenant_id, config, a2a_tenant, revision, created_ms, updated_ms) FROM STDIN"
                ) as copy:
                    for i in range(a, b):
                        copy.write_row((tenant_id(i), tenant_config(i), None, 1, now_ms, now_ms))
                with cur.copy("COPY platform_domains (host, tenant_id, added_ms) FROM STDIN") as copy:
                    for i in range(a, b):
                        copy.write_row((domain(i), tenant_id(i), now_ms))
                with cur.copy("COPY platform_changes (tenant_id, kind, at_ms) FROM STDIN") as copy:
                    for i in range(a, b):
                        copy.write_row((tenant_id(i), "added", now_ms))
                for table in tables:
                    rest = ", ".join(f"t.{c}" for c in columns[table] if c != "tenant_id")
                    names = ", ".join(columns[table])
                    conn.execute(
                        f"INSERT INTO {table} ({names}) OVERRIDING SYSTEM VALUE"
                        f" SELECT m.tenant_id, {rest} FROM bench_clone m JOIN {table} t ON t.tenant_id = m.proto"
                    )
            rate = (b - first) / (time.perf_counter() - started)
            print(f"[setup] {b:,} tenants ({b - first:,} made in bulk, {rate:,.0f} tenants/s)", flush=True)
        analysed = time.perf_counter()
        for table in [*tables, "platform_tenants", "platform_domains", "platform_changes"]:
            conn.execute(f"VACUUM (ANALYZE) {table}")
        print(
            f"[setup] bulk load of {last - first:,} tenants: {analysed - started:.0f} s, "
            f"then VACUUM ANALYZE {time.perf_counter() - analysed:.0f} s",
            flush=True,
        )


def database_figures(admin_url: str, label: str) -> None:
    """Relations in the database (every schema: what PostgreSQL's catalogue caches hold), its
    size, and the rows of the largest tables."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        total = conn.execute("SELECT COUNT(*) FROM pg_class").fetchone()[0]  # type: ignore[index]
        own = conn.execute(
            "SELECT COUNT(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        ).fetchone()[0]  # type: ignore[index]
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]  # type: ignore[index]
        listings_n = conn.execute("SELECT COUNT(*) FROM inv_listing").fetchone()[0]  # type: ignore[index]
        tenants_n = conn.execute("SELECT COUNT(*) FROM platform_tenants").fetchone()[0]  # type: ignore[index]
    print(
        f"[database] {label}: {tenants_n:,} tenants, {listings_n:,} listings; relations {total:,} in pg_class "
        f"({own:,} in the application's schema: tables, indexes, sequences, TOAST); size {size / 2**30:.2f} GiB",
        flush=True,
    )


def prewarm(admin_url: str) -> None:
    """Read the application's tables and indexes into shared buffers (``pg_prewarm``) when they
    fit, as a platform's database that has served for a while holds them (and as
    ``pg_prewarm.autoprewarm`` restores them after a restart: docs/platform.md, "Sizing").

    A database reused from an earlier run (``--database``) otherwise starts with the buffers of
    a freshly started cluster: requests spread over every tenant then read their pages from the
    disk or the operating system's cache, while one tenant's are read once, until the warm-up has
    read most of them. Printed either way; ``--cold`` leaves the buffers as they are."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        size = conn.execute(
            "SELECT COALESCE(SUM(pg_relation_size(oid)), 0) FROM pg_class"
            " WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'i', 't', 'm')"
        ).fetchone()[0]  # type: ignore[index]
        buffers = conn.execute(
            "SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()[0]  # type: ignore[index]
        if size > 0.9 * buffers:
            print(
                f"[database] not read into shared buffers: {size / 2**30:.2f} GiB of relations, "
                f"{buffers / 2**30:.2f} GiB of buffers",
                flush=True,
            )
            return
        started = time.perf_counter()
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        blocks = conn.execute(
            "SELECT COALESCE(SUM(pg_prewarm(oid)), 0) FROM pg_class"
            " WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'i', 't', 'm')"
        ).fetchone()[0]  # type: ignore[index]
    print(
        f"[database] read into shared buffers ({buffers / 2**30:.0f} GiB): {blocks * 8192 / 2**30:.2f} GiB "
        f"in {time.perf_counter() - started:.0f} s",
        flush=True,
    )


def backend_memory(admin_url: str, url: str) -> str:
    """Private memory (``RssAnon``: not shared buffers) of each server process connected to the
    benchmark's database, from /proc (the cluster runs on this machine)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]
    sizes = []
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    sizes.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    if not sizes:
        return "no backend found"
    sizes.sort()
    return f"{len(sizes)} backends, private memory median {sizes[len(sizes) // 2]:.1f} MiB, max {sizes[-1]:.1f} MiB"


def postmaster_pid(admin_url: str) -> int | None:
    """The PostgreSQL server's own process (a backend's parent), when it runs on this machine;
    None when it cannot be read from here."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:  # read while its backend runs
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        try:
            return int(Path(f"/proc/{row[0]}/stat").read_text().rsplit(")", 1)[1].split()[1]) if row else None
        except (OSError, ValueError, IndexError):
            return None


def sweep_began_ms(admin_url: str) -> int | None:
    """When a worker last began the platform's sweep over every tenant (the registry's ``sweep``
    row is due again :data:`SWEEP_SECONDS` after its claim), in ms since the epoch; None: never."""
    import psycopg

    from aap.server.platform_services import SWEEP_SECONDS
    from aap.store.platform import SWEEP

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT due_ms FROM platform_due WHERE work = %s", (SWEEP,)).fetchone()
    return None if row is None else int(row[0] - SWEEP_SECONDS * 1000)


# -- in-process ------------------------------------------------------------------------------------------


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def in_process(settings: Any, platform_url: str, tenants: int, samples: int) -> None:
    from aap.gateway import Caller
    from aap.server.platform import create_platform_app
    from aap.server.platform_services import SWEEP_SHARE
    from aap.skills.catalog import SKILLS

    before = rss_mib()
    stores = Stores(open_platform_database(platform_url))
    started = time.perf_counter()
    app = create_platform_app(settings, stores)
    context = app.state.platform
    built_in = time.perf_counter() - started
    print(
        f"[in-process] platform app built in {built_in * 1000:.0f} ms with {tenants:,} tenants registered; "
        f"runtimes built at start: {len(context.runtimes)}; RSS +{rss_mib() - before:.1f} MiB",
        flush=True,
    )
    skill = SKILLS["inventory.search"]
    rnd = random.Random(11)
    chosen = rnd.sample(range(tenants), min(samples, tenants))

    async def measure() -> None:
        first: list[float] = []
        warm: list[float] = []
        totals: set[bool] = set()
        caller = Caller("bench", "bench-client")
        for i in chosen:
            payload = {"type": "inventory.search.request", "filters": {"make": [MAKES[i % len(MAKES)]]}}
            t0 = time.perf_counter()
            runtime = await context.runtimes.get(f"t{i:05d}", f"https://{domain(i)}")
            answer = await runtime.gateway.call(caller, skill, payload)
            first.append((time.perf_counter() - t0) * 1000)
            totals.add(isinstance(answer["data"]["total"], int))
        for _ in range(3):
            for i in chosen:
                payload = {"type": "inventory.search.request", "filters": {"make": [MAKES[(i + 1) % len(MAKES)]]}}
                t0 = time.perf_counter()
                runtime = await context.runtimes.get(f"t{i:05d}", f"https://{domain(i)}")
                answer = await runtime.gateway.call(caller, skill, payload)
                warm.append((time.perf_counter() - t0) * 1000)
                totals.add(isinstance(answer["data"]["total"], int))
        print(
            f"[in-process] first request of a tenant not served yet: p50 {percentile(first, 0.5):.1f} ms, "
            f"p99 {percentile(first, 0.99):.1f} ms ({len(first)} tenants)",
            flush=True,
        )
        print(
            f"[in-process] inventory.search of a served tenant: p50 {percentile(warm, 0.5):.2f} ms, "
            f"p99 {percentile(warm, 0.99):.2f} ms ({len(warm)} searches); exact totals: {totals == {True}}",
            flush=True,
        )
        print(
            f"[in-process] after serving {len(chosen)} tenants: RSS +{rss_mib() - before:.1f} MiB "
            f"({(rss_mib() - before) * 1024 / max(1, len(chosen)):.1f} KiB a tenant, runtimes included)",
            flush=True,
        )
        await context.runtimes.close()

    async def start_up_pass() -> None:
        # What a starting worker's pass over every tenant costs it (docs/platform.md, "Sizing"):
        # a page of the registry's last tenants loaded and packed as the pass does, on its CPU.
        page = min(tenants, 2000)
        records = context.registry.store.tenants(
            after=tenant_id(tenants - page - 1) if tenants > page else "", limit=page
        )
        cpu = await context.runtimes.check_records(records) / max(1, len(records))
        print(
            f"[in-process] a starting worker's pass over every tenant: {cpu * 1e6:.0f} µs of CPU a tenant "
            f"({len(records):,} loaded and packed); at most {SWEEP_SHARE:.0%} of a core, so at least "
            f"{cpu * tenants / SWEEP_SHARE:.0f} s for {tenants:,} tenants on an idle machine, longer under load",
            flush=True,
        )
        await context.runtimes.close()

    asyncio.run(measure())
    asyncio.run(start_up_pass())
    context.work.close()
    stores.close()


# -- over HTTP -------------------------------------------------------------------------------------------

WRK_SCRIPT = r"""
local hosts = {}
init = function(args)
  local f = io.open(args[1], "rb"); wrk.body = f:read("*a"); f:close()
  for line in io.lines(args[2]) do hosts[#hosts + 1] = line end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  wrk.headers["Host"] = hosts[math.random(#hosts)]
  return wrk.format("POST", "/a2a")
end
done = function(summary, latency, requests)
  io.write(string.format(
    '\n{"requests": %d, "duration_us": %d, "errors": %d, "p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk(origin: str, work: Path, hosts: list[str], seconds: int, connections: int) -> dict[str, float]:
    script = work / "platform.lua"
    script.write_text(WRK_SCRIPT)
    body = work / "search.json"
    body.write_bytes(search_body("Honda"))
    host_file = work / f"hosts-{len(hosts)}.txt"
    host_file.write_text("\n".join(hosts) + "\n")
    argv = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(script)]
    argv += ["-H", "Content-Type: application/json", "-H", "A2A-Version: 1.0", origin + "/a2a"]
    argv += ["--", str(body), str(host_file)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    result = orjson.loads(out.strip().splitlines()[-1])
    return {
        "requests": result["requests"],
        "rps": result["requests"] / (result["duration_us"] / 1e6),
        "errors": result["errors"],
        "p50": result["p50_us"] / 1000,
        "p99": result["p99_us"] / 1000,
    }


#: What a round's CPU is read from: a name, and the CPU seconds so far of the processes it names.
Meters = dict[str, Callable[[], float]]


def interleaved(
    origin: str, work: Path, tenants: int, rounds: int, seconds: int, connections: int, meters: Meters
) -> dict[str, list[dict[str, float]]]:
    """wrk's figures of ``rounds`` rounds, each the search to one tenant and the same search
    spread uniformly over every tenant, so that both see the same hour of a noisy machine; and
    each round's CPU milliseconds a request, as each of ``meters`` reads it (``cpu <name>``).

    The kinds take turns at going first (one tenant first in the first round, every tenant in
    the second, …): a machine whose speed drifts over a run, or a worker still busy with its
    start-up pass in the first rounds, then favours neither kind in every round."""
    kinds = (("one tenant", [domain(0)]), ("every tenant", [domain(i) for i in range(tenants)]))
    figures: dict[str, list[dict[str, float]]] = {"one tenant": [], "every tenant": []}
    for n in range(rounds):
        for label, hosts in kinds if n % 2 == 0 else kinds[::-1]:
            before = {name: read() for name, read in meters.items()}
            figure = wrk(origin, work, hosts, seconds, connections)
            for name, read in meters.items():
                figure[f"cpu {name}"] = (read() - before[name]) * 1000 / max(figure["requests"], 1)
            figures[label].append(figure)
    return figures


def report_rounds(tag: str, figures: dict[str, list[dict[str, float]]]) -> None:
    """Each side's median throughput and the ratio of every tenant's to one tenant's, per round;
    then the CPU a request of each side, and the ratio of one tenant's to every tenant's.

    The CPU a request says which side a spread request costs more, the server's or
    PostgreSQL's. A round that only waited for the CPUs (the machine's other guests using them)
    loses requests, not CPU time a request; one whose code ran slower (caches and cores shared
    with them) loses both, and its CPU ratio moves with its throughput ratio
    (docs/benchmarks.md, "CPU a request next to throughput")."""
    for label, runs in figures.items():
        print(
            f"{tag} /a2a search, {label}: {percentile([r['rps'] for r in runs], 0.5):,.0f} req/s (median of {len(runs)}), "
            f"p50 {runs[-1]['p50']:.1f} ms, p99 {runs[-1]['p99']:.1f} ms, errors {sum(r['errors'] for r in runs)}",
            flush=True,
        )
    one, every = figures["one tenant"], figures["every tenant"]
    ratios = [e["rps"] / o["rps"] for o, e in zip(one, every)]
    print(
        f"{tag} every tenant / one tenant: {percentile(ratios, 0.5):.2f}x (per round: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")",
        flush=True,
    )
    meters = [key for key in one[0] if key.startswith("cpu ")] if one else []
    if not meters:
        return

    def cpu(run: dict[str, float]) -> float:
        return sum(run[key] for key in meters)

    for label, runs in figures.items():
        parts = ", ".join(f"{key[4:]} {percentile([r[key] for r in runs], 0.5):.2f}" for key in meters)
        print(
            f"{tag} CPU a request, {label}: {percentile([cpu(r) for r in runs], 0.5):.2f} ms ({parts}; medians)",
            flush=True,
        )
    cpu_ratios = [cpu(o) / cpu(e) for o, e in zip(one, every)]
    print(
        f"{tag} CPU a request, one tenant / every tenant: {percentile(cpu_ratios, 0.5):.2f}x (per round: "
        + ", ".join(f"{r:.2f}" for r in cpu_ratios)
        + ")",
        flush=True,
    )


def meters(server_pid: int, admin_url: str) -> Meters:
    """The CPU of the server (its supervisor and workers) and, when it runs on this machine, of
    PostgreSQL (every process of the cluster, the benchmark's own connections among them)."""
    found: Meters = {"server": lambda: cpu_seconds(server_pid)}
    postmaster = postmaster_pid(admin_url)
    if postmaster is not None:
        found["postgres"] = lambda: cpu_seconds(postmaster)
    return found


def workers_of(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(c) for c in text]
    # The server's workers, not multiprocessing's resource tracker.
    return [c for c in children if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]


def peak_rss_mib(pid: int, field: str = "VmHWM:") -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # gone
        return 0.0
    for line in lines:
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_of(pid: int) -> float:
    return peak_rss_mib(pid, "VmRSS:")


def tenants_served(metrics_dir: Path) -> dict[int, int]:
    """The tenants each worker (by pid) has answered a request of: the records of its
    per-tenant count table in the metrics directory (src/aap/web/tenant_counts.py)."""
    served: dict[int, int] = {}
    for path in metrics_dir.glob("tenant_requests_*.counts"):
        pid = int(path.name.removeprefix("tenant_requests_").split("-")[0])
        records = read_records(path.read_bytes(), TenantCounts.TENANT_BYTES, len(TenantCounts.CLASSES))
        served[pid] = served.get(pid, 0) + sum(1 for _ in records)
    return served


def over_http(
    config: Path,
    registry: TenantRegistry,
    tenants: int,
    count: int,
    workers: int,
    seconds: int,
    rounds: int,
    warm_limit: int,
    connections: int,
    work: Path,
    admin_url: str,
    url: str,
) -> None:
    import httpx

    started, started_wall = time.perf_counter(), time.time()
    metrics_dir = work / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    proc, origin = start_platform(config, workers, work / "serve.log", PLATFORM_HOST, metrics_dir)
    try:
        pids = workers_of(proc.pid)
        print(
            f"[http] {workers} worker(s) up {time.perf_counter() - started:.1f} s after start; "
            f"worker RSS at start {', '.join(f'{peak_rss_mib(p):.0f}' for p in pids)} MiB",
            flush=True,
        )
        every = [domain(i) for i in range(tenants)]
        probe = httpx.post(
            origin + "/a2a",
            content=search_body("Honda"),
            headers={"host": domain(0), "A2A-Version": "1.0", "content-type": "application/json"},
            timeout=30,
        )
        answer = probe.json()
        if "result" not in answer:
            raise SystemExit(f"the benchmark's search is refused: {answer}")
        # Cold: every tenant's first requests (a worker builds a tenant on its first request, and
        # each database connection reads a tenant's catalog on its first query of it).
        cold = wrk(origin, work, every, seconds, connections)
        print(f"[http] first {seconds} s over every tenant (cold): {cold['rps']:,.0f} req/s", flush=True)
        # Warm-up until every tenant was asked about a few times per worker and pool connection.
        wanted = tenants * workers * 4
        warm_seconds = min(warm_limit, max(seconds, int(wanted / max(cold["rps"], 1.0)) + 1))
        warm = wrk(origin, work, every, warm_seconds, connections)
        print(
            f"[http] warm-up over every tenant: {warm['rps']:,.0f} req/s for {warm_seconds} s "
            f"({warm['rps'] * warm_seconds / tenants:.0f} requests a tenant)",
            flush=True,
        )
        rounds_began = time.time()
        figures = interleaved(origin, work, tenants, rounds, seconds, connections, meters(proc.pid, admin_url))
        # The sweep (one worker's pass over the tenants with feeds or a retention period) shares
        # the CPU with the rounds it overlaps: say when it last began, so a run can be read.
        swept = sweep_began_ms(admin_url)
        if swept is None:
            since = "never"
        elif swept / 1000 >= rounds_began:
            since = f"{swept / 1000 - rounds_began:.0f} s into the rounds"
        else:
            since = f"{rounds_began - swept / 1000:.0f} s before the rounds began"
        print(
            f"[http] the last sweep began: {since} (server started {rounds_began - started_wall:.0f} s before them)",
            flush=True,
        )
        report_rounds("[http]", figures)
        now = workers_of(proc.pid)
        served = tenants_served(metrics_dir)
        if set(now) != set(pids):
            print(
                f"[http] {len(set(now) - set(pids))} worker(s) replaced during the run (the server's supervisor "
                "replaces a worker that does not answer its health check in time)",
                flush=True,
            )
        print(
            "[http] worker RSS after the rounds: "
            + ", ".join(
                f"{rss_of(p):.1f} MiB (peak {peak_rss_mib(p):.1f} MiB; {served.get(p, 0):,} tenants served)"
                for p in now
            )
            + f"; PostgreSQL: {backend_memory(admin_url, url)}",
            flush=True,
        )
        # A tenant added while serving, with its listings: until a run of new connections all find it.
        n = tenants
        if registry.store.tenant(f"t{n:05d}") is not None:  # left by an earlier run on this database
            registry.remove(f"t{n:05d}")
            time.sleep(1)
        # New connections (no keep-alive), so that requests reach every worker; the tenant is
        # served everywhere from the answer to the first request of a run of 10 per worker all
        # answered. The client is made before the clock starts: making one (its TLS context)
        # takes tens of milliseconds, which are not the server's.
        with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as probe_client:
            t0 = time.perf_counter()
            registry.add(f"t{n:05d}", tenant_config(n), [domain(n)])
            stores = Stores(registry.data.open(f"t{n:05d}"))
            stores.inventory.import_listings(listings(n, count))
            stores.close()
            registered = time.perf_counter() - t0
            streak, began = 0, 0.0
            for _ in range(2000):  # bounded by count
                try:
                    answer = probe_client.post(
                        origin + "/a2a",
                        content=search_body("Honda"),
                        headers={"host": domain(n), "A2A-Version": "1.0", "content-type": "application/json"},
                    )
                    ok = answer.status_code == 200 and "result" in answer.json()
                except httpx.TransportError:
                    ok = False
                if ok and streak == 0:
                    began = time.perf_counter()  # answered: the request's own time counted
                streak = streak + 1 if ok else 0
                if streak >= 10 * workers:
                    break
                time.sleep(0.01)
        answered = began - t0
        print(
            f"[http] a tenant added with {count} listings: registered and imported in {registered:.2f} s, "
            f"served on every worker {answered:.2f} s after the add began "
            f"({answered - registered:.3f} s after its import)",
            flush=True,
        )
        t0 = time.perf_counter()
        registry.remove(f"t{n:05d}")
        print(
            f"[http] that tenant removed (its rows deleted) in {(time.perf_counter() - t0) * 1000:.0f} ms", flush=True
        )
    finally:
        stop_process(proc)


def one_worker_every_tenant(
    config: Path,
    work: Path,
    tenants: int,
    connections: int,
    rounds: int,
    seconds: int,
    admin_url: str,
    *,
    kept: bool = False,
) -> None:
    """The RSS target in its own words: one worker (``--workers 1``, so that it answers every
    request, with a metrics directory as a platform's workers have) serves a search of every
    tenant once, in order; its RSS then, and after a ``/metrics`` scrape (whose text names every
    tenant). Then the rounds of one tenant against every tenant on that worker.

    ``kept``: ``config`` keeps every tenant built (``tenants_in_memory`` = the tenants), so that
    the rounds build nothing again: next to the same rounds at the configured number, what
    building tenants again costs the spread requests, apart from what PostgreSQL's pages of
    every tenant cost them. Bounded by the number of tenants and wrk's fixed rounds."""
    import httpx

    tag = "[one worker, every tenant kept]" if kept else "[one worker]"
    metrics_dir = work / ("metrics-one-worker-kept" if kept else "metrics-one-worker")
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    log = work / ("serve-one-worker-kept.log" if kept else "serve-one-worker.log")
    proc, origin = start_platform(config, 1, log, PLATFORM_HOST, metrics_dir)
    try:
        pid = (workers_of(proc.pid) or [proc.pid])[0]
        started = rss_of(pid)
        hosts = iter(domain(i) for i in range(tenants))
        errors = 0
        body = search_body("Honda")

        async def each() -> None:
            nonlocal errors
            limits = httpx.Limits(max_connections=connections)
            async with httpx.AsyncClient(base_url=origin, limits=limits, timeout=30) as client:

                async def sender() -> None:
                    nonlocal errors
                    for host in hosts:  # one iterator shared by the senders: each tenant once
                        headers = {"host": host, "A2A-Version": "1.0", "content-type": "application/json"}
                        answer = await client.post("/a2a", content=body, headers=headers)
                        errors += answer.status_code != 200 or b'"result"' not in answer.content

                await asyncio.gather(*(sender() for _ in range(connections)))

        began = time.perf_counter()
        asyncio.run(each())
        took = time.perf_counter() - began
        served = tenants_served(metrics_dir).get(pid, 0)
        after = rss_of(pid)
        scrape = httpx.get(origin + "/metrics", headers={"host": PLATFORM_HOST}, timeout=60)
        print(
            f"{tag} a search of each of {tenants:,} tenants in {took:.0f} s ({tenants / took:,.0f} req/s, "
            f"errors {errors}; {served:,} tenants counted by the worker): worker RSS {started:.1f} MiB at start, "
            f"{after:.1f} MiB after; {rss_of(pid):.1f} MiB after a /metrics scrape "
            f"({scrape.status_code}, {len(scrape.content) / 1e6:.1f} MB); peak {peak_rss_mib(pid):.1f} MiB",
            flush=True,
        )
        if rounds:
            figures = interleaved(origin, work, tenants, rounds, seconds, connections, meters(proc.pid, admin_url))
            report_rounds(tag, figures)
            print(f"{tag} worker RSS after the rounds: {rss_of(pid):.1f} MiB", flush=True)
    finally:
        stop_process(proc)


def write_config(path: Path, url: str, platform: dict[str, Any]) -> Path:
    """An ``aap serve`` configuration: the platform's database and its ``[platform]`` table."""
    table = "".join(f"{key} = {orjson.dumps(value).decode()}\n" for key, value in platform.items())
    path.write_text(f"database = {orjson.dumps(url).decode()}\n\n[platform]\n{table}", encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--listings", type=int, default=50)
    parser.add_argument(
        "--registered",
        type=int,
        default=1000,
        help="tenants added through the registry and imported one by one; the rest are made in bulk from them",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cold", action="store_true", help="leave PostgreSQL's buffers as they are (no pg_prewarm before measuring)"
    )
    parser.add_argument("--warm-seconds", type=int, default=120, help="the longest warm-up over every tenant")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--samples", type=int, default=300, help="tenants the in-process figures are taken on")
    parser.add_argument(
        "--no-one-worker", action="store_true", help="skip one worker serving every tenant once (its RSS after)"
    )
    parser.add_argument(
        "--every-tenant-kept",
        action="store_true",
        help="then the same with every tenant kept built (tenants_in_memory = --tenants): the rounds build nothing",
    )
    parser.add_argument("--tenants-in-memory", type=int, default=None, help="[platform] tenants_in_memory")
    parser.add_argument(
        "--tenant-concurrency",
        type=int,
        default=None,
        help="[platform] tenant_concurrency (fair sharing caps one tenant's requests at work in a worker: "
        "give the connections' count to compare the runtime's cost, not the cap)",
    )
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--setup-processes", type=int, default=2, help="processes registering tenants side by side")
    parser.add_argument("--cluster-dir", default=None, help="where the throwaway cluster's files go")
    parser.add_argument("--postgres-url", default=None, help="a server to create the database on")
    parser.add_argument(
        "--database",
        default=None,
        help="use this platform database as it is (its tenants kept between runs; the missing ones added)",
    )
    parser.add_argument(
        "--admin-database",
        default=None,
        help="--database reached as a superuser, for the bulk load and the catalogue (default: --database)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed (Debian: apt-get install wrk)")
    registered = max(PROTOTYPES, min(args.registered, args.tenants))

    from pg_cluster import PostgresCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="aap-bench-platform-"))
    if args.postgres_url:
        os.environ["AAP_TEST_POSTGRES_URL"] = args.postgres_url
    if args.cluster_dir:
        tempfile.tempdir = args.cluster_dir
    cluster = None
    if args.database is None:
        cluster = PostgresCluster().start(
            extra_conf=f"shared_buffers = '{args.shared_buffers}'\nmax_locks_per_transaction = 256\n"
            "max_wal_size = '8GB'\ncheckpoint_timeout = '30min'\n"
        )
    tempfile.tempdir = None
    try:
        if args.database is None:
            assert cluster is not None
            # The agent's own role: neither superuser nor BYPASSRLS, so row-level security binds
            # every statement the benchmark times, as in a deployment (docs/deployment.md).
            url = cluster.create_database(role="aap_bench")
            admin_url = cluster.admin_url_of(url)
        else:
            url, admin_url = args.database, args.admin_database or args.database
        platform_doc: dict[str, Any] = {"host": PLATFORM_HOST}
        if args.tenants_in_memory:
            platform_doc["tenants_in_memory"] = args.tenants_in_memory
        if args.tenant_concurrency:
            platform_doc["tenant_concurrency"] = args.tenant_concurrency
        config = write_config(work / "platform.toml", url, platform_doc)
        settings = parse_settings({"database": url, "platform": platform_doc}, environ={})
        db = open_platform_database(url)
        registry = TenantRegistry(settings, db, environ={})
        have = registry.store.count()
        if have < registered:
            setup(settings, url, registered, args.listings, args.setup_processes, first=have)
        database_figures(admin_url, f"after {max(have, registered):,} tenants")
        if have < args.tenants:
            clone(admin_url, max(have, registered), args.tenants)
            database_figures(admin_url, f"after {args.tenants:,} tenants")
        else:
            print(f"[setup] {have:,} tenants registered already: kept", flush=True)
        if not args.cold:
            prewarm(admin_url)
        in_process(settings, url, args.tenants, args.samples)
        over_http(
            config,
            registry,
            args.tenants,
            args.listings,
            args.workers,
            args.seconds,
            args.rounds,
            args.warm_seconds,
            args.connections,
            work,
            admin_url,
            url,
        )
        if not args.no_one_worker:
            one_worker_every_tenant(config, work, args.tenants, args.connections, args.rounds, args.seconds, admin_url)
        if args.every_tenant_kept:
            kept = write_config(work / "platform-kept.toml", url, {**platform_doc, "tenants_in_memory": args.tenants})
            one_worker_every_tenant(
                kept, work, args.tenants, args.connections, args.rounds, args.seconds, admin_url, kept=True
            )
        db.close()
        print(
            f"[done] peak RSS of this benchmark process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
