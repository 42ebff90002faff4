"""Consistent copies of a deployment database while it serves (``aap db backup``).

SQLite: the online backup API (``sqlite3.Connection.backup``) copies pages
under a read transaction, so the copy is one consistent state even while
workers write; copying the file (with its ``-wal``) is not. PostgreSQL:
``pg_dump --format=custom`` takes one snapshot without stopping anything;
its password goes in ``PGPASSWORD``, never on the command line, where other
users of the machine could read it. Restoring is in docs/deployment.md.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import urlsplit, urlunsplit

from aap.store.db import sqlite_path


class BackupError(Exception):
    """The copy could not be made; ``str()`` says why, in one line."""


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def sqlite_backup(url: str, destination: str) -> int:
    """Copy the SQLite database at ``url`` to the new file ``destination``; returns its size in bytes."""
    source_path = sqlite_path(url)
    if source_path == ":memory:":
        raise BackupError("an in-memory database has nothing to back up")
    if not os.path.exists(source_path):
        raise BackupError(f"{source_path} does not exist")
    if os.path.exists(destination):
        raise BackupError(f"{destination} already exists; a backup never overwrites a file")
    try:
        source = sqlite3.connect(source_path)  # only read: the backup API copies its pages
        try:
            target = sqlite3.connect(destination)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        if os.path.exists(destination):
            os.remove(destination)
        raise BackupError(f"SQLite backup failed: {exc}") from None
    return os.path.getsize(destination)


def pg_dump_command(url: str, destination: str, *, schema: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``pg_dump`` arguments and the extra environment (the password) for ``url``; ``schema``: that
    schema alone (a platform tenant's namespace, :mod:`aap.store.tenancy`)."""
    parts = urlsplit(url)
    extra: dict[str, str] = {}
    if parts.password is not None:
        extra["PGPASSWORD"] = parts.password
        netloc = parts.netloc.replace(f":{parts.password}@", "@", 1)
        url = urlunsplit(parts._replace(netloc=netloc))
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    argv = ["pg_dump", "--format=custom", f"--file={destination}", f"--dbname={url}"]
    if schema is not None:
        argv.append(f"--schema={schema}")
    return argv, extra
