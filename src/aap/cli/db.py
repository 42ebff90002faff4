"""``aap db upgrade`` and ``aap db backup``: schema migrations and consistent copies.

``upgrade`` applies every pending schema migration, then prints the versions.
Servers migrate on start too; running this first (once, from a deploy step)
keeps a rollout of many workers from racing to migrate — and shows what the
schema is at before any traffic arrives. Works on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os

import click
from rich.text import Text

from aap.cli.common import config_option, console, database_option, fail, load_or_fail, redacted


@click.group("db")
def group() -> None:
    """Database maintenance."""


@group.command("upgrade")
@config_option
@database_option
def upgrade(config: str | None, database: str | None) -> None:
    """Apply pending migrations and print each domain's schema version."""
    settings = load_or_fail(config, {"database": database})
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


command = group


@group.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@config_option
@database_option
def backup(path: str, config: str | None, database: str | None) -> None:
    """Write a consistent copy of the database to PATH while the server runs.

    SQLite: the online backup API. PostgreSQL: pg_dump --format=custom when
    pg_dump is installed; otherwise the command to run is printed (exit 1).
    Restore: docs/deployment.md.
    """
    import shlex
    import shutil
    import subprocess

    from aap.store.backup import BackupError, is_postgres, pg_dump_command, sqlite_backup

    settings = load_or_fail(config, {"database": database})
    url = settings.database_url
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
