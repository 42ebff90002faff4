"""Property tests: counts kept across imports equal a fresh exact count.

A marketplace of three configured sellers (and one the endpoint does not
serve) goes through a random sequence of per-seller imports, replaces and
removals (a listing sold). After every step, for random searches and facets:

* the posting index of a store that lived through every step (refreshed for
  the rows each import changed, or for its sellers; never rebuilt) and
* the remembered totals of a store counting in SQL (kept across imports, each
  seller's share recounted when that seller changed)

must answer exactly what a store counting afresh in SQL answers. On SQLite and
PostgreSQL; bounded by example counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap.agent import CallContext, DealerAgent
from aap.config.model import ALL_FILTERS, DealerProfile
from aap.errors import AapError
from aap.store import Stores, open_database
from conftest import make_settings, reset_database, rooftop, snapshot_database
from inventory_reference import SF_POINT, filters, listings

CTX = CallContext(binding="test")
PROPERTY = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
SELLERS = ("d1", "d2", "d3", "elsewhere")  # "elsewhere" is not configured: its listings are never served


def _seller(dealer_id: str, *rooftops: dict[str, Any]) -> DealerProfile:
    return DealerProfile({"dealer_id": dealer_id, "name": f"Seller {dealer_id}", "rooftops": list(rooftops)})


SETTINGS = make_settings(
    dealers=(
        _seller(
            "d1",
            rooftop("Bay Motors San Francisco", SF_POINT, city="San Francisco"),
            rooftop("Bay Motors Oakland", {"latitude": 37.8044, "longitude": -122.2712}, city="Oakland"),
        ),
        _seller(
            "d2",
            rooftop(
                "Bay Motors Vancouver", {"latitude": 49.2827, "longitude": -123.1207}, city="Vancouver", country="CA"
            ),
        ),
        _seller("d3", rooftop("Elsewhere", None, city="Nowhere")),
    ),
    scope="aggregate",
    filters=tuple(f for f in ALL_FILTERS if f != "rooftops"),
)


@st.composite
def steps(draw: Any) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(seller, "upsert" | "replace" | "sell", listings) steps."""
    out = []
    for _ in range(draw(st.integers(1, 5))):
        seller = draw(st.sampled_from(SELLERS))
        kind = draw(st.sampled_from(["upsert", "replace", "replace", "sell"]))
        feed = draw(listings(max_size=6))
        for item in feed:
            if "vehicle_id" in item:  # ids are per seller (a listing never changes hands here)
                item["vehicle_id"] = f"{seller}-{item['vehicle_id']}"
        out.append((seller, kind, feed))
    return out


@st.composite
def questions(draw: Any) -> list[dict[str, Any]]:
    out = []
    for _ in range(3):
        block = draw(filters())
        block.pop("rooftops", None)  # not on an aggregate endpoint
        kind = draw(st.sampled_from(["search", "facets"]))
        request: dict[str, Any] = {"type": f"inventory.{kind}.request"}
        if block:
            request["filters"] = block
        currency = draw(st.sampled_from([None, "CAD"]))
        if currency:
            request["currency"] = currency
        out.append(request)
    return out


@pytest.fixture
def marketplace(backend, request) -> Iterator[Any]:
    """``with marketplace() as (indexed, remembering, fresh): ...``: three stores on one fresh database."""
    if backend == "sqlite":
        tmp = request.getfixturevalue("tmp_path_factory")

        @contextmanager
        def opened() -> Iterator[tuple[Stores, Stores, Stores]]:
            db = open_database(f"sqlite:///{tmp.mktemp('posting')}/aap.db")
            try:
                yield _three(db)
            finally:
                db.close()

        yield opened
        return
    db = open_database(request.getfixturevalue("database_url"))
    empty = snapshot_database(db)

    @contextmanager
    def reused() -> Iterator[tuple[Stores, Stores, Stores]]:
        reset_database(db, empty)
        yield _three(db)

    yield reused
    db.close()


def _three(db: Any) -> tuple[Stores, Stores, Stores]:
    indexed, remembering, fresh = Stores(db), Stores(db), Stores(db)
    for stores, remember_ms in ((remembering, 0.0), (fresh, float("inf"))):
        stores.inventory.postings.enabled = False
        stores.inventory.totals.remember_count_ms = remember_ms  # 0: every count is remembered
    return indexed, remembering, fresh


def _apply(
    stores: Stores, seller: str, kind: str, feed: list[dict[str, Any]], sold: dict[str, list[dict[str, Any]]]
) -> None:
    if kind == "sell":
        gone = [dict(item, status="sold") for item in sold.get(seller, [])[:2]]
        stores.inventory.import_listings(gone, dealer_id=seller)
        return
    stores.inventory.import_listings(feed, dealer_id=seller, replace=kind == "replace")
    sold[seller] = feed if kind == "replace" else sold.get(seller, []) + feed


def _answer(agent: DealerAgent, request: dict[str, Any]) -> Any:
    try:
        data = agent.handle(request, CTX)["data"]
    except AapError as error:
        return error.code
    if request["type"] == "inventory.search.request":
        return data["total"], [v["vehicle_id"] for v in data["vehicles"]]
    return data


