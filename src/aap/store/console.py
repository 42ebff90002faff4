"""The staff console's state: accounts, sessions, sign-in throttling, the audit log, check runs.

All of it lives in the deployment's database, so every worker process (and
every server on one PostgreSQL database) agrees on who is signed in, who is
held back from signing in and what was looked at. Each row carries its tenant
and every statement is the transaction's tenant's (:mod:`aap.store.layout`): one
e-mail may have an account with two agents of a platform, and they never meet.

``console_users``      one row per staff account: e-mail (casefolded), argon2
                       hash, role, and the seller and rooftops it is limited to
``console_sessions``   a session by the SHA-256 of its token (a stolen
                       database copy holds no usable cookie), its CSRF token,
                       when it started and was last used
``console_throttle``   sign-in attempts counted per account, address, known
                       browser and session (the rules: :mod:`aap.accounts`)
``console_audit``      who viewed, exported or changed what, and when
``console_checks``     the conformance runs started from the console, and their reports

The rules (password hashing, timeouts, limits) are :mod:`aap.accounts`'s;
this module only stores.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.store.db import Database, Migrations, Tx, tenant_where

_LAYOUT = """
CREATE TABLE console_users (
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    email TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL,
    dealer_id TEXT,
    rooftops TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    password_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, user_id),
    UNIQUE (tenant_id, email)
);
CREATE TABLE console_sessions (
    tenant_id TEXT NOT NULL,
    session_hash TEXT NOT NULL,
    user_id TEXT NOT NULL,
    csrf_token TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL,
    user_agent TEXT,
    PRIMARY KEY (tenant_id, session_hash),
    FOREIGN KEY (tenant_id, user_id) REFERENCES console_users (tenant_id, user_id) ON DELETE CASCADE
);
CREATE INDEX console_sessions_user ON console_sessions (tenant_id, user_id);
CREATE INDEX console_sessions_seen ON console_sessions (tenant_id, seen_ms);
CREATE TABLE console_throttle (
    tenant_id TEXT NOT NULL,
    throttle_key TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, throttle_key)
);
CREATE INDEX console_throttle_last ON console_throttle (tenant_id, last_ms);
CREATE TABLE console_audit (
    tenant_id TEXT NOT NULL,
    audit_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT,
    detail TEXT NOT NULL,
    PRIMARY KEY (tenant_id, audit_id)
);
CREATE INDEX console_audit_at ON console_audit (tenant_id, at_ms, audit_id);
CREATE INDEX console_audit_subject ON console_audit (tenant_id, subject, at_ms, audit_id);
CREATE TABLE console_checks (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    started_by TEXT NOT NULL,
    target TEXT NOT NULL,
    state TEXT NOT NULL,
    report TEXT,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE INDEX console_checks_started ON console_checks (tenant_id, started_ms)
"""

# Sign-in throttling counts attempts *before* the password is hashed (aap.accounts): one row per
# key with the attempts counted and the time of the last. Sessions keep the browser's name for
# the account page.

MIGRATIONS = Migrations(
    "console",
    (_LAYOUT,),
    tables=("console_users", "console_sessions", "console_throttle", "console_audit", "console_checks"),
)

ROLES = ("admin", "staff")


#: A rooftop of a staff scope: ``(seller, rooftop name)``; the seller is None where the deployment
#: has one dealer (and for an account stored before scopes named sellers: :mod:`aap.accounts`
#: resolves it).
ScopeRooftop = tuple[str | None, str]


@dataclass(frozen=True)
class User:
    """A staff account (the password hash stays in the store but for :meth:`ConsoleStore.password_hash`)."""

    user_id: str
    email: str
    role: str
    dealer_id: str | None
    rooftops: tuple[ScopeRooftop, ...]
    created_ms: int
    password_ms: int


@dataclass(frozen=True)
class Session:
    """A live session row with its user."""

    session_hash: str
    user: User
    csrf_token: str
    created_ms: int
    seen_ms: int
    user_agent: str | None = None

    @property
    def public_id(self) -> str:
        """What the account page names a session by (a prefix of the hash, never the token)."""
        return self.session_hash[:16]


@dataclass(frozen=True)
class ThrottleRow:
    """Attempts counted under one key, and when the last one was."""

    attempts: int
    last_ms: int


def write_audit(tx: Tx, actor: str, action: str, subject: str | None, detail: dict[str, Any], now_ms: int) -> None:
    """One audit row of ``tx``'s tenant, in ``tx`` (a change and its audit row are one write)."""
    tx.execute(
        "INSERT INTO console_audit (tenant_id, audit_id, at_ms, actor, action, subject, detail)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (tx.tenant, audit_id(), now_ms, actor, action, subject, orjson.dumps(detail).decode()),
    )


def audit_id() -> str:
    """A new row's id, in the order rows are written: the log lists rows of one millisecond by
    it (newest first), so it leads with the clock in nanoseconds (fixed width, so that text
    order is time order) and ends with random bits that keep two writers' ids apart."""
    return f"aud_{time.time_ns():016x}{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class AuditEntry:
    at_ms: int
    actor: str
    action: str
    subject: str | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class CheckRun:
    run_id: str
    started_ms: int
    finished_ms: int | None
    started_by: str
    target: str
    state: str  # running, done, failed, timeout
    report: dict[str, Any] | None


_USER_COLUMNS = "u.user_id, u.email, u.role, u.dealer_id, u.rooftops, u.created_ms, u.password_ms"


def _rooftops(text: str, dealer_id: str | None) -> tuple[ScopeRooftop, ...]:
    """The stored rooftops: ``[seller, name]`` pairs, or (accounts made before) bare names, which
    belong to the account's seller when it has one."""
    out: list[ScopeRooftop] = []
    for entry in orjson.loads(text):
        if isinstance(entry, str):
            out.append((dealer_id, entry))
        else:
            out.append((entry[0], entry[1]))
    return tuple(out)


def _user(row: tuple[Any, ...]) -> User:
    return User(row[0], row[1], row[2], row[3], _rooftops(row[4], row[3]), int(row[5]), int(row[6]))


class ConsoleStore:
    """Accounts, sessions, throttling, audit log and check runs."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- accounts --------------------------------------------------------------------
    def add_user(
        self,
        email: str,
        password_hash: str,
        role: str,
        dealer_id: str | None,
        rooftops: tuple[ScopeRooftop, ...],
        now_ms: int,
    ) -> User | None:
        """A new account; None when the e-mail is taken."""
        user_id = "usr_" + uuid.uuid4().hex[:20]
        with self.db.transaction() as tx:
            inserted = tx.execute(
                "INSERT INTO console_users (tenant_id, user_id, email, password_hash, role, dealer_id, rooftops,"
                " created_ms, password_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, email) DO NOTHING",
                (
                    tx.tenant,
                    user_id,
                    email,
                    password_hash,
                    role,
                    dealer_id,
                    orjson.dumps([list(pair) for pair in rooftops]).decode(),
                    now_ms,
                    now_ms,
                ),
            ).rowcount
        if inserted != 1:
            return None
        return User(user_id, email, role, dealer_id, rooftops, now_ms, now_ms)

    def user_by_email(self, email: str) -> User | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT {_USER_COLUMNS} FROM console_users u WHERE u.tenant_id = ? AND u.email = ?", (tx.tenant, email)
            )
        return _user(row) if row else None

    def password_hash(self, user_id: str) -> str | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                "SELECT password_hash FROM console_users WHERE tenant_id = ? AND user_id = ?", (tx.tenant, user_id)
            )
        return str(row[0]) if row else None

    def users(self) -> list[User]:
        with self.db.read() as tx:
            rows = tx.fetchall(
                f"SELECT {_USER_COLUMNS} FROM console_users u WHERE u.tenant_id = ? ORDER BY u.email", (tx.tenant,)
            )
        return [_user(r) for r in rows]

    def set_password(
        self, user_id: str, password_hash: str, now_ms: int, *, end_sessions: bool = True, keep: str | None = None
    ) -> bool:
        """Replace the hash; ``end_sessions`` signs the account out everywhere (a reset, not a
        rehash) but the session ``keep`` (its hash: the one changing its own password)."""
        with self.db.transaction() as tx:
            changed = (
                tx.execute(
                    "UPDATE console_users SET password_hash = ?, password_ms = ? WHERE tenant_id = ? AND user_id = ?",
                    (password_hash, now_ms, tx.tenant, user_id),
                ).rowcount
                == 1
            )
            if changed and end_sessions:
                tx.execute(
                    "DELETE FROM console_sessions WHERE tenant_id = ? AND user_id = ? AND session_hash <> ?",
                    (tx.tenant, user_id, keep or ""),
                )
        return changed

    def remove_user(self, user_id: str) -> bool:
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM console_sessions WHERE tenant_id = ? AND user_id = ?", (tx.tenant, user_id))
            return (
                tx.execute(
                    "DELETE FROM console_users WHERE tenant_id = ? AND user_id = ?", (tx.tenant, user_id)
                ).rowcount
                == 1
            )

    def count_admins(self) -> int:
        with self.db.read() as tx:
            return int(
                tx.one("SELECT COUNT(*) FROM console_users WHERE tenant_id = ? AND role = 'admin'", (tx.tenant,))[0]
            )

    # -- sessions ----------------------------------------------------------------------
    def add_session(
        self, session_hash: str, user_id: str, csrf_token: str, now_ms: int, user_agent: str | None = None
    ) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO console_sessions (tenant_id, session_hash, user_id, csrf_token, created_ms, seen_ms,"
                " user_agent) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tx.tenant, session_hash, user_id, csrf_token, now_ms, now_ms, user_agent),
            )

    def session(self, session_hash: str) -> Session | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                f"SELECT s.session_hash, s.csrf_token, s.created_ms, s.seen_ms, s.user_agent, {_USER_COLUMNS}"
                " FROM console_sessions s JOIN console_users u ON u.tenant_id = s.tenant_id AND u.user_id = s.user_id"
                " WHERE s.tenant_id = ? AND s.session_hash = ?",
                (tx.tenant, session_hash),
            )
        if row is None:
            return None
        return Session(row[0], _user(row[5:]), row[1], int(row[2]), int(row[3]), row[4])

    def sessions_of(self, user: User) -> list[Session]:
        """Every stored session of ``user`` (live or not yet purged), newest use first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT session_hash, csrf_token, created_ms, seen_ms, user_agent FROM console_sessions"
                " WHERE tenant_id = ? AND user_id = ? ORDER BY seen_ms DESC, session_hash",
                (tx.tenant, user.user_id),
            )
        return [Session(r[0], user, r[1], int(r[2]), int(r[3]), r[4]) for r in rows]

    def touch_session(self, session_hash: str, now_ms: int) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE console_sessions SET seen_ms = ? WHERE tenant_id = ? AND session_hash = ?",
                (now_ms, tx.tenant, session_hash),
            )

    def end_session(self, session_hash: str) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "DELETE FROM console_sessions WHERE tenant_id = ? AND session_hash = ?", (tx.tenant, session_hash)
            )

    def end_sessions(self, user_id: str, *, keep: str | None = None) -> int:
        """End every session of the account but ``keep`` (a session hash); how many ended."""
        with self.db.transaction() as tx:
            return tx.execute(
                "DELETE FROM console_sessions WHERE tenant_id = ? AND user_id = ? AND session_hash <> ?",
                (tx.tenant, user_id, keep or ""),
            ).rowcount

    def purge_sessions(self, idle_before_ms: int, created_before_ms: int) -> int:
        """Forget sessions idle since ``idle_before_ms`` or started before ``created_before_ms``."""
        with self.db.transaction() as tx:
            return tx.execute(
                "DELETE FROM console_sessions WHERE tenant_id = ? AND (seen_ms < ? OR created_ms < ?)",
                (tx.tenant, idle_before_ms, created_before_ms),
            ).rowcount

    # -- sign-in throttling ----------------------------------------------------------------
    def reserve(
        self,
        keys: Sequence[str],
        now_ms: int,
        forget_before_ms: int,
        wait_ms: Callable[[str, int, int], int],
    ) -> int:
        """Count one attempt under every key at once, unless one of them must wait.

        ``wait_ms(key, attempts, last_ms)`` says how long the key must still wait (0: not at all);
        attempts whose last one is older than ``forget_before_ms`` count from 0 again. Returns 0
        when the attempt was counted, else the longest wait (nothing is counted then). One write
        transaction with the rows locked (PostgreSQL ``FOR UPDATE``; SQLite takes the write lock
        up front), so attempts raced on several workers are counted one after the other: of 30
        at once, exactly as many as the rules allow get through.
        """
        ordered = sorted(set(keys))  # one lock order: no deadlock between two attempts
        with self.db.transaction() as tx:
            tx.executemany(
                "INSERT INTO console_throttle (tenant_id, throttle_key, attempts, last_ms) VALUES (?, ?, 0, ?)"
                " ON CONFLICT (tenant_id, throttle_key) DO NOTHING",
                [(tx.tenant, key, now_ms) for key in ordered],
            )
            counted: dict[str, int] = {}
            longest = 0
            for key in ordered:
                attempts, last_ms = tx.one(
                    "SELECT attempts, last_ms FROM console_throttle WHERE tenant_id = ? AND throttle_key = ?"
                    + self.db.dialect.row_lock,
                    (tx.tenant, key),
                )
                attempts = 0 if int(last_ms) < forget_before_ms else int(attempts)
                counted[key] = attempts
                longest = max(longest, wait_ms(key, attempts, int(last_ms)))
            if longest > 0:
                return longest
            tx.executemany(
                "UPDATE console_throttle SET attempts = ?, last_ms = ? WHERE tenant_id = ? AND throttle_key = ?",
                [(counted[key] + 1, now_ms, tx.tenant, key) for key in ordered],
            )
        return 0

    def refund(self, keys: Sequence[str]) -> None:
        """Take back one counted attempt of each key (a success, or one never checked)."""
        with self.db.transaction() as tx:
            tx.executemany(
                "UPDATE console_throttle SET attempts = attempts - 1 WHERE tenant_id = ? AND throttle_key = ?"
                " AND attempts > 0",
                [(tx.tenant, key) for key in sorted(set(keys))],
            )

    def clear_throttle(self, keys: Sequence[str]) -> int:
        """Forget every attempt counted under ``keys``; how many keys had any."""
        with self.db.transaction() as tx:
            return sum(
                tx.execute(
                    "DELETE FROM console_throttle WHERE tenant_id = ? AND throttle_key = ? AND attempts > 0",
                    (tx.tenant, key),
                ).rowcount
                for key in sorted(set(keys))
            )

    def throttle(self, keys: Sequence[str]) -> dict[str, ThrottleRow]:
        """What is counted under ``keys`` (keys with nothing counted are left out)."""
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT throttle_key, attempts, last_ms FROM console_throttle"
                f" WHERE tenant_id = ? AND throttle_key IN ({marks}) AND attempts > 0",
                (tx.tenant, *keys),
            )
        return {r[0]: ThrottleRow(int(r[1]), int(r[2])) for r in rows}

    def purge_throttle(self, before_ms: int) -> int:
        """Forget the keys whose last attempt was before ``before_ms``."""
        with self.db.transaction() as tx:
            return tx.execute(
                "DELETE FROM console_throttle WHERE tenant_id = ? AND last_ms < ?", (tx.tenant, before_ms)
            ).rowcount

    # -- the audit log ---------------------------------------------------------------------
    def audit(self, actor: str, action: str, subject: str | None, detail: dict[str, Any], now_ms: int) -> None:
        with self.db.transaction() as tx:
            write_audit(tx, actor, action, subject, detail, now_ms)

    def audit_entries(
        self, *, subject: str | None = None, before_ms: int | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Newest first; ``subject`` limits them to one lead (or account)."""
        with self.db.read() as tx:
            where, params = tenant_where(tx.tenant, ("subject = ?", subject), ("at_ms < ?", before_ms))
            rows = tx.fetchall(
                f"SELECT at_ms, actor, action, subject, detail FROM console_audit {where}"
                f" ORDER BY at_ms DESC, audit_id DESC LIMIT {int(limit)}",
                params,
            )
        return [AuditEntry(int(r[0]), r[1], r[2], r[3], orjson.loads(r[4])) for r in rows]

    # -- conformance runs ------------------------------------------------------------------
    def start_check(self, started_by: str, target: str, now_ms: int, stale_before_ms: int) -> str | None:
        """A new run, unless one started after ``stale_before_ms`` is still running (None then).

        Runs left ``running`` by a worker that died are marked ``failed`` first.
        """
        run_id = "chk_" + uuid.uuid4().hex[:20]
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE console_checks SET state = 'failed', finished_ms = ? WHERE tenant_id = ? AND state = 'running'"
                " AND started_ms < ?",
                (now_ms, tx.tenant, stale_before_ms),
            )
            if tx.one("SELECT COUNT(*) FROM console_checks WHERE tenant_id = ? AND state = 'running'", (tx.tenant,))[0]:
                return None
            tx.execute(
                "INSERT INTO console_checks (tenant_id, run_id, started_ms, started_by, target, state)"
                " VALUES (?, ?, ?, ?, ?, 'running')",
                (tx.tenant, run_id, now_ms, started_by, target),
            )
        return run_id

    def finish_check(self, run_id: str, state: str, report: dict[str, Any] | None, now_ms: int) -> None:
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE console_checks SET state = ?, report = ?, finished_ms = ? WHERE tenant_id = ? AND run_id = ?",
                (state, None if report is None else orjson.dumps(report).decode(), now_ms, tx.tenant, run_id),
            )

    def latest_check(self) -> CheckRun | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                "SELECT run_id, started_ms, finished_ms, started_by, target, state, report"
                " FROM console_checks WHERE tenant_id = ? ORDER BY started_ms DESC, run_id DESC LIMIT 1",
                (tx.tenant,),
            )
        if row is None:
            return None
        return CheckRun(
            row[0],
            int(row[1]),
            None if row[2] is None else int(row[2]),
            row[3],
            row[4],
            row[5],
            None if row[6] is None else orjson.loads(row[6]),
        )
