"""``aap db upgrade`` and ``aap db backup``: schema migrations and consistent copies.

``upgrade`` applies every pending schema migration, then prints the versions.
Servers migrate on start too; running this first (once, from a deploy step)
keeps a rollout of many workers from racing to migrate — and shows what the
schema is at before any traffic arrives. Works on SQLite and PostgreSQL.

On a platform deployment (docs/platform.md) ``upgrade`` migrates the platform's own
namespace and then every tenant's; ``backup --tenant ID`` copies one tenant's namespace
(its SQLite file, or its PostgreSQL schema), which ``aap tenants remove`` deletes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click
from rich.text import Text

from aap.cli.common import (
    config_option,
    console,
    database_option,
    fail,
    load_agent_or_fail,
    load_or_fail,
    open_registry_or_fail,
    redacted,
    tenant_option,
)

if TYPE_CHECKING:
    from aap.config.model import Settings


@click.group("db")
def group() -> None:
    """Database maintenance."""


@group.command("upgrade")
@config_option
@database_option
def upgrade(config: str | None, database: str | None) -> None:
    """Apply pending migrations and print each domain's schema version."""
    settings = load_or_fail(config, {"database": database})
    if settings.platform is not None:
        _upgrade_platform(settings)
        return
    from aap.store import open_database  # the store: loaded only when a command needs it

    try:
        db = open_database(settings.database_url)  # opening migrates
    except Exception as exc:  # noqa: BLE001 - a driver error: report it, not a traceback
        fail(f"Cannot upgrade {redacted(settings.database_url)}", [f"{type(exc).__name__}: {exc}"])
    try:
        with db.read() as tx:
            rows = tx.fetchall("SELECT domain, version FROM schema_migrations ORDER BY domain")
    finally:
        db.close()
    console.print(Text(f"Database {redacted(settings.database_url)} is up to date."))
    for domain, version in rows:
        click.echo(f"{domain}\t{version}")


def _upgrade_platform(settings: Settings) -> None:
    """The platform's namespace (opening it migrates it), then each tenant's, a page at a time."""
    from aap.store.migrations import migrate
    from aap.store.tenancy import behind

    upgraded = 0
    with open_registry_or_fail(settings) as registry:
        with registry.store.db.read() as tx:
            rows = tx.fetchall("SELECT domain, version FROM schema_migrations ORDER BY domain")
        after, count = "", 0
        while page := registry.list(after=after, limit=500):
            for record in page:
                db = registry.namespaces.open(record.tenant_id, migrated=False)
                try:
                    if behind(db):
                        migrate(db)
                        upgraded += 1
                finally:
                    db.close()
            count += len(page)
            after = page[-1].tenant_id
    console.print(
        Text(
            f"Platform database {redacted(settings.database_url)} is up to date, and so are its {count} tenant(s)"
            f" ({upgraded} upgraded now)."
        )
    )
    for domain, version in rows:
        click.echo(f"{domain}\t{version}")


command = group


@group.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@config_option
@database_option
@tenant_option
def backup(path: str, config: str | None, database: str | None, tenant: str | None) -> None:
    """Write a consistent copy of the database to PATH while the server runs.

    SQLite: the online backup API. PostgreSQL: pg_dump --format=custom when
    pg_dump is installed; otherwise the command to run is printed (exit 1).
    Restore: docs/deployment.md. On a platform, --tenant ID copies that tenant's data alone.
    """
    import shlex
    import shutil
    import subprocess

    from aap.store.backup import BackupError, is_postgres, pg_dump_command, sqlite_backup

    settings = load_agent_or_fail(config, tenant, {"database": database}, platform_accounts=True)
    url = settings.database_url
    if not is_postgres(url):
        try:
            size = sqlite_backup(url, path)
        except BackupError as exc:
            fail(f"No backup made: {exc}")
        console.print(Text(f"Backed up {redacted(url)} to {path} ({size:,} bytes)."))
        if settings.platform is not None:
            console.print(
                Text(
                    "This is the platform's own database; each tenant's data is a file of its own: "
                    "aap db backup FILE --tenant ID copies one.",
                    style="yellow",
                )
            )
        return
    from aap.store.tenancy import schema_name

    argv, extra = pg_dump_command(url, path, schema=schema_name(tenant) if tenant else None)
    shown = shlex.join(argv) + ("  # with PGPASSWORD set to the database password" if extra else "")
    if shutil.which("pg_dump") is None:
        fail(
            "No backup made: pg_dump is not installed here (Debian: apt-get install postgresql-client). "
            "Run this where it is:",
            [shown],
        )
    done = subprocess.run(argv, env={**os.environ, **extra}, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        fail(
            f"No backup made: pg_dump exited with status {done.returncode}",
            [line for line in done.stderr.splitlines() if line.strip()][-5:],
        )
    console.print(Text(f"Backed up {redacted(url)} to {path} with pg_dump ({os.path.getsize(path):,} bytes)."))
