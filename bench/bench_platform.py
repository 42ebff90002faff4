"""Platform scale: thousands of tenants, each its own agent, in one PostgreSQL deployment.

    python bench/bench_platform.py [--tenants 5000] [--listings 200] [--workers 2]
        [--seconds 10] [--rounds 3] [--connections 16] [--samples 300]
        [--postgres-url postgresql://...]

Registers ``--tenants`` tenants (each a dealer with one rooftop, a domain ``tNNNNN.example``
and ``--listings`` listings of its own: 1M listings at the defaults) through the tenant
registry, as ``aap tenants add`` and ``aap import --tenant`` do, on a throwaway PostgreSQL
cluster (``tests/pg_cluster.py``; fsync off, so setup rates are an upper bound), then
measures the targets of docs/platform.md, "Sizing":

* **in-process**, through the platform's own runtimes and each tenant's gateway (schema
  validation, rate limit, placement included): the first ``inventory.search`` of a tenant
  this process has not served yet (its Settings parsed, its namespace opened, its agent and
  gateway built, the search run), and ``inventory.search`` p50 with an exact total for
  tenants already served; what a process holds after starting with every tenant registered;
* **over HTTP**, ``aap serve --workers N`` behind nothing (requests carry the tenant's
  ``Host``, as a proxy forwards it), wrk for ``--seconds`` per round: requests spread
  uniformly over every tenant next to the same requests to one tenant, interleaved for
  ``--rounds`` rounds after a warm-up that reaches every tenant on every worker; then each
  worker's peak RSS (``VmHWM``);
* a tenant added, with its listings, while the server runs: the time until it answers on
  every worker (a run of new connections all served).

Client and server share the machine; compare the ratios within one run. Bounded by counts
and wrk's fixed round length, never by waiting for a figure.
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
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster
sys.path.insert(0, str(ROOT / "bench"))

from aap.config.loader import parse_settings  # noqa: E402
from aap.store import Stores, open_platform_database  # noqa: E402
from aap.tenants import TenantRegistry  # noqa: E402
from common import percentile, stop_process  # noqa: E402

PLATFORM_HOST = "agents.platform.example"
MAKES = ("Honda", "Toyota", "Ford", "Kia", "Mazda", "Subaru", "Hyundai", "Nissan")
MODELS = ("Alpha", "Beta", "Gamma", "Delta")


def tenant_config(i: int) -> str:
    # No rate limit: the comparison is of the platform's routing and runtimes, and one client
    # address sending every request would be refused at one tenant and not at 5,000.
    return f"""
[rate_limit]
enabled = false

