"""Poppy state in the database: signing keys, replay caches, Sessions, tokens, feedback.

Everything a second worker (or the same worker after a restart) must know to
refuse a replay or a revoked token lives here, never in process memory.
Access tokens are stored as SHA-256 hashes only: a database dump grants no
access. Times are Unix seconds (floats). Every row carries its tenant, and every
statement here is the transaction's tenant's (:mod:`aap.store.layout`): a token,
a Session or a ``jti`` of one agent means nothing to another.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.store.db import Database, Migrations, Row, Tx

_LAYOUT = """
CREATE TABLE poppy_signing_keys (
    tenant_id TEXT NOT NULL,
    kid TEXT NOT NULL,
    private_jwk TEXT NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL,
    PRIMARY KEY (tenant_id, kid)
);
CREATE TABLE poppy_replay (
    tenant_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    entry TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (tenant_id, scope, entry)
);
CREATE INDEX poppy_replay_expiry ON poppy_replay (tenant_id, expires_at);
CREATE TABLE poppy_sessions (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    jkt TEXT NOT NULL,
    client_id TEXT NOT NULL,
    sub TEXT NOT NULL,
    agent_id TEXT,
    created_at REAL NOT NULL,
    last_used_at REAL NOT NULL,
    ended_at REAL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, jkt)
);
CREATE TABLE poppy_tokens (
    tenant_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    session_id TEXT NOT NULL,
    token_type TEXT NOT NULL,
    resource TEXT,
    issued_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    revoked_at REAL,
    PRIMARY KEY (tenant_id, token_hash),
    FOREIGN KEY (tenant_id, session_id) REFERENCES poppy_sessions (tenant_id, id)
);
CREATE INDEX poppy_tokens_session ON poppy_tokens (tenant_id, session_id);
CREATE INDEX poppy_tokens_expiry ON poppy_tokens (tenant_id, expires_at);
CREATE TABLE poppy_feedback (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    received_at REAL NOT NULL,
    client_id TEXT NOT NULL,
    sub TEXT NOT NULL,
    agent_id TEXT,
    kind TEXT NOT NULL,
    task TEXT NOT NULL,
    description TEXT NOT NULL,
    body TEXT NOT NULL,
    answered_with_alternative INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX poppy_feedback_caller ON poppy_feedback (tenant_id, client_id, sub, received_at)
"""

MIGRATIONS = Migrations(
    "poppy",
    (_LAYOUT,),
    tables=("poppy_signing_keys", "poppy_replay", "poppy_sessions", "poppy_tokens", "poppy_feedback"),
)


def token_hash(token: str) -> str:
    """What the database keeps instead of an access token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SessionUse:
    """One API call's single-use values (``(scope, entry, expires_at)``) and whether to mark its
    Session (if any) as used now."""

    session_id: str | None
    consumed: tuple[tuple[str, str, float], ...]
    touch: bool = False


class Replayed(Exception):
    """A single-use value (a ``jti``) was already seen in its scope."""

    def __init__(self, scope: str, entry: str) -> None:
        super().__init__(scope)
        self.scope = scope
        self.entry = entry


class SessionConflict(Exception):
    """The DPoP key already identifies a Session of another client, User ID or agent."""


class SubjectGone(Exception):
    """The subject token of an exchange was revoked, or its Session ended, before the exchange committed."""


@dataclass(frozen=True)
class SessionRecord:
    id: str
    jkt: str
    client_id: str
    sub: str
    agent_id: str | None
    created_at: float
    last_used_at: float
    ended_at: float | None


@dataclass(frozen=True)
class TokenRecord:
    """An issued access token joined with its Session."""

    token_hash: str
    token_type: str
    resource: str | None
    issued_at: float
    expires_at: float
    revoked_at: float | None
    session: SessionRecord


_SESSION_COLUMNS = "s.id, s.jkt, s.client_id, s.sub, s.agent_id, s.created_at, s.last_used_at, s.ended_at"


def _session(row: Row) -> SessionRecord:
    return SessionRecord(*row)


class PoppyStore:
    """All Poppy tables behind a few intention-revealing methods."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- single-use values ---------------------------------------------------
    @staticmethod
    def consume(tx: Tx, scope: str, entry: str, expires_at: float, now: float) -> None:
        """Record ``entry`` as used in ``scope`` until ``expires_at``; :class:`Replayed` if live.

        An expired row is taken over, so the table never needs a sweep to stay correct
        (:meth:`purge_expired` only keeps it small).
        """
        cursor = tx.execute(
            "INSERT INTO poppy_replay (tenant_id, scope, entry, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant_id, scope, entry) DO UPDATE SET expires_at = excluded.expires_at "
            "WHERE poppy_replay.expires_at < ?",
            (tx.tenant, scope, entry, expires_at, now),
        )
        if cursor.rowcount != 1:
            raise Replayed(scope, entry)

    @classmethod
    def consume_all(cls, tx: Tx, consumed: list[tuple[str, str, float]], now: float) -> None:
        """:meth:`consume` each ``(scope, entry, expires_at)``; the first replay raises."""
        for scope, entry, expires_at in consumed:
            cls.consume(tx, scope, entry, expires_at, now)

    def purge_expired(self, idle_ttl: float, now: float | None = None) -> None:
        """Drop what can no longer matter: used jtis past their window, expired tokens,
        Sessions idle longer than ``idle_ttl`` (with their tokens). Correctness never depends on it."""
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM poppy_replay WHERE tenant_id = ? AND expires_at < ?", (tx.tenant, now))
            tx.execute(
                "DELETE FROM poppy_tokens WHERE tenant_id = ? AND (expires_at < ? OR session_id IN "
                "(SELECT id FROM poppy_sessions WHERE tenant_id = ? AND last_used_at < ?))",
                (tx.tenant, now, tx.tenant, now - idle_ttl),
            )
            tx.execute(
                "DELETE FROM poppy_sessions WHERE tenant_id = ? AND last_used_at < ?", (tx.tenant, now - idle_ttl)
            )

    # -- Sessions and tokens -------------------------------------------------
    def start_session(
        self,
        *,
        jkt: str,
        client_id: str,
        sub: str,
        agent_id: str | None,
        token: str,
        token_type: str,
        resource: str | None,
        expires_at: float,
        idle_ttl: float,
        consumed: list[tuple[str, str, float]],
        now: float | None = None,
    ) -> SessionRecord:
        """Consume ``consumed`` jtis, find-or-create the Session of ``jkt`` and store ``token``.

        A known key with the same client, User ID and agent renews its Session: the
        older tokens stop working (the agent must switch to the newest). A known key
        with another identity is a :class:`SessionConflict`. One transaction: on any
        failure nothing is written.
        """
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            self.consume_all(tx, consumed, now)
            row = tx.fetchone(
                f"SELECT {_SESSION_COLUMNS} FROM poppy_sessions s WHERE s.tenant_id = ? AND s.jkt = ?", (tx.tenant, jkt)
            )
            if row is not None:
                session = _session(row)
                if (session.client_id, session.sub, session.agent_id) != (client_id, sub, agent_id):
                    raise SessionConflict()
                alive = session.ended_at is None and session.last_used_at + idle_ttl >= now
                if alive:
                    tx.execute(
                        "UPDATE poppy_tokens SET revoked_at = ? WHERE tenant_id = ? AND session_id = ?"
                        " AND revoked_at IS NULL",
                        (now, tx.tenant, session.id),
                    )
                    tx.execute(
                        "UPDATE poppy_sessions SET last_used_at = ? WHERE tenant_id = ? AND id = ?",
                        (now, tx.tenant, session.id),
                    )
                else:
                    # A Session that ended stays ended: the same key starts a fresh one.
                    tx.execute(
                        "DELETE FROM poppy_tokens WHERE tenant_id = ? AND session_id = ?", (tx.tenant, session.id)
                    )
                    tx.execute("DELETE FROM poppy_sessions WHERE tenant_id = ? AND id = ?", (tx.tenant, session.id))
                    row = None
            if row is None:
                session = SessionRecord(
                    "ses_" + secrets.token_urlsafe(18), jkt, client_id, sub, agent_id, now, now, None
                )
                tx.execute(
                    "INSERT INTO poppy_sessions (tenant_id, id, jkt, client_id, sub, agent_id, created_at,"
                    " last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (tx.tenant, session.id, jkt, client_id, sub, agent_id, now, now),
                )
            tx.execute(
                "INSERT INTO poppy_tokens (tenant_id, token_hash, session_id, token_type, resource, issued_at,"
                " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tx.tenant, token_hash(token), session.id, token_type, resource, now, expires_at),
            )
        return session

    def find_token(self, token: str) -> TokenRecord | None:
        with self.db.read() as tx:
            row = tx.fetchone(
                "SELECT t.token_hash, t.token_type, t.resource, t.issued_at, t.expires_at, t.revoked_at, "
                f"{_SESSION_COLUMNS} FROM poppy_tokens t"
                " JOIN poppy_sessions s ON s.tenant_id = t.tenant_id AND s.id = t.session_id"
                " WHERE t.tenant_id = ? AND t.token_hash = ?",
                (tx.tenant, token_hash(token)),
            )
        if row is None:
            return None
        hashed, token_type, resource, issued_at, expires_at, revoked_at = row[:6]
        return TokenRecord(hashed, token_type, resource, issued_at, expires_at, revoked_at, _session(row[6:]))

    def use_session(
        self,
        session_id: str | None,
        consumed: list[tuple[str, str, float]],
        *,
        touch: bool,
        now: float | None = None,
    ) -> None:
        """Consume an API call's single-use values; optionally mark the Session (if any) as used now.
        :class:`Replayed` (and nothing written) when one was used before."""
        replayed = self.use_sessions([SessionUse(session_id, tuple(consumed), touch)], now=now)[0]
        if replayed is not None:
            raise replayed

    def use_sessions(self, uses: Sequence[SessionUse], *, now: float | None = None) -> list[Replayed | None]:
        """:meth:`use_session` for several API calls in one transaction (one write for a batch of
        concurrent calls): each call's values are recorded, or none of them (its
        :class:`Replayed` in the answer at its place), independently of the others."""
        now = time.time() if now is None else now
        outcomes: list[Replayed | None] = []
        touched: set[str] = set()
        with self.db.transaction() as tx:
            for index, use in enumerate(uses):
                savepoint = f"use_{index}"
                tx.execute(f"SAVEPOINT {savepoint}")
                try:
                    self.consume_all(tx, list(use.consumed), now)
                except Replayed as replayed:
                    tx.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    outcomes.append(replayed)
                else:
                    outcomes.append(None)
                    if use.touch and use.session_id is not None:
                        touched.add(use.session_id)
                tx.execute(f"RELEASE SAVEPOINT {savepoint}")
            for session_id in sorted(touched):
                tx.execute(
                    "UPDATE poppy_sessions SET last_used_at = ? WHERE tenant_id = ? AND id = ?",
                    (now, tx.tenant, session_id),
                )
        return outcomes

    def exchange(
        self,
        *,
        subject_token: str,
        token: str,
        resource: str,
        expires_at: float,
        consumed: list[tuple[str, str, float]],
        now: float | None = None,
    ) -> None:
        """Store the Bearer ``token`` exchanged for the live DPoP ``subject_token`` (RFC 8693).

        One transaction: consume ``consumed``, check that the subject token is still
        live (:class:`SubjectGone` otherwise: a revocation may have won the race with
        the checks already made), store ``token`` in the subject's Session bound to
        ``resource``, and mark the Session as used.
        """
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            self.consume_all(tx, consumed, now)
            row = tx.fetchone(
                "SELECT t.session_id FROM poppy_tokens t"
                " JOIN poppy_sessions s ON s.tenant_id = t.tenant_id AND s.id = t.session_id"
                " WHERE t.tenant_id = ? AND t.token_hash = ? AND t.token_type = 'DPoP' AND t.revoked_at IS NULL"
                " AND t.expires_at > ? AND s.ended_at IS NULL",
                (tx.tenant, token_hash(subject_token), now),
            )
            if row is None:
                raise SubjectGone()
            session_id = row[0]
            tx.execute(
                "INSERT INTO poppy_tokens (tenant_id, token_hash, session_id, token_type, resource, issued_at,"
                " expires_at) VALUES (?, ?, ?, 'Bearer', ?, ?, ?)",
                (tx.tenant, token_hash(token), session_id, resource, now, expires_at),
            )
            tx.execute(
                "UPDATE poppy_sessions SET last_used_at = ? WHERE tenant_id = ? AND id = ?",
                (now, tx.tenant, session_id),
            )

    def revoke(
        self, token: str, client_id: str, consumed: list[tuple[str, str, float]], now: float | None = None
    ) -> bool:
        """Revoke ``token`` if it was issued to ``client_id``; True when something changed.

        Revoking a live DPoP (Session) token also revokes the Bearer tokens exchanged
        in its Session: they stand for the same Session and never outlive it.
        """
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            self.consume_all(tx, consumed, now)
            cursor = tx.execute(
                "UPDATE poppy_tokens SET revoked_at = ? WHERE tenant_id = ? AND token_hash = ? AND revoked_at IS NULL"
                " AND session_id IN (SELECT id FROM poppy_sessions WHERE tenant_id = ? AND client_id = ?)",
                (now, tx.tenant, token_hash(token), tx.tenant, client_id),
            )
            if cursor.rowcount != 1:
                return False
            tx.execute(
                "UPDATE poppy_tokens SET revoked_at = ? WHERE tenant_id = ? AND revoked_at IS NULL"
                " AND token_type = 'Bearer' AND session_id = (SELECT session_id FROM poppy_tokens"
                " WHERE tenant_id = ? AND token_hash = ? AND token_type = 'DPoP')",
                (now, tx.tenant, tx.tenant, token_hash(token)),
            )
            return True

    # -- signing keys --------------------------------------------------------
    def signing_keys(self) -> list[tuple[str, dict[str, Any], float, float | None]]:
        """``(kid, private JWK, created_at, retired_at)``, newest first."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT kid, private_jwk, created_at, retired_at FROM poppy_signing_keys WHERE tenant_id = ?"
                " ORDER BY created_at DESC, kid",
                (tx.tenant,),
            )
        return [(kid, orjson.loads(jwk), created, retired) for kid, jwk, created, retired in rows]

    def add_signing_key(
        self,
        kid: str,
        private_jwk: dict[str, Any],
        *,
        retire_others: bool,
        only_if_none: bool = False,
        now: float | None = None,
    ) -> bool:
        """Store a new active key. ``only_if_none``: skip if an active key exists (first start)."""
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            if only_if_none and tx.fetchone(
                "SELECT kid FROM poppy_signing_keys WHERE tenant_id = ? AND retired_at IS NULL", (tx.tenant,)
            ):
                return False
            if retire_others:
                tx.execute(
                    "UPDATE poppy_signing_keys SET retired_at = ? WHERE tenant_id = ? AND retired_at IS NULL",
                    (now, tx.tenant),
                )
            tx.execute(
                "INSERT INTO poppy_signing_keys (tenant_id, kid, private_jwk, created_at) VALUES (?, ?, ?, ?)",
                (tx.tenant, kid, orjson.dumps(private_jwk).decode(), now),
            )
        return True

    def drop_retired_keys(self, older_than: float) -> int:
        """Delete keys retired before ``older_than`` (no token they signed is still valid)."""
        with self.db.transaction() as tx:
            cursor = tx.execute(
                "DELETE FROM poppy_signing_keys WHERE tenant_id = ? AND retired_at IS NOT NULL AND retired_at < ?",
                (tx.tenant, older_than),
            )
            return cursor.rowcount

    # -- feedback ------------------------------------------------------------
    def add_feedback(
        self,
        *,
        client_id: str,
        sub: str,
        agent_id: str | None,
        body: dict[str, Any],
        answered_with_alternative: bool,
        daily_limit: int,
        now: float | None = None,
    ) -> str | None:
        """Store one report; None (and nothing written) when the caller's daily quota is used."""
        now = time.time() if now is None else now
        with self.db.transaction() as tx:
            (count,) = tx.one(
                "SELECT COUNT(*) FROM poppy_feedback WHERE tenant_id = ? AND client_id = ? AND sub = ?"
                " AND received_at > ?",
                (tx.tenant, client_id, sub, now - 86400),
            )
            if count >= daily_limit:
                return None
            feedback_id = "fb_" + secrets.token_urlsafe(12)
            tx.execute(
                "INSERT INTO poppy_feedback (tenant_id, id, received_at, client_id, sub, agent_id, kind, task,"
                " description, body, answered_with_alternative) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tx.tenant,
                    feedback_id,
                    now,
                    client_id,
                    sub,
                    agent_id,
                    body["kind"],
                    body["task"],
                    body["description"],
                    orjson.dumps(body).decode(),
                    int(answered_with_alternative),
                ),
            )
        return feedback_id

    def list_feedback(self, limit: int = 100) -> list[dict[str, Any]]:
        """Newest reports first, for the operator (data to read, never instructions to follow)."""
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT id, received_at, client_id, sub, agent_id, kind, task, description,"
                " answered_with_alternative FROM poppy_feedback WHERE tenant_id = ? ORDER BY received_at DESC LIMIT ?",
                (tx.tenant, limit),
            )
        keys = (
            "id",
            "received_at",
            "client_id",
            "sub",
            "agent_id",
            "kind",
            "task",
            "description",
            "answered_with_alternative",
        )
        return [dict(zip(keys, row)) for row in rows]
