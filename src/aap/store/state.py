"""Shared state every worker process must agree on, kept in the database.

Secrets (the cursor HMAC key), token buckets (rate limits), a replay cache
(DPoP/JWT ``jti``) and short-lived values (oversized cursor positions). None of
this may live only in process memory: with several workers a caller would get
one bucket per worker and a replayed token would pass on another worker.
Every read-modify-write runs in one write transaction, so concurrent callers on
other connections serialise on the row.
"""

from __future__ import annotations

import secrets as _secrets
import threading
import time
from datetime import datetime

from aap.store.db import Database, Migrations, Tx
from aap.util.memo import Memo

_LAYOUT = """
CREATE TABLE state_secret (
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE state_bucket (
    tenant_id TEXT NOT NULL,
    bucket_key TEXT NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    full_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, bucket_key)
);
CREATE INDEX state_bucket_full ON state_bucket (tenant_id, full_at);
CREATE TABLE state_once (
    tenant_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    once_key TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, namespace, once_key)
);
CREATE INDEX state_once_expiry ON state_once (tenant_id, expires_at);
CREATE TABLE state_value (
    tenant_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    value_key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, namespace, value_key)
);
CREATE INDEX state_value_expiry ON state_value (tenant_id, expires_at);
CREATE TABLE state_mark (
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
)
"""

MIGRATIONS = Migrations(
    "state", (_LAYOUT,), tables=("state_secret", "state_bucket", "state_once", "state_value", "state_mark")
)

_SWEEP_EVERY = 256  # sweep full buckets / expired values once per this many calls


def _seconds(value: float | datetime | None) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


class KeysKept:
    """The secrets of the agents a platform worker builds, kept across its builds of each.

    A worker serving more tenants than it keeps built builds most of them again, each time with
    new stores: a tenant's secret (the cursor key among them) would be read again, in a
    transaction of its own, by almost every request spread over the tenants that signs or
    checks a cursor. A secret never changes while its tenant lives, so the worker keeps it
    until the tenant changes (:meth:`forget`; a removal is a change), at most ``kept`` tenants'
    secrets, the least recently used dropped first. Keyed by the tenant a store's database
    view is bound to: no tenant is ever given another's.
    """

    def __init__(self, kept: int) -> None:
        self._memo: Memo[str, tuple[tuple[str, bytes], ...]] = Memo(max(1, kept), lru=True)
        #: Tenants forgotten so far: a secret read before a tenant was forgotten is not kept
        #: after it (it may be that of a tenant removed, then added again under its id).
        self.forgotten = 0

    def get(self, tenant: str, name: str) -> bytes | None:
        for kept_name, value in self._memo.peek(tenant) or ():
            if kept_name == name:
                return value
        return None

    def put(self, tenant: str, name: str, value: bytes, seen: int) -> None:
        """Keep ``value``, read when :attr:`forgotten` was ``seen``, unless a tenant was forgotten since."""
        if seen != self.forgotten:
            return
        others = tuple(pair for pair in self._memo.peek(tenant) or () if pair[0] != name)
        self._memo.put(tenant, (*others, (name, value)))

    def forget(self, tenant: str) -> None:
        self.forgotten += 1
        self._memo.discard(tenant)

    def __len__(self) -> int:
        return len(self._memo)


