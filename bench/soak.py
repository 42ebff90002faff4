"""Soak: mixed traffic against ``aap serve`` for ``--minutes``, the server killed with SIGKILL every
``--kill-every`` seconds, and a CRM that drops out; then an account of every lead.

The server is the packaged demo dealer group (2,000 listings) on SQLite with its lead delivery
worker inside, delivering ADF over HTTP to a CRM stand-in in this process. Client threads send
searches, facets, vehicle lookups and dealer information over A2A and MCP, and leads (A2A and
MCP alike), each lead retried with its idempotency key until it is acknowledged, as a buyer
agent would when the server vanishes under it.

The CRM cycles every two minutes: up; **down** (nothing listens: connection refused); answering
**503**; **hanging** (it reads the lead, then closes the connection without an answer after the
worker's timeout); up again. What it records decides the flags it should see: a lead reached
the CRM when a request of it arrived (whatever the answer), and was accepted when it was
answered 2xx.

Reported at the end (after killing stops and the outbox drains with the CRM up):

- leads **acked** (a lead.submit answer reached the client), **stored** (in the database),
  **delivered** (accepted by the CRM), **lost** (acked but not stored, or stored but never
  accepted), **duplicated** (one idempotency key stored as two leads, or one lead accepted
  twice by the CRM: what its Idempotency-Key header lets a CRM drop);
- **resend flags**: leads whose first arrival at the CRM said ``status="resend"``; those that
  had no earlier attempt that may have reached the CRM are **wrong**. An earlier attempt may
  have reached it when the server's log says it failed in a way that may have (a timeout, a
  lost connection, a 5xx), or when the log lacks an outcome for an attempt (the worker was
  killed holding the claim: it may have sent it);
- the server's **RSS** every 10 s, by server life (each life ends with a SIGKILL).

    python bench/soak.py                     # 10 minutes, SIGKILL every 60 s
    python bench/soak.py --minutes 2 --kill-every 30

Loopback only. The machine may be shared: the figures are for this run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from aap.util.rfc3339 import to_utc_z

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import free_port, stop_process  # noqa: E402

DEMO_CONFIG = ROOT / "src" / "aap" / "config" / "demo.toml"
ACCEPT = "application/json, text/event-stream"
CRM_CYCLE = [("up", 40), ("down", 20), ("503", 10), ("hang", 10), ("up", 40)]  # seconds each, repeated
WORKER_TIMEOUT = 2.0
NOT_REACHED = re.compile(r"^(ConnectError|ConnectTimeout|PoolTimeout) |^HTTP (408|425|429)$")


# -- the CRM -----------------------------------------------------------------------------------------


@dataclass
class Arrival:
    lead_id: str
    status: str  # the ADF prospect status: new | resend
    answer: str  # 200 | 503 | hang
    at: float


class Crm:
    """An ADF endpoint that follows :data:`CRM_CYCLE` from ``start``; records every arrival."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.arrivals: list[Arrival] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.mode = "up"
        self.forced_up = False

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        crm = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                lead_id = self.headers.get("X-AAP-Lead-Id", "")
                status = ET.fromstring(body).find("prospect").get("status", "?")
                mode = crm.mode
                answer = {"up": "200", "503": "503", "hang": "hang"}.get(mode, "200")
                with crm.lock:
                    crm.arrivals.append(Arrival(lead_id, status, answer, time.time()))
                if answer == "hang":
                    time.sleep(WORKER_TIMEOUT + 1)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # no answer, ever
                    return
                self.send_response(int(answer))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        return Handler

    def listen(self) -> None:
        if self.server is None:
            server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.server = server

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def run_cycle(self, stop: threading.Event) -> None:
        """Follow the cycle until ``stop``; then stay up."""
        while not stop.is_set():
            for mode, seconds in CRM_CYCLE:
                if stop.is_set() or self.forced_up:
                    break
                self.mode = mode
                if mode == "down":
                    self.close()
                else:
                    self.listen()
                stop.wait(seconds)
        self.mode = "up"
        self.listen()


