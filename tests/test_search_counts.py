"""The exact total of inventory.search: remembered per inventory version, or null past a budget.

A total is never an estimate. A count that was slow is remembered in the
database (shared by every worker) until the next import; with a count budget a
count that outruns it answers ``total: null`` and finishes in the background.
On PostgreSQL the count is made to outrun its budget deterministically: another
connection holds a lock on the listing table while the search counts.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import psycopg
import pytest

from conftest import assert_valid
from inventory_reference import listing

COLORS = ("Red", "Blue", "Black", "White")


def inventory(count: int) -> list[dict]:
    return [
        listing(
            f"v{i:04d}",
            make="Honda" if i % 3 else "Toyota",
            model="Civic",
            exterior_color=COLORS[i % 4],
            price=20_000 + i * 10,
            mileage=i,
            rooftop="Bay Motors Oakland",
            condition="used",
        )
        for i in range(count)
    ]


HONDA = {"type": "inventory.search.request", "filters": {"make": ["Honda"]}, "pagination": {"limit": 5}}
HONDAS = sum(1 for i in range(300) if i % 3)


def counting_in_sql(agent):
    """These tests pin the SQL count (what runs when the posting index declines a query, or
    is not built yet): take the index out of this agent's store."""
    agent.stores.inventory.postings.enabled = False
    return agent


def remembered(agent) -> list[tuple]:
    with agent.stores.db.read() as tx:
        return tx.fetchall("SELECT version, total FROM inv_count")


def search(agent, ctx, request=HONDA) -> dict:
    response = agent.handle(request, ctx)
    assert_valid(response, "inventory-search-response")
    return response["data"]


def test_a_slow_count_is_remembered_and_refreshed_by_the_next_import(agent_factory, ctx):
    agent = counting_in_sql(agent_factory(listings=inventory(300)))
    store = agent.stores.inventory
    store.totals.remember_count_ms = 0  # treat every count as slow
    assert search(agent, ctx)["total"] == HONDAS
    store.wait_for_background()
    version = store.inventory_version()
    assert remembered(agent) == [(version, HONDAS)]

    # The next request reads the remembered total instead of counting again.
    with agent.stores.db.transaction() as tx:
        tx.execute("UPDATE inv_count SET total = ?", (HONDAS + 1000,))
    assert search(agent, ctx)["total"] == HONDAS + 1000
    other = dict(HONDA, filters={"make": ["Toyota"]})
    assert search(agent, ctx, other)["total"] == 300 - HONDAS  # another matching set: its own count

    # An import changes the seller's inventory (here the one seller, without a dealer_id):
    # its share is counted again, and the refreshed total replaces the old one.
    store.import_listings([listing("v9999", make="Honda", model="Civic", price=1)])
    assert (version, HONDAS + 1000) in remembered(agent)  # kept: only its seller changed
    assert search(agent, ctx)["total"] == HONDAS + 1
    store.wait_for_background()
    assert (version + 1, HONDAS + 1) in remembered(agent)


def seller_inventory(dealer: str, count: int, make: str = "Honda") -> list[dict]:
    return [
        listing(f"{dealer}-{i:03d}", make=make, model="Civic", price=20_000 + i, dealer_id=dealer) for i in range(count)
    ]


def test_a_small_inventory_counted_in_sql_has_nothing_remembered(agent_factory, ctx):
    """A platform's small tenant (under the index threshold) is counted again at every search:
    a count that looks slow there is a busy machine, not a large set, and remembering it
    would add a write to the load."""
    agent = agent_factory(listings=inventory(300))
    store = agent.stores.inventory
    store.postings.min_rows = 1_000  # as a platform tenant's store: 300 listings is small
    store.totals.remember_count_ms = 0  # every count looks slow
    for _ in range(2):
        assert search(agent, ctx)["total"] == HONDAS
        store.wait_for_background()
    assert remembered(agent) == []
    big = agent_factory(listings=inventory(300))
    big.stores.inventory.postings.min_rows = 100  # the same rows above the threshold: indexed
    big.stores.inventory.postings.enabled = False  # … and counted in SQL when the index declines
    big.stores.inventory.totals.remember_count_ms = 0
    assert search(big, ctx)["total"] == HONDAS
    big.stores.inventory.wait_for_background()
    assert remembered(big) == [(big.stores.inventory.inventory_version(), HONDAS)]


