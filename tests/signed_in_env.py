"""A whole dealer (``create_app``: every surface, Poppy with MCP tokens) over HTTPS on loopback,
and signed-in personal agents for it.

The agents are the reference PAP client of tests/poppy_client.py (independent of
``aap.poppy``): guest Session with DPoP, then RFC 8693 token exchange for the MCP URL that
poppy.json lists. MCP calls are raw 2026-07-28 requests with ``Authorization: Bearer``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import aap.poppy
from aap.config.poppy import PoppySettings
from aap.server.app import SURFACES, create_app
from aap.store import Stores, open_stores
from http_helpers import load_demo_inventory, make_settings
from mcp_helpers import modern_call
from poppy_client import AgentHost, HttpsServer, PersonalAgent, PoppyClient, TestCA

_names = itertools.count(1)


@dataclass
class SignedInAgent:
    """One personal agent with a guest Session at the dealer."""

    client: PoppyClient
    dealer: SignedInDealer

    @property
    def http(self) -> httpx.Client:
        return self.client.http

    def mcp_token(self) -> str:
        return str(self.client.exchange_for_mcp()["access_token"])

    def mcp_call(self, tool: str, arguments: dict[str, Any], token: str | None) -> httpx.Response:
        body, headers = modern_call("tools/call", {"name": tool, "arguments": arguments})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.post(self.dealer.mcp_url, json=body, headers=headers)


@dataclass
class SignedInDealer:
    url: str
    ca: TestCA
    host: AgentHost
    stores: Stores
    settings: Any
    listings: list[dict[str, Any]]
    agents: list[SignedInAgent] = field(default_factory=list)

    @property
    def mcp_url(self) -> str:
        return self.url + "/mcp"

    @property
    def ca_file(self) -> Path:
        return self.ca.ca_file

    def available_vehicle(self) -> dict[str, Any]:
        return next(v for v in self.listings if v.get("vin") and v.get("status", "available") == "available")

    def new_agent(self, *, session: bool = True) -> SignedInAgent:
        """A freshly published personal agent, discovered the dealer, with a guest Session."""
        personal = PersonalAgent(self.host, name=f"mcp-agent{next(_names)}")
        client = PoppyClient(personal, self.url, self.ca.context())
        client.discover()
        if session:
            client.start_session()
        agent = SignedInAgent(client, self)
        self.agents.append(agent)
        return agent


@contextlib.contextmanager
def signed_in_dealer(
    directory: Path, *, inventory: int = 40, poppy: PoppySettings | None = None, **replace: Any
) -> Iterator[SignedInDealer]:
    """The dealer at ``https://localhost:<port>``; ``replace`` overrides settings fields."""
    ca = TestCA(directory)
    host = AgentHost(ca)
    server = HttpsServer(ca, "signed-in-dealer")
    options = poppy or PoppySettings(allow_loopback_clients=True)
    settings = make_settings(server.base_url, f"sqlite:///{directory}/aap.db", poppy=options, **replace)
    stores = open_stores(settings.database_url)
    listings = load_demo_inventory(stores, settings, inventory)
    # the Poppy surface fetches client metadata trusting the test CA
    poppy_surface = functools.partial(aap.poppy.build, ssl_context=ca.context())
    surfaces = tuple(dataclasses.replace(s, build=poppy_surface) if s.build is aap.poppy.build else s for s in SURFACES)
    server.start(create_app(settings, stores, surfaces=surfaces))
    dealer = SignedInDealer(server.base_url, ca, host, stores, settings, listings)
    try:
        yield dealer
    finally:
        for agent in dealer.agents:
            agent.client.close()
        server.stop()
        host.stop()
        stores.close()
