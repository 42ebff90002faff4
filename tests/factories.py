"""What the tests build, in one place: listings, dealer settings, deployments, free ports.

- **Listings** (feed rows as a dealer sends them): :func:`listing` (the least an available
  listing needs), :func:`crv` (a complete new Honda CR-V at the Oakland rooftop),
  :func:`seller_listing` (a used car of one seller of a marketplace), :func:`numbered_listing`
  (the ``n``-th of a series) and :func:`feed_listing` (a full ``aap``-format row of the demo
  dealer). Keyword arguments override any field; ``None`` removes one where the builder says so.
- **Dealers and settings** built in code, no TOML: :func:`make_settings` (three rooftops, two in
  the San Francisco Bay Area and one in Vancouver with CAD fees and its own time zone, and a
  feature vocabulary), :func:`rooftop`.
- **Deployments** as module fixtures, one line each in a test module:
  ``deployment = deployment_fixture("a2a", rate_limit=RateLimit(enabled=False))`` (the whole app
  on loopback, :class:`http_helpers.Deployment`), ``http = http_fixture()`` (a client of it),
  ``dealer = live_dealer_fixture("mcp-e2e")`` (:func:`mcp_helpers.live_dealer`) and
  ``dealer = signed_in_dealer_fixture("poppy-mcp")`` (:func:`signed_in_env.signed_in_dealer`).
  Their modules are imported when a fixture first runs, so a test that builds listings only
  never loads a web server.
- :func:`free_port`: a loopback port nothing listens on (for a child process to bind).

The older homes keep their names (``conftest.make_settings``, ``lead_support.listing``,
``inventory_reference.listing``, ``test_cli_serve.free_port`` …) as imports from here.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from aap.config.model import AgentIdentity, DealerProfile, Feature, SearchCapabilities, Settings

# -- listings -------------------------------------------------------------------------------------


def listing(vehicle_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """An available listing with nothing else than ``fields`` (and ``vehicle_id`` when given)."""
    out: dict[str, Any] = {} if vehicle_id is None else {"vehicle_id": vehicle_id}
    out.update({"status": "available", "updated_at": "2026-04-30T08:00:00Z"})
    out.update(fields)
    return out


def crv(vin: str, **fields: Any) -> dict[str, Any]:
    """A new 2024 Honda CR-V EX-L at Bay Motors Oakland, stock number from the VIN."""
    out: dict[str, Any] = {
        "vin": vin,
        "year": 2024,
        "make": "Honda",
        "model": "CR-V",
        "trim": "EX-L",
        "condition": "new",
        "status": "available",
        "price": 35500,
        "updated_at": "2026-03-01T08:00:00Z",
        "rooftop": "Bay Motors Oakland",
        "stock": "H" + vin[-5:],
        "body": "suv",
        "transmission": "cvt",
        "mileage": 12,
    }
    out.update(fields)
    return out


def seller_listing(vehicle_id: str, dealer_id: str, rooftop: str, vin: str, **fields: Any) -> dict[str, Any]:
    """A used 2023 Honda Accord of seller ``dealer_id`` at its ``rooftop``, in USD."""
    out: dict[str, Any] = {
        "vehicle_id": vehicle_id,
        "dealer_id": dealer_id,
        "rooftop": rooftop,
        "vin": vin,
        "year": 2023,
        "make": "Honda",
        "model": "Accord",
        "condition": "used",
        "status": "available",
        "price": 21000,
        "currency": "USD",
        "mileage": 12000,
        "updated_at": "2026-03-01T08:00:00Z",
    }
    out.update(fields)
    return out


def numbered_listing(n: int, **fields: Any) -> dict[str, Any]:
    """The ``n``-th Honda of a series: its own VIN, stock number ``S<n>`` and price."""
    return {
        "vin": f"1HGCV1F3{n % 10}NA{n:06d}",
        "stock": f"S{n}",
        "status": "available",
        "updated_at": "2026-01-01T00:00:00Z",
        "make": "Honda",
        "price": 20000 + n,
        **fields,
    }


#: The demo dealer group's first rooftop (``aap serve`` without a configuration).
DEMO_ROOFTOP = "Demo Motors San Francisco"


def feed_listing(**fields: Any) -> dict[str, Any]:
    """A complete ``aap``-format row of the demo dealer; a field given as ``None`` is left out."""
    out: dict[str, Any] = {
        "vehicle_id": "veh_1",
        "vin": "1HGCV1F30NA123456",
        "stock": "H12345",
        "year": 2024,
        "make": "Honda",
        "model": "CR-V",
        "trim": "EX-L",
        "condition": "new",
        "status": "available",
        "rooftop": DEMO_ROOFTOP,
        "msrp": 36000,
        "price": 35500,
        "updated_at": "2026-04-30T08:42:00Z",
    }
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


# -- dealers and settings ---------------------------------------------------------------------

SF = {"latitude": 37.7749, "longitude": -122.4194}
OAKLAND = {"latitude": 37.8044, "longitude": -122.2712}
VANCOUVER = {"latitude": 49.2827, "longitude": -123.1207}

WEEK = {
    day: ({"open": "09:00", "close": "19:00"} if day != "sunday" else None)
    for day in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
}

FEATURES: tuple[Feature, ...] = (
    Feature("adaptive_cruise_control", "Adaptive cruise control"),
    Feature("apple_carplay", "Apple CarPlay"),
    Feature("heated_front_seats", "Heated front seats"),
    Feature("sunroof", "Sunroof"),
)


def rooftop(
    name: str,
    geo: dict[str, float] | None,
    *,
    city: str,
    country: str = "US",
    timezone: str = "America/Los_Angeles",
    **extra: Any,
) -> dict[str, Any]:
    """A DealerInformation rooftop object."""
    out: dict[str, Any] = {
        "name": name,
        "address": {"city": city, "country": country},
        "timezone": timezone,
        "phones": [{"name": "Sales", "value": "+14155550100"}],
        "schedules": [{"name": "sales", "value": WEEK}],
        "capabilities": ["sales", "service"],
    }
    if geo is not None:
        out["geo"] = dict(geo)
    out.update(extra)
    return out


DEFAULT_ROOFTOPS: tuple[dict[str, Any], ...] = (
    rooftop("Bay Motors San Francisco", SF, city="San Francisco"),
    rooftop("Bay Motors Oakland", OAKLAND, city="Oakland"),
    rooftop(
        "Bay Motors Vancouver",
        VANCOUVER,
        city="Vancouver",
        country="CA",
        timezone="America/Vancouver",
        currency="CAD",
        fees=[{"name": "Documentation fee", "amount": 499}],
    ),
)


def make_settings(
    *,
    rooftops: Iterable[dict[str, Any]] = DEFAULT_ROOFTOPS,
    dealer_id: str | None = None,
    dealers: Iterable[DealerProfile] = (),
    features: tuple[Feature, ...] = FEATURES,
    **search: Any,
) -> Settings:
    """Settings for tests. Keyword arguments override :class:`SearchCapabilities` fields."""
    info: dict[str, Any] = {"name": "Bay Motors Group", "rooftops": [dict(r) for r in rooftops]}
    if dealer_id is not None:
        info["dealer_id"] = dealer_id
    caps = dataclasses.replace(SearchCapabilities(currencies=("USD", "CAD"), default_currency="USD"), **search)
    return Settings(
        deployment_id="test-deployment",
        public_url="https://dealer.example",
        agent=AgentIdentity(name="Bay Motors agent", description="Test dealer agent."),
        dealer=DealerProfile(info),
        search=caps,
        features=features,
        dealers=tuple(dealers),
    )


# -- deployments --------------------------------------------------------------------------------


def deployment_fixture(directory: str, **options: Any) -> Callable[..., Iterator[Any]]:
    """A module fixture: the whole app on loopback (:class:`http_helpers.Deployment`) in a
    temporary directory named ``directory``; ``options`` go to ``Deployment``."""

    @pytest.fixture(scope="module", name="deployment")
    def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        from http_helpers import Deployment

        with Deployment(tmp_path_factory.mktemp(directory), **options) as dep:
            yield dep

    return deployment


def http_fixture(of: str = "deployment") -> Callable[..., Iterator[Any]]:
    """A module fixture: an ``httpx.Client`` on the ``base_url`` of the fixture named ``of``."""

    @pytest.fixture(scope="module", name="http")
    def http(request: pytest.FixtureRequest) -> Iterator[Any]:
        import httpx

        with httpx.Client(base_url=request.getfixturevalue(of).base_url, timeout=30) as client:
            yield client

    return http


def live_dealer_fixture(directory: str, **options: Any) -> Callable[..., Iterator[Any]]:
    """A module fixture: a started dealer at a loopback public URL (:func:`mcp_helpers.live_dealer`)."""

    @pytest.fixture(scope="module", name="dealer")
    def dealer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        from mcp_helpers import live_dealer

        with live_dealer(tmp_path_factory.mktemp(directory), **options) as live:
            yield live

    return dealer


def signed_in_dealer_fixture(directory: str, **options: Any) -> Callable[..., Iterator[Any]]:
    """A module fixture: the dealer over HTTPS with Poppy sign-in (:func:`signed_in_env.signed_in_dealer`)."""

    @pytest.fixture(scope="module", name="dealer")
    def dealer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        from signed_in_env import signed_in_dealer

        with signed_in_dealer(tmp_path_factory.mktemp(directory), **options) as live:
            yield live

    return dealer


# -- ports ----------------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port that nothing listens on now (for a child process to bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
