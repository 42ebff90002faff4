"""``aap serve`` next to a bare ASGI server doing the same search: what the HTTP path costs.

The **floor** is the least any server can do for query (a) of the benchmarks (make +
price_max, sorted by price, 25 per page): a bare ASGI callable on the same uvicorn,
reading its own SQLite table of the same listings (the same page and total, checked
before measuring), answering the same JSON-RPC envelope with orjson. Next to it,
``aap serve`` answers the same search over ``/a2a`` (default configuration: rate
limiting on, with a limit high enough never to refuse; and rate limiting off), over
``/mcp`` (both revisions) and over ``/poppy/v1/inventory.search`` with a DPoP token.

**Every server stack** ``aap serve`` runs on is measured, each against a floor on the same
stack (``--stacks``): uvicorn's event loop is uvloop where it is installed (a dependency, but
for Windows) and asyncio otherwise, and the HTTP parser is always httptools (``aap serve``
keeps the request limits in its httptools protocol, :mod:`aap.server.protocol`). The stack
``asyncio-h11`` puts the floor on uvicorn's pure-Python parser (h11) next to aap on asyncio,
the comparison earlier rounds made with ``--plain-uvicorn`` (now that stack's alias). A
regression on one stack cannot hide behind another's figures.

The posting index (docs/search.md) is built in the background at start; every aap server is
waited for until its log says the index is built, so no round measures a count in SQL that
the index answers once it is there.

Each server is pinned to core 0 with ``taskset``, the load generator to core 1 (``wrk``
when installed, else a small asyncio generator in this file). Rounds are interleaved:
every target runs once per round, in a rotating order, so that whatever else the
machine does affects all of them alike; each round gives each target's ratio to the
floor's figure *of the same round*, and the report is the median of those ratios.
Server CPU per request comes from the server process's own CPU time (``/proc``), peak
memory from its ``VmHWM``.

The Poppy token is minted in this process on the server's database (the token
endpoint's own two calls: sign, then store the Session), because the guest-token
exchange needs an HTTPS client-metadata host; every request then carries a fresh DPoP
proof, signed before the run.

    python bench/bench_floor.py --listings 100000 --rounds 5 --duration 10
    python bench/bench_floor.py --stacks asyncio     # only the asyncio event loop
    python bench/bench_floor.py --plain-uvicorn     # the floor on asyncio + h11, aap on asyncio
    python bench/bench_floor.py --traced            # and a server exporting a trace of every request

With ``--traced`` a third ``aap serve`` (rate limit on) runs with ``OTEL_EXPORTER_OTLP_ENDPOINT``
at a loopback OTLP/HTTP sink (pinned with the load generator; it reads and drops every batch), so
``/a2a`` and ``/mcp`` are measured with traces on — every request sampled, the worst case — next
to the same requests with traces off (docs/deployment.md, "Traces").

Bounded by time per run and by the number of rounds. Nothing but loopback is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import build_database, cpu_seconds, free_port, peak_rss_kib  # noqa: E402
from common import percentile, stop_process, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEMO_CONFIG = ROOT / "src" / "aap" / "config" / "demo.toml"
LIMIT = 25
SEARCH_MEDIA = "application/vnd.autoagent.inventory-search-request+json"
RESULT_MEDIA = "application/vnd.autoagent.inventory-search-response+json"
MCP_ACCEPT = "application/json, text/event-stream"
# Servers import these only to be told they are absent (a stack without them).
NO_UVLOOP = "import sys; sys.modules['uvloop'] = None; "
NO_HTTPTOOLS = "import sys; sys.modules['httptools'] = None; "


@dataclass(frozen=True)
class Stack:
    """A server stack: what uvicorn loads in the floor and in ``aap serve`` (modules hidden)."""

    name: str
    floor_hides: str
    aap_hides: str
    description: str


#: The stacks ``aap serve`` offers (its loop: uvicorn's "auto"; its parser: httptools, always).
STACKS = {
    "uvloop": Stack("uvloop", "", "", "uvloop + httptools in both (aap serve's default)"),
    "asyncio": Stack("asyncio", NO_UVLOOP, NO_UVLOOP, "asyncio + httptools in both (aap serve without uvloop)"),
    "asyncio-h11": Stack(
        "asyncio-h11",
        NO_UVLOOP + NO_HTTPTOOLS,
        NO_UVLOOP,
        "the floor on asyncio + h11, aap on asyncio + httptools (the only parser aap serve runs)",
    ),
}


def available_stacks() -> list[str]:
    """The stacks this machine can run by default: uvloop's only where it is installed."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["uvloop", "asyncio"]


