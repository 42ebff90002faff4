"""The store's side of safe imports and the feed history, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from aap.store import open_stores
from aap.store.feeds import FeedRun
from aap.store.inventory import ShrinkRefused
from factories import numbered_listing as listing


@pytest.fixture
def stores(database_url):
    opened = open_stores(database_url)
    yield opened
    opened.close()


def test_shrink_dry_run_and_kept_rows(stores):
    inventory = stores.inventory
    inventory.import_listings([listing(n) for n in range(10)])
    with pytest.raises(ShrinkRefused) as info:
        inventory.import_listings([listing(n) for n in range(4)], replace=True, max_removed_share=0.5)
    assert (info.value.stats.omitted, info.value.stats.before) == (6, 10)
    assert inventory.count() == 10
    stats = inventory.import_listings([listing(n) for n in range(20, 25)], replace=True, dry_run=True)
    assert (stats.inserted, stats.removed) == (5, 10) and inventory.count() == 10
    # A rejected row (its VIN unreadable) keeps its stored listing through its stock number.
    stats = inventory.import_listings(
        [listing(n) for n in range(8)], replace=True, max_removed_share=0.5, keep=[{"stock": "S8"}]
    )
    assert stats.removed == 1 and inventory.count() == 9
    assert {r.stock for r in inventory.find(stock="S8")} == {"S8"}


def test_history_and_lease(stores):
    feeds = stores.feeds
    run = FeedRun(
        trigger="cli",
        source="x.csv",
        started_ms=1000,
        finished_ms=2500,
        outcome="imported",
        inserted=3,
        problems=[{"line": 2, "message": "m"}],
        rejected_lines=[2, 9],
    )
    feeds.record(run)
    (back,) = feeds.runs()
    assert back.to_json() == run.to_json()
    later = FeedRun(
        trigger="schedule", source="x.csv", started_ms=5000, finished_ms=5100, outcome="unchanged", feed="nightly"
    )
    feeds.record(later)
    assert [r.run_id for r in feeds.runs()] == [later.run_id, run.run_id]
    assert [r.run_id for r in feeds.runs(before_ms=5000)] == [run.run_id]  # the next page
    assert [r.run_id for r in feeds.runs(feed="nightly")] == [later.run_id]
    feeds.ensure(["nightly"], now_ms=1000)
    token = feeds.claim("nightly", 1000, 60_000)
    assert token and feeds.claim("nightly", 1000, 60_000) is None  # held
    assert feeds.claim("nightly", 70_000, 60_000, due_only=False)  # lapsed: taken over
    assert not feeds.release(
        "nightly", token, now_ms=2000, next_run_ms=9000, outcome="imported", success=True, failures=0
    )  # the old holder lost it