def test_a_remembered_total_survives_other_sellers_imports(agent_factory, ctx, settings_factory):
    """Per-seller versions: an import invalidates only the shares of the sellers it changed."""
    agent = counting_in_sql(
        agent_factory(
            listings=seller_inventory("d-a", 40)
            + seller_inventory("d-b", 30)
            + seller_inventory("d-c", 20, make="Toyota")
        )
    )
    store = agent.stores.inventory
    store.totals.remember_count_ms = 0
    assert search(agent, ctx)["total"] == 70
    store.wait_for_background()
    with agent.stores.db.read() as tx:
        (partials,) = tx.one("SELECT partials FROM inv_count")
    assert orjson.loads(partials) == {"d-a": 40, "d-b": 30}

    # Mark d-a's remembered share (never a real count): it must survive d-b's import.
    with agent.stores.db.transaction() as tx:
        tx.execute("UPDATE inv_count SET partials = ?", (orjson.dumps({"d-a": 400, "d-b": 30}).decode(),))
    store.import_listings(seller_inventory("d-b", 5), dealer_id="d-b", replace=True)
    assert search(agent, ctx)["total"] == 400 + 5  # d-b counted again, d-a remembered
    store.import_listings(seller_inventory("d-c", 3, make="Honda"), dealer_id="d-c", replace=True)
    assert search(agent, ctx)["total"] == 400 + 5 + 3  # a seller that had no match now has some
    store.import_listings(seller_inventory("d-a", 1), dealer_id="d-a", replace=True)
    assert search(agent, ctx)["total"] == 1 + 5 + 3  # d-a's own import: its share is exact again


def test_a_total_is_remembered_only_for_the_version_it_counted(agent_factory, ctx):
    agent = agent_factory(listings=inventory(30))
    store = agent.stores.inventory
    stale = store.inventory_version()
    store.import_listings([listing("late", make="Honda")])
    store.totals.remember(stale, "any-matching-set", 7)  # a late write from before the import
    assert remembered(agent) == []


@contextmanager
def counts_outrun_their_budget(agent, backend: str) -> Iterator[None]:
    """The next count of ``agent`` runs out of its budget, whatever the machine's speed."""
    if backend == "sqlite":
        # The progress handler checks the clock every thousand steps: a budget of a
        # microsecond is over at the first check, and scanning 1,000 rows takes more steps.
        agent.deps.settings = dataclasses.replace(agent.settings, count_timeout_ms=0.001)
        yield
        return
    agent.deps.settings = dataclasses.replace(agent.settings, count_timeout_ms=50)
    with psycopg.connect(agent.stores.db.url, autocommit=False) as holder:
        holder.execute("LOCK TABLE inv_listing IN ACCESS EXCLUSIVE MODE")
        # The page query waits for the lock too (it has no budget): let go after a while.
        release = threading.Timer(1.0, holder.rollback)
        release.start()
        try:
            yield
        finally:
            release.join()


@pytest.mark.slow
def test_a_count_past_its_budget_answers_null_then_the_exact_total(agent_factory, ctx, backend):
    agent = counting_in_sql(agent_factory(listings=inventory(1000)))
    civics = dict(HONDA, filters={"model": ["Civic"]})  # no index: the count scans every row
    with counts_outrun_their_budget(agent, backend):
        data = search(agent, ctx, civics)
    assert data["total"] is None
    assert len(data["vehicles"]) == 5 and data["next_cursor"]  # the page itself is whole

    agent.stores.inventory.wait_for_background()  # the count finished off the request path
    again = search(agent, ctx, civics)
    assert again["total"] == 1000
    assert [v["vehicle_id"] for v in again["vehicles"]] == [v["vehicle_id"] for v in data["vehicles"]]

    # Paging on with the cursor of the null-total page works and keeps the exact total.
    follow = search(agent, ctx, dict(civics, pagination={"limit": 5, "cursor": data["next_cursor"]}))
    assert follow["total"] == 1000
    assert not {v["vehicle_id"] for v in follow["vehicles"]} & {v["vehicle_id"] for v in data["vehicles"]}