# -- the floor ------------------------------------------------------------------------


def build_floor(aap_db: Path, floor_db: Path) -> None:
    """The floor's own table: the same listings (id, make key, currency, price, document)."""
    floor_db.unlink(missing_ok=True)
    out = sqlite3.connect(floor_db)
    out.execute("PRAGMA journal_mode=WAL")
    out.execute("CREATE TABLE listing (id TEXT PRIMARY KEY, make_k TEXT, currency TEXT, price INTEGER, doc TEXT)")
    out.execute(f"ATTACH DATABASE '{aap_db}' AS aap")
    out.execute(
        "INSERT INTO listing SELECT l.id, l.make_k, l.currency, l.price, d.doc "
        "FROM aap.inv_listing l JOIN aap.inv_doc d ON d.id = l.id"
    )
    out.commit()
    out.execute("DETACH DATABASE aap")
    out.execute("CREATE INDEX listing_make ON listing (make_k, currency, price, id)")
    out.commit()
    out.close()


def floor_app(database: str) -> Any:
    """The bare ASGI app: parse, count, page, documents, orjson. One connection, on the loop."""
    import uuid

    conn = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
    where = "make_k = ? AND currency = 'USD' AND price <= ?"
    count_sql = f"SELECT COUNT(*) FROM listing WHERE {where}"
    page_sql = f"SELECT doc FROM listing WHERE {where} ORDER BY price, id LIMIT {LIMIT}"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        rpc = orjson.loads(body)
        request = rpc["params"]["message"]["parts"][0]["data"]
        filters = request["filters"]
        params = (filters["make"][0].casefold(), filters["price_max"])
        conn.execute("BEGIN")
        total = conn.execute(count_sql, params).fetchone()[0]
        vehicles = [orjson.loads(row[0]) for row in conn.execute(page_sql, params)]
        conn.execute("COMMIT")
        data = {
            "currency": "USD",
            "mileage_unit": "mi",
            "total": total,
            "limit": LIMIT,
            "vehicles": vehicles,
            "next_cursor": None,
            "applied_filters": filters,
            "sort": request["sort"],
        }
        answer = {
            "jsonrpc": "2.0",
            "id": rpc["id"],
            "result": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "contextId": str(uuid.uuid4()),
                    "role": "ROLE_AGENT",
                    "parts": [{"data": {"type": "inventory.search.response", "data": data}, "mediaType": RESULT_MEDIA}],
                }
            },
        }
        out = orjson.dumps(answer)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": out})

    return app


def serve_floor(database: str, port: int) -> None:
    import uvicorn

    uvicorn.run(
        floor_app(database), host="127.0.0.1", port=port, access_log=False, server_header=False, log_level="warning"
    )


# -- requests ---------------------------------------------------------------------------


def search(make: str, price_max: int) -> dict[str, Any]:
    return {
        "type": "inventory.search.request",
        "filters": {"make": [make], "price_max": price_max},
        "sort": {"field": "price", "order": "asc"},
        "pagination": {"limit": LIMIT},
    }


def a2a_body(request: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "bench",
                    "role": "ROLE_USER",
                    "parts": [{"data": request, "mediaType": SEARCH_MEDIA}],
                },
                "configuration": {"acceptedOutputModes": [RESULT_MEDIA]},
            },
        }
    )


def mcp_body(request: dict[str, Any], version: str) -> tuple[bytes, dict[str, str]]:
    params: dict[str, Any] = {"name": "aap_inventory_search", "arguments": request}
    headers = {"Accept": MCP_ACCEPT, "MCP-Protocol-Version": version}
    if version == "2026-07-28":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": "aap_inventory_search"})
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}), headers


