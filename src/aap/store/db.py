"""Database access shared by every store: connections, transactions, migration steps.

SQL in this project is written once, portable, with ``?`` placeholders; the
database's :class:`~aap.store.dialect.Dialect` rewrites it for the backend in
use and answers what differs between backends. Each domain (inventory, leads,
poppy, shared state) keeps its own tables and declares its own numbered
:class:`Migrations`, so that adding a domain never means editing another's
schema; :mod:`aap.store.migrations` lists the domains and applies them.

**Every agent's rows carry its tenant** (docs/architecture.md, "Storage"): each table
that holds an agent's rows has a ``tenant_id`` column leading its keys, and a
:class:`Database` is always *of one tenant* — the deployment's own agent
(:data:`DEPLOYMENT_TENANT`), or a platform tenant's (:meth:`Database.for_tenant`, a
view sharing the connections). Each transaction knows its tenant (:attr:`Tx.tenant`),
set once when it opens; the stores' SQL filters and writes by it, and on PostgreSQL
the transaction also sets ``aap.tenant``, which the tables' row-level security
policies compare against (the second wall, :mod:`aap.store.layout`).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlparse

from aap import telemetry
from aap.store.dialect import SQLITE, Dialect

#: One schema step: DDL (``;``-separated statements) or a function of the migrating transaction.
Migration = Callable[["Tx"], None] | str

#: The tenant of the deployment's own rows: a single deployment's one agent, or a platform's
#: own accounts and state. Platform tenant ids are lower-case letters, digits and ``-``
#: (:mod:`aap.tenants`), so no tenant can ever be named so.
DEPLOYMENT_TENANT = "_"
_T = TypeVar("_T")
_TENANT_ID = re.compile(r"_|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def view_of(obj: _T) -> _T:
    """A shallow copy of ``obj``, an object that keeps its fields in ``__dict__``: what
    ``copy.copy`` makes, without its trip through the pickle protocol (``__reduce_ex__``),
    which costs several times more. A platform worker makes such a view of its database for
    every tenant it builds, so once per request spread over more tenants than it keeps."""
    view = object.__new__(type(obj))
    view.__dict__.update(obj.__dict__)
    return view


def checked_tenant(tenant: str) -> str:
    """``tenant`` when it is a tenant id (so it can be spelled in SQL as a literal), else ValueError."""
    if not _TENANT_ID.fullmatch(tenant):
        raise ValueError("not a tenant id")
    return tenant


@dataclass(frozen=True)
class Migrations:
    """The ordered schema steps of one domain: step i brings it to version i + 1.

    ``domain`` names the row in ``schema_versions``; steps are only ever appended.
    ``tables``: the domain's tables that hold an agent's rows, parents before children
    (each has ``tenant_id`` leading its keys; :mod:`aap.store.layout` checks it and, on
    PostgreSQL, gives each its row-level security); ``shared``: tables of the deployment
    as a whole (a platform's registry), which no tenant owns.
    """

    domain: str
    steps: tuple[Migration, ...]
    tables: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()


#: One result row: SQL values (``int``, ``float``, ``str``, ``bytes``, ``None``) by position.
Row = tuple[Any, ...]


class Cursor(Protocol):
    """The driver's cursor a :class:`Tx` wraps (``sqlite3.Cursor`` or ``psycopg.Cursor``)."""

    @property
    def rowcount(self) -> int: ...
    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object: ...
    def fetchone(self) -> Row | None: ...
    def fetchmany(self, size: int = ..., /) -> list[Row]: ...
    def fetchall(self) -> list[Row]: ...


class Tx:
    """A cursor inside one transaction of one tenant, with portable ``?`` placeholders."""

    def __init__(self, db: Database, raw: Cursor) -> None:
        self.db = db
        self._raw = raw
        #: The tenant whose rows this transaction reads and writes: every statement of a store
        #: names it (``WHERE tenant_id = ?``, and in every row it inserts).
        self.tenant = db.tenant
        self._sql = db.dialect.sql
        #: The statement time limits open in this transaction, outermost first (milliseconds):
        #: the dialect's ``time_limit`` keeps them here rather than asking the server.
        self.limits: list[int] = []
        #: Statements that only undo what this transaction set (:meth:`undo_later`), not sent yet.
        self._undo: list[str] = []

    @property
    def raw(self) -> Cursor:
        """The driver's cursor, for what this class does not wrap (``COPY``), after any
        statement :meth:`undo_later` holds back is sent."""
        if self._undo:
            self._send_undo()
        return self._raw

    def undo_later(self, sql: str) -> None:
        """Send ``sql`` (parameterless statements that only undo what this transaction set: a
        ``SET LOCAL``, a ``RELEASE SAVEPOINT``) before the transaction's next statement, not now.
        When the transaction ends first it is never sent: the end undoes the same, and a short
        read (a search under its time limit) saves a round trip to the server."""
        self._undo.append(sql)

    def _send_undo(self) -> None:
        pending, self._undo = self._undo, []  # taken first: never sent twice, even if it fails
        self._raw.execute("; ".join(pending), ())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        if self._undo:
            self._send_undo()
        return self._raw.execute(self._sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self._undo:
            self._send_undo()
        self._raw.executemany(self._sql(sql), rows)

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return self.execute(sql, params).fetchone()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row:
        """The row of a query that always has one (an aggregate, a row this transaction wrote)."""
        row = self.execute(sql, params).fetchone()
        if row is None:
            raise LookupError(f"no row for: {sql}")
        return row

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.execute(sql, params).fetchall())

    def fetchall_planned(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """``fetchall``, the statement planned for these values every time it runs: for a query
        whose best plan depends on a value (a time window), which a generic plan made once for
        any value can miss by an order of magnitude."""
        return list(self.db.dialect.execute_unprepared(self.raw, self._sql(sql), tuple(params)).fetchall())

    def script(self, sql: str) -> None:
        """Run several ``;``-separated DDL statements."""
        for statement in sql.split(";"):
            if statement.strip():
                self.execute(statement)


def where_all(conditions: Sequence[str]) -> str:
    """``WHERE c1 AND c2 ...`` of a query's optional filters, or nothing when there are none."""
    return ("WHERE " + " AND ".join(conditions)) if conditions else ""


def tenant_where(tenant: str, *optional: tuple[str, Any]) -> tuple[str, list[Any]]:
    """``WHERE tenant_id = ? AND …`` of one tenant's rows, with each ``(condition, value)`` whose
    value is not None (one ``?`` each), and the parameters in order."""
    conditions, params = ["tenant_id = ?"], [tenant]
    for condition, value in optional:
        if value is not None:
            conditions.append(condition)
            params.append(value)
    return where_all(conditions), params


def sqlite_path(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite://:memory:``."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise ValueError(f"not a sqlite URL: {url}")
    if parsed.netloc == ":memory:" or url in ("sqlite://", "sqlite:///:memory:"):
        return ":memory:"
    # sqlite:///rel.db → "rel.db"; sqlite:////abs/x.db → "/abs/x.db"
    return unquote(parsed.path)[1:]


class Database:
    """One database (SQLite by default), as one tenant sees it. Thread-safe: one connection per thread."""

    dialect: Dialect = SQLITE
    #: Whose rows this object's transactions read and write (:meth:`for_tenant`).
    tenant: str = DEPLOYMENT_TENANT
    #: False for a view of another object's connections (:meth:`for_tenant`): closing it closes nothing.
    owns_connections: bool = True
    #: A platform's database (its registry's tables are here): a tenant's stores record the
    #: platform's events in it (:func:`aap.store.platform_events.emit`), a single deployment's never.
    platform: bool = False
    #: Queries run inside this process, on its CPU, with no network round trip to wait
    #: for (SQLite): a short read may run on an event loop without holding it idle.
    in_process: bool = True
    # What the driver raises for an integer beyond BIGINT (sqlite3 refuses it client-side).
    overflow_errors: tuple[type[BaseException], ...] = (OverflowError,)
    # What the driver raises when the server cannot answer (a read may then go elsewhere).
    unavailable_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = sqlite_path(url)
        self._local = threading.local()
        self._memory_conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        # Every thread's connection slot, so that close() closes them all (not only the caller's).
        self._holders: weakref.WeakSet[_Holder] = weakref.WeakSet()
        if self.path == ":memory:":
            # One shared connection: an in-memory database exists per connection.
            self._memory_conn = self._open()

    def for_tenant(self, tenant: str) -> Database:
        """This database as ``tenant`` sees it: the same connections (a thousand tenants are not
        a thousand connections), every transaction of it scoped to that tenant's rows."""
        view = view_of(self)
        view.tenant = checked_tenant(tenant)
        view.owns_connections = False
        return view

    # -- connections --------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _holder(self) -> _Holder:
        """This thread's connection slot (the connection itself is opened lazily)."""
        holder = getattr(self._local, "holder", None)
        if holder is None:
            holder = _Holder()
            self._local.holder = holder
            with self._lock:
                self._holders.add(holder)
        return holder

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        """A transaction (:meth:`_transaction`), in a span of its own when tracing is on (:mod:`aap.telemetry`)."""
        tracing = telemetry.active
        if tracing is None:
            return self._transaction(write=write)
        return tracing.transaction(self._transaction(write=write), self.dialect.name, write, self.url)

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A transaction; ``write=True`` takes the write lock up front (``BEGIN IMMEDIATE``)."""
        if self._memory_conn is not None:
            lock, holder = self._lock, None
        else:
            holder = self._holder()
            lock = holder.lock  # close() takes it too: never closes a connection mid-statement
        with lock:
            if holder is None:
                if self._memory_conn is None:  # closed while this thread waited for the lock
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
                conn = self._memory_conn
            else:
                if holder.conn is None:  # first use in this thread, or closed since
                    holder.conn = self._open()
                conn = holder.conn
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield Tx(self, conn.cursor())
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """A read-only snapshot (a deferred transaction)."""
        with self.transaction(write=False) as tx:
            yield tx

    def maintain(self, tables: Sequence[str]) -> None:
        """Housekeeping after a large write. SQLite: nothing — its query plans are
        chosen without statistics (and the stores' SQL is written for that)."""

    def close_thread_connection(self) -> None:
        """Close this thread's connection now, with its page cache, rather than when the thread
        ends (a thread that read a lot and is about to hand its memory back: the index build)."""
        holder = getattr(self._local, "holder", None)
        if holder is not None:
            with holder.lock:
                if holder.conn is not None:
                    holder.conn.close()
                    holder.conn = None

    def close(self) -> None:
        """Close every thread's connection (waiting for its transaction in flight); a view of
        another object's connections (:meth:`for_tenant`) closes nothing.

        A later use opens a fresh connection.
        """
        if not self.owns_connections:
            return
        with self._lock:
            holders = list(self._holders)
        for holder in holders:
            with holder.lock:
                if holder.conn is not None:
                    holder.conn.close()
                    holder.conn = None
        with self._lock:
            if self._memory_conn is not None:
                self._memory_conn.close()
                self._memory_conn = None


class _Holder:
    """One thread's connection and the lock that guards its use.

    Held in a weak set (sqlite3 connections cannot be weakly referenced): a
    holder dies with its thread, and the connection with it.
    """

    __slots__ = ("conn", "lock", "__weakref__")

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None
        self.lock = threading.RLock()


def connect(url: str) -> Database:
    """The database named by ``url`` (``sqlite:///file.db`` or ``postgresql://...``), unmigrated."""
    if url.startswith(("postgresql://", "postgres://")):
        # Imported only here: psycopg (and its pool) load only for a PostgreSQL URL.
        from aap.store.postgres import PostgresDatabase

        return PostgresDatabase(url)
    return Database(url)
