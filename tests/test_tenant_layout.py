"""The layout keyed by tenant: what the catalogue says, the second wall, and the distribution.

Every table that holds an agent's rows leads its primary key, its unique and other indexes and
its foreign keys with ``tenant_id`` (Citus's rules for co-located distributed tables), on both
backends; on PostgreSQL row-level security is enabled and forced on each, so that a statement
that forgot its tenant filter sees only the transaction's tenant, and one of a transaction that
set no tenant sees nothing (docs/architecture.md, "Storage"). The number of relations does not
depend on the number of tenants.
"""

from __future__ import annotations

import psycopg
import pytest

from aap.store import open_platform_database
from aap.store.db import DEPLOYMENT_TENANT, connect
from aap.store.layout import citus_statements, problems, tenant_tables
from aap.store.migrations import DOMAINS, PLATFORM_DOMAINS
from aap.store.state import StateStore
from aap.tenants import TenantRegistry
from platform_support import listings, platform_settings, tenant_config, tenant_stores

APP_ROLE = "aap_app"


def test_every_tenant_table_keeps_the_layouts_rules(database_url) -> None:
    db = open_platform_database(database_url)
    try:
        with db.read() as tx:
            assert problems(tx, PLATFORM_DOMAINS) == []
            for table in tenant_tables(PLATFORM_DOMAINS):
                assert db.dialect.columns(tx, table)[0] == "tenant_id", table
    finally:
        db.close()


def test_the_check_finds_a_table_that_breaks_the_rules(database_url) -> None:
    """The catalogue check is not vacuous: a table keyed without the tenant is named."""
    from aap.store.db import Migrations

    rogue = Migrations("rogue", ("CREATE TABLE rogue_rows (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL)",))
    db = open_platform_database(database_url)
    try:
        with db.transaction() as tx:
            tx.script(rogue.steps[0])
        rules = (Migrations("rogue", rogue.steps, tables=("rogue_rows",)),)
        with db.read() as tx:
            found = problems(tx, rules)
        assert any("rogue_rows" in problem and "tenant_id" in problem for problem in found)
        if db.dialect.row_security:
            assert any("row-level security" in problem for problem in found)
    finally:
        db.close()


def _relations(db) -> int:
    """Relations of the database (PostgreSQL: but the catalogue's, and a pooled connection's
    temporary staging tables, which come and go with connections, never with tenants)."""
    with db.read() as tx:
        if db.dialect.row_security:
            return int(
                tx.one(
                    "SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
                    " AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'"
                )[0]
            )
        return int(tx.one("SELECT COUNT(*) FROM sqlite_master")[0])


@pytest.mark.slow
def test_the_number_of_relations_does_not_grow_with_tenants(database_url) -> None:
    db = open_platform_database(database_url)
    registry = TenantRegistry(platform_settings(database_url), db, environ={})
    try:
        registry.add("first", tenant_config("First Motors"), [])
        before = _relations(db)
        for index in range(12):
            tenant_id = f"dealer-{index}"
            registry.add(tenant_id, tenant_config(f"Dealer {index}"), [])
            stores = tenant_stores(registry, tenant_id)
            stores.inventory.import_listings(listings(tenant_id, "Honda", 3, f"Dealer {index} Main"))
            stores.state.secret("cursor")
        assert _relations(db) == before
    finally:
        db.close()


def test_citus_statements_distribute_every_tenant_table_by_tenant() -> None:
    statements = citus_statements(PLATFORM_DOMAINS)
    distributed = [s for s in statements if "create_distributed_table" in s]
    assert len(distributed) == len(tenant_tables(PLATFORM_DOMAINS))
    assert all("'tenant_id'" in s for s in distributed)
    first = tenant_tables(PLATFORM_DOMAINS)[0]
    assert all(f"colocate_with => '{first}'" in s for s in distributed[1:])
    references = [s for s in statements if "create_reference_table" in s]
    assert any("'platform_tenants'" in s for s in references) and any("'schema_versions'" in s for s in references)
    # Parents are distributed before the tables whose foreign keys refer to them.
    order = [s.split("'")[1] for s in distributed]
    assert order.index("leads") < order.index("lead_deliveries") < len(order)
    assert order.index("console_users") < order.index("console_sessions")


# -- the second wall: row-level security --------------------------------------------------------------


@pytest.fixture
def app_database(pg_cluster) -> str:
    """A database owned by, and reached as, a role without superuser or BYPASSRLS."""
    url = pg_cluster.create_database(role=APP_ROLE)
    yield url
    pg_cluster.drop_database(url)


def _two_tenants(url: str) -> None:
    db = open_platform_database(url)
    try:
        for tenant in ("alpha", "beta"):
            state = StateStore(db.for_tenant(tenant))
            state.set_mark("owner", tenant)
            state.put_value("cursor", "same-key", f"{tenant}'s value", expires_at=4_102_444_800)
    finally:
        db.close()


