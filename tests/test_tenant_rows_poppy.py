"""Tenants' Poppy state in one database: signing keys, Sessions, tokens, single-use values and
feedback sharing every key — one tenant's rows restored from another's backup hold the same
token hashes, Session ids, DPoP key thumbprints, kids and ``jti``s — and no tenant ever sees,
counts, revokes or deletes another's.

Each tenant is a view of one database (``db.for_tenant``); on PostgreSQL the test role is the
cluster's superuser, which row-level security does not bind, so what keeps the tenants apart
here is the stores' own SQL (docs/platform.md, "Isolation").
"""

from __future__ import annotations

import pytest

from aap.store import open_database
from aap.store.db import connect
from aap.store.poppy import PoppyStore, Replayed, SessionConflict, SessionUse, SubjectGone
from aap.store.transfer import copy_agent

LATER = 10_000.0
IDLE = 1_000.0
FEEDBACK = {"kind": "bug", "task": "search", "description": "No results for a Civic."}


def start(store: PoppyStore, client_id: str = "client-1", *, token: str = "tok-dpop", now: float = 100.0):
    return store.start_session(
        jkt="jkt-1",
        client_id=client_id,
        sub="user-1",
        agent_id=None,
        token=token,
        token_type="DPoP",
        resource=None,
        expires_at=LATER,
        idle_ttl=IDLE,
        consumed=[("jti", f"start-{token}", LATER)],
        now=now,
    )


def feedback(store: PoppyStore, now: float) -> str | None:
    return store.add_feedback(
        client_id="client-1",
        sub="user-1",
        agent_id=None,
        body=FEEDBACK,
        answered_with_alternative=False,
        daily_limit=1,
        now=now,
    )


@pytest.fixture
def stores(database_url):
    """Alpha's key, Session, DPoP and Bearer tokens, used jtis and a report; beta a copy; gamma new."""
    db = open_database(database_url)
    alpha = PoppyStore(db.for_tenant("alpha"))
    alpha.add_signing_key("kid-1", {"kty": "OKP", "d": "alpha"}, retire_others=False, now=100.0)
    start(alpha)
    alpha.exchange(
        subject_token="tok-dpop",
        token="tok-bearer",
        resource="https://dealer.example/mcp",
        expires_at=LATER,
        consumed=[("jti", "exchange-1", LATER)],
        now=101.0,
    )
    assert feedback(alpha, 102.0) is not None
    other = connect(database_url)  # a connection of its own: the copy reads one and writes the other
    try:
        with db.for_tenant("alpha").read() as source, other.for_tenant("beta").transaction() as target:
            copy_agent(source, target)
    finally:
        other.close()
    yield alpha, PoppyStore(db.for_tenant("beta")), PoppyStore(db.for_tenant("gamma"))
    db.close()


def test_a_single_use_value_is_used_once_per_tenant(stores):
    alpha, beta, gamma = stores
    with pytest.raises(Replayed):
        beta.use_session(None, [("jti", "exchange-1", LATER)], touch=False, now=200.0)  # its copy
    alpha.use_session(None, [("jti", "fresh", LATER)], touch=False, now=200.0)
    beta.use_session(None, [("jti", "fresh", LATER)], touch=False, now=200.0)
    gamma.use_session(None, [("jti", "exchange-1", LATER)], touch=False, now=200.0)
    with pytest.raises(Replayed):
        alpha.use_session(None, [("jti", "fresh", LATER)], touch=False, now=201.0)
    outcomes = gamma.use_sessions([SessionUse(None, (("jti", "fresh", LATER),))], now=202.0)
    assert outcomes == [None]


def test_a_token_is_revoked_used_and_exchanged_in_its_tenant_only(stores):
    alpha, beta, gamma = stores
    assert gamma.find_token("tok-dpop") is None
    mine, theirs = alpha.find_token("tok-dpop"), beta.find_token("tok-dpop")
    assert mine == theirs and mine.session.id == beta.find_token("tok-bearer").session.id
    alpha.use_session(mine.session.id, [], touch=True, now=300.0)
    assert alpha.find_token("tok-bearer").session.last_used_at == 300.0
    assert beta.find_token("tok-bearer").session.last_used_at == 101.0
    assert not beta.revoke("tok-dpop", "client-2", [], now=400.0)  # not its client's
    assert alpha.revoke("tok-dpop", "client-1", [], now=400.0)
    assert alpha.find_token("tok-dpop").revoked_at == alpha.find_token("tok-bearer").revoked_at == 400.0
    assert beta.find_token("tok-dpop").revoked_at is None and beta.find_token("tok-bearer").revoked_at is None
    with pytest.raises(SubjectGone):
        alpha.exchange(subject_token="tok-dpop", token="tok-2", resource="r", expires_at=LATER, consumed=[], now=401.0)
    beta.exchange(subject_token="tok-dpop", token="tok-2", resource="r", expires_at=LATER, consumed=[], now=401.0)
    assert beta.find_token("tok-2").session.id == mine.session.id
    assert alpha.find_token("tok-2") is None