@pytest.mark.slow
@PROPERTY
@given(plan=steps(), asked=questions(), by_seller=st.booleans())
def test_kept_counts_equal_a_fresh_count_after_every_import(marketplace, plan, asked, by_seller):
    with marketplace() as (indexed, remembering, fresh):
        if by_seller:  # no row-level change log: the index is refreshed seller by seller
            with indexed.db.transaction() as tx:
                tx.execute("UPDATE inv_meta SET num = ? WHERE name = 'changes_from'", (10**15,))
        agents = [DealerAgent(SETTINGS, stores) for stores in (indexed, remembering, fresh)]
        sold: dict[str, list[dict[str, Any]]] = {}
        for seller, kind, feed in plan:
            _apply(indexed, seller, kind, feed, sold)
            for request in asked:
                expected = _answer(agents[2], request)
                assert _answer(agents[0], request) == expected, (seller, kind, request)
                assert _answer(agents[1], request) == expected, (seller, kind, request)
                remembering.inventory.wait_for_background()
        # The index answered from its refreshed state, never from a rebuild.
        assert indexed.inventory.postings._kept, "the posting index was never used"


def test_the_index_is_refreshed_for_what_changed(agent_factory, ctx):
    """One seller's import re-reads the rows it changed only; every other bitmap is shared."""
    agent = agent_factory(settings=SETTINGS)
    store = agent.stores.inventory
    for seller in ("d1", "d2"):
        store.import_listings(
            [
                {
                    "vehicle_id": f"{seller}-{i}",
                    "status": "available",
                    "make": "Honda",
                    "updated_at": "2026-04-30T08:00:00Z",
                }
                for i in range(5)
            ],
            dealer_id=seller,
        )
    search = {"type": "inventory.search.request", "filters": {"make": ["Honda"]}}
    assert agent.handle(search, ctx)["data"]["total"] == 10
    before = store.postings._kept[0]
    store.import_listings(
        [{"vehicle_id": "d2-9", "status": "available", "make": "Toyota", "updated_at": "2026-04-30T08:00:00Z"}],
        dealer_id="d2",
        replace=True,
    )
    assert agent.handle(search, ctx)["data"]["total"] == 5
    after = store.postings._kept[0]
    assert after.version == before.version + 1
    assert after.sellers["d1"] is before.sellers["d1"]  # untouched: shared, not rebuilt
    assert len(after.sellers["d2"]) == 1


def test_a_build_in_chunks_equals_a_build_at_once(agent_factory, monkeypatch):
    """A build reads a few row numbers at a time (its memory); the lists it ends with are the
    same as those of one read of every row."""
    from aap.store.inventory import postings as module

    agent = agent_factory(settings=SETTINGS)
    store = agent.stores.inventory
    for seller in ("d1", "d2", "elsewhere"):
        store.import_listings(
            [
                {
                    "vehicle_id": f"{seller}-{i}",
                    "status": "available",
                    "make": ("Honda", "Toyota", "Kia")[i % 3],
                    "model": f"M{i % 4}",
                    "vin": f"1HGCV1F3{i:09d}",
                    "price": 10_000 + 997 * i,
                    "features": ["sunroof"] if i % 2 else [],
                    "updated_at": "2026-04-30T08:00:00Z",
                }
                for i in range(13)
            ],
            dealer_id=seller,
        )

    def built(chunk: int) -> dict[str, Any]:
        monkeypatch.setattr(module, "BUILD_CHUNK", chunk)
        with store.db.read() as tx:
            index = module.Postings.build(tx)
        return {
            name: getattr(index, name)
            for name in ("version", "sellers", "columns", "features", "parts", "chars", "buckets")
        }

    at_once = built(10**9)
    assert len(at_once["sellers"]) == 3 and at_once["parts"]
    assert built(4) == at_once
    assert built(1) == at_once


@pytest.mark.slow
def test_price_ranges_are_exact_at_every_bucket_edge(agent_factory, ctx):
    """Price filters come from $1,000 buckets: whole buckets inside the range, range-encoded
    bitmaps for them, and the listings of a bucket a bound cuts through checked in SQL. Prices
    and bounds on, next to and across bucket edges answer what counting in SQL answers."""
    agent = agent_factory(settings=SETTINGS)
    store = agent.stores.inventory
    prices = [None, 0, 1, 999, 1000, 1001, 1999, 2000, 2001, 4999, 5000, 40_000, 40_001, 39_999, 41_000]
    store.import_listings(
        [
            {
                "vehicle_id": f"p{i}",
                "status": "available",
                "make": "Honda",
                **({"price": p} if p is not None else {}),
                "updated_at": "2026-04-30T08:00:00Z",
            }
            for i, p in enumerate(prices)
        ],
        dealer_id="d1",
    )
    store.build_index()
    sql = DealerAgent(SETTINGS, Stores(agent.stores.db))
    sql.stores.inventory.postings.enabled = False
    bounds = [None, 0, 1, 998, 999, 1000, 1001, 1999, 2000, 2500, 40_000, 40_001, 10**6]
    asked = 0
    for low in bounds:
        for high in bounds:
            if low is not None and high is not None and low > high:
                continue
            price = {k: v for k, v in (("price_min", low), ("price_max", high)) if v is not None}
            request = {
                "type": "inventory.search.request",
                "filters": {"make": ["Honda"], **price},
                "pagination": {"limit": 50},
            }
            with store.snapshot() as snapshot:
                assert snapshot.postings() is not None, "the posting index is built"
            assert _answer(agent, request) == _answer(sql, request), price
            expected = (
                sum(1 for p in prices if p is not None and (low is None or p >= low) and (high is None or p <= high))
                if price
                else len(prices)
            )
            assert _answer(agent, request)[0] == expected, price
            asked += 1
    assert asked > 80
    assert store.postings._kept[0]._ranges, "the range-encoded bitmaps were used"
    assert store.postings._kept[0]._bucket_values, "bounds inside buckets were checked against the values"
