"""``aap db upgrade``: apply every pending schema migration, then print the versions.

Servers migrate on start too; running this first (once, from a deploy step)
keeps a rollout of many workers from racing to migrate — and shows what the
schema is at before any traffic arrives. Works on SQLite and PostgreSQL.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import click
from rich.text import Text

from aap.cli.common import config_option, console, database_option, fail, load_or_fail


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
        fail(f"Cannot upgrade {_redacted(settings.database_url)}", [f"{type(exc).__name__}: {exc}"])
    try:
        with db.read() as tx:
            rows = tx.fetchall("SELECT domain, version FROM schema_migrations ORDER BY domain")
    finally:
        db.close()
    console.print(Text(f"Database {_redacted(settings.database_url)} is up to date."))
    for domain, version in rows:
        click.echo(f"{domain}\t{version}")


def _redacted(url: str) -> str:
    """The URL without its password (it may be printed to a deploy log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


command = group