def test_without_a_budget_the_count_is_always_exact(agent_factory, ctx):
    agent = agent_factory(listings=inventory(300))
    assert agent.settings.count_timeout_ms == 0
    for colour in COLORS:
        request = dict(HONDA, filters={"exterior_color": [colour]})
        assert search(agent, ctx, request)["total"] == 75


@pytest.mark.parametrize("postings", [True, False], ids=["posting-index", "sql"])
def test_keyword_tokens_are_substrings_of_fields(agent_factory, ctx, backend, postings):
    """Keyword tokens, counted by the posting index and by SQL. (PostgreSQL used to keep a
    trigram index for them; the posting index replaced it, see docs/search.md.)"""
    agent = agent_factory(
        listings=[
            listing(f"k{i}", make="Honda" if i % 2 else "Toyota", model="Civic", stock=f"ST{i:03d}") for i in range(40)
        ]
    )
    agent.stores.inventory.postings.enabled = postings
    if backend == "postgresql":
        with agent.stores.db.read() as tx:
            assert not tx.fetchone("SELECT 1 FROM pg_indexes WHERE indexname = 'inv_text_trgm'")

    def total(query: str) -> int:
        return search(agent, ctx, {"type": "inventory.search.request", "filters": {"query": query}})["total"]

    assert total("civ") == 40  # substrings, case-insensitive
    assert total("ONDA civ") == 20  # every token, each in some field
    assert total("onda st01") == 5  # ST010..ST019, the odd ones
    assert total("1") == len([i for i in range(40) if "1" in f"{i:03d}"])  # short: no trigram
    assert total("toyota 7") == len([i for i in range(0, 40, 2) if "7" in f"{i:03d}"])


def walk(agent, ctx, request) -> tuple[list[str], set]:
    """Every vehicle_id of ``request`` page by page, and the totals the pages reported."""
    ids, totals, cursor = [], set(), None
    for _ in range(200):  # bounded: ~200 matches in pages of 10
        page = dict(request, pagination={"limit": 10, **({"cursor": cursor} if cursor else {})})
        data = search(agent, ctx, page)
        ids += [v["vehicle_id"] for v in data["vehicles"]]
        totals.add(data["total"])
        cursor = data["next_cursor"]
        if cursor is None:
            return ids, totals
    raise AssertionError("the cursor walk did not end")


@pytest.mark.slow
@pytest.mark.parametrize("sort", [{"field": "price", "order": "desc"}, {"field": "updated_at", "order": "desc"}])
def test_pages_of_a_remembered_keyword_search_are_the_same(agent_factory, ctx, sort):
    """With its total remembered, a dense keyword search pages through the sort index (SQLite
    tests each row's own text instead of scanning all of it): same vehicles, same order."""
    feed = [
        listing(
            f"w{i:04d}",
            make="Honda" if i % 4 else "Toyota",
            model="Civic",
            stock=f"S{i}",
            price=10_000 + (i * 7919) % 5000,
            updated_at=f"2026-04-{1 + i % 28:02d}T08:00:00Z",
        )
        for i in range(1000)
    ]
    request = {"type": "inventory.search.request", "filters": {"query": "honda 1"}, "sort": sort}
    expected = sorted(
        (item for item in feed if item["make"] == "Honda" and "1" in item["stock"]),
        key=lambda item: (
            -(item["price"] if sort["field"] == "price" else int(item["updated_at"][8:10])),
            item["vehicle_id"],
        ),
    )
    counted = counting_in_sql(agent_factory(listings=feed))
    counted.stores.inventory.totals.remember_count_ms = float("inf")  # never remembered: scan every time
    ids, totals = walk(counted, ctx, request)
    assert ids == [item["vehicle_id"] for item in expected] and totals == {len(expected)}
    assert len(expected) >= 10 * 11  # dense enough for a sort-index walk (pages of 10)

    remembering = counting_in_sql(agent_factory(listings=feed))
    remembering.stores.inventory.totals.remember_count_ms = 0
    search(remembering, ctx, request)
    remembering.stores.inventory.wait_for_background()
    assert remembered(remembering) == [(remembering.stores.inventory.inventory_version(), len(expected))]
    assert walk(remembering, ctx, request) == (ids, totals)
