"""Databases made by the release before the shared tables, upgraded (docs/platform.md, "Upgrading").

``tests/fixtures/layout-1/`` holds SQL dumps of deployments made with that release by its own
commands (``aap tenants add``, ``aap import --tenant``, ``aap users add``) and served (searches
with a cursor, a lead, the discovery documents): a single deployment and a platform of three
tenants sharing a VIN and a stock number, on SQLite (the platform file and one file per tenant)
and PostgreSQL (a schema per tenant). Each is loaded, upgraded the way an operator does, and
checked: every row of every table is in the new tables under its tenant (counted table by
table against the dump), the old namespaces are gone, the layout's rules hold, the agents serve
their own rows, and an upgrade stopped halfway resumes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from aap.cli.main import main
from aap.store import Stores, open_platform_database, open_stores
from aap.store.db import DEPLOYMENT_TENANT, connect
from aap.store.layout import problems, tenant_tables
from aap.store.migrations import DOMAINS, PLATFORM_DOMAINS
from aap.store.upgrade import UpgradeError, move_tenant, pending_tenants
from platform_support import PLATFORM_HOST, write

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "layout-1"
TENANTS = ("alpha", "beta", "gamma-3")
LISTINGS = {"alpha": 4, "beta": 6, "gamma-3": 3}
APP_ROLE = "aap_app"


def _sqlite_counts(path: Path) -> dict[str, int]:
    """Rows per agent table of a first-layout SQLite file."""
    conn = sqlite3.connect(path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tenant_tables(DOMAINS) if t in names
        }
    finally:
        conn.close()


def _load_sqlite(script: Path, path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script.read_text(encoding="utf-8"))
    finally:
        conn.close()


def _counts(db, tenant: str) -> dict[str, int]:
    with db.for_tenant(tenant).read() as tx:
        return {
            t: int(tx.one(f"SELECT COUNT(*) FROM {t} WHERE tenant_id = ?", (tenant,))[0])
            for t in tenant_tables(DOMAINS)
        }


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {t: n for t, n in counts.items() if n}


def _served(stores: Stores, listings: int) -> None:
    """The agent's own rows answer: its inventory, its lead, its staff account, its secrets."""
    assert stores.inventory.count() == listings
    if listings != 5:  # every platform tenant has the one VIN they share (the single dealer has none)
        assert [r.available for r in stores.inventory.find(vin="1HGCV1F30NA123456")] == [True]
    assert stores.leads.count_leads() == 1
    with stores.db.read() as tx:
        assert tx.one("SELECT COUNT(*) FROM state_secret WHERE tenant_id = ?", (tx.tenant,))[0] >= 1


def _platform_file(directory: Path, url: str) -> Path:
    return Path(write(directory / "platform.toml", f'database = "{url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n'))


def _upgrade(config: Path):
    return CliRunner().invoke(main, ["db", "upgrade", "--config", str(config)])


# -- SQLite -------------------------------------------------------------------------------------------


def test_a_single_sqlite_deployment_moves_in_when_opened(tmp_path) -> None:
    path = tmp_path / "aap.db"
    _load_sqlite(FIXTURES / "sqlite-single.sql", path)
    before = _sqlite_counts(path)
    stores = open_stores(f"sqlite:///{path}")
    try:
        assert _nonzero(_counts(stores.db, DEPLOYMENT_TENANT)) == _nonzero(before)
        with stores.db.read() as tx:
            assert problems(tx, DOMAINS) == []
            assert not stores.db.dialect.has_table(tx, "schema_migrations")
            assert not [r for r in tx.fetchall("SELECT name FROM sqlite_master WHERE name LIKE 'layout1_%'")]
        _served(stores, 5)
    finally:
        stores.close()


def _sqlite_platform(tmp_path: Path) -> tuple[Path, dict[str, dict[str, int]]]:
    _load_sqlite(FIXTURES / "sqlite-platform" / "platform.sql", tmp_path / "platform.db")
    (tmp_path / "platform.tenants").mkdir()
    counts = {DEPLOYMENT_TENANT: _sqlite_counts(tmp_path / "platform.db")}
    for tenant in TENANTS:
        file = tmp_path / "platform.tenants" / f"{tenant}.db"
        _load_sqlite(FIXTURES / "sqlite-platform" / f"{tenant}.sql", file)
        counts[tenant] = _sqlite_counts(file)
    return _platform_file(tmp_path, f"sqlite:///{tmp_path / 'platform.db'}"), counts


