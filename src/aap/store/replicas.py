"""Read replicas: where a read may go, and which replicas are fit to answer.

A marketplace scales its reads with PostgreSQL streaming replicas
(``[database] read_urls``). The read skills' inventory snapshots go to a replica
that is up and at most ``max_replica_lag_ms`` behind its primary, in turn;
everything that writes, everything that must read its own writes (leads,
tokens, rate limits, replay caches, cursor secrets, imports, remembered totals)
and every read that decides a write (a lead's vehicle of interest, which names its
seller: ``InventoryStore.find(primary=True)``) stays on the primary, which is also
the last resort of every read. A replica's
state is checked at most once a second per process, and at once when a read on
it fails; ``/healthz`` reports each one. See docs/deployment.md, "Read replicas".
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from aap.store.db import Database, view_of

log = logging.getLogger("aap.store")

#: Seconds a replica's state is trusted before it is checked again (down: longer, since
#: reaching a host that does not answer costs a connection timeout).
RECHECK_SECONDS = 1.0
RECHECK_DOWN_SECONDS = 5.0

# Replay lag in milliseconds: none while everything received is replayed (an idle primary
# sends nothing, and the last replay may be old), else the age of the last replayed commit.
_LAG = (
    "SELECT CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() "
    "THEN 0 ELSE COALESCE(EXTRACT(EPOCH FROM (now() - pg_last_xact_replay_timestamp())) * 1000, 0) END"
)


@dataclass
class Replica:
    """One read replica and what was last seen of it."""

    name: str  # "read_urls[0]": never the URL, which may carry a password
    db: Database | None  # None until a connection could be made
    url: str
    state: str = "unknown"  # "ok", "lagging" or "down"
    lag_ms: float | None = None
    checked: float = 0.0  # time.monotonic() of the last check
    checking: threading.Lock = field(default_factory=threading.Lock)

    def report(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "state": self.state}
        if self.lag_ms is not None:
            out["lag_ms"] = round(self.lag_ms)
        return out


class ReadRouter:
    """The databases a read may use, best first: fit replicas in turn, then the primary."""

    def __init__(
        self,
        primary: Database,
        read_urls: tuple[str, ...] = (),
        *,
        max_lag_ms: float = 5000,
        connect: type[Database] | None = None,
    ) -> None:
        self.primary = primary
        self.max_lag_ms = max_lag_ms
        self.replicas = [Replica(f"read_urls[{i}]", None, url) for i, url in enumerate(read_urls)]
        self._connect = connect
        self._turn = itertools.count()
        #: A platform tenant's view (:meth:`for_tenant`): its tenant, and its views of the replicas.
        self._tenant: str | None = None
        #: Made on the first replica read (a platform's tenants, most of them, never make one).
        self._views: dict[int, tuple[Database, Database]] | None = None
        self._owns = True

    def for_tenant(self, tenant: str, primary: Database | None = None) -> ReadRouter:
        """These replicas as ``tenant`` reads them: the same pools and the same replica states,
        every read scoped to its rows (a platform's tenants share one router's replicas).
        ``primary``: the tenant's view of the primary already made, to read through (not another)."""
        if primary is not None and (primary.tenant != tenant or primary.url != self.primary.url):
            raise ValueError("the primary given is not this router's primary as the tenant sees it")
        view = view_of(self)
        view.primary = primary if primary is not None else self.primary.for_tenant(tenant)
        view._tenant = tenant
        view._views = None
        view._owns = False
        return view

    def _as_tenant(self, db: Database) -> Database:
        if self._tenant is None:
            return db
        if self._views is None:
            self._views = {}
        held = self._views.get(id(db))
        if held is None or held[0] is not db:
            held = (db, db.for_tenant(self._tenant))
            self._views[id(db)] = held
        return held[1]

    def candidates(self) -> list[Database]:
        """Fit replicas (rotating, so that load spreads), then the primary."""
        fit = [self._as_tenant(r.db) for r in self.replicas if self._fit(r) and r.db is not None]
        if fit:
            start = next(self._turn) % len(fit)
            fit = fit[start:] + fit[:start]
        return fit + [self.primary]

    def failed(self, db: Database) -> None:
        """A read on ``db`` failed for want of the server: check it before its next use."""
        for replica in self.replicas:
            if replica.db is not None and (replica.db is db or self._as_tenant(replica.db) is db):
                self._check(replica)

    def status(self) -> list[dict[str, object]]:
        """Every replica's state, checked now (``/healthz``)."""
        for replica in self.replicas:
            self._check(replica)
        return [replica.report() for replica in self.replicas]

    def close(self) -> None:
        if not self._owns:
            return
        for replica in self.replicas:
            if replica.db is not None:
                replica.db.close()

    # -- checks -----------------------------------------------------------------
    def _fit(self, replica: Replica) -> bool:
        trusted = RECHECK_DOWN_SECONDS if replica.state == "down" else RECHECK_SECONDS
        if time.monotonic() - replica.checked >= trusted:
            self._check(replica, wait=False)
        return replica.state == "ok"

    def _check(self, replica: Replica, *, wait: bool = True) -> None:
        """Ask the replica how far behind it is; without ``wait``, leave it to a check in flight."""
        if not replica.checking.acquire(blocking=wait):
            return
        try:
            replica.checked = time.monotonic()
            try:
                if replica.db is None:
                    replica.db = self._open(replica.url)
                with replica.db.read() as tx:
                    replica.lag_ms = float(tx.one(_LAG)[0])
            except Exception as exc:  # any failure to reach or ask it: skip it for now
                if replica.state != "down":
                    log.warning(
                        "read replica unavailable",
                        extra={"fields": {"replica": replica.name, "error_type": type(exc).__name__}},
                    )
                replica.state, replica.lag_ms = "down", None
                if replica.db is not None:  # a new pool next time: no waiting out the old one's backoff
                    stale, replica.db = replica.db, None
                    stale.close()
                return
            replica.state = "ok" if replica.lag_ms <= self.max_lag_ms else "lagging"
        finally:
            replica.checking.release()

    def _open(self, url: str) -> Database:
        if self._connect is not None:
            return self._connect(url)
        from aap.store.postgres import PostgresDatabase  # replicas are PostgreSQL only

        return PostgresDatabase(url, replica=True)
