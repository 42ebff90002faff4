"""Database access shared by every store: connections, transactions, migrations.

SQL in this project is written once, portable, with ``?`` placeholders; the
:class:`Database` rewrites them for the backend in use. Each domain (inventory,
leads, poppy, shared state) keeps its own tables and its own numbered
migrations, registered with :func:`register_migrations`, so that adding a
domain never means editing another's schema.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import unquote, urlparse

Migration = Callable[["Tx"], None] | str


@dataclass(frozen=True)
class DomainMigrations:
    domain: str
    steps: tuple[Migration, ...]  # step i brings the domain to version i + 1


_MIGRATIONS: dict[str, DomainMigrations] = {}


class StatementTimeout(Exception):
    """A statement run under :meth:`Database.time_limit` ran out of time (the transaction survives)."""


def register_migrations(domain: str, steps: Sequence[Migration]) -> None:
    """Declare the ordered schema steps of one domain (idempotent by domain name)."""
    _MIGRATIONS[domain] = DomainMigrations(domain, tuple(steps))


class Tx:
    """A cursor inside one transaction, with portable ``?`` placeholders."""

    def __init__(self, db: "Database", raw: Any) -> None:
        self.db = db
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(self.db.sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]] | Any) -> Any:
        return self.raw.executemany(self.db.sql(sql), rows)

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        return self.execute(sql, params).fetchone()

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return list(self.execute(sql, params).fetchall())

    def script(self, sql: str) -> None:
        """Run several ``;``-separated DDL statements."""
        for statement in sql.split(";"):
            if statement.strip():
                self.execute(statement)


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
    """One database (SQLite by default). Thread-safe: one connection per thread."""

    dialect = "sqlite"
    # What the driver raises for an integer beyond BIGINT (sqlite3 refuses it client-side).
    overflow_errors: tuple[type[BaseException], ...] = (OverflowError,)

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

    # -- connections --------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _holder(self) -> "_Holder":
        """This thread's connection slot (the connection itself is opened lazily)."""
        holder = getattr(self._local, "holder", None)
        if holder is None:
            holder = _Holder()
            self._local.holder = holder
            with self._lock:
                self._holders.add(holder)
        return holder

    def sql(self, text: str) -> str:
        """Placeholders are already ``?`` for SQLite."""
        return text

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A transaction; ``write=True`` takes the write lock up front (``BEGIN IMMEDIATE``)."""
        if self._memory_conn is not None:
            lock, holder = self._lock, None
        else:
            holder = self._holder()
            lock = holder.lock  # close() takes it too: never closes a connection mid-statement
        with lock:
            if holder is None:
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

    @contextmanager
    def time_limit(self, tx: Tx, milliseconds: float) -> Iterator[None]:
        """Abort the statements run inside after ``milliseconds`` (0: no limit).

        Raises :class:`StatementTimeout`; the enclosing transaction stays
        usable. SQLite: a progress handler checks the clock every thousand
        virtual-machine steps (interrupting a read never rolls anything back).
        """
        if not milliseconds:
            yield
            return
        conn = tx.raw.connection
        deadline = time.monotonic() + milliseconds / 1000
        conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
            raise StatementTimeout() from None
        finally:
            conn.set_progress_handler(None, 0)

    # -- schema -------------------------------------------------------------
    def migrate(self) -> dict[str, int]:
        """Bring every registered domain to its newest version; returns versions."""
        _import_domains()
        versions: dict[str, int] = {}
        with self.transaction() as tx:
            self.lock_migrations(tx)
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " domain TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            for name in sorted(_MIGRATIONS):
                spec = _MIGRATIONS[name]
                row = tx.fetchone("SELECT version FROM schema_migrations WHERE domain = ?", (name,))
                current = row[0] if row else 0
                for step in spec.steps[current:]:
                    if callable(step):
                        step(tx)
                    else:
                        tx.script(step)
                if len(spec.steps) != current:
                    if row:
                        tx.execute(
                            "UPDATE schema_migrations SET version = ? WHERE domain = ?",
                            (len(spec.steps), name),
                        )
                    else:
                        tx.execute(
                            "INSERT INTO schema_migrations (domain, version) VALUES (?, ?)",
                            (name, len(spec.steps)),
                        )
                versions[name] = len(spec.steps)
        return versions

    def maintain(self, tables: Sequence[str]) -> None:
        """Housekeeping after a large write. SQLite: nothing — its query plans are
        chosen without statistics (and the stores' SQL is written for that)."""

    def lock_migrations(self, tx: Tx) -> None:
        """Serialise concurrent migrations (SQLite's BEGIN IMMEDIATE already does)."""

    def close(self) -> None:
        """Close every thread's connection (waiting for its transaction in flight).

        A later use opens a fresh connection.
        """
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


def _import_domains() -> None:
    """Import the modules that register migrations (kept in one list, here)."""
    import importlib

    for module in DOMAIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a domain not built into this install
            if exc.name is None or not module.startswith(exc.name):
                raise


# Modules that call register_migrations(); each owns its tables.
DOMAIN_MODULES: list[str] = [
    "aap.store.state",
    "aap.store.inventory",
    "aap.store.leads",
    "aap.store.poppy",
]


def open_database(url: str) -> Database:
    """Open (and migrate) the database named by ``url``."""
    if url.startswith(("postgresql://", "postgres://")):
        from aap.store.postgres import PostgresDatabase

        db: Database = PostgresDatabase(url)
    else:
        db = Database(url)
    db.migrate()
    return db
