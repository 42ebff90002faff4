"""A platform tenant's rows in the shared tables: its view of the database, and their removal.

A tenant's agent keeps everything an agent keeps — listings, leads and their idempotency
keys, Poppy keys, sessions and replay caches, rate-limit buckets, console accounts and
sessions, the audit log, the feed history — in the same tables as every other tenant and as a
deployment that is one agent, with the same code; each row carries its tenant
(docs/platform.md, "Isolation"). Opening a tenant's stores opens nothing: its
:class:`~aap.store.db.Database` is a view of the platform's (the same connections), whose
every transaction is the tenant's (:mod:`aap.store.layout`: the stores' filters, and
row-level security on PostgreSQL).
"""

from __future__ import annotations

from aap.store import layout
from aap.store.db import Database
from aap.store.migrations import DOMAINS


class TenantData:
    """Every tenant's rows in the platform's database ``platform``."""

    def __init__(self, platform: Database) -> None:
        self.platform = platform

    def open(self, tenant_id: str) -> Database:
        """The tenant's view of the platform database (nothing is opened or created)."""
        return self.platform.for_tenant(tenant_id)

    def remove(self, tenant_id: str) -> dict[str, int]:
        """Delete every row of the tenant, in one transaction; the rows deleted per table."""
        with self.open(tenant_id).transaction() as tx:
            return layout.purge(tx, DOMAINS)

    def counts(self, tenant_id: str) -> dict[str, int]:
        """How many rows the tenant has in each table."""
        with self.open(tenant_id).read() as tx:
            return layout.count_rows(tx, DOMAINS)
