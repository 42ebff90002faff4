"""Every storage domain's schema steps, and the one function that applies them.

A domain's version is the number of its steps applied so far, kept per domain
name in ``schema_migrations``; the names and step counts here are what
existing databases were migrated with, so steps are only ever appended.
"""

from __future__ import annotations

from aap.store import console, feeds, inventory, lead_pipeline, leads, platform, poppy, state
from aap.store.db import Database, Migrations

DOMAINS: tuple[Migrations, ...] = (
    state.MIGRATIONS,
    inventory.MIGRATIONS,
    leads.MIGRATIONS,
    lead_pipeline.MIGRATIONS,  # after leads (domains apply by name): its columns go on leads
    poppy.MIGRATIONS,
    feeds.MIGRATIONS,
    console.MIGRATIONS,
)

#: A platform deployment's own namespace: every domain (its platform administrators' console
#: accounts, its secrets) and the registry of its tenants (docs/platform.md).
PLATFORM_DOMAINS: tuple[Migrations, ...] = (*DOMAINS, platform.MIGRATIONS)


def migrate(db: Database, domains: tuple[Migrations, ...] = DOMAINS) -> dict[str, int]:
    """Bring every domain to its newest version, in one transaction; returns the versions."""
    versions: dict[str, int] = {}
    with db.transaction() as tx:
        db.dialect.lock_migrations(tx)
        tx.execute("CREATE TABLE IF NOT EXISTS schema_migrations ( domain TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        for domain in sorted(domains, key=lambda d: d.domain):
            row = tx.fetchone("SELECT version FROM schema_migrations WHERE domain = ?", (domain.domain,))
            current = row[0] if row else 0
            for step in domain.steps[current:]:
                if callable(step):
                    step(tx)
                else:
                    tx.script(step)
            newest = len(domain.steps)
            if row is None:
                tx.execute("INSERT INTO schema_migrations (domain, version) VALUES (?, ?)", (domain.domain, newest))
            elif newest != current:
                tx.execute("UPDATE schema_migrations SET version = ? WHERE domain = ?", (newest, domain.domain))
            versions[domain.domain] = newest
    return versions


def pending(db: Database, domains: tuple[Migrations, ...] = DOMAINS) -> list[str]:
    """The domains whose stored version is not this code's newest (none when the schema is
    current): a worker must not serve a schema it was not written for (``/readyz``)."""
    with db.read() as tx:
        rows = tx.fetchall("SELECT domain, version FROM schema_migrations")
    stored = {domain: version for domain, version in rows}
    return [d.domain for d in sorted(domains, key=lambda d: d.domain) if stored.get(d.domain) != len(d.steps)]
