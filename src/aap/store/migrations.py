"""Every storage domain's schema steps, and the one function that applies them.

A domain's version is the number of its steps applied so far, kept per domain name in
``schema_versions``; steps are only ever appended. Step 1 of each domain is its tables as
they are now — keyed by tenant (:mod:`aap.store.layout`) — so a new database is made in one
step per domain, and a database of the first layout (``schema_migrations``, no tenant
column: :mod:`aap.store.legacy`) is moved into them on the way (:mod:`aap.store.upgrade`).

The time a migration takes never depends on the number of tenants: they share the tables.
"""

from __future__ import annotations

from aap.store import console, erasure, feeds, inventory, layout, lead_pipeline, leads, platform, poppy, state, upgrade
from aap.store.db import Database, Migrations, Tx

#: The domains of an agent, in the order their steps apply (``pipeline`` adds columns to
#: ``leads``, so it comes after it; ``erasure`` records what was erased from both).
DOMAINS: tuple[Migrations, ...] = (
    state.MIGRATIONS,
    inventory.MIGRATIONS,
    leads.MIGRATIONS,
    lead_pipeline.MIGRATIONS,
    poppy.MIGRATIONS,
    feeds.MIGRATIONS,
    console.MIGRATIONS,
    erasure.MIGRATIONS,
)

#: A platform deployment: every domain (its tenants' rows and the platform's own accounts,
#: under the deployment's tenant) and the registry of its tenants (docs/platform.md).
PLATFORM_DOMAINS: tuple[Migrations, ...] = (*DOMAINS, platform.MIGRATIONS)

_VERSIONS = "CREATE TABLE IF NOT EXISTS schema_versions ( domain TEXT PRIMARY KEY, version INTEGER NOT NULL)"


def migrate(db: Database, domains: tuple[Migrations, ...] = DOMAINS) -> dict[str, int]:
    """Bring every domain to its newest version, in one transaction; returns the versions.

    A database of the first layout is moved into the shared tables in the same transaction
    (its rows become the deployment's own: :data:`~aap.store.db.DEPLOYMENT_TENANT`), so a
    failure anywhere leaves it exactly as it was.
    """
    with db.transaction() as tx:
        db.dialect.lock_migrations(tx)
        earlier = upgrade.set_aside(tx, domains) if upgrade.first_layout(tx) else None
        tx.execute(_VERSIONS)
        if earlier is not None:
            earlier.carry_versions(tx)
        versions = {domain.domain: _apply(tx, domain) for domain in domains}
        layout.isolate(tx, domains)
        db.dialect.settle_plans(tx, layout.tenant_tables(domains))
        if earlier is not None:
            earlier.bring_back(tx)
    return versions


def _apply(tx: Tx, domain: Migrations) -> int:
    row = tx.fetchone("SELECT version FROM schema_versions WHERE domain = ?", (domain.domain,))
    current = row[0] if row else 0
    for step in domain.steps[current:]:
        if callable(step):
            step(tx)
        else:
            tx.script(tx.db.dialect.ddl(step))
    newest = len(domain.steps)
    if row is None:
        tx.execute("INSERT INTO schema_versions (domain, version) VALUES (?, ?)", (domain.domain, newest))
    elif newest != current:
        tx.execute("UPDATE schema_versions SET version = ? WHERE domain = ?", (newest, domain.domain))
    return newest


def versions(db: Database) -> list[tuple[str, int]]:
    """Each domain's version, by name (what ``aap db upgrade`` prints)."""
    with db.read() as tx:
        return [(str(d), int(v)) for d, v in tx.fetchall("SELECT domain, version FROM schema_versions ORDER BY domain")]


def pending(db: Database, domains: tuple[Migrations, ...] = DOMAINS) -> list[str]:
    """The domains whose stored version is not this code's newest (none when the schema is
    current): a worker must not serve a schema it was not written for (``/readyz``)."""
    with db.read() as tx:
        if not tx.db.dialect.has_table(tx, "schema_versions"):  # never migrated, or the first layout
            return [d.domain for d in domains]
        rows = tx.fetchall("SELECT domain, version FROM schema_versions")
    stored = {domain: version for domain, version in rows}
    return [d.domain for d in sorted(domains, key=lambda d: d.domain) if stored.get(d.domain) != len(d.steps)]
