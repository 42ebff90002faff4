"""Noisy neighbours: one tenant of a platform flooded, another's latency idle and meanwhile.

    python bench/bench_neighbours.py [--backends sqlite,postgresql] [--workers 2]
        [--listings 1000] [--samples 150] [--rounds 3] [--flood-seconds 8] [--flood-connections 64]
        [--limits default,off] [--shares on,off]

Two tenants (``noisy.example``, ``quiet.example``, ``--listings`` listings each) on a platform
served by ``aap serve --workers N`` on loopback, for each backend. For each combination of

* the noisy tenant's rate limit: ``default`` (its file has no ``[rate_limit]``: 600 a minute,
  bursts of 120, as documented; most of the flood is refused) or ``off`` (every request of the
  flood does its work), and
* fair sharing: ``on`` (the ``[platform]`` defaults, docs/platform.md "Fair sharing") or
  ``off`` (``tenant_concurrency`` so large that no tenant is ever bounded: the behaviour before),

a fresh server measures the quiet tenant's ``inventory.search`` over ``/a2a`` and its agent card,
one request after another on one connection: in each of ``--rounds`` rounds, ``--samples`` times
idle and then ``--samples`` times while wrk sends the noisy tenant searches on
``--flood-connections`` connections from one client address for ``--flood-seconds``. It prints
p50 and p99 of each over the rounds, their ratio during the floods to idle (the target: within
3x), and the flood's rate.

Client, flood and server share the machine; compare the ratios within one run. Bounded by
sample counts and wrk's fixed duration, never by waiting for a figure.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster, test_cli_serve
sys.path.insert(0, str(ROOT / "bench"))

from aap.config.loader import parse_settings  # noqa: E402
from aap.store import Stores, open_platform_database  # noqa: E402
from aap.tenants import TenantRegistry  # noqa: E402
from bench_platform import WRK_SCRIPT, listings, search_body  # noqa: E402
from common import percentile, start_platform, stop_process  # noqa: E402

PLATFORM_HOST = "agents.platform.example"
NOISY, QUIET = "noisy", "quiet"
A2A_HEADERS = {"A2A-Version": "1.0", "content-type": "application/json"}


def tenant_file(name: str, limited: bool) -> str:
    rate = "" if limited else "[rate_limit]\nenabled = false\n"
    return f"""{rate}
[dealer]
name = "{name.title()} Motors"
[[dealer.rooftops]]
name = "Dealer 00000 Main"
timezone = "America/Chicago"
address = {{ city = "Springfield", state = "IL", country = "US" }}
phones = [{{ name = "Sales", value = "+12175550100" }}]
"""


def platform_file(url: str, shares: bool) -> str:
    bound = "" if shares else "tenant_concurrency = 10000\n"
    return f'database = "{url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\n{bound}'


def register(url: str, count: int, noisy_limited: bool) -> None:
    """The two tenants, with ``count`` listings each: the noisy one's rate limit as asked, the
    quiet one's off (its samples come from one address, faster than its limit allows)."""
    settings = parse_settings({"database": url, "platform": {"host": PLATFORM_HOST}}, environ={})
    db = open_platform_database(url)
    registry = TenantRegistry(settings, db, environ={})
    try:
        for tenant, limited in ((NOISY, noisy_limited), (QUIET, False)):
            if registry.store.tenant(tenant) is None:
                registry.add(tenant, tenant_file(tenant, limited), [f"{tenant}.example"])
                stores = Stores(registry.data.open(tenant))
                try:
                    stores.inventory.import_listings(listings(0, count))
                finally:
                    stores.close()
            else:
                registry.update(tenant, tenant_file(tenant, limited))
    finally:
        db.close()


def sample(client: httpx.Client, origin: str, body: bytes) -> tuple[float, float]:
    """Milliseconds of one search and one card request of the quiet tenant."""
    host = {"host": f"{QUIET}.example"}
    began = time.perf_counter()
    answer = client.post(origin + "/a2a", content=body, headers={**A2A_HEADERS, **host})
    searched = time.perf_counter()
    if answer.status_code != 200 or "result" not in answer.json():
        raise SystemExit(f"the quiet tenant's search failed: {answer.text[:300]}")
    card = client.get(origin + "/.well-known/agent-card.json", headers=host)
    carded = time.perf_counter()
    if card.status_code != 200:
        raise SystemExit(f"the quiet tenant's card failed: {card.status_code}")
    return (searched - began) * 1000, (carded - searched) * 1000