def page_of(kind: str, payload: Any) -> dict[str, Any]:
    """The search response ``data`` of one answer (SystemExit when it is an error)."""
    try:
        if kind in ("floor", "a2a"):
            return payload["result"]["message"]["parts"][0]["data"]["data"]
        if kind == "mcp":
            if payload["result"]["isError"]:
                raise KeyError("isError")
            return payload["result"]["structuredContent"]["data"]
        return payload["data"]
    except (KeyError, TypeError, IndexError):
        raise SystemExit(f"{kind}: not a search answer: {str(payload)[:400]}") from None


# -- targets ----------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    kind: str  # floor, a2a, mcp, poppy
    server: str  # which server process answers it
    path: str
    body: bytes
    headers: dict[str, str]
    runs: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen
    log: Any

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def pinned(core: str | None, argv: list[str]) -> list[str]:
    return (["taskset", "-c", core] if core is not None and shutil.which("taskset") else []) + argv


def start(name: str, argv: list[str], port: int, logdir: Path, env: dict[str, str] | None = None) -> Server:
    log = open(logdir / f"{name}.log", "wb")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | (env or {})
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=logdir, env=environ)
    server = Server(name, port, proc, log)
    wait_healthy(server.base, proc)
    return server


def stop(server: Server) -> None:
    stop_process(server.proc)
    server.log.close()


def aap_config(path: Path, port: int, database: Path, rate_limited: bool) -> Path:
    """The packaged demo configuration, on the bench database, with the rate limit set."""
    text = DEMO_CONFIG.read_text()
    limit = (
        "enabled = true\nper_minute = 60000000\nburst = 1000000"
        if rate_limited
        else "enabled = false\nper_minute = 600\nburst = 120"
    )
    for pattern, replacement in (
        (r"(?m)^public_url = .*$", f'public_url = "http://127.0.0.1:{port}"'),
        (r"(?m)^database = .*$", f'database = "sqlite:///{database}"'),
        (r"\[rate_limit\]\nenabled = \w+\nper_minute = \d+\nburst = \d+", "[rate_limit]\n" + limit),
    ):
        text, count = re.subn(pattern, replacement.replace("\\", "\\\\"), text, count=1)
        if count != 1:
            raise SystemExit(f"the demo configuration changed: {pattern!r} not found")
    tomllib.loads(text)
    path.write_text(text)
    return path


# -- Poppy ------------------------------------------------------------------------------


class PoppyCaller:
    """A guest Session minted on the server's database, and fresh DPoP proofs for its calls."""

    def __init__(self, config: Path, url: str) -> None:
        from aap.agent import DealerAgent
        from aap.client.poppy_auth import DpopKey
        from aap.config.loader import load_settings
        from aap.gateway import Gateway
        from aap.poppy import tokens
        from aap.poppy.context import PoppyContext
        from aap.store import open_stores

        settings = load_settings(str(config), environ={})
        stores = open_stores(settings.database_url)
        try:
            ctx = PoppyContext(Gateway.of(DealerAgent(settings, stores)), settings.poppy, stores.poppy, None)
            self.key = DpopKey()
            now = time.time()
            self.token, expires_at = tokens.mint(ctx, jkt=self.key.thumbprint, resource=None, now=now)
            ctx.store.start_session(
                jkt=self.key.thumbprint,
                client_id="https://agent.example/bench",
                sub="usr_bench",
                agent_id=None,
                token=self.token,
                token_type="DPoP",
                resource=None,
                expires_at=expires_at,
                idle_ttl=settings.poppy.session_idle_ttl,
                consumed=[],
            )
        finally:
            stores.close()
        self.url = url

    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"DPoP {self.token}",
            "Content-Type": "application/json",
            "DPoP": self.key.proof("POST", self.url, access_token=self.token),
        }

    def proofs(self, count: int) -> list[str]:
        """``count`` fresh proofs, signed before the run. Their ``iat`` is when the run will start
        (up to 30 s ahead): on a busy machine signing 30,000 took longer than the issuer's
        acceptance window (``dpop_iat_window``, 60 s), and the first ones were refused."""
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            self.key.proof("POST", self.url, access_token=self.token)
            timings.append(time.perf_counter() - started)
        iat = int(time.time() + min(30.0, statistics.median(timings) * count))
        return [self.key.proof("POST", self.url, access_token=self.token, iat=iat) for _ in range(count)]


