"""Shared fixtures: settings built in code, dealer agents on fresh databases of both backends.

``settings_factory`` builds a :class:`~aap.config.model.Settings` directly from
``aap.config.model`` (no TOML): three rooftops (two in the San Francisco Bay
Area, one in Vancouver with CAD fees and its own timezone) and a feature
vocabulary. ``agent_factory`` gives a :class:`~aap.agent.DealerAgent` on a
fresh database file, optionally loaded with listings; ``memory_agent`` is the
same on an in-memory database, as a context manager (usable inside hypothesis
examples). ``assert_valid`` checks an instance against a bundled AAP schema.

Every fixture that opens storage depends on ``database_url`` (or
``database_url_factory``), parametrized over ``sqlite`` and ``postgresql``, so
each storage-touching test runs on both backends. PostgreSQL comes from one
throwaway cluster per session (:mod:`pg_cluster`), a fresh database per test.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from aap.agent import CallContext, DealerAgent
from aap.config.model import (
    AgentIdentity,
    DealerProfile,
    Feature,
    SearchCapabilities,
    Settings,
)
from aap.spec import validate
from aap.store import Stores, open_database, open_stores
from aap.store.db import Database
from pg_cluster import PostgresCluster

# CI replays the same bounded examples on every run (a red build always means a
# change broke something); locally hypothesis keeps exploring new examples.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

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


def assert_valid(instance: Any, schema: str) -> Any:
    """Fail with every problem when ``instance`` does not match AAP schema ``schema``."""
    problems = validate(instance, schema)
    assert not problems, problems
    return instance


@contextmanager
def open_memory_agent(
    settings: Settings | None = None, listings: Iterable[dict] = (), **import_kw: Any
) -> Iterator[DealerAgent]:
    stores = open_stores("sqlite://:memory:")
    try:
        agent = DealerAgent(settings or make_settings(), stores)
        stores.inventory.import_listings(listings, **import_kw)
        yield agent
    finally:
        stores.close()


def _tables(tx, dialect: str) -> list[str]:
    if dialect == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    return sorted(r[0] for r in tx.fetchall(sql))


def snapshot_database(db: Database) -> dict[str, list[tuple]]:
    """Every table's rows right after migration (the rows migrations seed, such as counters)."""
    with db.read() as tx:
        return {name: tx.fetchall(f'SELECT * FROM "{name}"') for name in _tables(tx, db.dialect.name)}


def reset_database(db: Database, snapshot: dict[str, list[tuple]]) -> None:
    """Put every table back to ``snapshot``: a fresh database, minus the setup cost."""
    with db.transaction() as tx:
        names = _tables(tx, db.dialect.name)
        if db.dialect.name == "sqlite":
            for name in names:
                tx.execute(f'DELETE FROM "{name}"')
        else:
            tx.execute("TRUNCATE " + ", ".join(f'"{n}"' for n in names) + " RESTART IDENTITY CASCADE")
        for name, rows in snapshot.items():
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                tx.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL server for the whole session (started on first use)."""
    cluster = PostgresCluster().start(in_memory=True)
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def database_url_factory(backend, request, tmp_path) -> Iterator[Callable[..., str]]:
    """``database_url_factory(name="aap")`` → the URL of this test's database called ``name``.

    The same name gives the same database within one test; each test starts empty, and its
    PostgreSQL databases are dropped after it.
    """
    urls: dict[str, str] = {}
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgresql" else None

    def url(name: str = "aap") -> str:
        if name not in urls:
            if cluster is None:
                urls[name] = f"sqlite:///{tmp_path}/{name}.db"
            else:
                urls[name] = cluster.create_database()
        return urls[name]

    yield url
    if cluster is not None:
        for made in urls.values():
            cluster.drop_database(made)


@pytest.fixture
def database_url(database_url_factory) -> str:
    return database_url_factory()


@pytest.fixture
def settings_factory() -> Callable[..., Settings]:
    return make_settings


@pytest.fixture
def memory_agent(backend, request) -> Iterator[Callable[..., Any]]:
    """``with memory_agent(settings, listings) as agent: ...`` (stateless: hypothesis-safe).

    SQLite: a fresh in-memory database each time. PostgreSQL: one database per
    test, emptied on every entry (creating a database per hypothesis example
    would dominate the run).
    """
    if backend == "sqlite":
        yield open_memory_agent
        return
    db = open_database(request.getfixturevalue("database_url"))
    fresh = snapshot_database(db)

    @contextmanager
    def opened(
        settings: Settings | None = None, listings: Iterable[dict] = (), **import_kw: Any
    ) -> Iterator[DealerAgent]:
        reset_database(db, fresh)
        stores = Stores(db)
        agent = DealerAgent(settings or make_settings(), stores)
        stores.inventory.import_listings(listings, **import_kw)
        try:
            yield agent
        finally:  # a count remembered late must not land in the next example's database
            stores.inventory.wait_for_background()

    yield opened
    db.close()


@pytest.fixture(name="assert_valid")
def assert_valid_fixture() -> Callable[[Any, str], Any]:
    return assert_valid


@pytest.fixture
def ctx() -> CallContext:
    return CallContext(binding="test")


@pytest.fixture
def agent_factory(database_url_factory) -> Iterable[Callable[..., DealerAgent]]:
    """``agent_factory(settings=None, listings=None, **import_kw)`` → DealerAgent on a fresh database."""
    opened: list[Stores] = []

    def build(
        settings: Settings | None = None, listings: Iterable[dict] | None = None, **import_kw: Any
    ) -> DealerAgent:
        stores = open_stores(database_url_factory(f"aap-{len(opened)}"))
        opened.append(stores)
        agent = DealerAgent(settings or make_settings(), stores)
        if listings is not None:
            stores.inventory.import_listings(listings, **import_kw)
        return agent

    yield build
    for stores in opened:
        stores.close()


@pytest.fixture
def agent(agent_factory) -> DealerAgent:
    """A dealer agent with default settings and an empty inventory."""
    return agent_factory()
