"""Shared setup of the MCP tests: a live dealer on loopback with generated inventory,
and builders for raw MCP requests of both eras."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aap.bindings import mcp
from aap.inventory.demo import generate_listings
from aap.server.app import SURFACES, create_app, mcp_surface
from aap.store import Stores, open_stores
from aap.util.rfc3339 import to_utc_z
from http_helpers import LiveServer, make_settings

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


@dataclass
class Dealer:
    server: LiveServer
    settings: Any
    stores: Stores
    app: Any
    listings: list[dict[str, Any]]

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def mcp_url(self) -> str:
        return self.server.base_url + "/mcp"

    @property
    def a2a_url(self) -> str:
        return self.server.base_url + "/a2a"

    @property
    def agent(self) -> Any:
        return self.app.state.agent


@contextlib.contextmanager
def live_dealer(
    directory: Path, *, count: int = 60, verifier: Callable[..., Any] | None = None, **replace: Any
) -> Iterator[Dealer]:
    """A started dealer (``count`` generated listings) at a loopback public URL."""
    server = LiveServer()
    settings = make_settings(server.base_url, f"sqlite:///{directory / 'aap.db'}", **replace)
    stores = open_stores(settings.database_url)
    listings = list(generate_listings(count, seed=7, settings=settings))
    stores.inventory.import_listings(listings, replace=True)
    surfaces = SURFACES
    if verifier is not None:  # the MCP binding with this Bearer verifier instead of the Poppy issuer's
        build = functools.partial(mcp.build, verifier=verifier)
        surfaces = tuple(dataclasses.replace(s, build=build) if s.build is mcp_surface else s for s in SURFACES)
    app = create_app(settings, stores, surfaces=surfaces)
    server.start(app)
    try:
        yield Dealer(server, settings, stores, app, listings)
    finally:
        server.stop()
        stores.close()


# -- raw requests ----------------------------------------------------------------------
def envelope(version: str = MODERN, **extra: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "aap-tests", "version": "1"},
    }
    meta.update(extra)
    return meta


def rpc(method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def modern_call(method: str, params: dict[str, Any] | None = None, *, version: str = MODERN) -> tuple[dict, dict]:
    """(body, headers) of a well-formed 2026-07-28 request."""
    params = dict(params or {})
    params["_meta"] = envelope(version)
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": version, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return rpc(method, params), headers


def legacy_headers(version: str = LEGACY) -> dict[str, str]:
    return {"Accept": ACCEPT, "MCP-Protocol-Version": version}


def initialize(version: str = LEGACY) -> dict[str, Any]:
    return rpc(
        "initialize",
        {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "aap-tests", "version": "1"}},
    )


# -- AAP payloads ------------------------------------------------------------------------


def lead_request(vehicle: dict[str, Any], key: str) -> dict[str, Any]:
    """A consented lead about ``vehicle`` (no appointment)."""
    now = datetime.now(UTC)
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Test",
            "last_name": "Buyer",
            "email": "test.buyer@example.com",
            "phone": "+14155550123",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": to_utc_z(now - timedelta(minutes=5)),
            "expires_at": to_utc_z(now + timedelta(days=30)),
            "allowed_channels": ["email", "phone"],
            "consent_text": "I agree to be contacted by the dealership about this vehicle by email or phone.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": {k: vehicle[k] for k in ("vin", "year", "make", "model", "condition") if k in vehicle},
        "message": "Is this vehicle still available?",
        "source_agent": {"name": "aap-tests", "url": "https://buyer.example"},
        "submitted_at": to_utc_z(now),
        "idempotency_key": key,
    }
