"""``aap db upgrade``, ``backup``, ``restore`` and ``citus``: migrations, copies, distribution.

``upgrade`` applies every pending schema migration, then prints the versions.
Servers migrate on start too; running this first (once, from a deploy step)
keeps a rollout of many workers from racing to migrate — and shows what the
schema is at before any traffic arrives. Works on SQLite and PostgreSQL, and takes
the same time whatever the number of tenants: they share the tables.

On a platform made before the tables were keyed by tenant (a schema or a file per
tenant), ``upgrade`` also moves every tenant's rows into the shared tables, one tenant
per transaction, and drops its old namespace once its rows are counted in
(:mod:`aap.store.upgrade`); a platform serves no tenant until that is done.
``backup --tenant ID`` writes one tenant's rows as a SQLite database of one agent,
``restore FILE --tenant ID`` makes such a database (or any deployment's) that tenant's
rows, and ``citus`` prints the statements that distribute the tables (docs/platform.md).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
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
    load_platform_or_fail,
    open_registry_or_fail,
    redacted,
    tenant_option,
)

if TYPE_CHECKING:
    from aap.config.model import Settings
    from aap.store.db import Database


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
    from aap.store.migrations import versions

    try:
        db = open_database(settings.database_url)  # opening migrates
    except Exception as exc:  # noqa: BLE001 - a driver error: report it, not a traceback
        fail(f"Cannot upgrade {redacted(settings.database_url)}", [f"{type(exc).__name__}: {exc}"])
    try:
        rows = versions(db)
        _warn_if_unguarded(db)
    finally:
        db.close()
    console.print(Text(f"Database {redacted(settings.database_url)} is up to date."))
    for domain, version in rows:
        click.echo(f"{domain}\t{version}")


def _warn_if_unguarded(db: Database) -> None:
    """Say so when the database role is not bound by row-level security (docs/deployment.md)."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store.layout import bypasses_isolation

    with db.read() as tx:
        unguarded = bypasses_isolation(tx)
    if unguarded:
        console.print(
            Text(
                "The database role is a superuser or has BYPASSRLS: row-level security does not bind it, so "
                "the stores' own tenant filters are the only wall between tenants. Serve with a role of its own "
                '(docs/deployment.md, "Database role").',
                style="yellow",
            )
        )


def _upgrade_platform(settings: Settings) -> None:
    """The platform's database (opening it migrates it), then every tenant still in a namespace of
    the first layout, moved into the shared tables one at a time."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store.migrations import PLATFORM_DOMAINS, versions
    from aap.store.upgrade import move_tenant, pending_tenants

    with open_registry_or_fail(settings) as registry:
        db = registry.store.db
        pending = pending_tenants(db)
        moved = 0
        for tenant_id in pending:
            try:
                counts = move_tenant(db, tenant_id, PLATFORM_DOMAINS)
            except Exception as exc:  # noqa: BLE001 - name the tenant and the reason; what moved stays moved
                fail(
                    f"Tenant {tenant_id}: its rows could not be moved ({moved} of {len(pending)} moved so far; "
                    "run aap db upgrade again to resume)",
                    [f"{type(exc).__name__}: {exc}"],
                )
            moved += 1
            console.print(Text(f"Moved tenant {tenant_id}: {sum(counts.values()):,} row(s).", style="dim"))
        rows = versions(db)
        count = registry.store.count()
        _warn_if_unguarded(db)
    console.print(
        Text(
            f"Platform database {redacted(settings.database_url)} is up to date, with its {count} tenant(s)"
            f" ({moved} moved into the shared tables now)."
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
    Restore: docs/deployment.md. On a platform, --tenant ID writes that tenant's
    rows alone, as a SQLite database of one agent (aap db restore puts it back).
    """
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store.backup import BackupError, is_postgres, pg_dump_command, sqlite_backup

    settings = load_agent_or_fail(config, tenant, {"database": database}, platform_accounts=True)
    url = settings.database_url
    if settings.tenant_id is not None:
        _backup_tenant(settings, path)
        return
    if not is_postgres(url):
        try:
            size = sqlite_backup(url, path)
        except BackupError as exc:
            fail(f"No backup made: {exc}")
        console.print(Text(f"Backed up {redacted(url)} to {path} ({size:,} bytes)."))
        return
    argv, extra = pg_dump_command(url, path)
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


def _backup_tenant(settings: Settings, path: str) -> None:
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store import open_database
    from aap.store.db import connect
    from aap.store.transfer import copy_agent

    if os.path.exists(path):
        fail(f"No backup made: {path} already exists; a backup never overwrites a file")
    assert settings.tenant_id is not None
    platform = connect(settings.database_url)
    try:
        target = open_database(f"sqlite:///{os.path.abspath(path)}")
        try:
            with platform.for_tenant(settings.tenant_id).read() as source, target.transaction() as into:
                counts = copy_agent(source, into)
        finally:
            target.close()
    except Exception as exc:  # noqa: BLE001 - one line, and no half-written file left behind
        if os.path.exists(path):
            os.remove(path)
        fail(f"No backup made: {type(exc).__name__}: {exc}")
    finally:
        platform.close()
    console.print(
        Text(
            f"Backed up tenant {settings.tenant_id} to {path}: {sum(counts.values()):,} row(s), "
            "a SQLite database of one agent (aap db restore FILE --tenant ID puts it back)."
        )
    )


@group.command("restore")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@config_option
@database_option
@click.option("--tenant", "tenant", metavar="ID", required=True, help="The tenant whose rows PATH becomes.")
@click.option("--yes", is_flag=True, help="Replace the tenant's rows without asking.")
def restore(path: str, config: str | None, database: str | None, tenant: str, yes: bool) -> None:
    """Make the agent in PATH (a SQLite database: a tenant's backup, or a deployment's own
    database) tenant ID's rows on this platform, replacing what it has."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store import connect_platform, open_database
    from aap.store.transfer import copy_agent

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None)
    assert settings.tenant_id is not None
    if not yes and not click.confirm(f"Replace every row of tenant {tenant} with the agent in {path}?"):
        fail("Nothing restored.")
    source = open_database(f"sqlite:///{os.path.abspath(path)}")  # an older backup is brought up to date
    platform = connect_platform(settings.database_url)  # the restored outbox is noted for its runner
    try:
        with source.read() as reading, platform.for_tenant(settings.tenant_id).transaction() as into:
            counts = copy_agent(reading, into)
    except Exception as exc:  # noqa: BLE001 - the transaction rolled back: nothing changed
        fail(f"Nothing restored: {type(exc).__name__}: {exc}")
    finally:
        source.close()
        platform.close()
    console.print(Text(f"Restored tenant {tenant} from {path}: {sum(counts.values()):,} row(s)."))


@group.command("citus")
@config_option
def citus(config: str | None) -> None:
    """Print the statements that distribute the database with Citus, by tenant (docs/platform.md)."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store.layout import citus_statements
    from aap.store.migrations import PLATFORM_DOMAINS

    load_platform_or_fail(config)
    for statement in citus_statements(PLATFORM_DOMAINS):
        click.echo(statement)
