"""The adversarial suite at scale, against a real ``aap serve``: how many 5xx, and what a refusal
costs the server.

Four parts, one server (the packaged demo dealer group, 2,000 listings, rate limit off, a
signed-in Poppy client):

0. **Heads.** What the HTTP server's own protocol (aap.server.protocol) spends refusing heads
   over ``[server]``'s limits before the app sees them: the costliest heads under and just over
   each limit (request line, one field, the field count, the head in all), a 1 MB header field
   (server CPU, and the client's time to the 431), a 256 MB one (server CPU while the client
   sends until it is cut off, and ``/healthz`` answered meanwhile), and 16 parallel 32 MB
   headers (server RSS before and after). ``--heads-only`` runs this part alone.
1. **Worst refusals.** Hand-made requests just under the 1 MiB body cap that cost the most to
   refuse before the request bounds (docs/search.md, "Request bounds") existed (100,000 feature codes, 100,000 distinct makes, 60,000 filter names,
   a 1 MiB string, deep nesting, garbage the JSON reader chews on, a lead with a 1 MiB
   message, an MCP call the SDK reads, OAuth forms), each sent ``--repeat`` times over every
   door it fits; for each, the server CPU per request (mean and max).
2. **The suite.** ``--examples`` requests from the generators of tests/adversarial_support.py
   (A2A, MCP at both revisions, the Poppy API, the OAuth token endpoint) and schemathesis over
   both OpenAPI documents, judged by the same verdicts as tests/test_adversarial.py; per door:
   answers by status, 5xx, verdict failures, server CPU per request (p50, p99, max) and per
   refusal (max).
3. **Sign-ins.** 40 sign-ins at once with unknown e-mails (the per-address limit raised, so only
   the hash gate bounds them): the server's RSS before, at its peak (sampled every 5 ms) and
   after, and the answers; then 30 guesses at one account at once: how many were checked
   (answered 401) against ``[web] login_failures_per_account``. argon2id at its real costs.

Server CPU is the sum over the server process's threads of ``/proc/<pid>/task/*/schedstat``
(time on a CPU, in nanoseconds), read before and after each request, one request at a time;
the server is idle between requests, so each difference is that request's CPU. The target
(docs/benchmarks.md, "Adversarial requests"): no request under the body cap costs more than 20 ms of server CPU before it is
refused.

    python bench/adversarial.py --examples 20000
    python bench/adversarial.py --examples 2000 --repeat 20 --json out.json
    python bench/adversarial.py --heads-only --repeat 10

Everything runs on loopback (the server trusts the bench's throw-away CA for the client's
metadata through ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the suite's generators and verdicts, the reference Poppy client
sys.path.insert(0, str(ROOT / "bench"))

from common import percentile, stop_process, wait_healthy  # noqa: E402

DEMO_CONFIG = ROOT / "src" / "aap" / "config" / "demo.toml"
TARGET_MS = 20.0
BENCH_ACCOUNT = "bench@demo.example"
BENCH_PASSWORD = "a long bench passphrase"


def server_cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds (schedstat's first field)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base: str
    log: Any

    def cpu_ms_of(self, send: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
        """Send one request; its answer and the server CPU it cost, in milliseconds."""
        before = server_cpu_ns(self.proc.pid)
        response = send()
        time.sleep(0.001)  # the last bookkeeping after the answer (access log, metrics)
        return response, (server_cpu_ns(self.proc.pid) - before) / 1e6

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def configure(directory: Path, port: int, client_id: str) -> Path:
    """The demo configuration on a bench database: rate limit off, only the bench's Poppy client."""
    text = DEMO_CONFIG.read_text()
    text = text.replace('public_url = "http://127.0.0.1:8000"', f'public_url = "http://127.0.0.1:{port}"', 1)
    text = text.replace('database = "sqlite:///aap-demo.db"', f'database = "sqlite:///{directory}/aap.db"', 1)
    text = text.replace("[rate_limit]\nenabled = true", "[rate_limit]\nenabled = false", 1)
    text += f'\n[poppy]\nallow_loopback_clients = true\nallowed_clients = ["{client_id}"]\n'
    text += "\n[web]\nlogin_failures_per_address = 100000\n"  # part 3: the hash gate alone bounds the storm
    path = directory / "aap.toml"
    path.write_text(text)
    return path


