"""One agent's rows copied between databases: a tenant's backup, its restore, a dealer moving in.

Every database has the same tables keyed by tenant (:mod:`aap.store.layout`), so one agent's
rows read from one database can be written into another under another tenant: a platform
tenant's backup is a SQLite database of one agent (its rows under the deployment's tenant,
which ``aap serve`` can open as it is), and restoring it — or any single deployment's
database — into a platform makes it that tenant's rows (docs/platform.md, "Backups").

Each side is one transaction: the copy reads one snapshot, and the restore replaces the
tenant's rows whole, checking the count of every table, or changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aap.store import layout
from aap.store.db import Migrations, Tx
from aap.store.leads import note_outbox_due
from aap.store.migrations import DOMAINS

#: Rows read and written at a time.
CHUNK = 2000


class TransferError(Exception):
    """The copy could not be verified; nothing was changed."""


def _rows(tx: Tx, table: str, columns: Sequence[str]) -> Iterator[list[tuple[object, ...]]]:
    cursor = tx.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE tenant_id = ?", (tx.tenant,))
    while chunk := cursor.fetchmany(CHUNK):
        yield [tuple(row) for row in chunk]


def copy_agent(source: Tx, target: Tx, domains: Sequence[Migrations] = DOMAINS) -> dict[str, int]:
    """Replace ``target``'s tenant's rows with ``source``'s tenant's (every table, parents first);
    returns the rows copied per table. Both transactions stay open: their callers commit."""
    layout.purge(target, domains)
    copied: dict[str, int] = {}
    for table in layout.tenant_tables(domains):
        columns = [c for c in source.db.dialect.columns(source, table) if c != "tenant_id"]
        wanted = set(target.db.dialect.columns(target, table))
        columns = [c for c in columns if c in wanted]
        names = ("tenant_id", *columns)
        count = 0
        for chunk in _rows(source, table, columns):
            target.db.dialect.insert_rows(target, table, names, [(target.tenant, *row) for row in chunk])
            count += len(chunk)
        found = int(target.one(f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?", (target.tenant,))[0])
        if found != count:
            raise TransferError(f"{table}: {count} row(s) read, {found} written")
        copied[table] = count
        layout.refresh_statistics(target, table, count)
    note_outbox_due(target)  # a platform's runner finds the restored outbox (nothing written elsewhere)
    return copied
