"""PostgreSQL behind the same :class:`~aap.store.db.Database` interface.

Connections come from a pool, so many worker processes can share one database;
what the SQL itself does differently is the :class:`~aap.store.dialect.PostgresDialect`'s
business. This module is imported only for a ``postgresql://`` URL, so SQLite
deployments never load the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.errors import NumericValueOutOfRange, SerializationFailure
from psycopg_pool import ConnectionPool

from aap.store.db import Database, Tx
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
    """A pooled PostgreSQL database (psycopg 3)."""

    dialect: Dialect = POSTGRESQL
    in_process = False  # every query waits for the server: never on an event loop

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
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A transaction; a read (``write=False``) is one snapshot for all its statements.

        PostgreSQL's default, READ COMMITTED, takes a new snapshot per statement, so
        a search's count and page could see different imports; a REPEATABLE READ,
        READ ONLY transaction sees one (and, read-only, never fails to serialise).
        """
        with self.pool.connection() as conn:
            with conn.transaction():
                if not write:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield Tx(self, conn.cursor())

    def maintain(self, tables: Sequence[str]) -> None:
        """``VACUUM ANALYZE`` (outside a transaction): statistics, and a visibility map so
        that counts over an index need not visit the table — without waiting for autovacuum."""
        with self.pool.connection() as conn:  # autocommit
            for table in tables:
                conn.execute(f"VACUUM (ANALYZE) {table}")

    def close_thread_connection(self) -> None:
        """Nothing to close: connections belong to the pool, not to threads."""

    def close(self) -> None:
        self.pool.close()
