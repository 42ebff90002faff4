"""One layout for every deployment: shared tables keyed by tenant, and the walls around them.

Every table that holds an agent's rows starts with ``tenant_id``, and it leads the table's
primary key, every unique constraint, the indexes its queries use and every foreign key
(docs/architecture.md, "Storage"). So one database holds one dealer or a hundred thousand
with the same relations, the same statements and the same plans, and the layout is the one
Citus distributes by row (co-located tables, the tenant column in every key): a platform that
outgrows one server distributes it (:func:`citus_statements`, docs/platform.md, "Past one
server").

Two walls keep tenants apart:

1. **The stores' SQL.** A :class:`~aap.store.db.Database` is one tenant's; each transaction
   knows its tenant (``Tx.tenant``), and every statement of a store filters and writes by it.
2. **Row-level security** (PostgreSQL), enabled and *forced* on every tenant table
   (:func:`isolate`): a policy admits only rows whose ``tenant_id`` is the transaction's
   ``aap.tenant`` setting (``SET LOCAL`` when it begins). A statement that forgot its
   ``WHERE`` still sees its own tenant's rows only, and a transaction that set no tenant
   sees nothing. It binds every role but a superuser or one with ``BYPASSRLS``
   (:func:`bypasses_isolation`: ``aap db upgrade`` warns about such a role).
"""

from __future__ import annotations

from collections.abc import Sequence

from aap.store.db import Migrations, Tx

#: The name of every tenant table's row-level security policy.
POLICY = "tenant_rows"
_CURRENT = "(SELECT current_setting('aap.tenant', true))"  # one evaluation per statement, not per row


def tenant_tables(domains: Sequence[Migrations]) -> list[str]:
    """Every table keyed by tenant, parents before the tables that refer to them."""
    return [table for domain in domains for table in domain.tables]


def shared_tables(domains: Sequence[Migrations]) -> list[str]:
    """The tables of the deployment as a whole (a platform's registry), and the versions."""
    return [table for domain in domains for table in domain.shared] + ["schema_versions"]


def isolate(tx: Tx, domains: Sequence[Migrations]) -> None:
    """Row-level security on every tenant table that lacks it (PostgreSQL; idempotent)."""
    if not tx.db.dialect.row_security:
        return
    tables = tenant_tables(domains)
    rows = tx.fetchall(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
        " EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = ?)"
        " FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(?)",
        (POLICY, tables),
    )
    found = {name: (enabled, forced, policy) for name, enabled, forced, policy in rows}
    for table in tables:
        enabled, forced, policy = found.get(table, (False, False, False))
        if not enabled:
            tx.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        if not forced:
            tx.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        if not policy:
            tx.execute(
                f"CREATE POLICY {POLICY} ON {table} USING (tenant_id = {_CURRENT}) WITH CHECK (tenant_id = {_CURRENT})"
            )


def bypasses_isolation(tx: Tx) -> bool:
    """True when the connected role is not bound by row-level security (a superuser, or
    ``BYPASSRLS``): the stores' SQL is then the only wall (docs/deployment.md, "Database role")."""
    if not tx.db.dialect.row_security:
        return False
    return bool(tx.one("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")[0])


def purge(tx: Tx, domains: Sequence[Migrations]) -> dict[str, int]:
    """Delete every row of ``tx``'s tenant, children first; returns the rows deleted per table."""
    deleted: dict[str, int] = {}
    for table in reversed(tenant_tables(domains)):
        deleted[table] = max(0, tx.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tx.tenant,)).rowcount)
    return deleted


#: Rows written into a table by one copy from which its statistics are refreshed before the
#: next table is written (:func:`refresh_statistics`).
STATISTICS_AFTER_ROWS = 1000


def refresh_statistics(tx: Tx, table: str, rows: int) -> None:
    """After a copy wrote ``rows`` rows of one tenant into ``table``: its statistics again, when
    they were many.

    Every index of a tenant table leads with ``tenant_id``, so on a table without statistics an
    index such as ``(tenant_id, received_ms)`` costs what the primary key costs for one row by
    key, and a connection keeps the plans it made then (its foreign-key checks, its prepared
    statements). Written through such a plan, each of the next table's rows would walk the
    tenant's rows of this one. New statistics make every connection plan again.
    """
    if rows >= STATISTICS_AFTER_ROWS:
        tx.db.dialect.analyze(tx, table)


