"""Each tenant's own database namespace, so that tenants share nothing by accident.

A tenant's agent keeps everything an agent keeps — listings, leads and their idempotency
keys, Poppy keys, sessions and replay caches, rate-limit buckets, console accounts and
sessions, the audit log, the feed history — in the same tables as a deployment that is one
agent, with the same code; only the namespace differs (docs/platform.md, "Isolation"):

- **SQLite**: a database file per tenant next to the platform's own file
  (``aap.db`` → ``aap.tenants/<id>.db``);
- **PostgreSQL**: a schema per tenant (``tenant_<id>``) in the platform's database, read
  and written through the platform's one connection pool: every transaction of the
  tenant's stores sets its ``search_path`` to that schema alone
  (:meth:`aap.store.postgres.PostgresDatabase.in_schema`).

No query can name another tenant's tables, because none of them is on its path.
"""

from __future__ import annotations

import os
from pathlib import Path

from aap.store.db import Database, connect, sqlite_path
from aap.store.migrations import DOMAINS, migrate


def schema_name(tenant_id: str) -> str:
    """The PostgreSQL schema of a tenant (ids are lower-case letters, digits and ``-``)."""
    return "tenant_" + tenant_id.replace("-", "_")


class Namespaces:
    """Opens, creates and drops tenants' namespaces beside the platform database ``platform``."""

    def __init__(self, platform: Database) -> None:
        self.platform = platform
        self.postgres = not platform.in_process
        if not self.postgres:
            path = sqlite_path(platform.url)
            self.directory: Path | None = None if path == ":memory:" else Path(path).with_suffix(".tenants")

    def url(self, tenant_id: str) -> str:
        """A database URL that opens only ``tenant_id``'s namespace (for a process of its own)."""
        if self.postgres:
            from aap.store.postgres import with_search_path

            return with_search_path(self.platform.url, schema_name(tenant_id))
        if self.directory is None:
            return "sqlite://:memory:"
        return f"sqlite:///{self.directory / (tenant_id + '.db')}"

    def open(self, tenant_id: str, *, migrated: bool = True) -> Database:
        """The tenant's namespace (PostgreSQL: a view of the platform's pool, nothing opened).

        ``migrated``: bring it to the newest schema if it is behind (one read when it is not),
        so that a worker started after ``aap db upgrade`` of the platform can serve it.
        """
        if self.postgres:
            from aap.store.postgres import PostgresDatabase

            assert isinstance(self.platform, PostgresDatabase)
            db: Database = self.platform.in_schema(schema_name(tenant_id))
        else:
            db = connect(self.url(tenant_id))
        if migrated and behind(db):
            migrate(db)
        return db

    def create(self, tenant_id: str) -> Database:
        """Make the namespace and its tables (idempotent: an existing one is only migrated)."""
        if self.postgres:
            from aap.store.postgres import quote_identifier

            with self.platform.transaction() as tx:
                tx.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(schema_name(tenant_id))}")
        elif self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        db = self.open(tenant_id, migrated=False)
        migrate(db)
        return db

    def drop(self, tenant_id: str) -> None:
        """Delete the namespace and everything in it (a removed tenant's data)."""
        if self.postgres:
            from aap.store.postgres import quote_identifier

            with self.platform.transaction() as tx:
                tx.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(schema_name(tenant_id))} CASCADE")
            return
        if self.directory is None:
            return
        base = self.directory / f"{tenant_id}.db"
        for path in (base, base.with_name(base.name + "-wal"), base.with_name(base.name + "-shm")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def behind(db: Database) -> bool:
    """True when some storage domain of ``db`` is not at its newest version (or was never made)."""
    newest = {d.domain: len(d.steps) for d in DOMAINS}
    try:
        with db.read() as tx:
            rows = tx.fetchall("SELECT domain, version FROM schema_migrations")
    except Exception:  # no schema_migrations yet: a namespace never migrated
        return True
    current = {domain: version for domain, version in rows}
    return any(current.get(domain, 0) < version for domain, version in newest.items())