# -- the server ------------------------------------------------------------------------------------


def configure(directory: Path, port: int, crm_port: int) -> Path:
    text = DEMO_CONFIG.read_text()
    text = text.replace('public_url = "http://127.0.0.1:8000"', f'public_url = "http://127.0.0.1:{port}"', 1)
    text = text.replace('database = "sqlite:///aap-demo.db"', f'database = "sqlite:///{directory}/aap.db"', 1)
    text = text.replace("[rate_limit]\nenabled = true", "[rate_limit]\nenabled = false", 1)
    text += f"""
[leads.delivery]
poll_seconds = 0.5
base_backoff_seconds = 1
max_backoff_seconds = 4
max_attempts = 100
lease_seconds = 5
timeout_seconds = {WORKER_TIMEOUT}

[[leads.routes]]
rooftop = "*"
[[leads.routes.targets]]
type = "adf_http"
name = "crm"
url = "http://127.0.0.1:{crm_port}/adf"
"""
    path = directory / "aap.toml"
    path.write_text(text)
    return path


@dataclass
class Lives:
    """The server's successive processes (each ends with a SIGKILL but the last)."""

    directory: Path
    config: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    rss: list[list[int]] = field(default_factory=list)  # KiB, every 10 s, per life

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.directory / f"server-{len(self.logs)}.log"
        self.logs.append(log)
        self.rss.append([])
        env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aap",
                    "serve",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.port),
                    "--log-format",
                    "json",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        for _ in range(600):  # bounded by count
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("the server did not come up: " + log.read_text()[-2000:])

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        stop_process(self.proc)

    def sample_rss(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.rss[-1].append(int(line.split()[1]))
        except FileNotFoundError:
            pass


# -- the clients -----------------------------------------------------------------------------------


def lead(key: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Soak",
            "last_name": "Test",
            "email": f"soak.{key[:8]}@example.org",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": to_utc_z(now - timedelta(minutes=1)),
            "expires_at": to_utc_z(now + timedelta(days=30)),
            "allowed_channels": ["email"],
            "consent_text": "I agree to be contacted by email.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": {"make": "Honda", "model": "Civic"},
        "source_agent": {"name": "soak"},
        "idempotency_key": key,
    }


READS = [
    {"type": "inventory.search.request", "filters": {"make": ["Honda"]}, "sort": {"field": "price", "order": "asc"}},
    {"type": "inventory.search.request", "filters": {"query": "awd"}},
    {"type": "inventory.facets.request", "filters": {"condition": ["used"]}},
    {"type": "dealer.information.request"},
    {"type": "inventory.search.request", "currency": "CAD", "pagination": {"limit": 50}},
]
TOOL = {
    "inventory.search.request": "aap_inventory_search",
    "inventory.facets.request": "aap_inventory_facets",
    "dealer.information.request": "aap_dealer_information",
    "lead.submit.request": "aap_lead_submit",
    "inventory.vehicle.request": "aap_inventory_vehicle",
}


def call(http: httpx.Client, base: str, payload: dict[str, Any], mcp: bool) -> dict[str, Any] | None:
    """The AAP answer (response or aap.error), or None when the server could not be reached."""
    try:
        if mcp:
            reply = http.post(
                base + "/mcp",
                headers={"Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"},
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": TOOL[payload["type"]], "arguments": payload},
                },
            )
            body = reply.json()
            return body["result"]["structuredContent"] if "result" in body else {"transport_error": body}
        reply = http.post(
            base + "/a2a",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": payload}]}
                },
            },
        )
        body = reply.json()
        if "result" in body:
            return body["result"]["message"]["parts"][0]["data"]
        return {"transport_error": body}
    except (httpx.HTTPError, ValueError):
        return None


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    unreachable: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    acked: dict[str, str] = field(default_factory=dict)  # idempotency key -> lead_id
    unacked: list[str] = field(default_factory=list)


