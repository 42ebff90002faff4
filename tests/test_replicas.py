"""Read replicas: the read skills read from a real streaming replica, and never badly.

One throwaway primary and one hot standby (``pg_basebackup -R``) on loopback for
the module. The replica's replay is paused to make it lag (so the tests can
tell which server answered), and stopped outright in the last test. Waiting for
the replica to catch up is bounded by count, never by a clock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from aap.agent import CallContext, DealerAgent
from aap.config.loader import ConfigError, parse_settings
from aap.config.model import DealerProfile
from aap.errors import AapError
from aap.server.app import create_app
from aap.store import Stores, open_stores
from conftest import make_settings
from http_helpers import LiveServer
from inventory_reference import listing
from lead_support import NOW, lead_request
from pg_cluster import PostgresCluster
from test_aggregate_scope import OPERATOR_ROOFTOP, SHELBYVILLE, SPRINGFIELD

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

CTX = CallContext(binding="test")
LEAD_CTX = CallContext(binding="test", now=NOW)
SEARCH = {"type": "inventory.search.request", "sort": {"field": "price", "order": "asc"}, "pagination": {"limit": 10}}


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[PostgresCluster, PostgresCluster, str]]:
    """(primary, replica, URL of the primary's test database)."""
    primary = PostgresCluster().start()
    try:
        url = primary.create_database()
        open_stores(url).close()  # migrated before the base backup: the replica has the schema
        replica = primary.start_replica()
        try:
            yield primary, replica, url
        finally:
            replica.stop()
    finally:
        primary.stop()


def replay(replica_url: str, action: str) -> None:
    with psycopg.connect(replica_url, autocommit=True) as conn:
        conn.execute(f"SELECT pg_wal_replay_{action}()")


def caught_up(primary: Stores, replica_url: str) -> None:
    """Wait (bounded by count) until the replica shows the primary's inventory version.

    The version's row is written by a tenant's first import: until the replica has replayed
    that import it has no row at all, which is "not caught up" too.
    """
    wanted = primary.inventory.inventory_version()
    for _ in range(1000):
        with psycopg.connect(replica_url, autocommit=True) as conn:
            row = conn.execute("SELECT num FROM inv_meta WHERE name = 'version'").fetchone()
            if row is not None and row[0] == wanted:
                return
        time.sleep(0.01)
    raise AssertionError("the replica did not catch up")


def total(agent: DealerAgent, **extra: Any) -> dict[str, Any]:
    return agent.handle(dict(SEARCH, **extra), CTX)["data"]


@pytest.fixture
def deployment(clusters) -> Iterator[tuple[Stores, str, Any]]:
    """(primary-only stores with a fresh 25-listing inventory, the replica's URL, a factory of
    stores reading from the replica); the replica has replayed the inventory."""
    primary_cluster, replica, url = clusters
    stores = open_stores(url)
    stores.inventory.import_listings(
        [listing(f"r{i:02d}", make="Honda", price=10_000 + i) for i in range(25)], replace=True
    )
    replica_url = replica.url_of(url)
    caught_up(stores, replica_url)
    opened: list[Stores] = []

    def reading(**kw: Any) -> Stores:
        opened.append(open_stores(url, (replica_url,), **kw))
        return opened[-1]

    yield stores, replica_url, reading
    replay(replica_url, "resume")
    for other in opened:
        other.close()
    stores.close()


def test_reads_come_from_the_replica_and_a_cursor_never_goes_back_in_time(deployment):
    primary, replica_url, reading = deployment
    settings = make_settings()
    on_primary = DealerAgent(settings, primary)
    on_replica = DealerAgent(settings, reading(max_replica_lag_ms=600_000))
    replay(replica_url, "pause")
    primary.inventory.import_listings([listing("late", make="Honda", price=1)])

    assert total(on_replica)["total"] == 25  # the replica answered: it has not replayed "late"
    first = total(on_primary)
    assert first["total"] == 26 and first["vehicles"][0]["vehicle_id"] == "late"
    # The next page, asked where a replica answers: that replica is behind the cursor's
    # inventory version, so the primary answers, and the walk goes on where it stopped.
    second = total(on_replica, pagination={"limit": 10, "cursor": first["next_cursor"]})
    expected = total(on_primary, pagination={"limit": 10, "cursor": first["next_cursor"]})
    assert second == expected and second["total"] == 26
    assert [v["vehicle_id"] for v in second["vehicles"]] == [f"r{i:02d}" for i in range(9, 19)]

    replay(replica_url, "resume")
    caught_up(primary, replica_url)
    assert total(on_replica)["total"] == 26
    facets = on_replica.handle({"type": "inventory.facets.request"}, CTX)["data"]
    assert facets["makes"] == [{"value": "Honda", "count": 26}]


def healthz(stores: Stores) -> dict[str, Any]:
    app = create_app(make_settings(), stores, services=())
    server = LiveServer().start(app)
    try:
        response = httpx.get(server.base_url + "/healthz", timeout=30)
    finally:
        server.stop()
    assert response.status_code == 200  # replicas never fail the check: the primary answers reads
    return response.json()


def test_a_lagging_replica_is_skipped_and_healthz_says_so(deployment):
    primary, replica_url, reading = deployment
    stores = reading(max_replica_lag_ms=0)
    assert healthz(stores)["checks"]["replicas"] == [{"name": "read_urls[0]", "state": "ok", "lag_ms": 0}]
    replay(replica_url, "pause")
    primary.inventory.import_listings([listing("late", make="Honda", price=1)])
    for _ in range(1000):  # until the replica has received what it does not replay
        with psycopg.connect(replica_url, autocommit=True) as conn:
            if conn.execute("SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()").fetchone()[0]:
                break
        time.sleep(0.01)
    (report,) = healthz(stores)["checks"]["replicas"]
    assert report["name"] == "read_urls[0]" and report["state"] == "lagging" and report["lag_ms"] >= 0
    assert total(DealerAgent(make_settings(), stores))["total"] == 26  # the primary answered


def test_a_replica_stopped_midway_is_skipped(clusters, deployment):
    _primary, replica, _url = clusters
    primary, replica_url, reading = deployment
    stores = reading(max_replica_lag_ms=600_000)
    agent = DealerAgent(make_settings(), stores)
    first = total(agent)
    assert first["total"] == 25 and stores.reads.replicas[0].state == "ok"  # read from the replica
    replica.halt()
    try:
        primary.inventory.import_listings([listing("late", make="Honda", price=1)])
        # Its pooled connections are dead: the read fails over to the primary, at once.
        following = total(agent, pagination={"limit": 10, "cursor": first["next_cursor"]})
        assert following["total"] == 26
        assert [v["vehicle_id"] for v in following["vehicles"]] == [f"r{i:02d}" for i in range(10, 20)]
        assert agent.handle({"type": "inventory.vehicle.request", "vehicle_id": "late"}, CTX)["data"]
        assert healthz(stores)["checks"]["replicas"] == [{"name": "read_urls[0]", "state": "down"}]
    finally:
        replica.resume()
    caught_up(primary, replica_url)
    stores.reads.replicas[0].checked = 0.0  # the next read checks it again (instead of in a second)
    assert total(agent)["total"] == 26 and stores.reads.replicas[0].state == "ok"


def received_wal(replica_url: str) -> None:
    """Wait (bounded by count) until the paused replica has received WAL it has not replayed."""
    for _ in range(1000):
        with psycopg.connect(replica_url, autocommit=True) as conn:
            if conn.execute("SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()").fetchone()[0]:
                return
        time.sleep(0.01)
    raise AssertionError("the replica received nothing")


def test_a_lead_for_a_listing_the_standby_has_not_replayed_reaches_its_seller(deployment):
    """The vehicle of interest decides the lead's seller, rooftop and idempotency scope: it is read
    on the primary, never on a standby that is behind, even within the allowed lag."""
    primary, replica_url, reading = deployment
    settings = dataclasses.replace(
        make_settings(
            rooftops=[OPERATOR_ROOFTOP], dealers=(SPRINGFIELD, SHELBYVILLE), scope="aggregate", filters=("make",)
        ),
        dealer=DealerProfile({"name": "Cars Marketplace", "rooftops": [OPERATOR_ROOFTOP]}),
    )
    agent = DealerAgent(settings, reading(max_replica_lag_ms=600_000))
    replay(replica_url, "pause")
    fresh = listing(
        "fresh-1",
        dealer_id=SHELBYVILLE.dealer_id,
        rooftop="Shelbyville Ford Downtown",
        vin="1FTEW1EP5PKA00777",
        make="Ford",
        model="F-150",
        price=41_000,
    )
    primary.inventory.import_listings([fresh])
    received_wal(replica_url)
    # The standby answers reads and has not replayed the import: the listing is not there yet.
    with pytest.raises(AapError) as caught:
        agent.handle({"type": "inventory.vehicle.request", "vehicle_id": "fresh-1"}, CTX)
    assert caught.value.code == "VEHICLE_NOT_FOUND" and agent.stores.reads.replicas[0].state == "ok"

    for vehicle in ({"vehicle_id": "fresh-1"}, {"vin": fresh["vin"]}):
        answer = agent.handle(lead_request(vehicle_of_interest=vehicle, idempotency_key=str(vehicle)), LEAD_CTX)
        lead = primary.leads.get_lead(answer["data"]["lead_id"])
        assert answer["data"]["dealer"] == {"name": "Shelbyville Ford", "phone": "+12175550199"}
        assert "could not be matched" not in answer["message"]
        assert (lead["dealer_id"], lead["rooftop"], lead["vehicle_link"]) == (
            "shelbyville-ford",
            "Shelbyville Ford Downtown",
            "linked",
        )
    # A replay is looked up under the same seller: the same lead, not a second one.
    again = agent.handle(
        lead_request(vehicle_of_interest={"vehicle_id": "fresh-1"}, idempotency_key=str({"vehicle_id": "fresh-1"})),
        LEAD_CTX,
    )
    assert again["data"]["replayed"] is True


# -- configuration ------------------------------------------------------------------------
BASE = {
    "id": "x",
    "public_url": "https://dealer.example",
    "dealer": {"name": "D", "rooftops": [{"name": "R", "timezone": "UTC"}]},
}


def test_database_table_with_read_urls():
    settings = parse_settings(
        dict(
            BASE,
            database={
                "url": "postgresql://aap@primary/aap",
                "read_urls": ["postgresql://aap@replica-1/aap"],
                "max_replica_lag_ms": 2000,
            },
        ),
        environ={},
    )
    assert settings.database_url == "postgresql://aap@primary/aap"
    assert settings.database_read_urls == ("postgresql://aap@replica-1/aap",)
    assert settings.max_replica_lag_ms == 2000
    plain = parse_settings(dict(BASE, database="postgresql://aap@primary/aap"), environ={})
    assert plain.database_read_urls == () and plain.max_replica_lag_ms == 5000


def test_replicas_from_the_environment():
    settings = parse_settings(
        dict(BASE, database="postgresql://aap@primary/aap"),
        environ={
            "AAP_DATABASE_READ_URLS": "postgresql://aap@r1/aap, postgresql://aap@r2/aap",
            "AAP_DATABASE_URL": "postgresql://aap@other/aap",
        },
    )
    assert settings.database_url == "postgresql://aap@other/aap"
    assert settings.database_read_urls == ("postgresql://aap@r1/aap", "postgresql://aap@r2/aap")


def test_replica_problems_are_reported_with_their_paths():
    with pytest.raises(ConfigError) as caught:
        parse_settings(
            dict(
                BASE,
                database={"url": "sqlite:///aap.db", "read_urls": ["mysql://x"], "max_replica_lag_ms": -1, "bogus": 1},
            ),
            environ={},
        )
    problems = "\n".join(caught.value.problems)
    for expected in (
        "database.read_urls: item 0 must be a postgresql:// URL",
        "database.read_urls: read replicas need a PostgreSQL primary",
        "database.max_replica_lag_ms",
        "database.bogus: unknown key",
    ):
        assert expected in problems, problems
