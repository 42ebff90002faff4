"""Two tenants' feed history and schedule in one database, sharing every key — one tenant's
rows restored from the other's backup hold the same run ids, feed names and listing ids — and
neither ever sees, counts, leases, changes or deletes the other's.

Each tenant is a view of one database (``db.for_tenant``); on PostgreSQL the test role is the
cluster's superuser, which row-level security does not bind, so what keeps the tenants apart
here is the stores' own SQL (docs/platform.md, "Isolation").
"""

from __future__ import annotations

import pytest

from aap.store import open_database
from aap.store.db import connect
from aap.store.feeds import RETENTION_MS, FeedNote, FeedRun, FeedStore
from aap.store.transfer import copy_agent

START = 1_780_000_000_000


def run(run_id: str, started_ms: int, *notes: FeedNote, outcome: str = "imported") -> FeedRun:
    return FeedRun(
        trigger="schedule",
        source="https://dealer.example/feed.csv",
        started_ms=started_ms,
        finished_ms=started_ms + 1_000,
        outcome=outcome,
        feed="main",
        run_id=run_id,
        warnings=len(notes),
        notes=list(notes),
    )


def note(listing_id: str, message: str) -> FeedNote:
    return FeedNote("warning", 2, message, listing_id=listing_id, column="price", value="0")


@pytest.fixture
def stores(database_url):
    """Alpha's imported run (a warning about listing L1) and its feed's schedule row; beta a copy."""
    db = open_database(database_url)
    alpha = FeedStore(db.for_tenant("alpha"))
    alpha.record(run("run_shared", START, note("L1", "alpha's warning")))
    alpha.ensure(["main"], START)
    other = connect(database_url)  # a connection of its own: the copy reads one and writes the other
    try:
        with db.for_tenant("alpha").read() as source, other.for_tenant("beta").transaction() as target:
            copy_agent(source, target)
    finally:
        other.close()
    yield alpha, FeedStore(db.for_tenant("beta"))
    db.close()


def test_the_history_of_a_run_id_is_each_tenants_own(stores):
    alpha, beta = stores
    assert beta.run("run_shared").to_json() == alpha.run("run_shared").to_json()
    beta.record(run("run_beta", START + 60_000, note("L1", "beta's warning"), note("L2", "beta's other")))
    assert [r.run_id for r in alpha.runs()] == ["run_shared"]
    assert [r.run_id for r in beta.runs(feed="main")] == ["run_beta", "run_shared"]
    assert [r.run_id for r in beta.runs(before_ms=START + 1)] == ["run_shared"]
    assert (alpha.latest_imports(), beta.latest_imports()) == (["run_shared"], ["run_beta"])
    assert [(r.run_id, n.message) for r, n in alpha.listing_notes("L1")] == [("run_shared", "alpha's warning")]
    assert [n.message for _r, n in beta.listing_notes("L1")] == ["beta's warning", "alpha's warning"]
    assert alpha.listing_notes("L2") == []
    assert alpha.note_counts(["run_shared", "run_beta"]) == {"run_shared": {"warning": 1}}
    assert beta.note_counts(["run_beta"]) == {"run_beta": {"warning": 2}}
    # Beta's history outlives its retention; alpha's copy of the same run stays. A run id that is
    # old in alpha only (imported there long ago) is not old in beta.
    alpha.record(run("run_beta", START - RETENTION_MS, note("L3", "alpha's old warning")))
    beta.record(run("run_late", START + RETENTION_MS + 1, outcome="unchanged"))
    assert beta.run("run_shared") is None and beta.notes("run_shared") == []
    assert alpha.run("run_shared") is not None
    assert [n.message for n in alpha.notes("run_shared", kind="warning")] == ["alpha's warning"]
    assert alpha.note_counts(["run_shared"]) == {"run_shared": {"warning": 1}}
    assert [n.listing_id for n in beta.notes("run_beta")] == ["L1", "L2"]


def test_a_feeds_schedule_and_lease_are_each_tenants_own(stores):
    alpha, beta = stores
    mine = alpha.claim("main", START, 60_000)
    assert mine is not None
    theirs = beta.claim("main", START, 60_000)  # its own row: not held by alpha's lease
    assert theirs is not None and theirs != mine
    assert not beta.renew("main", mine, START + 120_000)
    assert alpha.renew("main", mine, START + 120_000)
    assert (alpha.state("main").lease_until_ms, beta.state("main").lease_until_ms) == (START + 120_000, START + 60_000)
    done = {"next_run_ms": START + 3_600_000, "outcome": "imported", "success": True, "failures": 0}
    assert not beta.release("main", mine, now_ms=START, **done)
    assert alpha.release("main", mine, now_ms=START + 1, etag='"v2"', **done)
    assert (alpha.state("main").etag, beta.state("main").etag) == ('"v2"', None)
    assert beta.state("main").lease_token == theirs
    assert alpha.claim("main", START + 2, 60_000) is None  # not due again yet, in alpha
    beta.ensure(["main", "url:https://beta.example/feed.csv"], START)
    assert [s.feed for s in alpha.states()] == ["main"]
    assert [s.feed for s in beta.states()] == ["main", "url:https://beta.example/feed.csv"]
    assert alpha.claim("url:https://beta.example/feed.csv", START, 60_000, due_only=False) is not None
    assert beta.state("url:https://beta.example/feed.csv").lease_token is None