def client(base: str, stop: threading.Event, tally: Tally, seed: int, lead_every: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=30) as http:
        n = 0
        while not stop.is_set():
            n += 1
            mcp = rng.random() < 0.4
            if n % lead_every == 0:
                key = str(uuid.uuid4())
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:  # a buyer agent retries with the same key
                    answer = call(http, base, lead(key), mcp)
                    with tally.lock:
                        tally.requests += 1
                    if answer is not None and answer.get("type") == "lead.submit.response":
                        with tally.lock:
                            tally.acked[key] = answer["data"]["lead_id"]
                        break
                    with tally.lock:
                        tally.unreachable += answer is None
                    time.sleep(0.5)
                else:
                    tally.unacked.append(key)
                continue
            payload = rng.choice(READS)
            answer = call(http, base, payload, mcp)
            with tally.lock:
                tally.requests += 1
                if answer is None:
                    tally.unreachable += 1
                elif answer.get("type") == "aap.error" or "transport_error" in answer:
                    code = answer.get("code", "transport")
                    tally.errors[code] = tally.errors.get(code, 0) + 1
            if answer is None:
                time.sleep(0.2)
            time.sleep(rng.uniform(0.01, 0.08))


# -- the account -----------------------------------------------------------------------------------


OUTCOMES = (
    "delivery delivered",
    "delivery failed; will retry",
    "delivery dead",
    "delivery sent after its claim lapsed; another worker may resend it (the CRM can drop the duplicate by lead id)",
)


def outcomes_by_lead(logs: list[Path]) -> dict[str, list[tuple[float, str, str]]]:
    """Every logged delivery outcome, (time, event, error), by lead id, over every server life.
    An attempt without one was cut short by a SIGKILL."""
    found: dict[str, list[tuple[float, str, str]]] = {}
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") in OUTCOMES and "lead_id" in record:
                moment = datetime.fromisoformat(record["ts"]).timestamp()
                found.setdefault(record["lead_id"], []).append((moment, record["event"], record.get("error", "")))
    return found


