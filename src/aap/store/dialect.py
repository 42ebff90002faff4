"""What differs between SQLite and PostgreSQL, answered by one object per backend.

Stores write their SQL once, portable: ``?`` placeholders, SQLite-flavoured DDL,
``INSERT ... ON CONFLICT``. Where the two backends really differ — in spelling
(placeholders, column types, a JSON array as rows) or in what is fast (how a
keyword scan, a bulk load or a facet count is best done) — a store asks its
database's :class:`Dialect` instead of comparing backend names. A new question
is a new attribute or method here, answered by both dialects.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import psycopg

    from aap.store.db import Tx

log = logging.getLogger("aap.store")


class StatementTimeout(Exception):
    """A statement run under :meth:`Dialect.time_limit` ran out of time (the transaction survives)."""


_LIMITS = threading.local()


def _deadlines(conn: sqlite3.Connection) -> list[float]:
    """The deadlines of the time limits open on ``conn`` in this thread, innermost last."""
    stacks: dict[int, list[float]] | None = getattr(_LIMITS, "stacks", None)
    if stacks is None:
        stacks = _LIMITS.stacks = {}
    return stacks.setdefault(id(conn), [])


def _watch(conn: sqlite3.Connection, deadline: float) -> None:
    """Interrupt ``conn``'s statements past ``deadline``: the clock is read every thousand
    virtual-machine steps when less than a second is left, every twenty thousand otherwise
    (a long budget around every search costs next to nothing)."""
    steps = 1000 if deadline - time.monotonic() < 1.0 else 20_000
    conn.set_progress_handler(lambda: time.monotonic() > deadline, steps)


_INDEX = re.compile(r"(CREATE (?:UNIQUE )?INDEX \w+ ON \w+ \()tenant_id, ([^)]*)\)")


def _tenant_last(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}, tenant_id)"


#: SQLite's own guesses without statistics: the rows of a table, and the rows an equality on an
#: index's 2nd, 3rd… column leaves (``sqlite3DefaultRowEst``), which :meth:`Dialect.settle_plans` restates.
_ALL_ROWS = 1_048_576
_GUESSES = (10, 9, 8, 7, 6)


class Dialect:
    """The SQLite dialect; :class:`PostgresDialect` overrides what PostgreSQL does otherwise."""

    name = "sqlite"
    #: Suffix of a ``SELECT`` that reads a row in order to rewrite it. SQLite's write
    #: transaction already locks the whole database.
    row_lock = ""
    #: A JSON array parameter as a one-column row set (no portable spelling exists).
    json_array_values = "SELECT value FROM json_each(?)"
    #: Run a search's keyword scan once, up front, and reuse the matching ids in the count
    #: and page queries. SQLite has no index for substring ``LIKE``, so the scan reads every
    #: listing's text; doing it twice per request would double the cost.
    scans_keywords_first = True
    #: Load an empty inventory by dropping the listing tables' indexes, appending the feed and
    #: rebuilding each index once (a sort per index instead of a B-tree insert per row).
    reloads_in_bulk = True
    #: The same for an import that rewrites a whole live inventory (a replace without a dealer
    #: scope): readers keep their snapshot meanwhile (SQLite's WAL).
    reloads_live_in_bulk = True
    #: (name, statement that creates it) of the secondary indexes of some tables (``{marks}``:
    #: theirs; not those of keys, which SQLite makes itself and lists without a statement).
    indexes_of = (
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({marks})"
    )
    #: Count every facet in the database in one pass (grouping sets). SQLite aggregates by
    #: sorting, one sort per ``GROUP BY``; fetching the narrow columns once and counting in
    #: Python is cheaper there.
    counts_facets_in_database = False
    #: Listings an import prepares, then writes together.
    import_batch = 1000
    #: Write a batch on a second thread while the next one is prepared. SQLite works in
    #: this process (and mostly under the GIL): nothing to overlap.
    pipelines_imports = False
    #: Tables can carry row-level security policies (:mod:`aap.store.layout`). SQLite has none:
    #: the stores' tenant filters are its only wall.
    row_security = False

    def sql(self, text: str) -> str:
        """``text`` as this backend runs it (SQLite runs the portable form as written)."""
        return text

    @contextmanager
    def time_limit(self, tx: Tx, milliseconds: float) -> Iterator[None]:
        """Abort the statements run inside after ``milliseconds`` (0: no limit).

        Raises :class:`StatementTimeout`; the enclosing transaction stays usable.
        SQLite: a progress handler checks the clock every thousand virtual-machine
        steps (interrupting a read never rolls anything back). Limits nest: an inner
        one never outlives an outer one, and the outer one holds again after it (a
        request's budget around a search, a count's budget inside it).
        """
        if not milliseconds:
            yield
            return
        conn = cast(sqlite3.Cursor, tx.raw).connection  # this dialect runs on sqlite3 only
        stack = _deadlines(conn)
        deadline = time.monotonic() + milliseconds / 1000
        if stack:
            deadline = min(deadline, stack[-1])
        stack.append(deadline)
        _watch(conn, deadline)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
            raise StatementTimeout() from None
        finally:
            stack.pop()
            if stack:
                _watch(conn, stack[-1])
            else:
                conn.set_progress_handler(None, 0)
                _LIMITS.stacks.pop(id(conn), None)  # nothing open: an id may belong to another later

    def lock_migrations(self, tx: Tx) -> None:
        """Serialise concurrent migrations (SQLite's ``BEGIN IMMEDIATE`` already does)."""

    def has_table(self, tx: Tx, name: str) -> bool:
        """True when a table ``name`` exists (in the schema the transaction resolves names in)."""
        return bool(tx.one("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))[0])

    def columns(self, tx: Tx, table: str) -> list[str]:
        """The column names of ``table`` (which may be schema-qualified), in order."""
        cursor = tx.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        cursor.fetchall()
        return [column[0] for column in getattr(cursor, "description", None) or ()]

    def aside_name(self, table: str) -> str:
        """Where :meth:`set_aside` put ``table`` of the first layout (:mod:`aap.store.upgrade`)."""
        return "layout1_" + table

    def set_aside(self, tx: Tx, tables: Sequence[str]) -> None:
        """Move first-layout ``tables`` out of the way of the new ones: SQLite drops their indexes
        (an index name belongs to the whole database) and renames them (their foreign keys and
        key indexes follow)."""
        marks = ", ".join("?" * len(tables))
        for (name,) in tx.fetchall(
            f"SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({marks})",
            list(tables),
        ):
            tx.execute(f"DROP INDEX {name}")
        for table in tables:
            tx.execute(f"ALTER TABLE {table} RENAME TO {self.aside_name(table)}")

    def drop_aside(self, tx: Tx) -> None:
        """Remove what :meth:`set_aside` made besides the tables (SQLite: nothing)."""

    def ddl(self, script: str) -> str:
        """A layout step's DDL as this backend makes it. SQLite keeps ``tenant_id`` last in a
        secondary index (``CREATE INDEX x ON t (tenant_id, a, b)`` becomes ``(a, b, tenant_id)``).

        An index led by a text column loses SQLite's fast comparison of an integer or text first
        key field (every probe compares the whole record instead), and its planner, which plans
        without statistics, would read ``tenant_id = ?`` as selective as any filter. SQLite is
        never distributed, and holds one agent or a handful of tenants: the tenant last still
        filters in the index, and every query is planned and run as before the tables were keyed
        by tenant. Primary keys keep it first (:meth:`settle_plans` tells the planner about those).
        """
        return _INDEX.sub(_tenant_last, script)

    def settle_plans(self, tx: Tx, tables: Sequence[str]) -> None:
        """Tell SQLite's planner that the tenant, first in the key of every table of ``tables``,
        narrows nothing.

        SQLite plans without statistics, guessing that an equality on an index's first column
        matches ten rows: ``tenant_id = ?`` alone would make a table's key look like the best
        index for any query. A ``sqlite_stat1`` row per such key says what SQLite's own guess
        would have said of it without the tenant column — every row matches the tenant, then 10,
        9, 8, 7, 6, then 5 rows per further column, one for a unique key; indexes with the tenant
        last (:meth:`ddl`) keep SQLite's guesses. Nothing is measured: ``ANALYZE`` of the data is
        never run, so plans do not move with what a tenant holds.
        """
        tx.execute("ANALYZE sqlite_schema")  # makes sqlite_stat1 if it is not there yet
        marks = ", ".join("?" * len(tables))
        tx.execute(f"DELETE FROM sqlite_stat1 WHERE tbl IN ({marks})", list(tables))
        rows: list[tuple[str, str, str]] = []
        for table in tables:
            for _seq, index, unique, _origin, _partial in tx.fetchall(f"PRAGMA index_list({table})"):
                columns = [row[2] for row in tx.fetchall(f"PRAGMA index_info({index})")]
                if not columns or columns[0] != "tenant_id":
                    continue
                guesses = [_ALL_ROWS, _ALL_ROWS] + [*_GUESSES, *[5] * len(columns)][: len(columns) - 1]
                if unique:
                    guesses[-1] = 1
                rows.append((table, index, " ".join(map(str, guesses))))
        tx.executemany("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", rows)
        tx.execute("ANALYZE sqlite_schema")  # this connection plans with them now; others reload

    def execute_unprepared(self, cursor: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """Run ``sql`` planned for ``params`` (SQLite plans every statement for its values)."""
        return cursor.execute(sql, params)

    def median(self, column: str) -> str | None:
        """An aggregate of the median of ``column`` (NULLs left out), or None where the SQL has none
        (SQLite): the caller then walks an index to the middle."""
        return None

    def integers_in(self, column: str, values: Sequence[int]) -> tuple[str, list[Any]]:
        """``column`` among ``values`` (any number of them), as one parameter: a JSON array."""
        return f"{column} IN (SELECT value FROM json_each(?))", ["[" + ",".join(map(str, values)) + "]"]

    def insert_rows(
        self, tx: Tx, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], on_conflict: str = ""
    ) -> None:
        """Add ``rows`` to ``table``, ``on_conflict`` (an ``ON CONFLICT`` clause) deciding about
        keys already there (SQLite: one prepared INSERT, run per row in C)."""
        marks = ", ".join("?" * len(columns))
        tx.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) {on_conflict}", rows)

    def vacuum_eagerly(self, tx: Tx, tables: Sequence[str]) -> None:
        """Keep ``tables``' statistics fresh under many small writes (SQLite keeps none)."""

    def analyze(self, tx: Tx, table: str) -> None:
        """``table``'s statistics, this transaction's rows counted (SQLite: none are kept, and
        its SQL is written for plans made without them)."""

    @contextmanager
    def large_write(self, tx: Tx) -> Iterator[None]:
        """Settings for one large write transaction: SQLite gets a 128 MiB page cache for the
        index inserts, and its previous size back afterwards."""
        previous = tx.one("PRAGMA cache_size")[0]
        tx.execute("PRAGMA cache_size = -131072")
        try:
            yield
        finally:
            tx.execute(f"PRAGMA cache_size = {int(previous)}")

    def drop_indexes(self, tx: Tx, tables: Sequence[str]) -> list[str]:
        """Drop the secondary indexes of ``tables``; returns the statements that recreate them.

        Only used where :attr:`reloads_in_bulk` is set.
        """
        marks = ", ".join("?" * len(tables))
        found = tx.fetchall(self.indexes_of.format(marks=marks), tables)
        for name, _create in found:
            tx.execute(f"DROP INDEX {name}")
        return [create for _name, create in found]


_DDL_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bTEXT\b(?! COLLATE)"), 'TEXT COLLATE "C"'),
]

# One advisory lock key for "schema migration in progress" (any constant works).
_MIGRATION_LOCK = 0x4141505F  # "AAP_"
# Where the first layout's tables wait while they move (aap.store.upgrade).
_ASIDE_SCHEMA = "aap_layout1"


def translate_placeholders(sql: str) -> str:
    """``?`` → ``%s`` outside string literals; a literal ``%`` is doubled for psycopg."""
    out: list[str] = []
    in_string = False
    for ch in sql:
        if ch == "'":
            in_string = not in_string
            out.append(ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "?" and not in_string:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


#: The longest statement text whose translation is kept (4,096 of them at most: a few MiB).
_CACHED_TEXT = 1000


def _postgres_text(text: str) -> str:
    """``text`` as PostgreSQL runs it."""
    return translate_placeholders(translate_ddl(text))


#: :func:`_postgres_text`, kept per distinct text: a pure function of the text, which every
#: statement of every request goes through, so each is translated once per process.
_postgres_text_kept = functools.lru_cache(maxsize=4096)(_postgres_text)


def translate_ddl(sql: str) -> str:
    """SQLite-flavoured DDL → PostgreSQL DDL (only statements that create things).

    Integer columns become 64-bit, ``REAL`` double precision, ``BLOB`` ``BYTEA``, and
    text compares byte-wise (``COLLATE "C"``) so that sort order is the same
    code-point order as SQLite and Python.
    """
    if not re.match(r"\s*(CREATE|ALTER)\b", sql, re.IGNORECASE):
        return sql
    for pattern, replacement in _DDL_RULES:
        sql = pattern.sub(replacement, sql)
    return sql


class PostgresDialect(Dialect):
    """PostgreSQL (psycopg 3): ``%s`` placeholders, row locks, COPY and hash aggregation."""

    name = "postgresql"
    row_lock = " FOR UPDATE"
    json_array_values = "SELECT json_array_elements_text(CAST(? AS json))"
    # The planner runs the keyword subquery itself (the fallback: the posting index answers
    # keyword searches once it is built).
    scans_keywords_first = False
    # The first load only: dropping an index locks its table until the commit, and readers of
    # an empty inventory lose nothing by waiting; a live inventory is never locked so.
    reloads_in_bulk = True
    reloads_live_in_bulk = False
    # Not the indexes of primary keys and unique constraints: they stay.
    indexes_of = (
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " JOIN pg_class t ON t.oid = x.indrelid WHERE t.relnamespace = current_schema()::regnamespace"
        " AND t.relname IN ({marks}) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"
    )
    # Grouping sets hash-aggregate every facet in one scan.
    counts_facets_in_database = True
    # COPY pays per statement: larger batches amortise it.
    import_batch = 5000
    # The server maintains the indexes while Python prepares the next batch.
    pipelines_imports = True
    row_security = True

    def sql(self, text: str) -> str:
        if len(text) > _CACHED_TEXT:  # a long IN list or VALUES batch: its text is not kept
            return _postgres_text(text)
        return _postgres_text_kept(text)

    @contextmanager
    def time_limit(self, tx: Tx, milliseconds: float) -> Iterator[None]:
        """``statement_timeout`` inside a savepoint, so a cancelled statement leaves the
        transaction usable (PostgreSQL aborts the whole transaction otherwise)."""
        if not milliseconds:
            yield
            return
        from psycopg.errors import QueryCanceled  # the driver is imported only with PostgreSQL

        # One round trip in (a pair of statements, no parameters); the way out is sent before
        # the transaction's next statement, or not at all when the transaction ends first (its
        # end undoes both): a search pays for its budget on every request. The limits open are kept
        # on the transaction, so an enclosing one (a request's budget around this count) is set
        # again afterwards without asking the server what it was; with none, the session's
        # default comes back.
        limit = max(1, math.ceil(milliseconds))  # 0 would mean none
        tx.execute(f"SAVEPOINT aap_time_limit; SET LOCAL statement_timeout = {limit}")
        tx.limits.append(limit)
        try:
            yield
        except QueryCanceled:
            tx.execute("ROLLBACK TO SAVEPOINT aap_time_limit")  # also undoes the SET LOCAL
            raise StatementTimeout() from None
        finally:
            tx.limits.pop()
        restore = f"= {tx.limits[-1]}" if tx.limits else "TO DEFAULT"
        tx.undo_later(f"SET LOCAL statement_timeout {restore}; RELEASE SAVEPOINT aap_time_limit")

    def execute_unprepared(self, cursor: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """psycopg prepares a statement on the server after its fifth run, and PostgreSQL then
        tries a generic plan: never for this one."""
        return cursor.execute(sql, params, prepare=False)

    def median(self, column: str) -> str | None:
        """The ordered-set aggregate: one pass over the group, where walking the index to the
        middle with ``OFFSET`` visits the table for every row it skips until a vacuum has run."""
        return f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {column})"

    def integers_in(self, column: str, values: Sequence[int]) -> tuple[str, list[Any]]:
        """``column = ANY(array)``: the planner sees an array of known size and probes the index."""
        return f"{column} = ANY(?)", [list(values)]

    def lock_migrations(self, tx: Tx) -> None:
        """Serialise concurrent migrations from several workers (an advisory lock)."""
        tx.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")

    def has_table(self, tx: Tx, name: str) -> bool:
        return bool(tx.one("SELECT to_regclass(?) IS NOT NULL", (name,))[0])

    def aside_name(self, table: str) -> str:
        return f"{_ASIDE_SCHEMA}.{table}"

    def set_aside(self, tx: Tx, tables: Sequence[str]) -> None:
        """A schema of their own: their indexes, constraints and sequences go with them."""
        tx.execute(f"CREATE SCHEMA {_ASIDE_SCHEMA}")
        for table in tables:
            tx.execute(f"ALTER TABLE {table} SET SCHEMA {_ASIDE_SCHEMA}")

    def drop_aside(self, tx: Tx) -> None:
        tx.execute(f"DROP SCHEMA {_ASIDE_SCHEMA} CASCADE")

    def ddl(self, script: str) -> str:
        """As written: every key and index of a tenant table leads with ``tenant_id`` (a tenant's
        rows are one range of each, and Citus routes by it)."""
        return script

    def settle_plans(self, tx: Tx, tables: Sequence[str]) -> None:
        """Nothing: PostgreSQL keeps statistics of its own (autovacuum's ANALYZE)."""

    def insert_rows(
        self, tx: Tx, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], on_conflict: str = ""
    ) -> None:
        """``COPY`` the rows into a staging table, then one set-based ``INSERT ... SELECT``.

        COPY streams rows without a statement per row (psycopg's ``executemany``
        still sends one INSERT each); the staging table (temporary, unlogged, no
        index) is emptied at every commit. The rows keep the importer's checks:
        they were prepared and validated in Python first, and the whole import is
        still one transaction.
        """
        stage = f"stage_{table}"
        names = ", ".join(columns)
        tx.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table}) ON COMMIT DELETE ROWS")
        with cast("psycopg.Cursor[Any]", tx.raw).copy(f"COPY {stage} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        tx.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {stage} {on_conflict}")
        tx.execute(f"TRUNCATE {stage}")

    def vacuum_eagerly(self, tx: Tx, tables: Sequence[str]) -> None:
        """Autovacuum ``tables`` after 1 % of their rows changed, not 20 %.

        Counts are index-only scans only on pages the visibility map marks
        all-visible; a marketplace's many small per-dealer imports would otherwise
        leave pages unmarked (and counts visiting the table) until a fifth of the
        table changed.
        """
        for table in tables:
            tx.execute(
                f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.01, "
                "autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01)"
            )

    def analyze(self, tx: Tx, table: str) -> None:
        """``ANALYZE`` inside the transaction (its own uncommitted rows are sampled). It holds
        the table's SHARE UPDATE EXCLUSIVE lock until commit: VACUUM, another ANALYZE and schema
        changes wait for it, reads and writes do not."""
        tx.execute(f"ANALYZE {table}")

    @contextmanager
    def large_write(self, tx: Tx) -> Iterator[None]:
        """Nothing to tune: the server's buffer cache is shared and sized by its operator."""
        yield


SQLITE = Dialect()
POSTGRESQL = PostgresDialect()
