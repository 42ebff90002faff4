"""Helpers for the lead tests: settings with a ``[leads]`` part, requests, receivers."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aap.config.leads import (
    AdfHttpTarget,
    AppointmentSettings,
    DeliverySettings,
    LeadSettings,
    Route,
)
from aap.config.model import AgentIdentity, DealerProfile, Settings
from factories import crv
from factories import free_port as free_port  # re-exported: the lead tests import it from here

#: The listing the lead tests link leads to (the name they import it by).
listing = crv

# Distinctive customer values: tests assert they never reach a log line or an error.
FIRST = "Zebulon"
LAST = "Quintavious-Marsh"
EMAIL = "zebulon.qm.7731@example.org"
PHONE = "+14155557731"
MESSAGE = 'Looking for a blue one <b>&amp; "cheap"</b> — ASAP ☃'
CONSENT_TEXT = "I agree that Bay Motors may contact me about this vehicle by email or text."

NOW = datetime(2026, 3, 2, 17, 0, tzinfo=UTC)  # Monday 09:00 in San Francisco (PST)

SALES_WEEK = {
    d: {"open": "09:00", "close": "18:00"} for d in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
} | {"sunday": None}
SERVICE_WEEK = {
    d: {"open": "07:30", "close": "17:00"} for d in ("monday", "tuesday", "wednesday", "thursday", "friday")
} | {"saturday": None, "sunday": None}
EVERY_DAY = {
    d: {"open": "10:00", "close": "17:00"}
    for d in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
}

SF_ROOFTOP = {
    "name": "Bay Motors San Francisco",
    "timezone": "America/Los_Angeles",
    "website": "https://sf.baymotors.example",
    "phones": [{"name": "Service", "value": "+14155550199"}, {"name": "Sales", "value": "+14155550100"}],
    "emails": [{"name": "Sales", "value": "sales@sf.baymotors.example"}],
    "schedules": [{"name": "sales", "value": SALES_WEEK}, {"name": "service", "value": SERVICE_WEEK}],
    "capabilities": ["sales", "service", "trade_in"],
}
OAKLAND_ROOFTOP = {
    "name": "Bay Motors Oakland",
    "timezone": "America/Los_Angeles",
    "phones": [{"name": "Sales", "value": "+15105550100"}],
    "schedules": [{"name": "sales", "value": EVERY_DAY}],
    "capabilities": ["sales"],
}
VANCOUVER_ROOFTOP = {
    "name": "Bay Motors Vancouver",
    "timezone": "America/Vancouver",
    "phones": [{"name": "Sales", "value": "+16045550100"}],
    "capabilities": ["sales"],
}
ROOFTOPS = (SF_ROOFTOP, OAKLAND_ROOFTOP, VANCOUVER_ROOFTOP)


def lead_settings(
    *,
    routes: Iterable[Route] = (),
    rooftops: Iterable[dict[str, Any]] = ROOFTOPS,
    appointments: AppointmentSettings | None = None,
    delivery: DeliverySettings | None = None,
    database_url: str = "sqlite:///aap.db",
    dealer_id: str | None = "bay-motors",
    **leads: Any,
) -> Settings:
    info: dict[str, Any] = {"name": "Bay Motors Group", "rooftops": copy.deepcopy(list(rooftops))}
    if dealer_id:
        info["dealer_id"] = dealer_id
    return Settings(
        deployment_id="lead-test",
        public_url="https://dealer.example",
        agent=AgentIdentity(name="Bay Motors agent", description="Lead tests."),
        dealer=DealerProfile(info),
        database_url=database_url,
        leads=LeadSettings(
            routes=tuple(routes),
            appointments=appointments or AppointmentSettings(),
            delivery=delivery
            or DeliverySettings(
                base_backoff_seconds=0.05,
                max_backoff_seconds=0.2,
                poll_seconds=0.05,
                timeout_seconds=5,
                lease_seconds=30,
            ),
            **leads,
        ),
    )


def http_route(url: str, rooftop: str = "*", name: str = "crm") -> Route:
    return Route(rooftop=rooftop, targets=(AdfHttpTarget(name=name, url=url),))


def lead_request(**changes: Any) -> dict[str, Any]:
    """A valid lead.submit.request; ``changes`` replace top-level keys (None removes one)."""
    body: dict[str, Any] = {
        "type": "lead.submit.request",
        "customer": {
            "first_name": FIRST,
            "last_name": LAST,
            "email": EMAIL,
            "phone": PHONE,
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": "2026-03-02T16:55:00Z",
            "allowed_channels": ["email", "sms"],
            "consent_text": CONSENT_TEXT,
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "example-buyer", "url": "https://buyer.example"},
        "idempotency_key": str(uuid.uuid4()),
        "message": MESSAGE,
    }
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


class Receiver:
    """A CRM stand-in on 127.0.0.1: records POSTs; answers ``status`` (settable), or hangs."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.hang = threading.Event()  # set: hold requests until release is set
        self.release = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    status = outer.status
                    outer.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers.items()),
                            "body": body,
                            "status": status,
                            "held": outer.hang.is_set(),
                        }
                    )
                if outer.hang.is_set():
                    outer.release.wait(60)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/adf"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def accepted(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if 200 <= r["status"] < 300 and not r["held"]]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def race(count: int, target: Callable[[int], Any]) -> list[Any]:
    """``target(0)`` … ``target(count - 1)`` on ``count`` threads released at once (a barrier), as
    concurrent requests of several workers are; what they returned, in the order they finished.
    Any of them raising fails the test."""
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results.append(target(i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results