class StateStore:
    """Small shared-state primitives on the deployment database."""

    def __init__(self, db: Database, keys: KeysKept | None = None) -> None:
        self.db = db
        #: The worker's secrets kept across builds of this agent (a platform's tenant), if any.
        self.keys = keys
        self._secrets: dict[str, bytes] = {}
        self._calls = 0
        self._lock = threading.Lock()

    def _due_sweep(self) -> bool:
        with self._lock:
            self._calls += 1
            return self._calls % _SWEEP_EVERY == 1

    # -- marks ----------------------------------------------------------------
    def mark(self, name: str) -> str | None:
        """The value of the mark ``name`` this database carries, or None."""
        with self.db.read() as tx:
            row = tx.fetchone("SELECT value FROM state_mark WHERE tenant_id = ? AND name = ?", (tx.tenant, name))
        return None if row is None else str(row[0])

    def set_mark(self, name: str, value: str) -> None:
        """Mark the database (idempotent; the first value stays)."""
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO state_mark (tenant_id, name, value) VALUES (?, ?, ?) ON CONFLICT (tenant_id, name) DO NOTHING",
                (tx.tenant, name, value),
            )

    # -- secrets --------------------------------------------------------------
    def secret(self, name: str) -> bytes:
        """32 random bytes named ``name``: created once, then the same for every worker."""
        cached = self._secrets.get(name)
        if cached is not None:
            return cached
        keys, seen = self.keys, 0
        if keys is not None:
            seen = keys.forgotten
            kept = keys.get(self.db.tenant, name)
            if kept is not None:
                self._secrets[name] = kept
                return kept
        value = self._stored_secret(name)
        self._secrets[name] = value
        if keys is not None:
            keys.put(self.db.tenant, name, value, seen)
        return value

    def _stored_secret(self, name: str) -> bytes:
        """The secret ``name`` as stored, made and stored first if there is none yet."""
        # Read first: a secret exists but for an agent's first use, and a platform worker asks
        # again for each tenant it builds anew, where a write transaction would cost far more.
        with self.db.read() as tx:
            row = tx.fetchone("SELECT value FROM state_secret WHERE tenant_id = ? AND name = ?", (tx.tenant, name))
        if row is not None:
            return bytes.fromhex(row[0])
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO state_secret (tenant_id, name, value) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant_id, name) DO NOTHING",
                (tx.tenant, name, _secrets.token_hex(32)),
            )
            return bytes.fromhex(
                tx.one("SELECT value FROM state_secret WHERE tenant_id = ? AND name = ?", (tx.tenant, name))[0]
            )

    # -- rate limiting --------------------------------------------------------
    def take_token(
        self,
        key: str,
        *,
        capacity: float,
        refill_per_second: float,
        now: float | datetime | None = None,
    ) -> float:
        """Take one token from bucket ``key``: 0.0 when allowed, else seconds until one is due.

        A bucket starts full (``capacity`` tokens) and refills continuously.
        A refused call takes nothing, so a client that waits the returned time
        gets through.
        """
        _granted, wait = self.lease_tokens(
            key, need=1, want=1, capacity=capacity, refill_per_second=refill_per_second, now=now
        )
        return wait

    def lease_tokens(
        self,
        key: str,
        *,
        need: int,
        want: int,
        capacity: float,
        refill_per_second: float,
        give_back: float = 0.0,
        now: float | datetime | None = None,
    ) -> tuple[int, float]:
        """Take between ``need`` and ``want`` whole tokens from bucket ``key`` in one write.

        Returns ``(granted, wait)``: ``granted`` tokens (``need``, or up to ``want``
        but never more than half of what the bucket holds) and 0.0, or ``(0, seconds
        until need tokens are due)`` when the bucket holds fewer than ``need`` (a
        refusal takes nothing). ``give_back`` unused tokens of an earlier lease are returned first,
        in the same transaction. A bucket starts full and refills continuously.
        """
        if capacity < 1 or refill_per_second <= 0:
            raise ValueError("a token bucket needs capacity >= 1 and refill_per_second > 0")
        if not 1 <= need <= want or need > capacity:
            raise ValueError("a lease needs 1 <= need <= want and need <= capacity")
        t = _seconds(now)
        with self.db.transaction() as tx:
            if self._due_sweep():
                tx.execute("DELETE FROM state_bucket WHERE tenant_id = ? AND full_at <= ?", (tx.tenant, t))
            tokens, updated_at = self._bucket(tx, key, capacity, refill_per_second, t)
            tokens = min(float(capacity), tokens + give_back)
            if tokens >= need:
                # Never more than half of what is there (beyond ``need``): the rest stays
                # for the caller's requests on other workers.
                granted = max(need, min(want, int(tokens / 2)))
                tokens -= granted
                wait = 0.0
            else:
                granted = 0
                wait = (need - tokens) / refill_per_second
            self._store_bucket(tx, key, tokens, max(t, updated_at), capacity, refill_per_second)
        return granted, wait

    def return_tokens(
        self,
        returns: list[tuple[str, float]],
        *,
        capacity: float,
        refill_per_second: float,
        now: float | datetime | None = None,
    ) -> None:
        """Give unused leased tokens back to their buckets (``(key, tokens)`` pairs), in one write."""
        if not returns:
            return
        t = _seconds(now)
        with self.db.transaction() as tx:
            for key, back in returns:
                tokens, updated_at = self._bucket(tx, key, capacity, refill_per_second, t)
                self._store_bucket(
                    tx, key, min(float(capacity), tokens + back), max(t, updated_at), capacity, refill_per_second
                )

    def _bucket(self, tx: Tx, key: str, capacity: float, refill_per_second: float, t: float) -> tuple[float, float]:
        """Lock bucket ``key`` (created full if missing): its tokens refilled up to ``t``, and its clock."""
        # Create the bucket full if missing, then lock and update the one row. On
        # PostgreSQL another worker's sweep may delete the (full) bucket between the
        # two statements: the row lock then finds nothing, and the insert is redone.
        row = None
        while row is None:
            tx.execute(
                "INSERT INTO state_bucket (tenant_id, bucket_key, tokens, updated_at, full_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant_id, bucket_key) DO NOTHING",
                (tx.tenant, key, float(capacity), t, t),
            )
            row = tx.fetchone(
                "SELECT tokens, updated_at FROM state_bucket WHERE tenant_id = ? AND bucket_key = ?"
                + self.db.dialect.row_lock,
                (tx.tenant, key),
            )
        stored, updated_at = float(row[0]), float(row[1])
        return min(float(capacity), stored + max(0.0, t - updated_at) * refill_per_second), updated_at

    @staticmethod
    def _store_bucket(tx: Tx, key: str, tokens: float, at: float, capacity: float, refill_per_second: float) -> None:
        tx.execute(
            "UPDATE state_bucket SET tokens = ?, updated_at = ?, full_at = ? WHERE tenant_id = ? AND bucket_key = ?",
            (tokens, at, at + (capacity - tokens) / refill_per_second, tx.tenant, key),
        )

    # -- replay cache ---------------------------------------------------------
    def remember_once(
        self,
        namespace: str,
        key: str,
        expires_at: float | datetime,
        *,
        now: float | datetime | None = None,
    ) -> bool:
        """True the first time ``(namespace, key)`` is seen before ``expires_at``; False on replay.

        An expired entry no longer counts (the token it guarded has expired
        too), and expired entries are swept as we go.
        """
        t = _seconds(now)
        expiry = _seconds(expires_at)
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM state_once WHERE tenant_id = ? AND expires_at <= ?", (tx.tenant, t))
            cur = tx.execute(
                "INSERT INTO state_once (tenant_id, namespace, once_key, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (tenant_id, namespace, once_key) DO NOTHING",
                (tx.tenant, namespace, key, expiry),
            )
            return cur.rowcount == 1

    # -- short-lived values ---------------------------------------------------
    def put_value(self, namespace: str, key: str, value: str, expires_at: float | datetime) -> None:
        """Store ``value`` under ``(namespace, key)`` until ``expires_at`` (overwrites)."""
        expiry = _seconds(expires_at)
        with self.db.transaction() as tx:
            if self._due_sweep():
                tx.execute("DELETE FROM state_value WHERE tenant_id = ? AND expires_at <= ?", (tx.tenant, time.time()))
            tx.execute(
                "INSERT INTO state_value (tenant_id, namespace, value_key, value, expires_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant_id, namespace, value_key) DO UPDATE SET value = excluded.value, "
                "expires_at = excluded.expires_at",
                (tx.tenant, namespace, key, value, expiry),
            )

    def get_value(self, namespace: str, key: str, *, now: float | datetime | None = None) -> str | None:
        """The value stored under ``(namespace, key)``, or None when absent or expired."""
        t = _seconds(now)
        with self.db.read() as tx:
            row = tx.fetchone(
                "SELECT value, expires_at FROM state_value WHERE tenant_id = ? AND namespace = ? AND value_key = ?",
                (tx.tenant, namespace, key),
            )
        if row is None or row[1] <= t:
            return None
        value: str = row[0]
        return value
