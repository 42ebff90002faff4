"""Liveness and readiness (docs/deployment.md, "Health, liveness and readiness"): ``/livez``
answers while the process serves, whatever the database does; ``/readyz`` answers 503 when the
database is gone, its schema is behind the code, or a platform worker stopped following its
registry; ``/healthz`` is kept. Real servers on loopback, a real PostgreSQL database dropped
under a running server."""

from __future__ import annotations

import shutil

import httpx
import psycopg
import pytest

from aap.server.app import create_app
from aap.server.operations import Readiness
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database, open_stores
from aap.store.migrations import DOMAINS, PLATFORM_DOMAINS
from http_helpers import LiveServer, make_settings
from platform_support import PLATFORM_HOST, platform_settings


def probe(base: str, path: str, host: str | None = None) -> httpx.Response:
    return httpx.get(base + path, headers={"host": host} if host else None, timeout=60)


def assert_ready(base: str, host: str | None = None) -> None:
    ready = probe(base, "/readyz", host)
    assert ready.status_code == 200, ready.text
    assert ready.headers["cache-control"] == "no-store"
    assert ready.json()["status"] == "ready"
    live = probe(base, "/livez", host)
    assert live.status_code == 200 and live.json() == {"status": "ok"}


@pytest.mark.slow
def test_a_database_that_goes_away_makes_the_worker_unready_but_alive(tmp_path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    settings = make_settings("http://127.0.0.1:8000", f"sqlite:///{directory}/aap.db")
    stores = open_stores(settings.database_url)
    server = LiveServer().start(create_app(settings, stores, services=()))
    try:
        assert_ready(server.base_url)
        assert probe(server.base_url, "/readyz").json()["checks"] == {"database": "ok", "migrations": "current"}
        shutil.rmtree(directory)  # the file and its directory are gone: no connection can be opened
        stores.db.close()
        unready = probe(server.base_url, "/readyz")
        assert unready.status_code == 503
        assert unready.json() == {"status": "unready", "checks": {"database": "unavailable"}}
        assert probe(server.base_url, "/livez").status_code == 200
        assert probe(server.base_url, "/healthz").status_code == 503  # kept as it was
    finally:
        server.stop()
        stores.close()


def test_a_schema_behind_the_code_is_not_ready(tmp_path) -> None:
    settings = make_settings("http://127.0.0.1:8000", f"sqlite:///{tmp_path}/aap.db")
    stores = open_stores(settings.database_url)
    server = LiveServer().start(create_app(settings, stores, services=()))
    try:
        with stores.db.transaction() as tx:  # as a database restored from an older release is
            tx.execute("UPDATE schema_migrations SET version = version - 1 WHERE domain = 'leads'")
        unready = probe(server.base_url, "/readyz")
        assert unready.status_code == 503
        assert unready.json()["checks"] == {"database": "ok", "migrations": "pending"}
        assert probe(server.base_url, "/livez").status_code == 200
    finally:
        server.stop()
        stores.close()


@pytest.mark.slow
def test_a_postgresql_database_dropped_under_the_server(pg_cluster) -> None:
    url = pg_cluster.create_database()
    settings = make_settings("http://127.0.0.1:8000", url)
    stores = open_stores(url)
    server = LiveServer().start(create_app(settings, stores, services=()))
    try:
        assert_ready(server.base_url)
        name = url.rpartition("/")[2]
        with psycopg.connect(pg_cluster._admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # every connection to it is cut
        unready = probe(server.base_url, "/readyz")
        assert unready.status_code == 503
        assert unready.json()["checks"]["database"] in ("unavailable", "timeout")
        assert "psycopg" not in unready.text and name not in unready.text  # no driver text, no name
        assert probe(server.base_url, "/livez").status_code == 200
    finally:
        server.stop()
        stores.close()


@pytest.mark.slow
def test_a_platform_answers_its_probes_at_every_host(tmp_path) -> None:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    server = LiveServer().start(create_platform_app(settings, stores))
    try:
        for host in (PLATFORM_HOST, "unknown.example", None):
            assert_ready(server.base_url, host)
        checks = probe(server.base_url, "/readyz", PLATFORM_HOST).json()["checks"]
        assert checks == {"database": "ok", "migrations": "current", "registry": "followed"}
    finally:
        server.stop()
        stores.close()


def test_a_platform_worker_that_stopped_following_its_registry_is_not_ready(tmp_path) -> None:
    db = open_platform_database(f"sqlite:///{tmp_path}/platform.db")
    try:
        ages = iter([None, 3.0, 30.0])
        readiness = Readiness(db, PLATFORM_DOMAINS, lambda: next(ages), registry_max_age=10.0)
        assert readiness.check()["registry"] == "stale"  # never read yet
        assert readiness.check()["registry"] == "followed"
        assert readiness.check()["registry"] == "stale"  # past the few polls it may miss
        assert Readiness(db, DOMAINS).check()["migrations"] == "current"  # the platform's own domains include these
    finally:
        db.close()