# -- load generators ----------------------------------------------------------------------

WRK_SCRIPT = r"""
local body_file, proof_file = ...
wrk.method = "POST"
local proofs = {}
local n = 0
init = function(args)
  local f = io.open(args[1], "rb"); wrk.body = f:read("*a"); f:close()
  if args[2] then for line in io.lines(args[2]) do proofs[#proofs + 1] = line end end
end
request = function()
  if #proofs == 0 then return wrk.format(nil, nil, nil, nil) end
  n = n + 1
  wrk.headers["DPoP"] = proofs[(n - 1) % #proofs + 1]
  return wrk.format(nil, nil, nil, nil)
end
done = function(summary, latency, requests)
  io.write(string.format(
    '\n{"requests": %d, "duration_us": %d, "status_errors": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "mean_us": %f}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
"""


def run_wrk(
    target: Target,
    base: str,
    seconds: float,
    connections: int,
    core: str | None,
    workdir: Path,
    proofs: list[str] | None,
) -> dict[str, float]:
    script = workdir / "bench.lua"
    script.write_text(WRK_SCRIPT)
    body = workdir / f"{target.name.replace(' ', '_')}.body"
    body.write_bytes(target.body)
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s", "-s", str(script)]
    for name, value in {"Content-Type": "application/json", **target.headers}.items():
        if name != "DPoP":
            argv += ["-H", f"{name}: {value}"]
    argv += [base + target.path, "--", str(body)]
    if proofs is not None:
        proof_file = workdir / "proofs.txt"
        proof_file.write_text("\n".join(proofs) + "\n")
        argv.append(str(proof_file))
    out = subprocess.run(pinned(core, argv), capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {
        "requests": result["requests"],
        "seconds": result["duration_us"] / 1e6,
        "errors": result["status_errors"] + result["socket_errors"],
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
    }


async def _python_load(host: str, port: int, requests: list[bytes], connections: int, seconds: float) -> dict:
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []
    errors = 0
    counter = 0

    async def connection() -> None:
        nonlocal errors, counter
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < stop_at:
                request = requests[counter % len(requests)]
                counter += 1
                started = time.perf_counter()
                writer.write(request)
                status = int((await reader.readline()).split()[1])
                length, chunked = 0, False
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
                        chunked = True
                if chunked:
                    while size := int((await reader.readline()).strip(), 16):
                        await reader.readexactly(size + 2)
                    await reader.readline()
                else:
                    await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                errors += status >= 400
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(connections)))
    elapsed = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "errors": errors,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def raw_request(target: Target, port: int, dpop: str | None) -> bytes:
    headers = {
        "Host": f"127.0.0.1:{port}",
        "Content-Type": "application/json",
        "Content-Length": str(len(target.body)),
        **target.headers,
    }
    if dpop is not None:
        headers["DPoP"] = dpop
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST {target.path} HTTP/1.1\r\n{head}\r\n".encode() + target.body


