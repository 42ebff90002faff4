"""PostgreSQL behind the same :class:`~aap.store.db.Database` interface.

Connections come from a pool, so many worker processes can share one database;
what the SQL itself does differently is the :class:`~aap.store.dialect.PostgresDialect`'s
business. This module is imported only for a ``postgresql://`` URL, so SQLite
deployments never load the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import quote

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.errors import NumericValueOutOfRange, SerializationFailure
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from aap.store.db import Database, Tx, checked_tenant, view_of
from aap.store.dialect import POSTGRESQL, Dialect


class _NumberLoader(Loader):
    """``numeric`` as int or float, like SQLite returns ``SUM``/``COUNT`` arithmetic.

    PostgreSQL widens ``SUM(bigint)`` to ``numeric``, which psycopg loads as
    :class:`~decimal.Decimal`; the stores (and orjson) expect plain numbers.
    """

    def load(self, data: Buffer) -> int | float:
        text = bytes(data).decode()
        try:
            return int(text)
        except ValueError:
            return float(text)


def _configure(conn: psycopg.Connection) -> None:
    conn.adapters.register_loader("numeric", _NumberLoader)


class PostgresDatabase(Database):
    """A pooled PostgreSQL database (psycopg 3), or one schema of it (:meth:`in_schema`)."""

    dialect: Dialect = POSTGRESQL
    in_process = False  # every query waits for the server: never on an event loop
    #: The schema every statement of this database's transactions resolves names in; None: the
    #: server's search_path (always, but for the upgrade of an earlier layout's tenant schemas).
    schema: str | None = None
    #: A view of another database's pool (:meth:`for_tenant`): closing it leaves the pool open.
    owns_pool = True

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10, replica: bool = False) -> None:
        """``replica``: a read replica, given up on quickly (the primary answers instead)."""
        self.overflow_errors = (OverflowError, NumericValueOutOfRange)
        # A server gone, or a replica cancelling a read that conflicts with its recovery.
        self.unavailable_errors = (psycopg.OperationalError, SerializationFailure)
        wait = 2.0 if replica else 30.0
        # One direct connection first: a wrong URL fails now, with the server's reason,
        # instead of the pool retrying in the background until its timeout.
        psycopg.connect(url, connect_timeout=2 if replica else 10).close()

        self.url = url
        self.path = url
        self._memory_conn = None
        self.pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": 2 if replica else 10},
            configure=_configure,
            open=True,
            timeout=wait,
        )
        self.pool.wait(timeout=wait)

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A transaction of this object's tenant; a read (``write=False``) is one snapshot for all
        its statements.

        PostgreSQL's default, READ COMMITTED, takes a new snapshot per statement, so
        a search's count and page could see different imports; a REPEATABLE READ,
        READ ONLY transaction sees one (and, read-only, never fails to serialise).
        It begins in one round trip with its tenant setting (``SET LOCAL``: this
        transaction's only, so a pooled connection carries no tenant out), which the
        tables' row-level security policies read (docs/architecture.md, "Storage").
        """
        begin = "BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
        setup = f"{begin}; SET LOCAL aap.tenant = '{self.tenant}'"  # checked_tenant: no quote in it
        if self.schema is not None:
            setup += f"; SET LOCAL search_path TO {quote_identifier(self.schema)}"
        with self.pool.connection() as conn:
            conn.execute(setup)
            try:
                yield Tx(self, conn.cursor())
            except BaseException:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def for_tenant(self, tenant: str) -> PostgresDatabase:
        """This database's pool as ``tenant`` sees it (many tenants share one pool of connections)."""
        view = view_of(self)
        view.tenant = checked_tenant(tenant)
        view.owns_pool = False
        return view

    def in_schema(self, schema: str) -> PostgresDatabase:
        """This database's pool, with every transaction's names resolved in ``schema``: a
        schema of the earlier layout, one per platform tenant, read once by the upgrade that
        moves its rows into the shared tables (:mod:`aap.store.legacy`)."""
        view = view_of(self)
        view.schema = schema
        view.owns_pool = False
        view.url = with_search_path(self.url, schema)
        return view

    def maintain(self, tables: Sequence[str]) -> None:
        """``VACUUM ANALYZE`` (outside a transaction): statistics, and a visibility map so
        that counts over an index need not visit the table — without waiting for autovacuum."""
        with self.pool.connection() as conn:  # autocommit
            for table in tables:
                conn.execute(f"VACUUM (ANALYZE) {table}")

    def close_thread_connection(self) -> None:
        """Nothing to close: connections belong to the pool, not to threads."""

    def close(self) -> None:
        if self.owns_pool:
            self.pool.close()


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (a ``"`` inside is doubled, as PostgreSQL reads it)."""
    return '"' + name.replace('"', '""') + '"'


def with_search_path(url: str, schema: str) -> str:
    """``url`` with a connection option that makes ``schema`` its search_path, for a process of
    its own (``aap import --tenant``, a feed's child process) that opens the tenant's namespace."""
    option = quote(f"-c search_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"
