"""Moving a database of the first layout into the shared tables keyed by tenant.

The first layout (:mod:`aap.store.legacy`) had no tenant column: a deployment that is one
agent kept its tables as they were, a platform kept a copy of them per tenant (a PostgreSQL
schema ``tenant_<id>``, a SQLite file ``<platform>.tenants/<id>.db``). Two moves bring it
into the layout of :mod:`aap.store.layout`:

- **The deployment's own tables** move inside :func:`aap.store.migrations.migrate`, in its
  one transaction: the first layout is finished (its pending steps), its tables are set
  aside (:func:`set_aside`: PostgreSQL moves them to a schema of their own, SQLite renames
  them), the new tables are made, every row comes back under the deployment's tenant
  (:meth:`SetAside.bring_back`), the counts are compared table by table and the old tables
  dropped. A failure anywhere rolls all of it back.
- **A platform's tenants** move with ``aap db upgrade`` (:func:`move_tenant`), one
  transaction per tenant: its namespace finished to the first layout's last version, its rows
  copied in under its id, the counts compared per table, the move recorded in
  ``layout_moves``, and only then its namespace dropped. An upgrade that stops (killed, a
  full disk) is resumed by running it again: a tenant is either moved and its namespace
  gone, or untouched.

A platform serves no tenant while any namespace is still to move
(:func:`pending_tenants`): its rows would be missing from the shared tables.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aap.store import layout, legacy
from aap.store.db import DEPLOYMENT_TENANT, Database, Migrations, Tx, checked_tenant, sqlite_path
from aap.store.leads import note_outbox_due

#: The first layout's schema of a platform tenant.
TENANT_SCHEMA_PREFIX = "tenant_"

_MOVES = (
    "CREATE TABLE IF NOT EXISTS layout_moves ("
    " tenant_id TEXT PRIMARY KEY, moved_ms INTEGER NOT NULL, row_count INTEGER NOT NULL)"
)


class UpgradeError(Exception):
    """A move could not be verified; ``str()`` says which table and what was counted."""


def first_layout(tx: Tx) -> bool:
    """True when the database was made with the first layout (its versions in ``schema_migrations``)."""
    return tx.db.dialect.has_table(tx, "schema_migrations")


def finish_first_layout(tx: Tx) -> None:
    """Apply the first layout's pending steps (a database that was not at its last version)."""
    versions: dict[str, int] = {str(d): int(v) for d, v in tx.fetchall("SELECT domain, version FROM schema_migrations")}
    for domain in legacy.DOMAINS:
        current = int(versions.get(domain.domain, 0))
        for step in domain.steps[current:]:
            if callable(step):
                step(tx)
            else:
                tx.script(step)


@dataclass
class SetAside:
    """The deployment's first-layout tables, set aside until their rows come back."""

    tables: list[str]
    #: Versions of the domains the layout kept as they were (a platform's registry).
    kept: dict[str, int] = field(default_factory=dict)

    def carry_versions(self, tx: Tx) -> None:
        for domain, version in self.kept.items():
            tx.execute("INSERT INTO schema_versions (domain, version) VALUES (?, ?)", (domain, version))

    def bring_back(self, tx: Tx) -> None:
        """Every set-aside row into the new tables, under the deployment's tenant; counts
        compared table by table; then the old tables dropped."""
        assert tx.tenant == DEPLOYMENT_TENANT
        dialect = tx.db.dialect
        for table in self.tables:
            copy_rows(tx, table, dialect.aside_name(table))
        for table in reversed(self.tables):  # children first
            tx.execute(f"DROP TABLE {dialect.aside_name(table)}")
        dialect.drop_aside(tx)
        tx.execute("DROP TABLE schema_migrations")


def set_aside(tx: Tx, domains: Sequence[Migrations]) -> SetAside:
    """Finish the first layout, then move its agent tables out of the way of the new ones."""
    finish_first_layout(tx)
    versions: dict[str, int] = {str(d): int(v) for d, v in tx.fetchall("SELECT domain, version FROM schema_migrations")}
    legacy_names = {d.domain for d in legacy.DOMAINS}
    kept = {
        str(d.domain): int(versions[d.domain]) for d in domains if d.domain in versions and d.domain not in legacy_names
    }
    tables = [t for t in layout.tenant_tables(domains) if tx.db.dialect.has_table(tx, t)]
    tx.db.dialect.set_aside(tx, tables)
    return SetAside(tables, kept)


