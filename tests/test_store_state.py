"""StateStore: secrets, token buckets, replay cache and short-lived values — shared by workers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from aap.store import open_stores
from aap.store.state import KeysKept, StateStore


@pytest.fixture
def url(database_url):
    return database_url


@pytest.fixture
def workers(url):
    """Two independent Stores on one database file, as two worker processes would have."""
    opened = [open_stores(url), open_stores(url)]
    yield [s.state for s in opened]
    for stores in opened:
        stores.close()


def test_secret_is_created_once_and_shared(workers):
    one, two = workers
    key = one.secret("cursor")
    assert len(key) == 32
    assert two.secret("cursor") == key
    assert one.secret("other") != key


def test_token_bucket_refills(workers):
    state, _ = workers
    for _ in range(3):
        assert state.take_token("k", capacity=3, refill_per_second=1.0, now=100.0) == 0.0
    assert state.take_token("k", capacity=3, refill_per_second=1.0, now=100.0) == pytest.approx(1.0)
    assert state.take_token("k", capacity=3, refill_per_second=1.0, now=100.25) == pytest.approx(0.75)
    assert state.take_token("k", capacity=3, refill_per_second=1.0, now=101.0) == 0.0
    # buckets are per key; a long pause refills to capacity only
    assert state.take_token("other", capacity=3, refill_per_second=1.0, now=100.0) == 0.0
    for _ in range(3):
        assert state.take_token("k", capacity=3, refill_per_second=1.0, now=10_000.0) == 0.0
    assert state.take_token("k", capacity=3, refill_per_second=1.0, now=10_000.0) > 0


def test_token_bucket_accepts_datetimes_and_tolerates_clock_steps(workers):
    state, _ = workers
    moment = datetime(2026, 5, 1, tzinfo=UTC)
    assert state.take_token("d", capacity=1, refill_per_second=0.5, now=moment) == 0.0
    assert state.take_token("d", capacity=1, refill_per_second=0.5, now=moment) == pytest.approx(2.0)
    earlier = moment.timestamp() - 50  # a clock step backwards never mints tokens
    assert state.take_token("d", capacity=1, refill_per_second=0.5, now=earlier) == pytest.approx(2.0)


def test_token_bucket_rejects_nonsense(workers):
    with pytest.raises(ValueError):
        workers[0].take_token("k", capacity=0, refill_per_second=1.0)
    with pytest.raises(ValueError):
        workers[0].take_token("k", capacity=1, refill_per_second=0)


def test_token_bucket_is_shared_and_atomic_across_connections(workers):
    """Two workers, four threads each, 200 takes against a bucket of 50: exactly 50 pass."""
    allowed: list[int] = []
    lock = threading.Lock()

    def hammer(state):
        mine = 0
        for _ in range(25):
            if state.take_token("shared", capacity=50, refill_per_second=1e-9, now=1000.0) == 0.0:
                mine += 1
        with lock:
            allowed.append(mine)

    threads = [threading.Thread(target=hammer, args=(workers[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 50


def test_remember_once_detects_replays_across_workers(workers):
    one, two = workers
    assert one.remember_once("jti", "abc", expires_at=200.0, now=100.0) is True
    assert two.remember_once("jti", "abc", expires_at=200.0, now=150.0) is False
    assert two.remember_once("dpop", "abc", expires_at=200.0, now=150.0) is True  # namespaced
    assert one.remember_once("jti", "abc", expires_at=400.0, now=250.0) is True  # expired: forgotten


def test_remember_once_is_atomic_under_contention(workers):
    """Eight threads on two connections race for the same 100 keys: each key wins exactly once."""
    wins: list[str] = []
    lock = threading.Lock()

    def race(state):
        for n in range(100):
            if state.remember_once("race", f"k{n}", expires_at=10**10):
                with lock:
                    wins.append(f"k{n}")

    threads = [threading.Thread(target=race, args=(workers[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == sorted(f"k{n}" for n in range(100))


def test_values_expire(workers):
    one, two = workers
    one.put_value("ns", "k", "v1", expires_at=200.0)
    assert two.get_value("ns", "k", now=150.0) == "v1"
    one.put_value("ns", "k", "v2", expires_at=300.0)
    assert two.get_value("ns", "k", now=250.0) == "v2"
    assert two.get_value("ns", "k", now=300.0) is None
    assert two.get_value("ns", "missing") is None


def rewrite_secret(db, name: str, value: bytes) -> None:
    """Change a stored secret behind the stores' back (what no code path does: a secret stays)."""
    with db.transaction() as tx:
        tx.execute("UPDATE state_secret SET value = ? WHERE tenant_id = ? AND name = ?", (value.hex(), tx.tenant, name))


def test_kept_keys_serve_every_build_of_a_tenant_and_never_another_tenant(url):
    """A platform worker builds a tenant's stores again and again: the secrets it kept are what
    each build uses, without reading them, and are never given to a build of another tenant.
    Forgetting a tenant (it changed) makes its next build read them again."""
    stores = open_stores(url)
    try:
        keys = KeysKept(10)
        alpha, beta = stores.db.for_tenant("alpha"), stores.db.for_tenant("beta")
        first = StateStore(alpha, keys).secret("cursor")
        rewrite_secret(alpha, "cursor", bytes(32))
        assert StateStore(alpha, keys).secret("cursor") == first  # kept: not read again
        assert StateStore(alpha).secret("cursor") == bytes(32)  # without kept keys: read
        other = StateStore(beta, keys).secret("cursor")
        assert other not in (first, bytes(32))
        assert StateStore(beta, keys).secret("cursor") == other
        assert StateStore(alpha, keys).secret("other") not in (first, other)
        keys.forget("alpha")
        assert StateStore(alpha, keys).secret("cursor") == bytes(32)
        assert StateStore(beta, keys).secret("cursor") == other
    finally:
        stores.close()


def test_a_secret_read_before_a_tenant_was_forgotten_is_not_kept_and_kept_keys_are_bounded():
    keys = KeysKept(2)
    seen = keys.forgotten
    keys.forget("alpha")  # alpha removed and added again while its old secret was being read
    keys.put("alpha", "cursor", b"o" * 32, seen)
    assert keys.get("alpha", "cursor") is None
    keys.put("alpha", "cursor", b"n" * 32, keys.forgotten)
    keys.put("alpha", "console", b"c" * 32, keys.forgotten)
    assert keys.get("alpha", "cursor") == b"n" * 32 and keys.get("alpha", "console") == b"c" * 32
    keys.put("beta", "cursor", b"b" * 32, keys.forgotten)
    keys.put("gamma", "cursor", b"g" * 32, keys.forgotten)  # past two tenants: the least recently used goes
    assert len(keys) == 2 and keys.get("alpha", "cursor") is None and keys.get("gamma", "cursor") == b"g" * 32