def account(directory: Path, tally: Tally, crm: Crm, lives: Lives) -> dict[str, Any]:
    with sqlite3.connect(directory / "aap.db") as db:
        stored = {key: lead_id for lead_id, key in db.execute("SELECT lead_id, idempotency_key FROM leads")}
        keys_stored_twice = db.execute(
            "SELECT COUNT(*) FROM (SELECT idempotency_key FROM leads GROUP BY idempotency_key HAVING COUNT(*) > 1)"
        ).fetchone()[0]
        attempts = dict(db.execute("SELECT lead_id, attempts FROM lead_deliveries"))
        rows = dict(db.execute("SELECT status, COUNT(*) FROM lead_deliveries GROUP BY status").fetchall())
    accepted: dict[str, int] = {}
    first: dict[str, Arrival] = {}
    for arrival in crm.arrivals:
        first.setdefault(arrival.lead_id, arrival)
        if arrival.answer == "200":
            accepted[arrival.lead_id] = accepted.get(arrival.lead_id, 0) + 1
    outcomes = outcomes_by_lead(lives.logs)
    acked_ids = set(tally.acked.values())
    stored_ids = set(stored.values())
    wrong, flagged, takeovers = [], 0, 0
    for lead_id, arrival in first.items():
        if arrival.status != "resend":
            continue
        flagged += 1
        logged = outcomes.get(lead_id, [])
        if attempts.get(lead_id, 0) > len(logged):  # a worker was killed holding its claim: it may have sent it
            takeovers += 1
            continue
        failures = [error for moment, event, error in logged if event != "delivery delivered" and moment <= arrival.at]
        if all(NOT_REACHED.match(error) for error in failures):  # nothing before could have reached the CRM
            wrong.append(lead_id)
    lost = sorted((acked_ids - stored_ids) | {i for i in stored_ids if i not in accepted})
    return {
        "requests": tally.requests,
        "unreachable_answers": tally.unreachable,
        "aap_errors": tally.errors,
        "leads": {
            "acked": len(tally.acked),
            "never_acked": len(tally.unacked),
            "stored": len(stored_ids),
            "delivered": len(accepted),
            "lost": len(lost),
            "lost_ids": lost[:10],
            "duplicated_submissions": keys_stored_twice,
            "accepted_twice_by_the_crm": sum(1 for n in accepted.values() if n > 1),
            "outbox": rows,
        },
        "crm": {"arrivals": len(crm.arrivals), "answers": _count(a.answer for a in crm.arrivals)},
        "resend": {
            "first_arrival_flagged_resend": flagged,
            "after_a_killed_claim": takeovers,
            "wrongly_flagged": len(wrong),
            "wrong_ids": wrong[:10],
        },
        "logged_attempt_outcomes": sum(len(v) for v in outcomes.values()),
        "rss_mib_by_life": [[round(k / 1024, 1) for k in life] for life in lives.rss],
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between SIGKILLs of the server")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--lead-every", type=int, default=8, help="every Nth request of a client is a lead")
    parser.add_argument("--drain-seconds", type=float, default=120.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aap-soak-") as tmp:
        directory = Path(tmp)
        crm = Crm(free_port())
        lives = Lives(directory, configure(directory, free_port(), crm.port), 0)
        lives.port = int(re.search(r"127\.0\.0\.1:(\d+)", lives.config.read_text()).group(1))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "aap",
                "import",
                "--config",
                str(lives.config),
                "--replace",
                str(_feed(directory, lives.config)),
            ],
            check=True,
            capture_output=True,
        )
        crm.listen()
        lives.start()
        tally = Tally()
        stop_traffic, stop_crm = threading.Event(), threading.Event()
        threads = [
            threading.Thread(target=client, args=(lives.base, stop_traffic, tally, i, args.lead_every))
            for i in range(args.clients)
        ]
        threads.append(threading.Thread(target=crm.run_cycle, args=(stop_crm,)))
        for thread in threads:
            thread.start()
        started = time.monotonic()
        next_kill = started + args.kill_every
        kills = 0
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(10 - (time.monotonic() - started) % 10)
            lives.sample_rss()
            if time.monotonic() >= next_kill and time.monotonic() - started < args.minutes * 60 - 5:
                lives.kill()
                kills += 1
                lives.start()
                next_kill += args.kill_every
                print(
                    f"[{time.monotonic() - started:6.0f} s] SIGKILL #{kills}; requests {tally.requests}, "
                    f"leads acked {len(tally.acked)}, CRM arrivals {len(crm.arrivals)} ({crm.mode})",
                    flush=True,
                )
        stop_traffic.set()
        stop_crm.set()
        for thread in threads:
            thread.join(timeout=180)
        # Drain: the CRM up, the server running, until nothing is pending or the time is up.
        drain_until = time.monotonic() + args.drain_seconds
        while time.monotonic() < drain_until:
            with sqlite3.connect(directory / "aap.db") as db:
                open_rows = db.execute(
                    "SELECT COUNT(*) FROM lead_deliveries WHERE status IN ('pending', 'delivering')"
                ).fetchone()[0]
            if open_rows == 0:
                break
            time.sleep(1)
            if int(time.monotonic() - started) % 10 == 0:
                lives.sample_rss()
        lives.stop()
        crm.close()
        report = {
            "minutes": args.minutes,
            "kills": kills,
            "clients": args.clients,
            **account(directory, tally, crm, lives),
        }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    lives_rss = report.pop("rss_mib_by_life")
    print(json.dumps(report, indent=2))
    print("server RSS (MiB) by life, sampled every 10 s: first / max / last")
    for index, life in enumerate(lives_rss):
        if life:
            print(f"  life {index + 1:2}: {life[0]:6.1f} {max(life):6.1f} {life[-1]:6.1f}  ({len(life)} samples)")


def _feed(directory: Path, config: Path) -> Path:
    feed = directory / "feed.jsonl"
    subprocess.run(
        [sys.executable, "-m", "aap", "demo-inventory", "--config", str(config), "-n", "2000", "-o", str(feed)],
        check=True,
        capture_output=True,
    )
    return feed


if __name__ == "__main__":
    main()
