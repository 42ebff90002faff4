"""Shared fixtures: settings built in code, dealer agents on fresh databases of both backends.

``settings_factory`` builds a :class:`~aap.config.model.Settings` directly from
``aap.config.model`` (no TOML, :func:`factories.make_settings`): three rooftops (two in the San Francisco Bay
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

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

# The helper modules' asserts are rewritten like a test's, so a failing assert_* helper shows the
# values it compared (pytest rewrites only modules registered before they are first imported):
# every module of tests/ that is not a test module, a new helper included.
pytest.register_assert_rewrite(
    *sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith(("test_", "conftest")))
)

from aap.agent import CallContext, DealerAgent  # noqa: E402 (after the registration above)
from aap.config.model import Settings  # noqa: E402
from aap.spec import validate  # noqa: E402
from aap.store import Stores, open_database, open_stores  # noqa: E402
from aap.store.db import Database  # noqa: E402
from factories import DEFAULT_ROOFTOPS as DEFAULT_ROOFTOPS  # noqa: E402 (re-exported: tests import these from here)
from factories import FEATURES as FEATURES  # noqa: E402
from factories import OAKLAND as OAKLAND  # noqa: E402
from factories import SF as SF  # noqa: E402
from factories import VANCOUVER as VANCOUVER  # noqa: E402
from factories import WEEK as WEEK  # noqa: E402
from factories import make_settings as make_settings  # noqa: E402
from factories import rooftop as rooftop  # noqa: E402
from pg_cluster import PostgresCluster  # noqa: E402

# CI replays the same bounded examples on every run (a red build always means a
# change broke something); locally hypothesis keeps exploring new examples.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


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


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A CRM stub on loopback recording what it is sent (lead_support.Receiver)."""
    from lead_support import Receiver

    found = Receiver()
    try:
        yield found
    finally:
        found.close()
