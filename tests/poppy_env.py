"""Fixtures for the Poppy tests: a dealer over HTTPS on loopback and an HTTPS agent host.

The dealer app is assembled from ``aap.poppy.build(agent)`` (plus the agent card,
to check that discovery links agree) and served by uvicorn with a certificate
from a CA made in the test session; the dealer trusts the same CA when it
fetches client metadata, with ``allow_loopback_clients`` on.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from aap.agent import DealerAgent
from aap.config.poppy import ExcludedTask, PoppySettings
from aap.discovery.agent_card import build_agent_card
from aap.gateway import Gateway
from aap.poppy import build
from aap.store import open_stores
from aap.util.rfc3339 import to_rfc3339
from conftest import make_settings as code_settings
from http_helpers import load_demo_inventory
from poppy_client import AgentHost, HttpsServer, PersonalAgent, PoppyClient, TestCA

FINANCING = ExcludedTask(
    "financing pre-approval",
    {
        "instructions": "Apply for financing on our website; a specialist calls you back.",
        "references": [{"type": "web", "url": "https://dealer.example/finance/apply"}],
    },
)
SERVICE = ExcludedTask("book a service appointment")

TEST_POPPY = PoppySettings(allow_loopback_clients=True, excluded_tasks=(FINANCING, SERVICE))


class PoppyDeployment:
    """A dealer agent with the Poppy binding, served over HTTPS at ``https://localhost:<port>``."""

    def __init__(
        self,
        directory: Path,
        ca: TestCA,
        poppy: PoppySettings = TEST_POPPY,
        *,
        inventory: int = 30,
        database: str | None = None,
        public_url: str | None = None,
        **replace: Any,
    ) -> None:
        self.directory = Path(directory)
        self.ca = ca
        self.server = HttpsServer(ca, f"dealer-{self.directory.name}")
        self.listen_url = self.server.base_url
        self.url = public_url or self.listen_url  # the public base URL (a proxy may sit in front)
        self.database_path = database or str(self.directory / "aap.db")
        self.settings = dataclasses.replace(
            code_settings(), public_url=self.url, database_url=f"sqlite:///{self.database_path}", **replace
        )
        self.stores = open_stores(self.settings.database_url)
        if inventory:
            load_demo_inventory(self.stores, self.settings, inventory)
        self.agent = DealerAgent(self.settings, self.stores)
        self.poppy_settings = poppy
        parts = build(Gateway.of(self.agent), settings=poppy, ssl_context=ca.context())
        card = build_agent_card(self.settings, self.agent.skills)

        async def agent_card(request: Any) -> JSONResponse:
            return JSONResponse(card)

        @asynccontextmanager
        async def lifespan(app: Any):
            async with AsyncExitStack() as stack:
                for factory in parts.lifespans:
                    await stack.enter_async_context(factory(app))
                yield

        self.card = card
        self.app = Starlette(
            routes=[Route("/.well-known/agent-card.json", agent_card), *parts.routes], lifespan=lifespan
        )
        self.server.start(self.app)

    @property
    def ctx(self) -> Any:
        return self.app.state.poppy

    def snapshot(self) -> dict[str, list[tuple]]:
        """Every row of every table: what a refused request must leave untouched.

        Except the rate-limit buckets: counting hostile attempts is their purpose.
        """
        with sqlite3.connect(self.database_path) as conn:
            tables = [
                r[0]
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if r[0] != "state_bucket"
            ]
            return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in sorted(tables)}

    def count(self, table: str) -> int:
        with sqlite3.connect(self.database_path) as conn:
            return conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]

    def stop(self) -> None:
        self.server.stop()
        self.stores.close()


_names = itertools.count(1)


@pytest.fixture(scope="session")
def poppy_ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("poppy-ca"))


@pytest.fixture(scope="session")
def agent_host(poppy_ca) -> Iterator[AgentHost]:
    host = AgentHost(poppy_ca)
    yield host
    host.stop()


@pytest.fixture(scope="module")
def dealer(tmp_path_factory, poppy_ca) -> Iterator[PoppyDeployment]:
    deployment = PoppyDeployment(tmp_path_factory.mktemp("poppy-dealer"), poppy_ca)
    yield deployment
    deployment.stop()


@pytest.fixture
def personal_agent(agent_host) -> PersonalAgent:
    return PersonalAgent(agent_host, name=f"agent{next(_names)}")


@pytest.fixture
def client(dealer, personal_agent, poppy_ca) -> Iterator[PoppyClient]:
    """A discovered reference client (no token yet)."""
    c = PoppyClient(personal_agent, dealer.url, poppy_ca.context())
    c.discover()
    yield c
    c.close()


@pytest.fixture
def session_client(client) -> PoppyClient:
    """A reference client holding a guest token."""
    client.start_session()
    return client


# -- helpers shared by the Poppy test modules ----------------------------------------


def lead_request(vin: str | None, key: str) -> dict:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    body = {
        "type": "lead.submit.request",
        "idempotency_key": key,
        "source_agent": {"name": "poppy-reference-agent", "url": "https://agent.example"},
        "customer": {
            "first_name": "Ada",
            "last_name": "Tester",
            "email": "ada@example.com",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": to_rfc3339(now - dt.timedelta(minutes=1)),
            "expires_at": to_rfc3339(now + dt.timedelta(days=30)),
            "allowed_channels": ["email"],
            "consent_text": "I authorize Bay Motors to contact me by email about this vehicle.",
            "scope": ["lead_submission"],
        },
    }
    if vin:
        body["vehicle_of_interest"] = {"vin": vin}
    return body


def assert_refused(dealer, send: Callable[[], httpx.Response], status: int, error: str) -> httpx.Response:
    """``send()`` must fail with ``status``/``error`` and change nothing in the database."""
    before = dealer.snapshot()
    response = send()
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error, body
    assert response.headers["cache-control"] == "no-store"
    assert dealer.snapshot() == before
    return response


def assert_api_refused(dealer, send: Callable[[], httpx.Response], error: str) -> httpx.Response:
    response = assert_refused(dealer, send, 401, error)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("DPoP ") and f'error="{error}"' in challenge and 'algs="ES256"' in challenge
    return response


# The names other modules knew these by.
refused = assert_refused
api_refused = assert_api_refused
