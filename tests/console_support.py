"""Helpers for the console tests: a dealer with leads at each rooftop, distinct customers."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from argon2 import PasswordHasher

from aap import accounts
from aap.agent import CallContext, DealerAgent
from aap.config.leads import DeliverySettings
from aap.config.model import DealerProfile, Settings
from aap.config.web import WebSettings
from aap.store import open_stores
from lead_support import NOW, OAKLAND_ROOFTOP, http_route, lead_request, lead_settings, listing

PASSWORD = "correct horse battery staple"

VINS = {
    "Bay Motors San Francisco": "1HGCV1F30NA000101",
    "Bay Motors Oakland": "1HGCV1F30NA000202",
    "Bay Motors Vancouver": "1HGCV1F30NA000303",
}

#: (first, last, e-mail, phone, rooftop): one lead each, in this order (oldest first).
CUSTOMERS = (
    ("Adelheid", "Lovelacqua", "adelheid@analytical.example", "+14155550111", "Bay Motors San Francisco"),
    ("Grazyna", "Hopperwick", "grazyna.hopperwick@navy.example", "+15105550122", "Bay Motors Oakland"),
    ("Alaric", "Turingsby", "alaric@bletchley.example", "+16045550133", "Bay Motors Vancouver"),
    ("Adelheid", "Yonathar", "yonathar@weizmann.example", "+14155550144", "Bay Motors Oakland"),
    ("Edsgard", "Dijkstrom", "ewd@eindhoven.example", "+15105550155", "Bay Motors San Francisco"),
)


def listings() -> list[dict[str, Any]]:
    return [listing(vin, rooftop=rooftop) for rooftop, vin in VINS.items()]


@pytest.fixture
def dealer(database_url: str) -> Iterator[DealerAgent]:
    """A dealer agent on a fresh database of each backend with :func:`listings` in stock, its one
    CRM target unreachable (port 9) and tried once: leads stay in the store for the console."""
    settings = lead_settings(
        routes=[http_route("http://127.0.0.1:9/adf")],
        database_url=database_url,
        delivery=DeliverySettings(max_attempts=1),
    )
    agent = DealerAgent(settings, open_stores(database_url))
    agent.stores.inventory.import_listings(listings())
    yield agent
    agent.stores.close()


def submit_customers(agent: DealerAgent, customers: tuple[tuple[str, ...], ...] = CUSTOMERS) -> list[str]:
    """One lead per customer, a second apart, each about the vehicle at its rooftop; the lead ids."""
    ids = []
    for i, (first, last, email, phone, rooftop) in enumerate(customers):
        body = lead_request(
            customer={
                "first_name": first,
                "last_name": last,
                "email": email,
                "phone": phone,
                "preferred_contact": "email",
            },
            vehicle_of_interest={"vin": VINS[rooftop]},
        )
        ctx = CallContext(binding="test", now=NOW + timedelta(seconds=i))
        ids.append(agent.handle(copy.deepcopy(body), ctx)["data"]["lead_id"])
    return ids


def fast_web(**changes: Any) -> WebSettings:
    return replace(WebSettings(), **changes)


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def post_sign_in(client: Any, email: str, password: str = PASSWORD, *, base: str = "") -> Any:
    """Sign in through the console's form as a browser does (read the form for its CSRF token,
    post the e-mail and password): the answer, not followed (303 when it worked). ``client`` is a
    TestClient or an httpx client; ``base`` what precedes ``/console`` (a host, a tenant prefix)."""
    form = client.get(f"{base}/console/login")
    return client.post(
        f"{base}/console/login",
        data={"csrf_token": csrf_of(form.text), "email": email, "password": password},
        follow_redirects=False,
    )


@contextmanager
def cheap_hashing() -> Iterator[None]:
    """argon2id with test-sized costs: the production defaults take ~0.3 s a hash on a busy
    two-core machine, and these tests sign in dozens of times. One test keeps the defaults."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accounts, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
        yield


# -- a marketplace whose two sellers both have a rooftop called "Downtown" ----------------------

NORTH, SOUTH = "north-motors", "south-autos"
#: (seller, rooftop, VIN, vehicle_id, (first, last, e-mail)) of each marketplace lead.
MARKET_LEADS = (
    (NORTH, "Downtown", "1HGCV1F30NA000411", "n-1", ("Ottoline", "Northcote", "ottoline@north.example")),
    (NORTH, "Airport", "1HGCV1F30NA000422", "n-2", ("Peregrine", "Airwright", "peregrine@north.example")),
    (SOUTH, "Downtown", "1HGCV1F30NA000433", "s-1", ("Quillon", "Southwark", "quillon@south.example")),
)


def _market_rooftop(name: str) -> dict[str, Any]:
    return dict(OAKLAND_ROOFTOP, name=name)


def market_settings(**changes: Any) -> Settings:
    """An aggregate endpoint: north-motors (Downtown, Airport) and south-autos (Downtown)."""
    base = lead_settings(**changes)
    sellers = (
        DealerProfile(
            {
                "dealer_id": NORTH,
                "name": "North Motors",
                "rooftops": [_market_rooftop("Downtown"), _market_rooftop("Airport")],
            }
        ),
        DealerProfile({"dealer_id": SOUTH, "name": "South Autos", "rooftops": [_market_rooftop("Downtown")]}),
    )
    operator = DealerProfile({"name": "Cars Marketplace", "rooftops": [_market_rooftop("Marketplace HQ")]})
    return replace(base, dealer=operator, dealers=sellers, search=replace(base.search, scope="aggregate"))


def market_listings() -> list[dict[str, Any]]:
    return [
        listing(vin, vehicle_id=vehicle_id, dealer_id=seller, rooftop=rooftop)
        for seller, rooftop, vin, vehicle_id, _ in MARKET_LEADS
    ]


def submit_market_leads(agent: DealerAgent) -> dict[tuple[str, str], str]:
    """One lead per (seller, rooftop) of :data:`MARKET_LEADS`; their ids by (seller, rooftop)."""
    ids = {}
    for i, (seller, rooftop, _vin, vehicle_id, (first, last, email)) in enumerate(MARKET_LEADS):
        body = lead_request(
            customer={
                "first_name": first,
                "last_name": last,
                "email": email,
                "phone": f"+1415555{4100 + i}",
                "preferred_contact": "email",
            },
            vehicle_of_interest={"vehicle_id": vehicle_id},
        )
        ctx = CallContext(binding="test", now=NOW + timedelta(seconds=i))
        ids[(seller, rooftop)] = agent.handle(body, ctx)["data"]["lead_id"]
    return ids