def start(directory: Path, config: Path, port: int, ca_file: Path, listings: int) -> Server:
    aap = [sys.executable, "-m", "aap"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")} | {"SSL_CERT_FILE": str(ca_file)}
    feed = directory / "feed.jsonl"
    subprocess.run(
        [*aap, "demo-inventory", "--config", str(config), "-n", str(listings), "-o", str(feed)],
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run(
        [*aap, "import", str(feed), "--config", str(config), "--replace"], check=True, env=env, capture_output=True
    )
    subprocess.run(
        [*aap, "users", "add", BENCH_ACCOUNT, "--password-stdin", "--config", str(config)],
        input=(BENCH_PASSWORD + "\n").encode(),
        check=True,
        env=env,
        capture_output=True,
    )
    log = open(directory / "server.log", "wb")
    proc = subprocess.Popen(
        [*aap, "serve", "--config", str(config), "--port", str(port), "--log-level", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    return Server(proc, base, log)


# -- part 3: sign-ins ------------------------------------------------------------------------------


def measure_sign_ins(server: Server) -> dict[str, Any]:
    """40 sign-ins at once with unknown e-mails (RSS sampled meanwhile), then 30 guesses at once at
    one account (how many were checked)."""
    import threading
    from collections import Counter

    from console_attacks import race

    peak = [rss_kib(server.proc.pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak.append(rss_kib(server.proc.pid))

    before = peak[0]
    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    storm = race(server.base, [(f"nobody{i}@demo.example", "a guess at a password") for i in range(40)])
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    after = rss_kib(server.proc.pid)
    guesses = race(server.base, [(BENCH_ACCOUNT, f"guess number {i}") for i in range(30)])
    return {
        "storm": {
            "requests": len(storm),
            "statuses": dict(sorted(Counter(storm).items())),
            "seconds": round(seconds, 2),
            "rss_mib": [round(before / 1024, 1), round(max(peak) / 1024, 1), round(after / 1024, 1)],
            "rss_rise_mib": round((max(peak) - before) / 1024, 1),
        },
        "race": {
            "guesses": len(guesses),
            "statuses": dict(sorted(Counter(guesses).items())),
            "checked": guesses.count(401),
            "limit": 5,
        },
    }


# -- part 1: the worst refusals -------------------------------------------------------------------


def worst_refusals(max_body: int) -> dict[str, tuple[str, Any]]:
    """name -> (door, AAP payload or raw body) of the costliest requests under the body cap."""
    near = max_body - 4096
    return {
        "features_all: 100,000 x 'x'": (
            "aap",
            {"type": "inventory.search.request", "filters": {"features_all": ["x"] * 100_000}},
        ),
        "make: 100,000 distinct values": (
            "aap",
            {"type": "inventory.search.request", "filters": {"make": [f"m{i}" for i in range(90_000)]}},
        ),
        "filters: 60,000 members": (
            "aap",
            {"type": "inventory.facets.request", "filters": {f"f{i}": i for i in range(60_000)}},
        ),
        "query: one 1 MiB string": (
            "aap",
            {"type": "inventory.search.request", "filters": {"query": "x " * (near // 2)}},
        ),
        "120,000 integers in pagination": (
            "aap",
            {"type": "inventory.search.request", "pagination": {"limit": list(range(120_000))}},
        ),
        "nesting 500 deep": ("aap", {"type": "inventory.search.request", "filters": json.loads("[" * 500 + "]" * 500)}),
        "lead: 1 MiB message and 50,000 features": (
            "aap",
            {
                "type": "lead.submit.request",
                "message": "m" * (near // 2),
                "vehicle_of_interest": {"features": [{"code": "x", "status": "present"}] * 12_000},
            },
        ),
        "vehicle: 1 MiB stock": ("aap", {"type": "inventory.vehicle.request", "stock": "S" * near}),
        "A2A: 1 MiB that is not JSON": ("a2a-raw", b"{" * near),
        "MCP: a batch of 5,000 tool calls": (
            "mcp-raw",
            json.dumps(
                [
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request"}},
                    }
                    for i in range(5_000)
                ]
            ).encode(),
        ),
        "MCP: a call for the SDK with 100,000 features": (
            "mcp-sdk",
            {"type": "inventory.search.request", "filters": {"features_all": ["x"] * 100_000}},
        ),
        "OAuth: a 32 KiB form of garbage": ("token", b"client_id=" + b"A" * 32_000),
        "OAuth: a 1 MiB form": ("token", b"assertion=" + b"B" * near),
    }


def measure_worst(server: Server, client: Any, repeat: int) -> list[dict[str, Any]]:
    """Every worst refusal over every door it fits, ``repeat`` times: server CPU per request."""
    from aap.skills.catalog import SKILLS
    from adversarial_support import ACCEPT, LEGACY, encode

    by_type = {s.request_type: s for s in SKILLS.values()}
    rows = []
    http = httpx.Client(base_url=server.base, timeout=120)
    for name, (door, payload) in worst_refusals(1_048_576).items():
        sends: dict[str, Callable[[], httpx.Response]] = {}
        if door == "aap":
            skill = by_type[payload["type"]]
            a2a = encode(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": payload}]}},
                }
            )
            mcp = encode(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": skill.tool_name, "arguments": payload},
                }
            )
            poppy_body = encode(payload)
            url = client.operation_url(skill.operation_id)
            sends = {
                "a2a": lambda body=a2a: http.post("/a2a", content=body, headers={"Content-Type": "application/json"}),
                "mcp": lambda body=mcp: http.post(
                    "/mcp",
                    content=body,
                    headers={"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY},
                ),
                "poppy": lambda body=poppy_body, url=url: client.http.post(
                    url, content=body, headers={**client.auth_headers("POST", url), "Content-Type": "application/json"}
                ),
            }
        elif door == "a2a-raw":
            sends = {"a2a": lambda: http.post("/a2a", content=payload, headers={"Content-Type": "application/json"})}
        elif door == "mcp-raw":
            sends = {
                "mcp": lambda: http.post(
                    "/mcp",
                    content=payload,
                    headers={"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY},
                )
            }
        elif door == "mcp-sdk":  # an extra member: not a plain call, so the SDK reads it
            body = encode(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "x": 1,
                    "params": {"name": "aap_inventory_search", "arguments": payload},
                }
            )
            sends = {
                "mcp (SDK)": lambda: http.post(
                    "/mcp",
                    content=body,
                    headers={"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY},
                )
            }
        elif door == "token":
            endpoint = client.issuer_metadata["token_endpoint"]
            sends = {
                "oauth": lambda: http.post(
                    endpoint, content=payload, headers={"Content-Type": "application/x-www-form-urlencoded"}
                )
            }
        for where, send in sends.items():
            costs, statuses = [], set()
            for _ in range(repeat):
                response, cpu = server.cpu_ms_of(send)
                statuses.add(response.status_code)
                costs.append(cpu)
            rows.append(
                {
                    "request": name,
                    "door": where,
                    "statuses": sorted(statuses),
                    "bytes": _size(send),
                    "cpu_ms_mean": round(statistics.mean(costs), 2),
                    "cpu_ms_max": round(max(costs), 2),
                }
            )
    http.close()
    return rows


def _size(send: Callable[[], httpx.Response]) -> int:
    defaults = getattr(send, "__defaults__", None) or ()
    return next((len(d) for d in defaults if isinstance(d, bytes)), 0)


# -- part 0: heads, refused by the server's protocol ---------------------------------------------------


def _head(target: str = "/healthz", fields: list[tuple[str, str]] | None = None, method: str = "GET") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: bench", *(f"{n}: {v}" for n, v in fields or []), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _answer(sock: socket.socket) -> int:
    """The status of the answer on ``sock`` (0: closed or reset without one); reads to the end."""
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def _exchange(port: int, data: bytes) -> tuple[int, float]:
    """Send ``data`` on a new connection: the answer's status and the milliseconds until it began."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(60)
        start = time.perf_counter()
        try:
            sock.sendall(data)
        except OSError:
            pass  # cut off while sending: what was answered is read below
        first = sock.recv(12)
        elapsed = (time.perf_counter() - start) * 1000
        rest = _answer(sock) if first.startswith(b"HTTP/1.1") else 0
        status = int(first.split(b" ")[1]) if first.startswith(b"HTTP/1.1 ") else rest
    return status, elapsed


def worst_heads() -> dict[str, bytes]:
    """name -> the raw request: the costliest heads at, and just past, each default limit."""
    line = len("GET") + len("/healthz") + 10
    budget = 32_768 - line - len("Host") - len("bench") - len("Connection") - len("close")
    at_head = [(f"X{i:02d}", "v" * (budget // 8 - 3)) for i in range(8)]
    at_head[-1] = (at_head[-1][0], at_head[-1][1] + "v" * (budget % 8))  # exactly 32768 in all
    return {
        "request line at 8192 bytes (served)": _head("/healthz?q=" + "a" * (8192 - line - 3)),
        "request line at 8193 bytes (414)": _head("/healthz?q=" + "a" * (8192 - line - 2)),
        "one field at 8192 bytes (served)": _head(fields=[("X-Pad", "p" * (8192 - 5))]),
        "one field at 8193 bytes (431)": _head(fields=[("X-Pad", "p" * (8192 - 4))]),
        "100 fields (served)": _head(fields=[(f"X-{i}", "v") for i in range(98)]),  # and Host, Connection
        "101 fields (431)": _head(fields=[(f"X-{i}", "v") for i in range(99)]),
        "head at 32768 bytes in 8 fields (served)": _head(fields=at_head),
        "head at 32769 bytes (431)": _head(fields=[*at_head[:-1], (at_head[-1][0], at_head[-1][1] + "v")]),
        "4,000 fields of 8 bytes (431)": _head(fields=[(f"X{i:04d}", "vvv") for i in range(4000)]),
        "a 64 KiB request line (414)": _head("/healthz?q=" + "a" * 65_536),
        "a 1 MB header field (431)": _head(fields=[("Poppy-Session", "e" * 1_000_000)]),
    }


def measure_heads(server: Server, repeat: int) -> dict[str, Any]:
    """Part 0: server CPU per refused head; a 256 MB header; 16 parallel 32 MB headers."""
    port = int(server.base.rsplit(":", 1)[1])
    rows = []
    for name, data in worst_heads().items():
        costs, latencies, statuses = [], [], set()
        for _ in range(repeat):
            before = server_cpu_ns(server.proc.pid)
            status, elapsed = _exchange(port, data)
            time.sleep(0.005)  # the access-log line and the connection's close
            costs.append((server_cpu_ns(server.proc.pid) - before) / 1e6)
            latencies.append(elapsed)
            statuses.add(status)
        rows.append(
            {
                "request": name,
                "bytes": len(data),
                "statuses": sorted(statuses),
                "cpu_ms_mean": round(statistics.mean(costs), 2),
                "cpu_ms_max": round(max(costs), 2),
                "answer_ms_max": round(max(latencies), 2),
            }
        )
    return {"worst_heads": rows, "huge_header": huge_header(server, port), "parallel": parallel_headers(server, port)}


def _send_forever(port: int, total: int, outcome: dict[str, Any]) -> None:
    """One header field of ``total`` bytes, sent until done or cut off."""
    piece = b"a" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(60)
        sent = 0
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nPoppy-Session: ")
            while sent < total:
                sock.sendall(piece)
                sent += len(piece)
            sock.sendall(b"\r\n\r\n")
            outcome["status"] = _answer(sock)
        except OSError as exc:
            outcome["cut_off"] = type(exc).__name__
            outcome["status"] = _answer(sock)
        outcome["sent_mib"] = round(sent / (1 << 20), 1)


def huge_header(server: Server, port: int, total: int = 256 << 20) -> dict[str, Any]:
    """A 256 MB header field: the server's CPU while it is sent (alone), then the same send
    with ``/healthz`` asked every 20 ms meanwhile (its slowest answer)."""
    outcome: dict[str, Any] = {}
    before = server_cpu_ns(server.proc.pid)
    start = time.perf_counter()
    _send_forever(port, total, outcome)
    seconds = time.perf_counter() - start
    time.sleep(0.05)
    outcome["server_cpu_ms"] = round((server_cpu_ns(server.proc.pid) - before) / 1e6, 2)
    outcome["client_seconds"] = round(seconds, 3)
    meanwhile: dict[str, Any] = {}
    thread = threading.Thread(target=_send_forever, args=(port, total, meanwhile))
    health = []
    with httpx.Client(base_url=server.base, timeout=60) as http:
        thread.start()
        while thread.is_alive() or len(health) < 5:
            asked = time.perf_counter()
            status = http.get("/healthz").status_code
            health.append(((time.perf_counter() - asked) * 1000, status))
            time.sleep(0.02)
    thread.join()
    outcome["healthz_answers"] = len(health)
    outcome["healthz_statuses"] = sorted({status for _, status in health})
    outcome["healthz_ms_max"] = round(max(ms for ms, _ in health), 2)
    return outcome


def parallel_headers(server: Server, port: int, count: int = 16, size: int = 32 << 20) -> dict[str, Any]:
    """``count`` 32 MB header fields at once: the server's RSS before and after."""
    rss_before = rss_kib(server.proc.pid)
    outcomes: list[dict[str, Any]] = [{} for _ in range(count)]
    threads = [threading.Thread(target=_send_forever, args=(port, size, o)) for o in outcomes]
    peak = rss_before
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_kib(server.proc.pid))
        time.sleep(0.01)
    return {
        "connections": count,
        "statuses": sorted({o.get("status", 0) for o in outcomes}),
        "sent_mib_max": max(o.get("sent_mib", 0) for o in outcomes),
        "rss_mib": [round(rss_before / 1024, 1), round(peak / 1024, 1), round(rss_kib(server.proc.pid) / 1024, 1)],
    }


def print_heads(heads: dict[str, Any]) -> None:
    print("\n## heads refused by the server's protocol (server CPU per request, ms; client ms to the answer)")
    print(f"{'request':44} {'bytes':>9} {'status':>7} {'mean':>7} {'max':>7} {'answer':>8}")
    for row in heads["worst_heads"]:
        print(
            f"{row['request']:44} {row['bytes']:9} {'/'.join(map(str, row['statuses'])):>7} "
            f"{row['cpu_ms_mean']:7.2f} {row['cpu_ms_max']:7.2f} {row['answer_ms_max']:8.2f}"
        )
    huge = heads["huge_header"]
    print(
        f"\n256 MB header field: server CPU {huge['server_cpu_ms']} ms, client cut off after {huge['sent_mib']} MiB "
        f"({huge.get('cut_off', 'not cut off')}, status {huge['status']}) in {huge['client_seconds']} s; "
        f"/healthz meanwhile: {huge['healthz_answers']} answers {huge['healthz_statuses']}, "
        f"slowest {huge['healthz_ms_max']} ms"
    )
    par = heads["parallel"]
    print(
        f"{par['connections']} parallel 32 MB header fields: statuses {par['statuses']}, at most "
        f"{par['sent_mib_max']} MiB sent each; server RSS {par['rss_mib'][0]} -> peak {par['rss_mib'][1]} -> "
        f"{par['rss_mib'][2]} MiB"
    )


# -- part 2: the suite at scale -------------------------------------------------------------------


@dataclass
class Door:
    """What one door answered during the run."""

    costs: list[float] = field(default_factory=list)
    refusal_costs: list[float] = field(default_factory=list)

    def report(self, verdicts: Any) -> dict[str, Any]:
        costs = self.costs or [0.0]
        refusals = self.refusal_costs or [0.0]
        return {
            "requests": len(self.costs),
            "statuses": dict(sorted(verdicts.statuses.items())),
            "5xx": sum(n for status, n in verdicts.statuses.items() if status >= 500),
            "verdict_failures": len(verdicts.failures),
            "first_failures": verdicts.failures[:5],
            "cpu_ms_p50": round(percentile(costs, 0.5), 2),
            "cpu_ms_p99": round(percentile(costs, 0.99), 2),
            "cpu_ms_max": round(max(costs), 2),
            "refusal_cpu_ms_max": round(max(refusals), 2),
            "refusals_over_target": sum(1 for c in self.refusal_costs if c > TARGET_MS),
        }


def run_suite(server: Server, client: Any, examples: int, ca_file: Path) -> dict[str, Any]:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    from aap.skills.catalog import SKILLS
    from adversarial_support import Verdicts, a2a_bodies, aap_payloads, encode, mcp_exchanges, skill_of, token_requests
    from poppy_client import dpop_only

    shares = {
        "a2a": 0.25,
        "mcp": 0.30,
        "poppy": 0.15,
        "token": 0.15,
        "a2a schemathesis": 0.10,
        "poppy schemathesis": 0.05,
    }
    budget = {door: max(1, int(examples * share)) for door, share in shares.items()}
    common = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=False)
    http = httpx.Client(base_url=server.base, timeout=120)
    results: dict[str, Any] = {}

    def judged(door: str, refused: bool, cpu: float) -> None:
        seen = doors.setdefault(door, Door())
        seen.costs.append(cpu)
        if refused:
            seen.refusal_costs.append(cpu)

    doors: dict[str, Door] = {}

    v = Verdicts()

    @settings(max_examples=budget["a2a"], **common)
    @given(request=a2a_bodies())
    def a2a(request: Any) -> None:
        body, headers = request
        response, cpu = server.cpu_ms_of(lambda: http.post("/a2a", content=body, headers=headers))
        v.a2a(response.status_code, response.headers, response.content)
        judged("a2a", b'"error"' in response.content[:64], cpu)

    a2a()
    results["a2a"] = (v, "a2a")

    v_mcp = Verdicts()

    @settings(max_examples=budget["mcp"], **common)
    @given(exchange=mcp_exchanges())
    def mcp(exchange: Any) -> None:
        body, headers, tool = exchange
        response, cpu = server.cpu_ms_of(lambda: http.post("/mcp", content=body, headers=headers))
        v_mcp.mcp(response.status_code, response.headers, response.content, tool)
        refused = (
            response.status_code != 200 or b'"isError":true' in response.content or b'"error"' in response.content[:40]
        )
        judged("mcp", refused, cpu)

    mcp()
    results["mcp"] = (v_mcp, "mcp")

    v_poppy = Verdicts()
    skills = list(SKILLS.values())

    @settings(max_examples=budget["poppy"], **common)
    @given(payload=aap_payloads(), index=st.integers(0, len(skills) - 1))
    def poppy(payload: Any, index: int) -> None:
        skill = skill_of(payload) or skills[index]
        url = client.operation_url(skill.operation_id)
        headers = {**client.auth_headers("POST", url), "Content-Type": "application/json"}
        response, cpu = server.cpu_ms_of(lambda: client.http.post(url, content=encode(payload), headers=headers))
        v_poppy.poppy(response.status_code, response.headers, response.content, skill.id)
        judged("poppy", response.status_code != 200, cpu)

    poppy()
    results["poppy"] = (v_poppy, "poppy")

    v_token = Verdicts()
    endpoint = client.issuer_metadata["token_endpoint"]

    def proof() -> str:
        return client.agent.dpop_proof(client.session_key, "POST", endpoint)

    @settings(max_examples=budget["token"], **common)
    @given(request=st.builds(lambda: client.grant_form()).flatmap(lambda real: token_requests(real, proof)))
    def token(request: Any) -> None:
        body, headers = request
        response, cpu = server.cpu_ms_of(lambda: client.http.post(endpoint, content=body, headers=headers))
        v_token.oauth(response.status_code, response.headers, response.content)
        judged("oauth token", response.status_code != 200, cpu)

    token()
    results["oauth token"] = (v_token, "oauth token")
    client.start_session()  # the token run replaced the client's Session

    v_sa = Verdicts()
    document = http.get("/a2a/openapi.json").json()
    document["paths"] = {"/a2a": document["paths"]["/"]}
    document["servers"] = [{"url": server.base}]
    operation = next(r.ok() for r in schemathesis.openapi.from_dict(document).get_all_operations())
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

        @settings(max_examples=max(1, budget["a2a schemathesis"] // 2), **common)
        @given(case=operation.as_strategy(generation_mode=mode))
        def a2a_schema(case: Any) -> None:
            response, cpu = server.cpu_ms_of(lambda: case.call(base_url=server.base))
            v_sa.a2a(response.status_code, response.headers, response.content)
            judged("a2a schemathesis", b'"error"' in response.content[:64], cpu)

        a2a_schema()
    results["a2a schemathesis"] = (v_sa, "a2a schemathesis")

    v_sp = Verdicts()
    schema = schemathesis.openapi.from_dict(dpop_only(client.openapi))
    api = client.openapi["servers"][0]["url"]
    operations = [r.ok() for r in schema.get_all_operations()]

    def poppy_operation(operation: Any, mode: Any) -> None:
        url, skill_id = api + operation.path, operation.path.strip("/")

        @settings(max_examples=max(1, budget["poppy schemathesis"] // (2 * len(operations))), **common)
        @given(case=operation.as_strategy(generation_mode=mode))
        def poppy_schema(case: Any) -> None:
            response, cpu = server.cpu_ms_of(lambda: case.call(base_url=api, headers=client.auth_headers("POST", url)))
            v_sp.poppy(response.status_code, response.headers, response.content, skill_id)
            judged("poppy schemathesis", response.status_code != 200, cpu)

        poppy_schema()

    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            poppy_operation(operation, mode)
    results["poppy schemathesis"] = (v_sp, "poppy schemathesis")
    http.close()
    return {name: doors.get(door, Door()).report(verdicts) for name, (verdicts, door) in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="generated requests in all (part 2)")
    parser.add_argument("--repeat", type=int, default=30, help="sends of each worst refusal per door (part 1)")
    parser.add_argument("--listings", type=int, default=2_000)
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("--heads-only", action="store_true", help="part 0 (heads) alone")
    parser.add_argument("--only-sign-ins", action="store_true", help="run part 3 alone")
    args = parser.parse_args()

    from poppy_client import AgentHost, PersonalAgent, PoppyClient, TestCA
    from test_server_runner import free_port

    with tempfile.TemporaryDirectory(prefix="aap-adversarial-") as tmp:
        directory = Path(tmp)
        (directory / "ca").mkdir()
        ca = TestCA(directory / "ca")
        host = AgentHost(ca)
        agent = PersonalAgent(host, name="bench-agent")
        port = free_port()
        config = configure(directory, port, agent.client_id)
        server = start(directory, config, port, ca.ca_file, args.listings)
        try:
            client = PoppyClient(agent, server.base, ca.context())
            client.discover()
            client.start_session()
            warm_up(server, client)  # what a worker loads once (the MCP SDK on its first unusual call)
            rss_start = rss_kib(server.proc.pid)
            started = time.monotonic()
            alone = args.heads_only or args.only_sign_ins
            heads = None if args.only_sign_ins else measure_heads(server, args.repeat)
            worst = [] if alone else measure_worst(server, client, args.repeat)
            suite = {} if alone else run_suite(server, client, args.examples, ca.ca_file)
            sign_ins = None if args.heads_only else measure_sign_ins(server)
            report = {
                "examples": 0 if alone else args.examples,
                "repeat": args.repeat,
                "listings": args.listings,
                "seconds": round(time.monotonic() - started, 1),
                "server_rss_mib": [round(rss_start / 1024, 1), round(rss_kib(server.proc.pid) / 1024, 1)],
                "heads": heads,
                "worst_refusals": worst,
                "suite": suite,
                "target_ms": TARGET_MS,
                "worst_refusal_over_target": [
                    row for row in [*(heads or {}).get("worst_heads", []), *worst] if row["cpu_ms_max"] > TARGET_MS
                ],
                "sign_ins": sign_ins,
            }
            client.close()
        finally:
            server.stop()
            host.stop()
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def warm_up(server: Server, client: Any) -> None:
    """One ordinary request per door, so the run measures requests, not a worker's first imports."""
    from adversarial_support import ACCEPT, LEGACY, valid_payloads

    with httpx.Client(base_url=server.base, timeout=60) as http:
        for payload in (maker() for maker in valid_payloads().values()):
            http.post(
                "/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"message": {"messageId": "w", "role": "ROLE_USER", "parts": [{"data": payload}]}},
                },
            )
        headers = {"Accept": ACCEPT, "MCP-Protocol-Version": LEGACY}
        http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
        http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "aap_dealer_information", "arguments": {"type": "dealer.information.request"}},
            },
            headers=headers,
        )
    client.call("inventorySearch", {"type": "inventory.search.request"})


def print_report(report: dict[str, Any]) -> None:
    print(
        f"# adversarial run: {report['examples']} generated requests, worst refusals x{report['repeat']}, "
        f"{report['listings']} listings, {report['seconds']} s; server RSS {report['server_rss_mib'][0]} -> "
        f"{report['server_rss_mib'][1]} MiB"
    )
    if report["heads"] is not None:
        print_heads(report["heads"])
    print("\n## worst refusals under the body cap (server CPU per request, ms)")
    print(f"{'request':48} {'door':11} {'status':>8} {'mean':>7} {'max':>7}")
    for row in report["worst_refusals"]:
        print(
            f"{row['request']:48} {row['door']:11} {'/'.join(map(str, row['statuses'])):>8} "
            f"{row['cpu_ms_mean']:7.2f} {row['cpu_ms_max']:7.2f}"
        )
    print("\n## the suite")
    print(
        f"{'door':20} {'requests':>8} {'5xx':>5} {'fail':>5} {'p50':>6} {'p99':>6} {'max':>7} {'refusal max':>11}"
        f" {'>20ms':>6}  statuses"
    )
    for door, row in report["suite"].items():
        print(
            f"{door:20} {row['requests']:8} {row['5xx']:5} {row['verdict_failures']:5} {row['cpu_ms_p50']:6.2f} "
            f"{row['cpu_ms_p99']:6.2f} {row['cpu_ms_max']:7.2f} {row['refusal_cpu_ms_max']:11.2f} "
            f"{row['refusals_over_target']:6}  {row['statuses']}"
        )
        for failure in row["first_failures"]:
            print("    ", failure[:200])
    if report["sign_ins"] is None:
        return
    storm, guesses = report["sign_ins"]["storm"], report["sign_ins"]["race"]
    print("\n## sign-ins (argon2id, 64 MiB a hash)")
    print(
        f"40 at once, unknown e-mails: {storm['statuses']} in {storm['seconds']} s; server RSS "
        f"{storm['rss_mib'][0]} -> peak {storm['rss_mib'][1]} -> {storm['rss_mib'][2]} MiB "
        f"(+{storm['rss_rise_mib']} MiB)"
    )
    print(
        f"30 guesses at one account at once: {guesses['statuses']}; checked {guesses['checked']} (limit {guesses['limit']})"
    )


if __name__ == "__main__":
    main()
