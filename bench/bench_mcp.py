"""Throughput of the ``inventory.search`` tool over ``POST /mcp`` next to the same request over ``POST /a2a``.

Builds a SQLite database with a generated inventory, starts the server
(``aap.server.runner.run``) as a subprocess on 127.0.0.1, and sends a fixed number of
identical search requests (price_max, optionally the most common make; sorted by price,
limit 20: a full page of listings) in four ways:

* ``a2a``: A2A ``SendMessage`` with the AAP DataPart;
* ``mcp 2026-07-28``: a raw ``tools/call`` with the per-request ``_meta`` envelope and headers;
* ``mcp 2025-11-25``: a raw ``tools/call`` with the legacy version header (stateless: no handshake needed);
* ``mcp client``: the official MCP client SDK pinned to 2026-07-28 (one client per concurrent task),
  which adds its own work (output-schema validation, pydantic models) to every call.

Every response is checked (a failed or isError answer counts as a failure). Rate limiting
is switched off. Bounded by request counts, not by time. Client and server share the
machine: on a small machine the figures are a floor.

    python bench/bench_mcp.py --listings 20000 --requests 1000 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from aap.client.a2a import envelope
from aap.skills.catalog import SKILLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import build_database, free_port, start_server  # noqa: E402
from common import percentile, stop_process, wait_healthy  # noqa: E402

ACCEPT = "application/json, text/event-stream"


def search_request(make: str | None, price_max: int) -> dict[str, Any]:
    filters: dict[str, Any] = {"price_max": price_max}
    if make:
        filters["make"] = [make]
    return {
        "type": "inventory.search.request",
        "filters": filters,
        "sort": {"field": "price", "order": "asc"},
        "pagination": {"limit": 20},
    }


def a2a_call(request: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    return "/a2a", envelope(SKILLS["inventory.search"], request, request_id=1), {"A2A-Version": "1.0"}


def mcp_call(request: dict[str, Any], version: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    params: dict[str, Any] = {"name": "aap_inventory_search", "arguments": request}
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": version}
    if version == "2026-07-28":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": "aap_inventory_search"})
    return "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, headers


def response_data(path: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The AAP response ``data`` of a successful answer, else None."""
    result = payload.get("result")
    if result is None:
        return None
    if path == "/a2a":
        return result["message"]["parts"][0]["data"]["data"]
    if result.get("isError"):
        return None
    return result["structuredContent"]["data"]


async def run_load(call: Callable[[], Awaitable[dict | None]], requests: int, concurrency: int, warmup: int):
    for _ in range(warmup):
        if await call() is None:
            raise SystemExit("warm-up request failed")
    latencies: list[float] = []
    failures = 0
    remaining = requests

    async def worker() -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            data = await call()
            latencies.append(time.perf_counter() - started)
            failures += data is None

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started, failures


async def raw(base: str, target: tuple[str, dict, dict], args: argparse.Namespace):
    path, body, headers = target
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60, headers=headers) as client:

        async def call() -> dict | None:
            response = await client.post(path, json=body)
            return response_data(path, response.json()) if response.status_code == 200 else None

        return await run_load(call, args.requests, args.concurrency, args.warmup)


async def official(base: str, request: dict[str, Any], args: argparse.Namespace):
    """Each concurrent task drives its own client (anyio scopes stay in the task that opened them)."""
    from mcp import Client

    async def call_with(client: Client) -> dict | None:
        result = await client.call_tool("aap_inventory_search", request)
        return None if result.is_error else result.structured_content["data"]

    async with Client(base + "/mcp", mode="2026-07-28") as client:
        for _ in range(args.warmup):
            if await call_with(client) is None:
                raise SystemExit("warm-up request failed")
    latencies: list[float] = []
    failures = 0
    remaining = args.requests

    async def worker() -> None:
        nonlocal remaining, failures
        async with Client(base + "/mcp", mode="2026-07-28") as client:
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                data = await call_with(client)
                latencies.append(time.perf_counter() - started)
                failures += data is None

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return latencies, time.perf_counter() - started, failures


def report(label: str, latencies: list[float], elapsed: float, failures: int) -> None:
    print(
        f"{label:<16} {len(latencies) / elapsed:>8,.0f} req/s   p50 {percentile(latencies, 0.50) * 1000:6.1f} ms"
        f"   p99 {percentile(latencies, 0.99) * 1000:6.1f} ms   mean {statistics.fmean(latencies) * 1000:6.1f} ms"
        f"   failures {failures}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listings", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--price-max", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--with-make", action="store_true", help="also filter by the most common make")
    parser.add_argument("--skip-client", action="store_true", help="leave out the official-client run")
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory(prefix="aap-bench-mcp-")
    database = Path(workdir.name) / "bench.db"
    import_seconds, common_make = build_database(database, args.listings, args.seed)
    make = common_make if args.with_make else None
    request = search_request(make, args.price_max)
    print(
        f"inventory: {args.listings} listings ({import_seconds:.1f} s to import); "
        f"query {request['filters']} sorted by price, limit 20; "
        f"{args.requests} requests per run, concurrency {args.concurrency}"
    )

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(database, port, 1)
    try:
        wait_healthy(base, proc)
        path, body, headers = a2a_call(request)
        page = response_data(path, httpx.post(base + path, json=body, headers=headers, timeout=60).json())
        if page is None:
            raise SystemExit("the search request failed")
        print(f"each answer: {len(page['vehicles'])} of {page['total']} matching listings")
        runs: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("a2a", lambda: raw(base, a2a_call(request), args)),
            ("mcp 2026-07-28", lambda: raw(base, mcp_call(request, "2026-07-28"), args)),
            ("mcp 2025-11-25", lambda: raw(base, mcp_call(request, "2025-11-25"), args)),
        ]
        if not args.skip_client:
            runs.append(("mcp client", lambda: official(base, request, args)))
        for label, run in runs:
            report(label, *asyncio.run(run()))
    finally:
        stop_process(proc)
        workdir.cleanup()


if __name__ == "__main__":
    main()