def test_a_sqlite_platform_is_moved_by_aap_db_upgrade(tmp_path) -> None:
    config, before = _sqlite_platform(tmp_path)
    refused = CliRunner().invoke(main, ["leads", "list", "--tenant", "alpha", "--config", str(config)])
    assert refused.exit_code == 1 and "aap db upgrade" in refused.output
    done = _upgrade(config)
    assert done.exit_code == 0, done.output
    assert "3 moved into the shared tables" in done.output
    assert not (tmp_path / "platform.tenants").exists()
    _check_platform(f"sqlite:///{tmp_path / 'platform.db'}", before)
    again = _upgrade(config)
    assert again.exit_code == 0 and "0 moved" in again.output


def _check_platform(url: str, before: dict[str, dict[str, int]]) -> None:
    db = open_platform_database(url)
    try:
        assert pending_tenants(db) == []
        for tenant, counts in before.items():
            assert _nonzero(_counts(db, tenant)) == _nonzero(counts), tenant
        with db.read() as tx:
            assert problems(tx, PLATFORM_DOMAINS) == []
        for tenant in TENANTS:
            stores = Stores(db.for_tenant(tenant))
            _served(stores, LISTINGS[tenant])
            assert stores.console.user_by_email(f"owner@{tenant.split('-')[0]}.example") is not None
    finally:
        db.close()


def test_a_sqlite_platform_upgrade_stopped_halfway_resumes(tmp_path, monkeypatch) -> None:
    config, before = _sqlite_platform(tmp_path)
    db = open_platform_database(f"sqlite:///{tmp_path / 'platform.db'}")
    try:
        _stop_halfway(db, monkeypatch)
        assert pending_tenants(db) == ["beta", "gamma-3"]
        assert (tmp_path / "platform.tenants" / "beta.db").exists()
        assert _nonzero(_counts(db, "beta")) == {}
    finally:
        db.close()
    monkeypatch.undo()
    done = _upgrade(config)
    assert done.exit_code == 0, done.output
    _check_platform(f"sqlite:///{tmp_path / 'platform.db'}", before)


def _stop_halfway(db, monkeypatch) -> None:
    """Move the first tenant, then fail the second's move in its last table."""
    import aap.store.upgrade as upgrade

    assert move_tenant(db, "alpha", PLATFORM_DOMAINS)
    real = upgrade.copy_rows

    def failing(tx, table, source):
        copied = real(tx, table, source)
        if table == "inv_change":
            raise UpgradeError("the disk is full")
        return copied

    monkeypatch.setattr(upgrade, "copy_rows", failing)
    with pytest.raises(UpgradeError):
        move_tenant(db, "beta", PLATFORM_DOMAINS)


# -- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.fixture
def app_database(pg_cluster):
    url = pg_cluster.create_database(role=APP_ROLE)
    yield url
    pg_cluster.drop_database(url)


def _pg_counts_of(url: str, schema: str) -> dict[str, int]:
    db = connect(url)
    try:
        with db.read() as tx:
            found = {}
            for table in tenant_tables(DOMAINS):
                if tx.one("SELECT to_regclass(?) IS NOT NULL", (f"{schema}.{table}",))[0]:
                    found[table] = int(tx.one(f"SELECT COUNT(*) FROM {schema}.{table}")[0])
            return found
    finally:
        db.close()


def test_a_single_postgresql_deployment_moves_in_when_opened(app_database, pg_cluster) -> None:
    pg_cluster.psql(app_database, str(FIXTURES / "postgresql-single.sql"))
    before = _pg_counts_of(app_database, "public")
    stores = open_stores(app_database)
    try:
        assert _nonzero(_counts(stores.db, DEPLOYMENT_TENANT)) == _nonzero(before)
        with stores.db.read() as tx:
            assert problems(tx, DOMAINS) == []
            assert not tx.one("SELECT to_regclass('schema_migrations') IS NOT NULL")[0]
            assert tx.one("SELECT COUNT(*) FROM pg_namespace WHERE nspname = 'aap_layout1'")[0] == 0
        _served(stores, 5)
    finally:
        stores.close()


def test_a_postgresql_platform_is_moved_by_aap_db_upgrade(app_database, pg_cluster, tmp_path, monkeypatch) -> None:
    pg_cluster.psql(app_database, str(FIXTURES / "postgresql-platform.sql"))
    before = {DEPLOYMENT_TENANT: _pg_counts_of(app_database, "public")}
    for tenant in TENANTS:
        before[tenant] = _pg_counts_of(app_database, "tenant_" + tenant.replace("-", "_"))
    config = _platform_file(tmp_path, app_database)
    db = open_platform_database(app_database)
    try:
        assert pending_tenants(db) == list(TENANTS)
        _stop_halfway(db, monkeypatch)
        assert pending_tenants(db) == ["beta", "gamma-3"]
    finally:
        db.close()
    monkeypatch.undo()
    done = _upgrade(config)
    assert done.exit_code == 0, done.output
    assert "2 moved into the shared tables" in done.output
    _check_platform(app_database, before)
    with connect(app_database).read() as tx:
        assert tx.one("SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE 'tenant\\_%'")[0] == 0