def copy_rows(tx: Tx, table: str, source: str) -> int:
    """``source``'s rows into ``table`` under ``tx``'s tenant (the columns both have); raises
    :class:`UpgradeError` when the counts differ."""
    columns = [c for c in tx.db.dialect.columns(tx, table) if c != "tenant_id"]
    present = set(tx.db.dialect.columns(tx, source))
    names = ", ".join(c for c in columns if c in present)
    tx.execute(f"INSERT INTO {table} (tenant_id, {names}) SELECT ?, {names} FROM {source}", (tx.tenant,))
    before = int(tx.one(f"SELECT COUNT(*) FROM {source}")[0])
    after = int(tx.one(f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?", (tx.tenant,))[0])
    if before != after:
        raise UpgradeError(f"{table}: {before} row(s) in the first layout, {after} after the move")
    layout.refresh_statistics(tx, table, after)
    return after


# -- a platform's tenants ---------------------------------------------------------------------


def pending_tenants(platform: Database) -> list[str]:
    """The tenants whose first-layout namespace has not moved into the shared tables yet."""
    if platform.in_process:
        directory = _tenants_directory(platform)
        if directory is None or not directory.is_dir():
            return []
        return sorted(p.stem for p in directory.glob("*.db"))
    with platform.read() as tx:
        rows = tx.fetchall(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE ? ESCAPE '\\' ORDER BY nspname",
            (TENANT_SCHEMA_PREFIX.replace("_", "\\_") + "%",),
        )
    return [tenant_of_schema(name) for (name,) in rows]


def tenant_of_schema(schema: str) -> str:
    """The tenant id of a first-layout schema (ids hold ``-``, schema names ``_``)."""
    return schema[len(TENANT_SCHEMA_PREFIX) :].replace("_", "-")


def _tenants_directory(platform: Database) -> Path | None:
    path = sqlite_path(platform.url)
    return None if path == ":memory:" else Path(path).with_suffix(".tenants")


def move_tenant(platform: Database, tenant_id: str, domains: Sequence[Migrations]) -> dict[str, int]:
    """Move one tenant's first-layout namespace into the shared tables (one transaction), then
    drop the namespace; returns the rows moved per table. Idempotent: a tenant moved already
    only has its namespace dropped."""
    checked_tenant(tenant_id)
    if platform.in_process:
        return _move_sqlite(platform, tenant_id, domains)
    return _move_postgres(platform, tenant_id, domains)


def _record(tx: Tx, tenant_id: str, counts: dict[str, int]) -> None:
    """The move's row, and its outbox noted for the platform's runner, in the move's transaction."""
    note_outbox_due(tx)
    tx.execute(_MOVES)
    tx.execute(
        "INSERT INTO layout_moves (tenant_id, moved_ms, row_count) VALUES (?, ?, ?)"
        " ON CONFLICT (tenant_id) DO UPDATE SET moved_ms = excluded.moved_ms, row_count = excluded.row_count",
        (tenant_id, int(time.time() * 1000), sum(counts.values())),
    )


def _move_postgres(platform: Database, tenant_id: str, domains: Sequence[Migrations]) -> dict[str, int]:
    from aap.store.postgres import PostgresDatabase, quote_identifier

    assert isinstance(platform, PostgresDatabase)
    schema = TENANT_SCHEMA_PREFIX + tenant_id.replace("-", "_")
    namespace = platform.in_schema(schema)
    with namespace.transaction() as tx:
        if tx.db.dialect.has_table(tx, "schema_migrations"):
            finish_first_layout(tx)
    quoted = quote_identifier(schema)
    counts: dict[str, int] = {}
    with platform.for_tenant(tenant_id).transaction() as tx:
        tx.db.dialect.lock_migrations(tx)
        layout.purge(tx, domains)  # nothing, unless something wrote for it before the move
        for table in layout.tenant_tables(domains):
            exists = tx.one("SELECT to_regclass(?) IS NOT NULL", (f"{quoted}.{table}",))[0]
            if exists:
                counts[table] = copy_rows(tx, table, f"{quoted}.{table}")
        _record(tx, tenant_id, counts)
        tx.execute(f"DROP SCHEMA {quoted} CASCADE")
    return counts


def _move_sqlite(platform: Database, tenant_id: str, domains: Sequence[Migrations]) -> dict[str, int]:
    directory = _tenants_directory(platform)
    assert directory is not None
    source = directory / f"{tenant_id}.db"
    counts: dict[str, int] = {}
    if source.exists():
        namespace = Database(f"sqlite:///{source}")
        try:
            with namespace.transaction() as tx:
                if tx.db.dialect.has_table(tx, "schema_migrations"):
                    finish_first_layout(tx)
        finally:
            namespace.close()
        # ATTACH cannot run inside a transaction, so this move has a connection of its own.
        conn = sqlite3.connect(sqlite_path(platform.url), isolation_level=None, timeout=30.0)
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("ATTACH DATABASE ? AS layout1", (str(source),))
            conn.execute("BEGIN IMMEDIATE")
            try:
                tx = Tx(platform.for_tenant(tenant_id), conn.cursor())
                layout.purge(tx, domains)
                for table in layout.tenant_tables(domains):
                    if tx.one("SELECT COUNT(*) FROM layout1.sqlite_master WHERE type = 'table' AND name = ?", (table,))[
                        0
                    ]:
                        counts[table] = copy_rows(tx, table, f"layout1.{table}")
                _record(tx, tenant_id, counts)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            conn.execute("DETACH DATABASE layout1")
        finally:
            conn.close()
    for path in (source, source.with_name(source.name + "-wal"), source.with_name(source.name + "-shm")):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()
    return counts