def flood(origin: str, work: Path, seconds: int, connections: int) -> subprocess.Popen[str]:
    script = work / "flood.lua"
    script.write_text(WRK_SCRIPT)
    body = work / "search.json"
    body.write_bytes(search_body("Honda"))
    hosts = work / "noisy.txt"
    hosts.write_text(f"{NOISY}.example\n")
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(script)]
    argv += ["-H", "Content-Type: application/json", "-H", "A2A-Version: 1.0", origin + "/a2a"]
    argv += ["--", str(body), str(hosts)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def measure(origin: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Idle and flooded samples of the quiet tenant, in ``--rounds`` interleaved rounds (so that
    the machine's drift touches both alike)."""
    body = search_body("Honda")
    idle: list[tuple[float, float]] = []
    during: list[tuple[float, float]] = []
    rates: list[float] = []
    with httpx.Client(timeout=60) as client:
        for _ in range(50):  # warm: both tenants built, the search's shape seen, connections open
            sample(client, origin, body)
            client.post(origin + "/a2a", content=body, headers={**A2A_HEADERS, "host": f"{NOISY}.example"})
        for _ in range(args.rounds):
            time.sleep(1.0)  # the last flood's connections closed
            idle += [sample(client, origin, body) for _ in range(args.samples)]
            wrk = flood(origin, work, args.flood_seconds, args.flood_connections)
            time.sleep(1.0)  # the flood's connections open and its first requests arrive
            taken = 0
            while taken < args.samples and wrk.poll() is None:
                during.append(sample(client, origin, body))
                taken += 1
            out, err = wrk.communicate()
            if wrk.returncode != 0:
                raise SystemExit(f"wrk failed: {err[-500:]}")
            result = orjson.loads(out.strip().splitlines()[-1])
            rates.append(result["requests"] / (result["duration_us"] / 1e6))
    return {"idle": idle, "during": during, "flood_rps": sorted(rates)[len(rates) // 2]}


def report(label: str, figures: dict[str, Any], samples: int) -> None:
    for index, what in ((0, "search"), (1, "card")):
        idle = [s[index] for s in figures["idle"]]
        during = [s[index] for s in figures["during"]]
        if not during:
            print(f"[{label}] {what}: no sample taken during the flood", flush=True)
            continue
        i50, i99 = percentile(idle, 0.5), percentile(idle, 0.99)
        d50, d99 = percentile(during, 0.5), percentile(during, 0.99)
        short = f" (only {len(during)} of {samples} samples in the floods)" if len(during) < samples else ""
        print(
            f"[{label}] quiet {what}: idle p50 {i50:.1f} ms p99 {i99:.1f} ms; during the flood p50 {d50:.1f} ms "
            f"p99 {d99:.1f} ms, max {max(during):.1f} ms; p50 {d50 / i50:.1f}x, p99 {d99 / i99:.1f}x{short}",
            flush=True,
        )
    print(f"[{label}] flood on the noisy tenant: {figures['flood_rps']:,.0f} req/s (median of the rounds)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--listings", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=150, help="samples idle and flooded, each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flood-seconds", type=int, default=8)
    parser.add_argument("--flood-connections", type=int, default=64)
    parser.add_argument("--limits", default="default,off", help="the noisy tenant's rate limit: default, off")
    parser.add_argument("--shares", default="on,off", help="fair sharing: on (the defaults), off")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed (Debian: apt-get install wrk)")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="aap-bench-neighbours-"))
    cluster = None
    try:
        for backend in args.backends.split(","):
            if backend == "postgresql":
                from pg_cluster import PostgresCluster

                cluster = PostgresCluster().start()
                url = cluster.create_database()
            else:
                url = f"sqlite:///{work}/platform.db"
            for limit in args.limits.split(","):
                register(url, args.listings, noisy_limited=limit == "default")
                for shares in args.shares.split(","):
                    config = work / "platform.toml"
                    config.write_text(platform_file(url, shares == "on"), encoding="utf-8")
                    proc, origin = start_platform(config, args.workers, work / "serve.log", PLATFORM_HOST)
                    label = f"{backend}, noisy rate limit {limit}, fair sharing {shares}"
                    try:
                        figures = measure(origin, work, args)
                    except httpx.TransportError as exc:  # told, with the server's last words; the next case runs
                        log = (work / "serve.log").read_text(errors="replace")[-1500:]
                        print(f"[{label}] the quiet tenant's request failed: {exc!r}\n{log}", flush=True)
                        continue
                    finally:
                        stop_process(proc)
                    report(label, figures, args.samples * args.rounds)
            if cluster is not None:
                cluster.stop()
                cluster = None
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
