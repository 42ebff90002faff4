"""Helpers shared by the bench scripts (run them from the repository root).

One percentile rule, one timing loop, one way to forget remembered totals, one
wait-for-/healthz and one set of the benchmark search queries, so every script
measures the same things the same way.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def timed(fn: Callable[[], Any], runs: int, *, warm: bool = True) -> list[float]:
    """Milliseconds of ``runs`` calls of ``fn`` (after one warm-up call by default)."""
    if warm:
        fn()  # warm the page cache and the statement cache
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def forget_counts(stores: Any) -> None:
    """Drop every remembered search total, so that the next search counts again (a search the
    posting index answers counts there, in this process, and never reads a remembered total)."""
    with stores.db.transaction() as tx:
        tx.execute("DELETE FROM inv_count")


def free_port() -> int:
    """A loopback port free now, for a server the bench starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` and every process under it (a server's workers, a
    PostgreSQL postmaster's backends), those running and those ended: an ended process's time
    is in its parent's ``cutime``/``cstime`` once reaped, so each second is counted once.
    Read from ``/proc`` (proc(5), ``stat``); a process gone meanwhile counts nothing."""
    ticks, pending = 0, [pid]
    while pending:
        p = pending.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
            for task in Path(f"/proc/{p}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen) -> None:
    """Stop a server as an operator would (SIGINT, its graceful shutdown), killing it after 30 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_healthy(base: str, proc: subprocess.Popen, *, host: str | None = None, log: Path | None = None) -> None:
    """Wait (bounded by count) until the server at ``base`` answers ``/healthz`` (at ``host``,
    a platform's own host name, when given); a server that exits first ends the run with the
    tail of its ``log``."""
    headers = {"host": host} if host is not None else {}
    for _ in range(1200):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
            raise SystemExit("server exited during startup" + (": " + tail if tail else ""))
        try:
            if httpx.get(base + "/healthz", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not become healthy")


def start_platform(
    config: Path, workers: int, log: Path, host: str, metrics_dir: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``aap serve --config CONFIG --workers N`` on a free loopback port, its output in ``log``
    (no ``AAP_`` variable of this shell passed on), once ``/healthz`` answers at ``host``;
    ``metrics_dir``: the workers' metrics directory (an empty one), for the benchmark to read."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    with log.open("wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aap", "serve", "--config", str(config), "--port", str(port)]
            + ["--workers", str(workers), "--log-level", "warning"],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
        )
    wait_healthy(origin, proc, host=host, log=log)
    return proc, origin


def benchmark_searches(makes: list[str], geo: dict[str, float], codes: list[str]) -> dict[str, dict[str, Any]]:
    """The four benchmark queries of the core issue, from the inventory's own facets."""
    return {
        "(a) make + price_max, sort price": {
            "filters": {"make": [makes[0]], "price_max": 40000},
            "sort": {"field": "price", "order": "asc"},
        },
        "(b) near 50 mi, sort distance": {
            "filters": {
                "near": {"latitude": geo["latitude"] + 0.05, "longitude": geo["longitude"] - 0.05, "radius_mi": 50}
            },
            "sort": {"field": "distance_mi", "order": "asc"},
        },
        "(c) query tokens": {"filters": {"query": f"{makes[1]} 4"}},
        "(d) features_all": {"filters": {"features_all": codes}},
    }


async def post_a2a(
    client: httpx.AsyncClient, bodies: Iterable[Any], concurrency: int
) -> tuple[list[float], float, int]:
    """POST every A2A body in turn from ``concurrency`` requests at once: the seconds of each, the
    seconds of them all, and the failures (not a 200 with a JSON-RPC result)."""
    latencies: list[float] = []
    failures = 0
    pending = iter(bodies)

    async def worker() -> None:
        nonlocal failures
        for body in pending:
            start = time.perf_counter()
            response = await client.post("/a2a", json=body)
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200 or "result" not in response.json():
                failures += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start, failures