def test_a_statement_without_its_tenant_filter_sees_only_its_tenant(app_database) -> None:
    _two_tenants(app_database)
    db = connect(app_database)
    try:
        with db.for_tenant("alpha").read() as tx:
            assert tx.fetchall("SELECT value FROM state_mark") == [("alpha",)]
            assert tx.fetchall("SELECT value FROM state_value") == [("alpha's value",)]
            assert tx.one("SELECT COUNT(*) FROM state_value")[0] == 1
        with db.for_tenant("beta").transaction() as tx:
            assert tx.execute("UPDATE state_value SET value = 'overwritten'").rowcount == 1
            assert tx.execute("DELETE FROM state_mark").rowcount == 1
        with db.for_tenant("alpha").read() as tx:
            assert tx.fetchall("SELECT value FROM state_value") == [("alpha's value",)]
            assert tx.fetchall("SELECT value FROM state_mark") == [("alpha",)]
    finally:
        db.close()


def test_with_no_tenant_set_nothing_is_seen_or_written(app_database) -> None:
    _two_tenants(app_database)
    with psycopg.connect(app_database, autocommit=True) as conn:
        for table in ("state_mark", "state_value", *tenant_tables(DOMAINS)):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO state_mark (tenant_id, name, value) VALUES ('alpha', 'x', 'y')")
        # A transaction's tenant setting ends with it: the next one on the connection sees nothing.
        with conn.transaction():
            conn.execute("SET LOCAL aap.tenant = 'alpha'")
            assert conn.execute("SELECT COUNT(*) FROM state_mark").fetchone() == (1,)
        assert conn.execute("SELECT COUNT(*) FROM state_mark").fetchone() == (0,)


def test_a_row_for_another_tenant_is_refused(app_database) -> None:
    _two_tenants(app_database)
    db = connect(app_database)
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with db.for_tenant("alpha").transaction() as tx:
                tx.execute("INSERT INTO state_mark (tenant_id, name, value) VALUES ('beta', 'planted', 'x')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with db.for_tenant("alpha").transaction() as tx:
                tx.execute("UPDATE state_mark SET tenant_id = 'beta'")
        with db.for_tenant("beta").read() as tx:
            assert tx.fetchall("SELECT name FROM state_mark") == [("owner",)]
    finally:
        db.close()


def test_the_application_role_is_bound_and_a_superuser_is_said_not_to_be(app_database, pg_cluster) -> None:
    from aap.store.layout import bypasses_isolation

    for url, expected in ((app_database, False), (pg_cluster.admin_url_of(app_database), True)):
        db = connect(url)
        try:
            with db.read() as tx:
                assert bypasses_isolation(tx) is expected
        finally:
            db.close()


def test_the_deployments_own_rows_are_a_tenant_like_any_other(app_database) -> None:
    """A deployment that is one agent keeps its rows under its own tenant, behind the same wall."""
    db = open_platform_database(app_database)
    try:
        StateStore(db).set_mark("demo", "yes")
        with db.for_tenant("alpha").read() as tx:
            assert tx.fetchall("SELECT value FROM state_mark") == []
        with db.read() as tx:
            assert tx.tenant == DEPLOYMENT_TENANT
            assert tx.fetchall("SELECT tenant_id, value FROM state_mark") == [(DEPLOYMENT_TENANT, "yes")]
    finally:
        db.close()


def test_a_tenants_first_import_leaves_the_shared_indexes_alone(app_database) -> None:
    """A platform tenant's first load writes into the tables' indexes as they are: dropping and
    rebuilding them (a single deployment's first load) would lock every other tenant out and
    rebuild over their rows, and two first loads at once would deadlock on the drop."""
    from concurrent.futures import ThreadPoolExecutor

    from aap.store import Stores

    db = open_platform_database(app_database)
    indexes = (
        "SELECT indexrelid::regclass::text, indexrelid FROM pg_index"
        " WHERE indrelid IN ('inv_listing'::regclass, 'inv_doc'::regclass, 'inv_text'::regclass)"
    )
    try:
        with db.read() as tx:
            before = sorted(tx.fetchall(indexes))

        def first_import(tenant: str) -> int:
            return (
                Stores(db.for_tenant(tenant)).inventory.import_listings(listings(tenant, "Honda", 30, "Main")).inserted
            )

        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(first_import, ("alpha", "beta", "gamma"))) == [30, 30, 30]
        with db.read() as tx:
            assert sorted(tx.fetchall(indexes)) == before  # the same indexes, never rebuilt
        for tenant in ("alpha", "beta", "gamma"):
            assert Stores(db.for_tenant(tenant)).inventory.count() == 30
    finally:
        db.close()


def test_a_tenants_view_is_a_copy_that_shares_the_connections(tmp_path) -> None:
    """``for_tenant`` makes its view with ``view_of`` (a shallow copy without the pickle
    protocol): the view reads its own tenant's rows through its database's connections, and
    making it changes nothing of the database it was made from."""
    db = open_platform_database(f"sqlite:///{tmp_path / 'platform.db'}")
    try:
        alpha = db.for_tenant("alpha")
        assert type(alpha) is type(db) and alpha is not db
        assert (db.tenant, alpha.tenant) == (DEPLOYMENT_TENANT, "alpha")
        assert db.owns_connections and not alpha.owns_connections
        assert alpha._local is db._local and alpha._lock is db._lock  # the same connections
        StateStore(alpha).set_mark("who", "alpha")
        assert StateStore(db.for_tenant("alpha")).mark("who") == "alpha"
        assert StateStore(db.for_tenant("beta")).mark("who") is None
        assert StateStore(db).mark("who") is None
    finally:
        db.close()