[dealer]
name = "Dealer {i:05d} Motors"
[[dealer.rooftops]]
name = "Dealer {i:05d} Main"
timezone = "America/Chicago"
address = {{ city = "Springfield", state = "IL", country = "US" }}
phones = [{{ name = "Sales", value = "+12175550100" }}]
"""


def listings(i: int, count: int) -> list[dict[str, Any]]:
    rnd = random.Random(i)
    return [
        {
            "vehicle_id": f"t{i:05d}-{n}",
            "status": "available",
            "updated_at": "2026-11-30T08:00:00Z",
            "make": rnd.choice(MAKES),
            "model": rnd.choice(MODELS),
            "year": rnd.randint(2016, 2026),
            "price": rnd.randrange(12_000, 80_000, 100),
            "mileage": rnd.randrange(0, 120_000, 10),
            "condition": rnd.choice(("new", "used")),
            "rooftop": f"Dealer {i:05d} Main",
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


def add_tenants(settings: Any, url: str, first: int, last: int, count: int) -> None:
    """Register and import tenants ``first`` .. ``last - 1`` (one setup process's share)."""
    db = open_platform_database(url)
    registry = TenantRegistry(settings, db, environ={})
    try:
        for i in range(first, last):
            registry.add(f"t{i:05d}", tenant_config(i), [domain(i)])
            stores = Stores(registry.data.open(f"t{i:05d}"))
            try:
                stores.inventory.import_listings(listings(i, count))
            finally:
                stores.close()
    finally:
        db.close()


def setup(settings: Any, url: str, tenants: int, count: int, processes: int, *, first: int = 0) -> None:
    """Tenants ``first`` .. ``tenants - 1`` registered and imported, by ``processes`` processes side by side."""
    import multiprocessing

    started = time.perf_counter()
    step = 250
    chunks = [(i, min(tenants, i + step)) for i in range(first, tenants, step)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        done = 0
        for added in pool.imap_unordered(_add_chunk, [(settings, url, a, b, count) for a, b in chunks]):
            done += added
            rate = done / (time.perf_counter() - started)
            print(f"[setup] {first + done:,} tenants registered and imported ({rate:.1f} tenants/s)", flush=True)


def _add_chunk(job: tuple[Any, str, int, int, int]) -> int:
    add_tenants(*job)
    return job[3] - job[2]


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

    asyncio.run(measure())
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
        "rps": result["requests"] / (result["duration_us"] / 1e6),
        "errors": result["errors"],
        "p50": result["p50_us"] / 1000,
        "p99": result["p99_us"] / 1000,
    }


def workers_of(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(c) for c in text]
    return children


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def over_http(
    config: Path,
    registry: TenantRegistry,
    tenants: int,
    count: int,
    workers: int,
    seconds: int,
    rounds: int,
    connections: int,
    work: Path,
) -> None:
    import httpx

    from test_cli_serve import free_port

    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
    log = (work / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aap", "serve", "--config", str(config), "--port", str(port)]
        + ["--workers", str(workers), "--log-level", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        started = time.perf_counter()
        for _ in range(1200):  # bounded by count
            try:
                if httpx.get(origin + "/healthz", headers={"host": PLATFORM_HOST}, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit("aap serve did not come up")
        pids = workers_of(proc.pid)
        print(
            f"[http] {workers} worker(s) up {time.perf_counter() - started:.1f} s after start; "
            f"worker RSS at start {', '.join(f'{peak_rss_mib(p):.0f}' for p in pids)} MiB",
            flush=True,
        )
        every = [domain(i) for i in range(tenants)]
        one = [domain(0)]
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
        warm_seconds = min(900, max(seconds, int(wanted / max(cold["rps"], 1.0)) + 1))
        warm = wrk(origin, work, every, warm_seconds, connections)
        print(
            f"[http] warm-up over every tenant: {warm['rps']:,.0f} req/s for {warm_seconds} s "
            f"({warm['rps'] * warm_seconds / tenants:.0f} requests a tenant)",
            flush=True,
        )
        figures: dict[str, list[dict[str, float]]] = {"one tenant": [], "every tenant": []}
        for _ in range(rounds):
            for label, hosts in (("one tenant", one), ("every tenant", every)):
                figures[label].append(wrk(origin, work, hosts, seconds, connections))
        for label, runs in figures.items():
            rps = sorted(r["rps"] for r in runs)[len(runs) // 2]
            print(
                f"[http] /a2a search, {label}: {rps:,.0f} req/s (median of {len(runs)}), "
                f"p50 {runs[-1]['p50']:.1f} ms, p99 {runs[-1]['p99']:.1f} ms, errors {sum(r['errors'] for r in runs)}",
                flush=True,
            )
        ratios = [e["rps"] / o["rps"] for o, e in zip(figures["one tenant"], figures["every tenant"])]
        print(
            f"[http] every tenant / one tenant: {sorted(ratios)[len(ratios) // 2]:.2f}x (per round: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + ")",
            flush=True,
        )
        print(
            "[http] worker peak RSS after serving every tenant: "
            + ", ".join(f"{peak_rss_mib(p):.1f} MiB" for p in pids),
            flush=True,
        )
        # A tenant added while serving, with its listings: until a run of new connections all find it.
        n = tenants
        if registry.store.tenant(f"t{n:05d}") is not None:  # left by an earlier run on this database
            registry.remove(f"t{n:05d}")
            time.sleep(1)
        t0 = time.perf_counter()
        registry.add(f"t{n:05d}", tenant_config(n), [domain(n)])
        stores = Stores(registry.data.open(f"t{n:05d}"))
        stores.inventory.import_listings(listings(n, count))
        stores.close()
        registered = time.perf_counter() - t0
        # New connections (no keep-alive), so that requests reach every worker; the tenant is
        # served everywhere from the first request of a run of 10 per worker all answered.
        streak, began = 0, 0.0
        with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as probe_client:
            for _ in range(2000):  # bounded by count
                sent = time.perf_counter()
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
                    began = sent
                streak = streak + 1 if ok else 0
                if streak >= 10 * workers:
                    break
                time.sleep(0.01)
        served = began - t0
        print(
            f"[http] a tenant added with {count} listings: registered and imported in {registered:.2f} s, "
            f"served on every worker {served:.2f} s after the add began "
            f"({served - registered:.2f} s after its import)",
            flush=True,
        )
    finally:
        stop_process(proc)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=5000)
    parser.add_argument("--listings", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--samples", type=int, default=300, help="tenants the in-process figures are taken on")
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--setup-processes", type=int, default=3, help="processes registering tenants side by side")
    parser.add_argument("--postgres-url", default=None, help="a server to create the database on")
    parser.add_argument(
        "--database",
        default=None,
        help="use this platform database as it is (its tenants kept between runs; the missing ones added)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed (Debian: apt-get install wrk)")

    from pg_cluster import PostgresCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="aap-bench-platform-"))
    if args.postgres_url:
        os.environ["AAP_TEST_POSTGRES_URL"] = args.postgres_url
    cluster = None
    if args.database is None:
        cluster = PostgresCluster().start(
            extra_conf=f"shared_buffers = '{args.shared_buffers}'\nmax_locks_per_transaction = 256\n"
        )
    try:
        url = args.database or cluster.create_database()  # type: ignore[union-attr]
        config = work / "platform.toml"
        config.write_text(f'database = "{url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\n', encoding="utf-8")
        settings = parse_settings({"database": url, "platform": {"host": PLATFORM_HOST}}, environ={})
        db = open_platform_database(url)
        registry = TenantRegistry(settings, db, environ={})
        have = registry.store.count()
        if have < args.tenants:
            setup(settings, url, args.tenants, args.listings, args.setup_processes, first=have)
        else:
            print(f"[setup] {have:,} tenants registered already: kept", flush=True)
        in_process(settings, url, args.tenants, args.samples)
        over_http(
            config,
            registry,
            args.tenants,
            args.listings,
            args.workers,
            args.seconds,
            args.rounds,
            args.connections,
            work,
        )
        db.close()
        print(
            f"[done] peak RSS of this benchmark process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
