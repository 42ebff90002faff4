"""Two tenants' console state in one database, sharing every key — one tenant's rows restored
from the other's backup (``aap db restore``) hold the same user ids, e-mails, session hashes,
throttle keys and check run ids — and neither ever sees, counts, changes or deletes the
other's rows.

Each tenant is a view of one database (``db.for_tenant``); on PostgreSQL the test role is the
cluster's superuser, which row-level security does not bind, so what keeps the tenants apart
here is the stores' own SQL (docs/platform.md, "Isolation").
"""

from __future__ import annotations

import pytest

from aap.store import open_database
from aap.store.console import ConsoleStore, User
from aap.store.db import connect
from aap.store.transfer import copy_agent

EMAIL = "owner@dealer.example"
SESSION = "session-hash-shared"
KEYS = ("account:owner@dealer.example", "address:127.0.0.1")


def no_wait(_key: str, _attempts: int, _last: int) -> int:
    return 0


@pytest.fixture
def stores(database_url):
    """Alpha's account, session, attempts, audit entry and check run; beta a copy of them all."""
    db = open_database(database_url)
    alpha = ConsoleStore(db.for_tenant("alpha"))
    user = alpha.add_user(EMAIL, "hash-alpha", "admin", None, (), 1_000)
    assert user is not None
    alpha.add_session(SESSION, user.user_id, "csrf", 1_000, "Firefox")
    assert alpha.reserve(KEYS, 1_000, 0, no_wait) == 0
    alpha.audit(EMAIL, "lead.view", "lead_shared", {}, 1_000)
    assert alpha.start_check(EMAIL, "https://dealer.example", 1_000, stale_before_ms=0) is not None
    other = connect(database_url)  # a connection of its own: the copy reads one and writes the other
    try:
        with db.for_tenant("alpha").read() as source, other.for_tenant("beta").transaction() as target:
            copy_agent(source, target)
    finally:
        other.close()
    yield alpha, ConsoleStore(db.for_tenant("beta")), user
    db.close()


def test_one_account_restored_into_another_tenant_is_two_accounts(stores):
    alpha, beta, user = stores
    assert beta.user_by_email(EMAIL) == alpha.user_by_email(EMAIL) == user
    assert alpha.add_user(EMAIL, "again", "staff", None, (), 2_000) is None  # taken, in alpha
    assert beta.set_password(user.user_id, "hash-beta", 3_000, end_sessions=False)
    assert (alpha.password_hash(user.user_id), beta.password_hash(user.user_id)) == ("hash-alpha", "hash-beta")
    assert (alpha.user_by_email(EMAIL).password_ms, beta.user_by_email(EMAIL).password_ms) == (1_000, 3_000)
    assert (alpha.session(SESSION).user.password_ms, beta.session(SESSION).user.password_ms) == (1_000, 3_000)
    assert [u.user_id for u in alpha.users()] == [user.user_id]
    assert (alpha.count_admins(), beta.count_admins()) == (1, 1)
    assert beta.remove_user(user.user_id)
    assert (alpha.count_admins(), beta.count_admins()) == (1, 0)
    assert alpha.user_by_email(EMAIL) == user and alpha.session(SESSION) is not None  # its session too
    assert beta.users() == [] and beta.session(SESSION) is None


def test_a_session_hash_is_each_tenants_own(stores):
    alpha, beta, user = stores
    assert alpha.session(SESSION).user == beta.session(SESSION).user == user
    assert beta.purge_sessions(idle_before_ms=2_000, created_before_ms=0) == 1  # beta's, idle since 1 000
    assert beta.session(SESSION) is None and alpha.session(SESSION) is not None
    beta.add_session(SESSION, user.user_id, "csrf-beta", 2_000, "Chromium")
    alpha.touch_session(SESSION, 5_000)
    assert (alpha.session(SESSION).seen_ms, beta.session(SESSION).seen_ms) == (5_000, 2_000)
    assert [s.user_agent for s in beta.sessions_of(user)] == ["Chromium"]
    assert [s.user_agent for s in alpha.sessions_of(user)] == ["Firefox"]
    alpha.end_session(SESSION)
    assert alpha.session(SESSION) is None and beta.session(SESSION) is not None
    alpha.add_session(SESSION, user.user_id, "csrf", 6_000)
    assert beta.end_sessions(user.user_id) == 1
    assert alpha.session(SESSION) is not None and beta.session(SESSION) is None
    beta.add_session(SESSION, user.user_id, "csrf-beta", 7_000)
    assert alpha.set_password(user.user_id, "reset", 8_000)  # signs alpha's account out everywhere
    assert alpha.session(SESSION) is None and beta.session(SESSION) is not None
    alpha.add_session(SESSION, user.user_id, "csrf", 9_000)
    assert alpha.remove_user(user.user_id)  # its sessions go with it, in alpha only
    assert alpha.session(SESSION) is None
    assert beta.session(SESSION).user == User(user.user_id, EMAIL, "admin", None, (), 1_000, 1_000)


def test_sign_in_attempts_are_counted_per_tenant(stores):
    alpha, beta, _user = stores
    for _ in range(2):
        assert alpha.reserve(KEYS, 1_000, 0, no_wait) == 0
    assert {k: r.attempts for k, r in alpha.throttle(KEYS).items()} == dict.fromkeys(KEYS, 3)
    assert {k: r.attempts for k, r in beta.throttle(KEYS).items()} == dict.fromkeys(KEYS, 1)

    def three(_key: str, attempts: int, _last: int) -> int:
        return 60_000 if attempts >= 3 else 0

    # A rule that holds alpha's next attempt back does not hold beta's.
    assert alpha.reserve(KEYS, 2_000, 0, three) == 60_000
    assert beta.reserve(KEYS, 2_000, 0, three) == 0
    beta.refund(KEYS)
    assert {k: r.attempts for k, r in alpha.throttle(KEYS).items()} == dict.fromkeys(KEYS, 3)
    assert {k: r.attempts for k, r in beta.throttle(KEYS).items()} == dict.fromkeys(KEYS, 1)
    assert beta.clear_throttle(KEYS) == 2
    assert len(alpha.throttle(KEYS)) == 2 and beta.throttle(KEYS) == {}
    assert beta.reserve(KEYS, 3_000, 0, no_wait) == 0
    assert alpha.purge_throttle(before_ms=4_000) == 2  # alpha's two keys; beta's, as old, stay
    assert alpha.throttle(KEYS) == {} and len(beta.throttle(KEYS)) == 2


def test_the_audit_log_and_check_runs_are_each_tenants_own(stores):
    alpha, beta, _user = stores
    beta.audit(EMAIL, "lead.export", "lead_shared", {"rows": 1}, 2_000)
    assert [e.action for e in alpha.audit_entries(subject="lead_shared")] == ["lead.view"]
    assert [e.action for e in beta.audit_entries(before_ms=10_000)] == ["lead.export", "lead.view"]
    run = alpha.latest_check().run_id
    assert beta.latest_check().run_id == run
    # Beta gives its copy of the run up as stale and starts another; alpha's runs on.
    assert beta.start_check(EMAIL, "https://beta.example", 9_000, stale_before_ms=5_000) is not None
    assert alpha.latest_check().state == "running"
    assert alpha.start_check(EMAIL, "https://dealer.example", 9_000, stale_before_ms=0) is None
    beta.finish_check(run, "done", {"from": "beta"}, 10_000)
    assert alpha.latest_check().report is None
    alpha.finish_check(run, "done", {"ok": True}, 11_000)
    assert alpha.latest_check().report == {"ok": True}
    assert beta.latest_check().target == "https://beta.example"