def run_python_load(
    target: Target,
    port: int,
    seconds: float,
    connections: int,
    core: str | None,
    workdir: Path,
    proofs: list[str] | None,
) -> dict[str, float]:
    requests = [raw_request(target, port, p) for p in proofs] if proofs else [raw_request(target, port, None)]
    spec = workdir / "load.json"
    spec.write_text(
        json.dumps(
            {
                "port": port,
                "requests": [r.decode("latin-1") for r in requests],
                "connections": connections,
                "seconds": seconds,
            }
        )
    )
    argv = [sys.executable, __file__, "--python-load", str(spec)]
    out = subprocess.run(pinned(core, argv), capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- an OTLP/HTTP sink (--traced) ------------------------------------------------------------


def serve_otlp_sink(port: int) -> None:
    """Answer every ``POST /v1/traces`` with 200 after reading its body (nothing is kept)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    try:
        ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
    except KeyboardInterrupt:  # stopped at the end of the run
        pass


def start_sink(core: str | None, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(pinned(core, [sys.executable, __file__, "--serve-otlp-sink", str(port)]))
    for _ in range(200):  # bounded by count
        try:
            httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=b"", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit("the OTLP sink did not start")


# -- the run ----------------------------------------------------------------------------


def measure(
    target: Target, server: Server, args: argparse.Namespace, workdir: Path, poppy: PoppyCaller | None, seconds: float
) -> dict[str, float]:
    proofs = None
    if target.kind == "poppy":
        assert poppy is not None
        proofs = poppy.proofs(int(seconds * args.poppy_rate) + 100)
    runner = run_wrk if args.loadgen == "wrk" else run_python_load
    before = cpu_seconds(server.proc.pid)
    if runner is run_wrk:
        result = run_wrk(target, server.base, seconds, args.connections, args.client_core, workdir, proofs)
    else:
        result = run_python_load(target, server.port, seconds, args.connections, args.client_core, workdir, proofs)
    cpu = cpu_seconds(server.proc.pid) - before
    result["rps"] = result["requests"] / result["seconds"]
    result["cpu_ms"] = cpu * 1000 / max(1, result["requests"])
    return result


def check_answers(targets: list[Target], servers: dict[str, Server], poppy: PoppyCaller | None) -> dict[str, Any]:
    """Every target answers the same page and total before anything is measured."""
    pages = {}
    for target in targets:
        headers = {"Content-Type": "application/json", **target.headers}
        if target.kind == "poppy":
            assert poppy is not None
            headers.update(poppy.headers())
        response = httpx.post(
            servers[target.server].base + target.path, content=target.body, headers=headers, timeout=60
        )
        page = page_of(target.kind, response.json())
        pages[target.name] = (page["total"], [v["vehicle_id"] for v in page["vehicles"]])
    reference = pages["floor"]
    for name, page in pages.items():
        if page != reference:
            raise SystemExit(f"{name} answers another page or total than the floor: {page[0]} vs {reference[0]}")
    return {"total": reference[0], "page": len(reference[1])}


def errors_counted(server: Server) -> int:
    text = httpx.get(server.base + "/metrics", timeout=30).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith("aap_errors_total{"))


def summarise(targets: list[Target]) -> list[str]:
    floor = targets[0]
    lines = [
        "| target | req/s | p50 ms | p99 ms | server CPU/request ms | CPU ratio (median) | p99 ratio (median) | req/s ratio (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target in targets:

        def median(key: str) -> float:
            return statistics.median(run[key] for run in target.runs)

        def ratio(key: str) -> float:
            return statistics.median(run[key] / base[key] for run, base in zip(target.runs, floor.runs))

        lines.append(
            f"| {target.name} | {median('rps'):,.0f} | {median('p50_ms'):.2f} | {median('p99_ms'):.2f} | "
            f"{median('cpu_ms'):.3f} | {ratio('cpu_ms'):.2f}× | {ratio('p99_ms'):.2f}× | {ratio('rps'):.2f}× |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listings", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per target per round")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds per target before the first round")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--price-max", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database", type=Path, help="reuse or create this SQLite file (default: a temp file)")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--client-core", default="1")
    parser.add_argument("--loadgen", choices=("wrk", "python"), default="wrk" if shutil.which("wrk") else "python")
    parser.add_argument(
        "--stacks", help=f"comma-separated server stacks ({', '.join(STACKS)}; default: every one installed but h11's)"
    )
    parser.add_argument("--plain-uvicorn", action="store_true", help="the stack asyncio-h11 only")
    parser.add_argument("--only", help="comma-separated target names to run (the floor always runs)")
    parser.add_argument("--poppy-rate", type=float, default=3000, help="proofs signed per second of a Poppy run")
    parser.add_argument("--python-load", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", nargs=2, metavar=("DATABASE", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help="also a server exporting traces (OTLP/HTTP)")
    parser.add_argument("--serve-otlp-sink", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.serve_otlp_sink:
        serve_otlp_sink(args.serve_otlp_sink)
        return
    if args.serve_floor:
        serve_floor(args.serve_floor[0], int(args.serve_floor[1]))
        return
    if args.python_load:
        spec = json.loads(Path(args.python_load).read_text())
        result = asyncio.run(
            _python_load(
                "127.0.0.1",
                spec["port"],
                [r.encode("latin-1") for r in spec["requests"]],
                spec["connections"],
                spec["seconds"],
            )
        )
        print(json.dumps(result))
        return

    workdir_handle = tempfile.TemporaryDirectory(prefix="aap-bench-floor-")
    workdir = Path(workdir_handle.name)
    database = args.database or workdir / "aap.db"
    if args.database is None or not database.exists():
        seconds, make = build_database(database, args.listings, args.seed)
        print(f"inventory: {args.listings} listings imported in {seconds:.1f} s")
    conn = sqlite3.connect(database)
    make = conn.execute(
        "SELECT make FROM inv_listing WHERE currency = 'USD' GROUP BY make_k ORDER BY COUNT(*) DESC LIMIT 1"
    ).fetchone()[0]
    listings = conn.execute("SELECT COUNT(*) FROM inv_listing").fetchone()[0]
    # A reused database may hold a remembered total of query (a) (one count that took 20 ms,
    # under a profiler say): aap would then skip the COUNT the floor does on every request.
    conn.execute("DELETE FROM inv_count")
    conn.commit()
    conn.close()
    floor_db = workdir / "floor.db"
    build_floor(database, floor_db)

    stacks = [name.strip() for name in args.stacks.split(",")] if args.stacks else available_stacks()
    if args.plain_uvicorn:
        stacks = ["asyncio-h11"]
    unknown = [name for name in stacks if name not in STACKS]
    if unknown:
        raise SystemExit(f"unknown stack {', '.join(unknown)}: choose from {', '.join(STACKS)}")
    print(f"load generator {args.loadgen}; {args.connections} connections; stacks: {', '.join(stacks)}", flush=True)
    reports = [run_stack(STACKS[name], args, workdir, database, floor_db, make, listings) for name in stacks]
    for stack_name, report in zip(stacks, reports):
        print(f"\n## {STACKS[stack_name].description}\n")
        print("\n".join(report))
    print(
        f"\nload average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "(a shared machine: compare the ratios, which are taken within each round)"
    )
    workdir_handle.cleanup()


def run_stack(
    stack: Stack, args: argparse.Namespace, workdir: Path, database: Path, floor_db: Path, make: str, listings: int
) -> list[str]:
    """Start the floor and the aap servers on ``stack``, measure every target, stop them: the report."""
    python = [sys.executable, "-c", stack.aap_hides + "import runpy; runpy.run_module('aap', run_name='__main__')"]
    floor_cmd = [
        sys.executable,
        "-c",
        stack.floor_hides + "import runpy, sys; sys.argv[0] = 'bench_floor'; "
        f"runpy.run_path({str(Path(__file__))!r}, run_name='__main__')",
    ]
    ports = {name: free_port() for name in ("floor", "aap", "aap-nolimit", "aap-traced", "otlp-sink")}
    servers: dict[str, Server] = {}
    logdir = workdir / stack.name
    logdir.mkdir(exist_ok=True)
    sink = start_sink(args.client_core, ports["otlp-sink"]) if args.traced else None
    try:
        servers["floor"] = start(
            "floor",
            pinned(args.server_core, floor_cmd + ["--serve-floor", str(floor_db), str(ports["floor"])]),
            ports["floor"],
            logdir,
        )
        for name, limited in (("aap", True), ("aap-nolimit", False)):
            config = aap_config(logdir / f"{name}.toml", ports[name], database, limited)
            servers[name] = start(
                name,
                pinned(args.server_core, python + ["serve", "--config", str(config), "--port", str(ports[name])]),
                ports[name],
                logdir,
            )
        if args.traced:
            config = aap_config(logdir / "aap-traced.toml", ports["aap-traced"], database, True)
            servers["aap-traced"] = start(
                "aap-traced",
                pinned(
                    args.server_core, python + ["serve", "--config", str(config), "--port", str(ports["aap-traced"])]
                ),
                ports["aap-traced"],
                logdir,
                {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['otlp-sink']}"},
            )
        for name in servers:
            if name != "floor":
                wait_indexed(logdir / f"{name}.log")
        start_rss = {name: max(peak_rss_kib(s.proc.pid).values()) / 1024 for name, s in servers.items()}

        request = search(make, args.price_max)
        poppy_url = servers["aap"].base + "/poppy/v1/inventory.search"
        poppy = PoppyCaller(logdir / "aap.toml", poppy_url)
        mcp_new, mcp_new_headers = mcp_body(request, "2026-07-28")
        mcp_old, mcp_old_headers = mcp_body(request, "2025-11-25")
        targets = [
            Target("floor", "floor", "floor", "/a2a", a2a_body(request), {}),
            Target("a2a (default: rate limit on)", "a2a", "aap", "/a2a", a2a_body(request), {"A2A-Version": "1.0"}),
            Target("a2a (rate limit off)", "a2a", "aap-nolimit", "/a2a", a2a_body(request), {"A2A-Version": "1.0"}),
            Target("mcp 2026-07-28", "mcp", "aap", "/mcp", mcp_new, mcp_new_headers),
            Target("mcp 2025-11-25", "mcp", "aap", "/mcp", mcp_old, mcp_old_headers),
            Target(
                "poppy",
                "poppy",
                "aap",
                "/poppy/v1/inventory.search",
                orjson.dumps(request),
                {"Authorization": f"DPoP {poppy.token}"},
            ),
        ]
        if args.traced:
            a2a_headers = {"A2A-Version": "1.0"}
            targets += [
                Target("a2a (traces on)", "a2a", "aap-traced", "/a2a", a2a_body(request), a2a_headers),
                Target("mcp 2026-07-28 (traces on)", "mcp", "aap-traced", "/mcp", mcp_new, mcp_new_headers),
            ]
        if args.only:
            wanted = {name.strip() for name in args.only.split(",")}
            targets = [t for t in targets if t.kind == "floor" or t.name in wanted or t.kind in wanted]
        answer = check_answers(targets, servers, poppy)
        errors_before = {name: errors_counted(s) for name, s in servers.items() if name != "floor"}
        print(
            f"\n{stack.description}: {listings} listings; query (a): make={make!r} price_max={args.price_max}, "
            f"sort price, {answer['page']} of {answer['total']} per page; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )

        for target in targets:  # warm-up: caches, statement caches, the page cache
            measure(target, servers[target.server], args, workdir, poppy, args.warmup)
        for round_no in range(args.rounds):
            order = targets[round_no % len(targets) :] + targets[: round_no % len(targets)]
            for target in order:
                run = measure(target, servers[target.server], args, workdir, poppy, args.duration)
                if run["errors"]:
                    raise SystemExit(f"{target.name}: {run['errors']:.0f} failed requests in round {round_no + 1}")
                target.runs.append(run)
            floor = targets[0].runs[-1]
            print(
                f"round {round_no + 1}: "
                + "; ".join(
                    f"{t.name} {t.runs[-1]['rps']:,.0f} req/s cpu {t.runs[-1]['cpu_ms']:.3f} ms "
                    f"({t.runs[-1]['cpu_ms'] / floor['cpu_ms']:.2f}×) p99 {t.runs[-1]['p99_ms']:.1f} ms"
                    for t in targets
                ),
                flush=True,
            )
        for name, before in errors_before.items():
            if errors_counted(servers[name]) != before:
                raise SystemExit(f"{name} answered errors during the run (see aap_errors_total)")
        peaks = {name: max(peak_rss_kib(s.proc.pid).values()) / 1024 for name, s in servers.items()}
    finally:
        for server in servers.values():
            stop(server)
        if sink is not None:
            stop_process(sink)
    report = summarise(targets)
    report += ["", "| server | RSS after start | peak RSS |", "|---|---|---|"]
    report += [f"| {name} | {start_rss[name]:.1f} MiB | {peaks[name]:.1f} MiB |" for name in servers]
    return report


def wait_indexed(log: Path) -> None:
    """Wait (bounded by count) until an aap server's log says its posting index is built."""
    for _ in range(1200):
        text = log.read_text(errors="replace") if log.exists() else ""
        if "posting index built" in text or "posting index build failed" in text:
            return
        time.sleep(0.25)
    print(f"warning: {log.name} never logged its posting index; measuring regardless", flush=True)


if __name__ == "__main__":
    main()