def count_rows(tx: Tx, domains: Sequence[Migrations]) -> dict[str, int]:
    """How many rows ``tx``'s tenant has in each tenant table."""
    return {
        table: int(tx.one(f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?", (tx.tenant,))[0])
        for table in tenant_tables(domains)
    }


def citus_statements(domains: Sequence[Migrations]) -> list[str]:
    """The statements that distribute this layout with Citus, row-based by ``tenant_id``: the
    shared tables as reference tables (a copy on every node), then every tenant table,
    parents first, co-located with the first (docs/platform.md, "Past one server")."""
    statements = [f"SELECT create_reference_table('{table}');" for table in shared_tables(domains)]
    tables = tenant_tables(domains)
    for index, table in enumerate(tables):
        colocate = "" if index == 0 else f", colocate_with => '{tables[0]}'"
        statements.append(f"SELECT create_distributed_table('{table}', 'tenant_id'{colocate});")
    return statements


# -- what the catalogue says ---------------------------------------------------------------------

_KEYS = """
SELECT c.relname, i.indisprimary, i.indisunique, i.indexrelid::regclass::text,
       ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum ORDER BY k.n)
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(?)
"""
_FOREIGN = """
SELECT c.relname, con.conname,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum ORDER BY k.n),
       ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum ORDER BY k.n)
FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
WHERE con.contype = 'f' AND c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(?)
"""
_SECURITY = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = ?)
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(?)
"""


def problems(tx: Tx, domains: Sequence[Migrations]) -> list[str]:
    """What in the database breaks the layout's rules, read from the catalogue: a tenant table
    without ``tenant_id`` first in its primary key, a unique index or an index without it
    leading, a foreign key that does not carry it on both sides, and on PostgreSQL row-level
    security not enabled, not forced or without its policy. Empty when every rule holds — which
    are Citus's rules for co-located distributed tables, and the isolation of this layout."""
    if not tx.db.dialect.row_security:
        return _sqlite_problems(tx, tenant_tables(domains))
    tables = tenant_tables(domains)
    found: list[str] = []
    keyed = set()
    for table, primary, unique, index, columns in tx.fetchall(_KEYS, (tables,)):
        if not columns or columns[0] != "tenant_id":
            kind = "primary key" if primary else "unique index" if unique else "index"
            found.append(f"{table}: {kind} {index} does not lead with tenant_id ({', '.join(columns)})")
        if primary:
            keyed.add(table)
    found += [f"{table}: no primary key" for table in tables if table not in keyed]
    for table, name, columns, referenced in tx.fetchall(_FOREIGN, (tables,)):
        if not columns or columns[0] != "tenant_id" or not referenced or referenced[0] != "tenant_id":
            found.append(f"{table}: foreign key {name} does not carry tenant_id on both sides")
    security = {row[0]: row[1:] for row in tx.fetchall(_SECURITY, (POLICY, tables))}
    for table in tables:
        enabled, forced, policy = security.get(table, (False, False, False))
        if not (enabled and forced and policy):
            found.append(f"{table}: row-level security not enabled, forced and with its {POLICY} policy")
    return found


def _sqlite_problems(tx: Tx, tables: list[str]) -> list[str]:
    found: list[str] = []
    for table in tables:
        info = tx.fetchall(f"PRAGMA table_info({table})")
        primary = [name for _cid, name, _type, _notnull, _default, pk in sorted(info, key=lambda r: r[5]) if pk]
        if not primary:
            found.append(f"{table}: no primary key")
        elif primary[0] != "tenant_id":
            found.append(f"{table}: primary key does not lead with tenant_id ({', '.join(primary)})")
        for _seq, index, _unique, origin, _partial in tx.fetchall(f"PRAGMA index_list({table})"):
            columns = [row[2] for row in tx.fetchall(f"PRAGMA index_info({index})")]
            # SQLite keeps the tenant last in a secondary index (Dialect.ddl), first in a key.
            place = columns[:1] if origin != "c" else columns[-1:]
            if place != ["tenant_id"]:
                found.append(f"{table}: index {index} does not hold tenant_id ({', '.join(map(str, columns))})")
        keys: dict[int, list[tuple[str, str]]] = {}
        for row in tx.fetchall(f"PRAGMA foreign_key_list({table})"):
            keys.setdefault(row[0], []).append((row[3], row[4]))
        for pairs in keys.values():
            if pairs[0] != ("tenant_id", "tenant_id"):
                found.append(f"{table}: a foreign key does not carry tenant_id on both sides")
    return found
