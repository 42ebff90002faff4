"""The tenants of a platform deployment: who they are, where they are served, what changed.

These tables belong to the deployment as a whole, not to a tenant (no ``tenant_id``, no
row-level security; reference tables where Citus distributes the rest,
:mod:`aap.store.layout`); each tenant's rows are in the shared tables keyed by tenant
(:mod:`aap.store.tenancy`), and no tenant's agent ever reads these.

``platform_tenants``  one row per tenant: its configuration (the TOML text it was
                      given, kept as written so that ``aap tenants show`` gives it back),
                      its A2A routing value, a revision counted up on every change.
``platform_domains``  the host names a tenant is served at (unique across tenants).
``platform_changes``  one row per change of a tenant (added, updated, domains, removed),
                      in order: every worker of every host reads the rows after the last
                      one it saw (:meth:`PlatformStore.changes_since`) and drops what it
                      built for those tenants, which is how a change reaches them all
                      without a restart (docs/platform.md, "Changes").
``platform_due``      when a tenant's background work (its lead deliveries, its scheduled
                      feeds) is next due, so that one deployment-wide runner finds the
                      tenants with work without opening every tenant's namespace.
``platform_secrets``  a tenant's secrets (CRM tokens, SMTP passwords…), each sealed with the
                      platform's key (:mod:`aap.secretbox`): the store never sees a value.
                      A secret may be set before its tenant is added (the tenant's file is
                      checked against the secrets it names), so it has no foreign key.
``platform_events``   what happened to a tenant, until the platform is told
                      (:mod:`aap.store.platform_events`, docs/platform.md, "Events").
``platform_status``   what the platform's operators see of a tenant besides its
                      configuration: since when it is suspended (served 503, its background
                      work paused, its data kept), and the reason its stored configuration
                      failed to load in a worker, for the revision that failed
                      (docs/platform.md, "Operating tenants").

Every change of a tenant writes its audit row in the same transaction, to the platform's own
audit log (``console_audit`` of the deployment's namespace, which the platform console shows):
who (``cli:USER``, ``api:TOKEN``, a platform administrator's e-mail), what, when, which tenant,
never a secret or a configuration's text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aap.store import platform_events
from aap.store.console import write_audit
from aap.store.db import DEPLOYMENT_TENANT, Database, Migrations, Tx

_V1 = """
CREATE TABLE platform_tenants (
    tenant_id TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    a2a_tenant TEXT UNIQUE,
    revision INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE platform_domains (
    host TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES platform_tenants (tenant_id) ON DELETE CASCADE,
    added_ms INTEGER NOT NULL
);
CREATE INDEX platform_domains_tenant ON platform_domains (tenant_id);
CREATE TABLE platform_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TABLE platform_due (
    tenant_id TEXT NOT NULL,
    work TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, work)
);
CREATE INDEX platform_due_when ON platform_due (work, due_ms)
"""

_V2 = """
CREATE TABLE platform_secrets (
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    sealed TEXT NOT NULL,
    key_id TEXT NOT NULL,
    set_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE platform_status (
    tenant_id TEXT PRIMARY KEY REFERENCES platform_tenants (tenant_id) ON DELETE CASCADE,
    suspended_ms INTEGER,
    broken_revision INTEGER,
    broken_reason TEXT,
    broken_ms INTEGER
)
"""

MIGRATIONS = Migrations(
    "platform",
    (_V1, _V2, platform_events.LAYOUT),
    shared=(
        "platform_tenants",
        "platform_domains",
        "platform_changes",
        "platform_due",
        "platform_secrets",
        "platform_status",
        "platform_events",
    ),
)
#: The longest reason a broken tenant is reported with (a configuration's problems, listed).
MAX_REASON = 2000

#: Who changed a tenant when a caller in code named nobody.
UNNAMED = "unnamed"
#: The audit log's action for each kind of change.
AUDIT_ACTIONS = {
    "added": "tenant.add",
    "updated": "tenant.update",
    "domains": "tenant.domains",
    "secrets": "tenant.secrets",
    "removed": "tenant.remove",
    "suspended": "tenant.suspend",
    "resumed": "tenant.resume",
}

#: The platform event of each kind of change (docs/platform.md, "Events"), with what it says
#: besides the change's audit detail (ids, domains and revisions: never a configuration's text).
EVENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "added": (platform_events.TENANT_ADDED, {}),
    "updated": (platform_events.TENANT_UPDATED, {"change": "configuration"}),
    "domains": (platform_events.TENANT_UPDATED, {"change": "domains"}),
    "secrets": (platform_events.TENANT_UPDATED, {"change": "secrets"}),
    "removed": (platform_events.TENANT_REMOVED, {}),
    "suspended": (platform_events.TENANT_SUSPENDED, {}),
    "resumed": (platform_events.TENANT_RESUMED, {}),
}

#: The kinds of background work ``platform_due`` keeps a time for: a tenant's, and the
#: platform's own sweep over every tenant (its row's tenant id is empty).
DELIVERIES, FEEDS, SWEEP = "deliveries", "feeds", "sweep"


def note_due(tx: Tx, work: str, due_ms: int) -> None:
    """Note in ``tx`` that ``work`` of ``tx``'s tenant is due by ``due_ms`` (an earlier time
    noted stays), when ``tx`` is a platform's. Written in the transaction of what made the work
    due, the note commits or rolls back with it: no worker stopping between them loses it, and
    no pass over every tenant's rows has to find it again. A single deployment has no
    ``platform_due`` (its own runner reads its outbox), so nothing is written there."""
    if tx.tenant == DEPLOYMENT_TENANT or not tx.db.platform:
        return
    tx.execute(
        "INSERT INTO platform_due (tenant_id, work, due_ms) VALUES (?, ?, ?) ON CONFLICT (tenant_id, work)"
        " DO UPDATE SET due_ms = CASE WHEN excluded.due_ms < platform_due.due_ms"
        " THEN excluded.due_ms ELSE platform_due.due_ms END",
        (tx.tenant, work, due_ms),
    )


def hold_due(tx: Tx, work: str) -> None:
    """Lock ``tx``'s tenant's ``platform_due`` row of ``work`` (made if missing) until ``tx``
    ends: a runner settling when the work is next due (:func:`write_due`) holds it first, so a
    note written meanwhile (:func:`note_due`) waits and lands after, never under it."""
    tx.execute(
        "INSERT INTO platform_due (tenant_id, work, due_ms) VALUES (?, ?, 0) ON CONFLICT (tenant_id, work)"
        " DO UPDATE SET due_ms = platform_due.due_ms",
        (tx.tenant, work),
    )


def write_due(tx: Tx, work: str, due_ms: int | None, *, tenant: str | None = None) -> None:
    """Record in ``tx`` when ``work`` of ``tenant`` (default: ``tx``'s) is next due; None:
    nothing left to do."""
    tenant_id = tx.tenant if tenant is None else tenant
    if due_ms is None:
        tx.execute("DELETE FROM platform_due WHERE tenant_id = ? AND work = ?", (tenant_id, work))
        return
    tx.execute(
        "INSERT INTO platform_due (tenant_id, work, due_ms) VALUES (?, ?, ?)"
        " ON CONFLICT (tenant_id, work) DO UPDATE SET due_ms = excluded.due_ms",
        (tenant_id, work, due_ms),
    )


@dataclass(frozen=True)
class TenantRecord:
    """One tenant as registered."""

    tenant_id: str
    config: str
    a2a_tenant: str | None
    revision: int
    created_ms: int
    updated_ms: int
    domains: tuple[str, ...] = ()
    #: Since when the tenant is suspended (epoch ms), or None: it is served.
    suspended_ms: int | None = None
    #: Why its configuration, at this revision, failed to load in a worker, or None.
    broken: str | None = None
    broken_ms: int | None = None


@dataclass(frozen=True)
class StoredSecret:
    """One tenant secret as stored: its name, its sealed value, the id of the key that sealed it."""

    tenant_id: str
    name: str
    sealed: str
    key_id: str
    set_ms: int


@dataclass(frozen=True)
class Change:
    """One change of one tenant, in the order the platform made them."""

    seq: int
    tenant_id: str
    kind: str  # "added", "updated", "domains", "secrets", "removed", "suspended", "resumed"


#: The columns of a :class:`TenantRecord`, read from ``platform_tenants t`` joined with its
#: ``platform_status s`` (a broken report counts for the revision that failed only).
_COLUMNS = (
    "t.tenant_id, {config}, t.a2a_tenant, t.revision, t.created_ms, t.updated_ms, s.suspended_ms,"
    " CASE WHEN s.broken_revision = t.revision THEN s.broken_reason END,"
    " CASE WHEN s.broken_revision = t.revision THEN s.broken_ms END"
)
_FROM = "platform_tenants t LEFT JOIN platform_status s ON s.tenant_id = t.tenant_id"


def _select(config: str = "t.config") -> str:
    return f"SELECT {_COLUMNS.format(config=config)} FROM {_FROM}"


def _record(row: tuple[Any, ...], domains: tuple[str, ...]) -> TenantRecord:
    tenant_id, config, a2a_tenant, revision, created_ms, updated_ms, suspended_ms, broken, broken_ms = row
    return TenantRecord(
        tenant_id,
        config,
        a2a_tenant,
        int(revision),
        int(created_ms),
        int(updated_ms),
        domains,
        None if suspended_ms is None else int(suspended_ms),
        broken,
        None if broken_ms is None else int(broken_ms),
    )


def _like_escaped(text: str) -> str:
    """``text`` as the literal part of a ``LIKE`` pattern (escape character ``\\``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class PlatformStore:
    """The platform's registry of tenants, on the platform's own database namespace."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- reads ---------------------------------------------------------------------------
    def tenant(self, tenant_id: str, *, domains: bool = True) -> TenantRecord | None:
        """The tenant's row; ``domains=False`` leaves its domains out (empty): a worker building
        the tenant's runtime routes by host already, and reads one table fewer."""
        with self.db.read() as tx:
            return self._tenant(tx, tenant_id, domains=domains)

    def _tenant(self, tx: Tx, tenant_id: str, *, domains: bool = True) -> TenantRecord | None:
        row = tx.fetchone(_select() + " WHERE t.tenant_id = ?", (tenant_id,))
        if row is None:
            return None
        if not domains:
            return _record(row, ())
        hosts = tx.fetchall("SELECT host FROM platform_domains WHERE tenant_id = ? ORDER BY host", (tenant_id,))
        return _record(row, tuple(h for (h,) in hosts))

    def tenants(
        self,
        *,
        after: str = "",
        limit: int = 1000,
        matching: str | None = None,
        holding: Sequence[str] = (),
    ) -> list[TenantRecord]:
        """Tenants in id order, ``limit`` at a time after the id ``after`` (keyset paging); with
        ``matching``, those whose id or one of whose domains contains it (the platform console's
        filter: ids and host names are lower case, so is the text looked for); with
        ``holding``, those whose configuration's text contains one of these (the sweep's
        filter: the database passes the others by, their configurations are not sent)."""
        if "\x00" in after or "\x00" in (matching or ""):
            return []  # no id or host holds NUL, which PostgreSQL's text cannot hold either
        where, args = "t.tenant_id > ?", [after]
        if holding:
            where += " AND (" + " OR ".join("t.config LIKE ? ESCAPE '\\'" for _ in holding) + ")"
            args += ["%" + _like_escaped(text) + "%" for text in holding]
        if matching:
            pattern = "%" + _like_escaped(matching.lower()) + "%"
            where += (
                " AND (t.tenant_id LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM platform_domains d"
                " WHERE d.tenant_id = t.tenant_id AND d.host LIKE ? ESCAPE '\\'))"
            )
            args += [pattern, pattern]
        with self.db.read() as tx:
            rows = tx.fetchall(_select() + f" WHERE {where} ORDER BY t.tenant_id LIMIT ?", (*args, limit))
            ids = [r[0] for r in rows]
            domains: dict[str, list[str]] = {i: [] for i in ids}
            if ids:
                marks = ", ".join("?" * len(ids))
                for host, tenant_id in tx.fetchall(
                    f"SELECT host, tenant_id FROM platform_domains WHERE tenant_id IN ({marks}) ORDER BY host", ids
                ):
                    domains[tenant_id].append(host)
        return [_record(r, tuple(domains[r[0]])) for r in rows]

    def directory(self, *, after: str = "", through: str | None = None, limit: int = 1000) -> list[TenantRecord]:
        """Tenants with ids in (``after``, ``through``] in id order, at most ``limit``, with their
        domains but without their configuration (a listing of thousands reads none of it)."""
        if "\x00" in after or "\x00" in (through or ""):
            return []
        where, args = "t.tenant_id > ?", [after]
        if through is not None:
            where += " AND t.tenant_id <= ?"
            args.append(through)
        with self.db.read() as tx:
            rows = tx.fetchall(_select("''") + f" WHERE {where} ORDER BY t.tenant_id LIMIT ?", (*args, limit))
            domains: dict[str, list[str]] = {r[0]: [] for r in rows}
            if rows:
                first, last = rows[0][0], rows[-1][0]
                for host, tenant_id in tx.fetchall(
                    "SELECT host, tenant_id FROM platform_domains WHERE tenant_id >= ? AND tenant_id <= ?"
                    " ORDER BY host",
                    (first, last),
                ):
                    if tenant_id in domains:
                        domains[tenant_id].append(host)
        return [_record(r, tuple(domains[r[0]])) for r in rows]

    def boundaries(self, every: int) -> list[str]:
        """The id of every ``every``-th tenant in id order, and the last tenant's: where each
        page of a listing ``every`` tenants long ends (one pass over the id index)."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT tenant_id FROM (SELECT tenant_id, ROW_NUMBER() OVER (ORDER BY tenant_id) AS n"
                " FROM platform_tenants) AS numbered WHERE n % ? = 0 ORDER BY tenant_id",
                (every,),
            )
            last = tx.one("SELECT MAX(tenant_id) FROM platform_tenants")[0]
        ends = [r[0] for r in rows]
        if last is not None and (not ends or ends[-1] != last):
            ends.append(last)
        return ends

    def count(self) -> int:
        with self.db.read() as tx:
            return int(tx.one("SELECT COUNT(*) FROM platform_tenants")[0])

    def tenant_at(self, host: str) -> str | None:
        """The tenant served at ``host``, or None."""
        with self.db.read() as tx:
            row = tx.fetchone("SELECT tenant_id FROM platform_domains WHERE host = ?", (host,))
        return row[0] if row else None

    def tenant_for_a2a(self, value: str) -> str | None:
        """The tenant whose agent card declares the A2A routing value ``value``, or None."""
        with self.db.read() as tx:
            row = tx.fetchone("SELECT tenant_id FROM platform_tenants WHERE a2a_tenant = ?", (value,))
        return row[0] if row else None

    def hosts_taken(self, hosts: Sequence[str]) -> dict[str, str]:
        """Of ``hosts``, those served already, with their tenant."""
        if not hosts:
            return {}
        marks = ", ".join("?" * len(hosts))
        with self.db.read() as tx:
            rows = tx.fetchall(f"SELECT host, tenant_id FROM platform_domains WHERE host IN ({marks})", list(hosts))
        return {host: tenant_id for host, tenant_id in rows}

    def last_change(self) -> int:
        with self.db.read() as tx:
            return int(tx.one("SELECT COALESCE(MAX(seq), 0) FROM platform_changes")[0])

    def changes_since(self, seq: int, limit: int = 10_000) -> list[Change]:
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT seq, tenant_id, kind FROM platform_changes WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            )
        return [Change(*row) for row in rows]

    # -- writes (one transaction each, with its change row) ---------------------------------
    def add(
        self,
        tenant_id: str,
        config: str,
        a2a_tenant: str | None,
        domains: Iterable[str],
        now_ms: int,
        *,
        actor: str = UNNAMED,
    ) -> TenantRecord:
        domains = list(domains)
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO platform_tenants (tenant_id, config, a2a_tenant, revision, created_ms, updated_ms)"
                " VALUES (?, ?, ?, 1, ?, ?)",
                (tenant_id, config, a2a_tenant, now_ms, now_ms),
            )
            self._move_domains(tx, tenant_id, domains, (), now_ms)
            self._changed(tx, tenant_id, "added", now_ms, actor, {"domains": domains})
            record = self._tenant(tx, tenant_id)
        assert record is not None
        return record

    def update(
        self, tenant_id: str, config: str, a2a_tenant: str | None, now_ms: int, *, actor: str = UNNAMED
    ) -> TenantRecord | None:
        with self.db.transaction() as tx:
            if not self._set_config(tx, tenant_id, config, a2a_tenant, now_ms):
                return None
            record = self._tenant(tx, tenant_id)
            assert record is not None
            self._changed(tx, tenant_id, "updated", now_ms, actor, {"revision": record.revision})
            return record

    def replace(
        self,
        tenant_id: str,
        config: str,
        a2a_tenant: str | None,
        add: Sequence[str],
        remove: Sequence[str],
        now_ms: int,
        *,
        actor: str = UNNAMED,
    ) -> TenantRecord | None:
        """A new configuration and domains in one change (one revision, one audit row): what an
        idempotent ``PUT`` of a whole tenant, or a line of a bulk file, makes of an existing one."""
        with self.db.transaction() as tx:
            if not self._set_config(tx, tenant_id, config, a2a_tenant, now_ms):
                return None
            self._move_domains(tx, tenant_id, add, remove, now_ms)
            record = self._tenant(tx, tenant_id)
            assert record is not None
            detail = {"revision": record.revision, "added": list(add), "removed": list(remove)}
            self._changed(tx, tenant_id, "updated", now_ms, actor, detail)
            return record

    def set_domains(
        self, tenant_id: str, add: Sequence[str], remove: Sequence[str], now_ms: int, *, actor: str = UNNAMED
    ) -> TenantRecord | None:
        with self.db.transaction() as tx:
            if tx.fetchone("SELECT 1 FROM platform_tenants WHERE tenant_id = ?", (tenant_id,)) is None:
                return None
            self._move_domains(tx, tenant_id, add, remove, now_ms)
            self._next_revision(tx, tenant_id, now_ms)
            self._changed(tx, tenant_id, "domains", now_ms, actor, {"added": list(add), "removed": list(remove)})
            return self._tenant(tx, tenant_id)

    def remove(self, tenant_id: str, now_ms: int, *, actor: str = UNNAMED) -> bool:
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM platform_domains WHERE tenant_id = ?", (tenant_id,))
            tx.execute("DELETE FROM platform_due WHERE tenant_id = ?", (tenant_id,))
            tx.execute("DELETE FROM platform_secrets WHERE tenant_id = ?", (tenant_id,))
            tx.execute("DELETE FROM platform_status WHERE tenant_id = ?", (tenant_id,))
            cursor = tx.execute("DELETE FROM platform_tenants WHERE tenant_id = ?", (tenant_id,))
            if cursor.rowcount == 0:
                return False
            self._changed(tx, tenant_id, "removed", now_ms, actor, {})
        return True

    # -- secrets (sealed by the caller: aap.tenant_secrets) ----------------------------------------
    def secrets(self, tenant_id: str) -> list[StoredSecret]:
        """The tenant's secrets in name order."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT tenant_id, name, sealed, key_id, set_ms FROM platform_secrets WHERE tenant_id = ? ORDER BY name",
                (tenant_id,),
            )
        return [StoredSecret(t, n, s, k, int(ms)) for t, n, s, k, ms in rows]

    def secrets_page(self, after: tuple[str, str] = ("", ""), limit: int = 500) -> list[StoredSecret]:
        """Every tenant's secrets, in (tenant, name) order after ``after`` (what rotation walks)."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT tenant_id, name, sealed, key_id, set_ms FROM platform_secrets"
                " WHERE tenant_id > ? OR (tenant_id = ? AND name > ?) ORDER BY tenant_id, name LIMIT ?",
                (after[0], after[0], after[1], limit),
            )
        return [StoredSecret(t, n, s, k, int(ms)) for t, n, s, k, ms in rows]

    def set_secret(self, tenant_id: str, name: str, sealed: str, key_id: str, now_ms: int) -> bool:
        """Store a sealed value (replacing the name's earlier one); returns whether it is new. The
        tenant's revision and change row make every worker rebuild it with the new value."""
        with self.db.transaction() as tx:
            existed = tx.fetchone("SELECT 1 FROM platform_secrets WHERE tenant_id = ? AND name = ?", (tenant_id, name))
            tx.execute(
                "INSERT INTO platform_secrets (tenant_id, name, sealed, key_id, set_ms) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant_id, name) DO UPDATE SET sealed = excluded.sealed, key_id = excluded.key_id,"
                " set_ms = excluded.set_ms",
                (tenant_id, name, sealed, key_id, now_ms),
            )
            self._secrets_changed(tx, tenant_id, now_ms)
        return existed is None

    def remove_secret(self, tenant_id: str, name: str, now_ms: int) -> bool:
        with self.db.transaction() as tx:
            cursor = tx.execute("DELETE FROM platform_secrets WHERE tenant_id = ? AND name = ?", (tenant_id, name))
            if cursor.rowcount == 0:
                return False
            self._secrets_changed(tx, tenant_id, now_ms)
        return True

    def reseal(self, secret: StoredSecret, sealed: str, key_id: str) -> bool:
        """Replace ``secret``'s sealed form by the same value sealed again (rotation), unless it
        changed since it was read; no change row (the value is the same)."""
        with self.db.transaction() as tx:
            cursor = tx.execute(
                "UPDATE platform_secrets SET sealed = ?, key_id = ? WHERE tenant_id = ? AND name = ? AND sealed = ?",
                (sealed, key_id, secret.tenant_id, secret.name, secret.sealed),
            )
            return cursor.rowcount == 1

    def _secrets_changed(self, tx: Tx, tenant_id: str, now_ms: int) -> None:
        self._next_revision(tx, tenant_id, now_ms)
        self._changed(tx, tenant_id, "secrets", now_ms, UNNAMED, {})

    def suspend(self, tenant_id: str, now_ms: int, *, actor: str = UNNAMED) -> TenantRecord | None:
        """Suspend the tenant (every worker answers 503 for it, its background work pauses);
        suspending a suspended tenant changes nothing and writes no row."""
        return self._set_suspended(tenant_id, now_ms, now_ms, "suspended", actor)

    def resume(self, tenant_id: str, now_ms: int, *, actor: str = UNNAMED) -> TenantRecord | None:
        """Serve the tenant again; resuming a tenant that is served changes nothing."""
        return self._set_suspended(tenant_id, None, now_ms, "resumed", actor)

    def _set_suspended(
        self, tenant_id: str, since_ms: int | None, now_ms: int, kind: str, actor: str
    ) -> TenantRecord | None:
        with self.db.transaction() as tx:
            record = self._tenant(tx, tenant_id)
            if record is None or (record.suspended_ms is not None) == (since_ms is not None):
                return record
            tx.execute(
                "INSERT INTO platform_status (tenant_id, suspended_ms) VALUES (?, ?)"
                " ON CONFLICT (tenant_id) DO UPDATE SET suspended_ms = excluded.suspended_ms",
                (tenant_id, since_ms),
            )
            self._changed(tx, tenant_id, kind, now_ms, actor, {})
            return self._tenant(tx, tenant_id)

    @staticmethod
    def _set_config(tx: Tx, tenant_id: str, config: str, a2a_tenant: str | None, now_ms: int) -> bool:
        """Store a new configuration as the tenant's next revision; False when there is no such
        tenant (the callers answer None then)."""
        cursor = tx.execute(
            "UPDATE platform_tenants SET config = ?, a2a_tenant = ?, revision = revision + 1, updated_ms = ?"
            " WHERE tenant_id = ?",
            (config, a2a_tenant, now_ms, tenant_id),
        )
        return cursor.rowcount != 0

    @staticmethod
    def _next_revision(tx: Tx, tenant_id: str, now_ms: int) -> None:
        """Domains and secrets are part of what the workers load: a change to them is a revision."""
        tx.execute(
            "UPDATE platform_tenants SET revision = revision + 1, updated_ms = ? WHERE tenant_id = ?",
            (now_ms, tenant_id),
        )

    @staticmethod
    def _move_domains(tx: Tx, tenant_id: str, add: Sequence[str], remove: Sequence[str], now_ms: int) -> None:
        """Release ``remove`` then claim ``add`` for the tenant (removal first, so a host may move
        within one change); a host another tenant holds fails the primary key."""
        for host in remove:
            tx.execute("DELETE FROM platform_domains WHERE host = ? AND tenant_id = ?", (host, tenant_id))
        for host in add:
            tx.execute(
                "INSERT INTO platform_domains (host, tenant_id, added_ms) VALUES (?, ?, ?)",
                (host, tenant_id, now_ms),
            )

    @staticmethod
    def _changed(tx: Tx, tenant_id: str, kind: str, now_ms: int, actor: str, detail: dict[str, Any]) -> None:
        tx.execute("INSERT INTO platform_changes (tenant_id, kind, at_ms) VALUES (?, ?, ?)", (tenant_id, kind, now_ms))
        write_audit(tx, actor, AUDIT_ACTIONS[kind], tenant_id, detail, now_ms)
        type_, data = EVENTS[kind]
        platform_events.emit(tx, type_, {**data, **detail}, tenant=tenant_id, now_ms=now_ms)

    # -- what the workers report ------------------------------------------------------------
    def report_broken(self, tenant_id: str, revision: int, reason: str, now_ms: int) -> bool:
        """Record that ``revision`` of the tenant's configuration failed to load, and why; False
        when that was recorded already (so the workers of a platform write it once)."""
        reason = reason[:MAX_REASON]
        with self.db.transaction() as tx:
            row = tx.fetchone(
                "SELECT broken_revision, broken_reason FROM platform_status WHERE tenant_id = ?", (tenant_id,)
            )
            if row is not None and row[0] == revision and row[1] == reason:
                return False
            if tx.fetchone("SELECT 1 FROM platform_tenants WHERE tenant_id = ?", (tenant_id,)) is None:
                return False
            tx.execute(
                "INSERT INTO platform_status (tenant_id, broken_revision, broken_reason, broken_ms) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (tenant_id) DO UPDATE SET broken_revision = excluded.broken_revision,"
                " broken_reason = excluded.broken_reason, broken_ms = excluded.broken_ms",
                (tenant_id, revision, reason, now_ms),
            )
            platform_events.emit(
                tx,
                platform_events.TENANT_BROKEN,
                {"revision": revision, "reason": platform_events.reason(reason)},
                tenant=tenant_id,
                now_ms=now_ms,
            )
        return True

    def clear_broken(self, tenant_id: str, revision: int) -> None:
        """``revision`` of the tenant's configuration loaded: forget a failure reported for it or before."""
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE platform_status SET broken_revision = NULL, broken_reason = NULL, broken_ms = NULL"
                " WHERE tenant_id = ? AND broken_revision <= ?",
                (tenant_id, revision),
            )

    def unavailable(self, limit: int = 10_000) -> list[TenantRecord]:
        """The tenants suspended or broken (at their current revision), in id order, without
        their configuration or domains: ``/metrics`` gauges them."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                _select("''") + " WHERE s.suspended_ms IS NOT NULL OR s.broken_revision = t.revision"
                " ORDER BY t.tenant_id LIMIT ?",
                (limit,),
            )
        return [_record(r, ()) for r in rows]

    # -- background work due --------------------------------------------------------------
    def due(self, work: str, now_ms: int, limit: int = 100) -> list[str]:
        """Tenants whose ``work`` is due by ``now_ms``, the longest-waiting first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT tenant_id FROM platform_due WHERE work = ? AND due_ms <= ? ORDER BY due_ms LIMIT ?",
                (work, now_ms, limit),
            )
        return [r[0] for r in rows]

    def next_due(self, work: str) -> int | None:
        """When the earliest tenant's ``work`` is due (epoch ms), or None when none is."""
        with self.db.read() as tx:
            row = tx.one("SELECT MIN(due_ms) FROM platform_due WHERE work = ?", (work,))
        return None if row[0] is None else int(row[0])

    def claim_sweep(self, now_ms: int, every_ms: int) -> bool:
        """Whether this caller sweeps now: true for one caller per ``every_ms`` across every
        worker and host (the platform's own row of ``platform_due``: no tenant id is empty), which
        moves its time on in the same statement that finds it due."""
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO platform_due (tenant_id, work, due_ms) VALUES ('', ?, 0) ON CONFLICT (tenant_id, work) DO NOTHING",
                (SWEEP,),
            )
            claimed = tx.execute(
                "UPDATE platform_due SET due_ms = ? WHERE tenant_id = '' AND work = ? AND due_ms <= ?",
                (now_ms + every_ms, SWEEP, now_ms),
            ).rowcount
        return claimed == 1

    def set_due(self, tenant_id: str, work: str, due_ms: int | None) -> None:
        """Record when ``work`` of ``tenant_id`` is next due; None: nothing left to do."""
        with self.db.transaction() as tx:
            write_due(tx, work, due_ms, tenant=tenant_id)

    def prune_changes(self, before_ms: int) -> None:
        """Forget change rows older than any worker still needs (they are an hour old at least)."""
        with self.db.transaction() as tx:
            tx.execute(
                "DELETE FROM platform_changes WHERE at_ms < ? AND seq < (SELECT MAX(seq) FROM platform_changes)",
                (before_ms,),
            )
