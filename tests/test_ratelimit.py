"""The rate limiter: a shared bucket in the database, spent from per-process leases.

What must hold (aap/ratelimit.py, docs/architecture.md "Rate limiting"): a busy
caller costs at most one database write per 20 admitted requests; a one-off
caller costs one write, as before; a refusal takes nothing and says how long to
wait, and waiting that long gets through; several processes on one database
never admit more than the bucket holds, and tokens a process leased but did not
spend go back to the bucket.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from aap.config.model import RateLimit
from aap.errors import AapError
from aap.ratelimit import LEASE_SECONDS, RateLimiter
from aap.store import open_stores


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class WriteCounter:
    """Counts the write transactions a database runs (the thing leases are for)."""

    def __init__(self, db) -> None:
        self.writes = 0
        original = db.transaction

        @contextmanager
        def transaction(*, write: bool = True) -> Iterator:
            if write:
                self.writes += 1
            with original(write=write) as tx:
                yield tx

        db.transaction = transaction


@pytest.fixture
def processes(database_url):
    """Two independent Stores on one database, as two worker processes have."""
    opened = [open_stores(database_url), open_stores(database_url)]
    yield opened
    for stores in opened:
        stores.close()


def limiter(stores, clock: Clock, *, per_minute: int = 60, burst: int = 10) -> RateLimiter:
    return RateLimiter(stores.state, RateLimit(enabled=True, per_minute=per_minute, burst=burst), clock=clock)


def admitted(rl: RateLimiter, key: str, n: int, cost: int = 1) -> int:
    count = 0
    for _ in range(n):
        try:
            rl.check(key, cost)
            count += 1
        except AapError as exc:
            assert exc.code == "RATE_LIMITED"
    return count


def test_a_busy_caller_costs_at_most_one_write_per_twenty_requests(processes):
    clock = Clock()
    counter = WriteCounter(processes[0].db)
    rl = limiter(processes[0], clock, per_minute=60_000_000, burst=1_000_000)
    for _ in range(400):
        clock.now += 0.0005  # 2,000 requests a second
        rl.check("busy")
    assert counter.writes <= 400 // 20


def test_a_one_off_caller_costs_one_write_and_gets_one_token(processes):
    clock = Clock()
    counter = WriteCounter(processes[0].db)
    rl = limiter(processes[0], clock, burst=10)
    rl.check("once")
    assert counter.writes == 1
    other = limiter(processes[1], clock, burst=10)
    assert admitted(other, "once", 20) == 9  # the rest of the burst is still in the shared bucket


def test_check_local_admits_from_the_lease_without_the_database(processes):
    clock = Clock()
    rl = limiter(processes[0], clock, per_minute=60_000, burst=1_000)
    assert rl.check_local("k") is False  # nothing leased yet
    for _ in range(3):
        rl.check("k")  # leases grow: 1, then 4, then 16
    counter = WriteCounter(processes[0].db)
    assert rl.check_local("k") is True
    assert counter.writes == 0


def test_refusal_takes_nothing_and_waiting_retry_after_gets_through(processes):
    clock = Clock()
    counter = WriteCounter(processes[0].db)
    rl = limiter(processes[0], clock, per_minute=60, burst=5)  # one token a second
    assert admitted(rl, "k", 5) == 5
    with pytest.raises(AapError) as refused:
        rl.check("k")
    err = refused.value
    assert err.code == "RATE_LIMITED" and err.retryable
    retry_ms = err.details["retry_after_ms"]
    assert 0 < retry_ms <= 1000
    # Refused again without asking the database, with what is left of the same wait.
    writes = counter.writes
    clock.now += 0.25
    with pytest.raises(AapError) as again:
        rl.check("k")
    assert counter.writes == writes
    assert again.value.details["retry_after_ms"] == pytest.approx(retry_ms - 250, abs=1)
    clock.now += retry_ms / 1000 - 0.25
    rl.check("k")  # waited the time asked: through
    with pytest.raises(AapError):
        rl.check("k")


def test_a_request_may_cost_several_tokens(processes):
    clock = Clock()
    rl = limiter(processes[0], clock, per_minute=60, burst=10)
    assert admitted(rl, "k", 5, cost=3) == 3  # 9 of the 10 tokens
    assert admitted(rl, "k", 1, cost=1) == 1
    with pytest.raises(ValueError):
        rl.check("k", cost=11)  # more than the bucket can ever hold


def test_processes_never_admit_more_than_the_bucket_holds(processes):
    """Threads of two processes race for one bucket; leases never spend a token twice."""
    clock = Clock()
    limiters = [limiter(stores, clock, per_minute=1, burst=200) for stores in processes]
    counts: list[int] = []
    lock = threading.Lock()

    def hammer(rl: RateLimiter) -> None:
        n = admitted(rl, "shared", 100)
        with lock:
            counts.append(n)

    threads = [threading.Thread(target=hammer, args=(limiters[i % 2],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = sum(lease.tokens for rl in limiters for lease in rl._leases.values())
    assert sum(counts) + held == 200  # every token admitted once or still leased, none twice
    assert sum(counts) >= 200 - 2 * limiters[0].max_lease


def test_unspent_leased_tokens_go_back_to_the_shared_bucket(processes):
    """A caller that moves to another worker finds the tokens the first one leased."""
    clock = Clock()
    first = limiter(processes[0], clock, per_minute=1, burst=100)
    second = limiter(processes[1], clock, per_minute=1, burst=100)
    assert admitted(first, "mover", 3) == 3  # leases of 1, then 4: three tokens left in the lease
    held = first._leases["rate:mover"].tokens
    assert held > 0
    clock.now += LEASE_SECONDS + 0.1
    first.check("someone-else")  # any lease of the first process sweeps its expired ones
    assert "rate:mover" not in first._leases
    assert admitted(second, "mover", 200) == 100 - 3


def test_release_returns_every_lease(processes):
    clock = Clock()
    first = limiter(processes[0], clock, per_minute=1, burst=100)
    assert admitted(first, "k", 6) == 6
    first.release()
    assert admitted(limiter(processes[1], clock, per_minute=1, burst=100), "k", 200) == 94


def test_disabled_limiter_admits_everything_without_the_database(processes):
    counter = WriteCounter(processes[0].db)
    rl = RateLimiter(processes[0].state, RateLimit(enabled=False, per_minute=1, burst=1))
    for _ in range(5):
        assert rl.check_local("k") is True
        rl.check("k")
    assert counter.writes == 0


def test_a_busy_callers_lease_is_topped_up_before_it_runs_out(processes):
    """At the largest lease size and a quarter left, top_up adds a lease's worth in one write;
    a caller with a small lease never runs low (it leases as it goes)."""
    clock = Clock()
    rl = limiter(processes[0], clock, per_minute=60_000_000, burst=1_000_000)
    rl.check("one-off")
    assert not rl.running_low("one-off")
    for _ in range(1 + 4 + 16 + 64 + 1):  # leases of 1, 4, 16 and 64 used up; the fifth is the largest
        rl.check("busy")
    lease = rl._leases["rate:busy"]
    assert lease.size == rl.max_lease
    while not rl.running_low("busy"):
        assert rl.check_local("busy")
    assert lease.tokens <= rl.max_lease // 4
    counter = WriteCounter(processes[0].db)
    before = lease.tokens
    rl.top_up("busy")
    assert counter.writes == 1
    assert lease.tokens == before + rl.max_lease
    assert not rl.running_low("busy")


def test_a_top_up_takes_only_what_the_bucket_holds(processes):
    """Tokens topped up come out of the shared bucket: the limit holds across processes."""
    clock = Clock()
    first = limiter(processes[0], clock, per_minute=1, burst=200)
    second = limiter(processes[1], clock, per_minute=1, burst=200)
    spent = 0
    for _ in range(200):
        if first.running_low("shared"):
            first.top_up("shared")
        try:
            first.check("shared")
            spent += 1
        except AapError:
            break
    held = sum(lease.tokens for lease in first._leases.values())
    assert spent + held + admitted(second, "shared", 400) == 200


def test_admit_tops_up_in_the_background_and_requests_never_lease_themselves(processes):
    """Over the gateway's admit(): after the lease has grown, every next lease is a top-up
    taken off the request path; no request calls the blocking check again."""
    import asyncio

    from aap.agent import DealerAgent
    from aap.gateway import Gateway
    from aap.work import Work
    from conftest import make_settings

    clock = Clock()
    rl = limiter(processes[0], clock, per_minute=60_000_000, burst=1_000_000)
    calls = {"check": 0, "top_up": 0}
    check, top_up = rl.check, rl.top_up

    def counted_check(*args, **kwargs):
        calls["check"] += 1
        return check(*args, **kwargs)

    def counted_top_up(*args, **kwargs):
        calls["top_up"] += 1
        return top_up(*args, **kwargs)

    rl.check, rl.top_up = counted_check, counted_top_up

    gateway = Gateway(DealerAgent(make_settings(), processes[0]), rl, Work(inline=processes[0].db.in_process))
    counter = WriteCounter(processes[0].db)

    async def requests(n: int) -> None:
        for _ in range(n):
            clock.now += 0.0005
            await gateway.admit("busy")
            await asyncio.sleep(0)  # other requests run: a top-up started is under way

    asyncio.run(requests(500))
    assert calls["check"] == 5  # leases of 1, 4, 16, 64 and 128 while it grows
    assert calls["top_up"] >= (500 - 53) // rl.max_lease
    assert counter.writes <= 500 // 20


@pytest.mark.slow
def test_over_a2a_a_busy_caller_costs_at_most_one_write_per_twenty_requests(tmp_path):
    """The default configuration's limiter, high enough never to refuse, over real HTTP."""
    import httpx

    from http_helpers import Deployment, send_message

    DEALER = {"type": "dealer.information.request"}

    rule = RateLimit(enabled=True, per_minute=6_000_000, burst=100_000)
    with Deployment(tmp_path, inventory=0, rate_limit=rule) as dep:
        with httpx.Client(base_url=dep.base_url) as http:
            assert "result" in http.post("/a2a", json=send_message(DEALER)).json()
            counter = WriteCounter(dep.stores.db)
            answers = [http.post("/a2a", json=send_message(DEALER)).json() for _ in range(200)]
    assert all("result" in answer for answer in answers)
    assert counter.writes <= 200 // 20