def test_a_dpop_key_has_a_session_with_each_tenant(stores):
    alpha, beta, gamma = stores
    with pytest.raises(SessionConflict):
        start(beta, "client-2", token="tok-other", now=150.0)  # its copy is client-1's
    start(gamma, "client-2", token="tok-other", now=150.0)
    assert gamma.find_token("tok-other").session.client_id == "client-2"
    renewed = start(beta, token="tok-renewed", now=160.0)  # renews beta's Session: older tokens stop
    assert beta.find_token("tok-dpop").revoked_at == 160.0
    assert alpha.find_token("tok-dpop").revoked_at is None
    assert alpha.find_token("tok-renewed") is None
    assert renewed.id == alpha.find_token("tok-dpop").session.id
    # Purging one tenant's idle Sessions and expired values leaves the others'.
    alpha.purge_expired(IDLE, now=LATER + 1)
    assert alpha.find_token("tok-dpop") is None
    assert beta.find_token("tok-renewed") is not None and gamma.find_token("tok-other") is not None
    alpha.use_session(None, [("jti", "exchange-1", LATER)], touch=False, now=LATER + 2)  # forgotten in alpha
    with pytest.raises(Replayed):
        beta.use_session(None, [("jti", "exchange-1", LATER)], touch=False, now=LATER - 1)


def test_signing_keys_and_feedback_are_each_tenants_own(stores):
    alpha, beta, gamma = stores
    assert [k[0] for k in beta.signing_keys()] == ["kid-1"]
    assert gamma.signing_keys() == []
    assert gamma.add_signing_key("kid-1", {"kty": "OKP", "d": "gamma"}, retire_others=True, only_if_none=True)
    assert not alpha.add_signing_key("kid-2", {"kty": "OKP"}, retire_others=False, only_if_none=True)
    assert alpha.add_signing_key("kid-2", {"kty": "OKP", "d": "alpha-2"}, retire_others=True, now=500.0)
    assert [(k[0], k[3]) for k in alpha.signing_keys()] == [("kid-2", None), ("kid-1", 500.0)]
    assert [(k[0], k[3]) for k in beta.signing_keys()] == [("kid-1", None)]
    assert gamma.signing_keys()[0][1] == {"kty": "OKP", "d": "gamma"}
    beta.add_signing_key("kid-3", {"kty": "OKP"}, retire_others=True, now=600.0)
    assert alpha.drop_retired_keys(older_than=1_000.0) == 1
    assert [k[0] for k in beta.signing_keys()] == ["kid-3", "kid-1"]  # its retired key is its to drop
    # Each tenant's callers have their own daily quota, and see their own reports.
    assert feedback(beta, 103.0) is None  # its copy of alpha's report counts
    assert feedback(gamma, 103.0) is not None
    assert feedback(alpha, 103.0) is None
    assert [r["description"] for r in gamma.list_feedback()] == [FEEDBACK["description"]]
    assert len(alpha.list_feedback()) == len(beta.list_feedback()) == 1


def test_purging_and_revoking_look_at_the_tenants_own_sessions(stores):
    alpha, beta, gamma = stores
    session_id = alpha.find_token("tok-dpop").session.id
    # Alpha's Session is in use; beta's copy of it (the same id) is idle: purging alpha's idle
    # Sessions keeps alpha's tokens.
    alpha.use_session(session_id, [], touch=True, now=2_000.0)
    alpha.purge_expired(IDLE, now=2_500.0)
    assert alpha.find_token("tok-dpop") is not None
    # The same Session id names another client's Session in beta: alpha's is still client-1's.
    with beta.db.transaction() as tx:
        tx.execute("UPDATE poppy_sessions SET client_id = 'client-2' WHERE tenant_id = ?", (tx.tenant,))
    assert not alpha.revoke("tok-dpop", "client-2", [], now=2_600.0)
    assert alpha.find_token("tok-dpop").revoked_at is None
    # Gamma's own Session holds a DPoP token of the same value: revoking it revokes gamma's Bearer.
    start(gamma)
    gamma.exchange(subject_token="tok-dpop", token="tok-g", resource="r", expires_at=LATER, consumed=[], now=101.0)
    assert gamma.find_token("tok-dpop").session.id != session_id
    assert gamma.revoke("tok-dpop", "client-1", [], now=2_700.0)
    assert gamma.find_token("tok-g").revoked_at == 2_700.0
    assert alpha.find_token("tok-bearer").revoked_at is None
