"""The console's inventory browser: the listings as the assistants see them, filtered, sorted, paged.

Filters: seller, rooftop, condition, vehicle type (what the summary counts, so
every choice comes with its count and only what the inventory has is offered),
no photo, no price, and "warned by the last import" (the listings whose rows
drew a warning in the latest import of their feed, :mod:`aap.store.feeds`).
Sorts: price, mileage (odometers compared exactly across miles and kilometres,
``odometer_mm``) and days in stock (``inventory_date``), each in both orders,
listings without the value after the others.

Every page is a keyset query (:mod:`aap.store.keyset`) on an index of its
sort — ``(price, id)``, ``(odometer_mm, id)``, ``(in_stock_day, id)`` — so the
two-hundredth page of 10k listings costs what the first does. A rare filter
(a few listings without a photo, among 100k) would make that walk long, so
its count, known from the summary, decides which index leads: a filter that
keeps few listings is written so that its own index is used (the partial
``inv_listing_no_photo``, the NULL end of ``(price, id)``) and the few rows are
sorted; one that keeps many is written so that it is not (``photos + 0``), and
the walk along the sort finds a page of them at once. SQLite plans without
statistics and follows how the SQL is written; PostgreSQL plans either form
from its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aap.store.db import Database, Tx
from aap.store.inventory.summary import Summary
from aap.store.keyset import Cursor, Segment, walk

#: At most this many matches: the filter's own index leads and the matches are sorted.
FEW = 2000


def _sort(column: str, descending: bool, kind: type = int) -> tuple[Segment, ...]:
    return (
        Segment(f"{column} IS NOT NULL", ((column, descending, kind), ("l.id", descending, str))),
        Segment(f"{column} IS NULL", (("l.id", False, str),)),
    )


#: Sort name -> its segments; the first is the default.
SORTS: Mapping[str, tuple[Segment, ...]] = {
    "in_stock": _sort("l.in_stock_day", False),  # the earliest stock date first: longest in stock
    "in_stock_recent": _sort("l.in_stock_day", True),
    "price": _sort("l.price", False),
    "price_desc": _sort("l.price", True),
    "mileage": _sort("l.odometer_mm", False),
    "mileage_desc": _sort("l.odometer_mm", True),
}
SORT_LABELS = {
    "in_stock": "Days in stock: longest first",
    "in_stock_recent": "Days in stock: newest arrivals first",
    "price": "Price: low to high",
    "price_desc": "Price: high to low",
    "mileage": "Mileage: lowest first",
    "mileage_desc": "Mileage: highest first",
}


@dataclass(frozen=True)
class BrowseFilter:
    """What the browser's form asks for (``sellers``: the person's scope, None for every seller)."""

    sellers: frozenset[str] | None = None
    dealer_id: str | None = None
    rooftop: str | None = None
    condition: str | None = None
    vehicle_type: str | None = None
    no_photo: bool = False
    no_price: bool = False
    warned: bool = False

    def counts(self, summary: Summary) -> int:
        """How many listings the filter keeps, from the summary (the warned filter aside)."""
        return sum(
            r.listings
            for r in summary.rows
            if (self.sellers is None or r.dealer_id in self.sellers)
            and (self.dealer_id is None or r.dealer_id == self.dealer_id)
            and (self.rooftop is None or r.rooftop == self.rooftop)
            and (self.condition is None or r.condition == self.condition)
            and (self.vehicle_type is None or r.vehicle_type == self.vehicle_type)
            and (not self.no_photo or r.no_photo)
            and (not self.no_price or r.no_price)
        )


@dataclass(frozen=True)
class BrowseRow:
    """One listing as the browser shows it: its stored document (what an assistant receives)."""

    vehicle_id: str
    doc: dict[str, Any]
    warned: bool


def _unindexed(segment: Segment) -> str:
    """The segment's order with its first key written as an expression no index serves (``x + 0``,
    ``x || ''``), so that the planner starts from the filter's index and sorts what it finds."""
    (column, descending, kind), *rest = segment.keys
    first = f"{column} + 0" if kind is int else f"{column} || ''"
    return ", ".join(
        [f"{first} {'DESC' if descending else 'ASC'}"] + [f"{c} {'DESC' if d else 'ASC'}" for c, d, _ in rest]
    )


class InventoryBrowser:
    """The browser's reads (the listing tables belong to :mod:`aap.store.inventory`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _warned_runs(self, tx: Tx, runs: Sequence[str]) -> tuple[str, list[Any]]:
        if not runs:
            return "1 = 0", []
        marks = ", ".join("?" for _ in runs)
        # The tenant as a value, not ``n.tenant_id = l.tenant_id``: an ``IN`` subquery that
        # refers to the outer row is run again for every listing (PostgreSQL turns only an
        # uncorrelated one into a join), which took seconds a page at 100k listings.
        return (
            "l.id IN (SELECT n.listing_id FROM feed_notes n WHERE n.tenant_id = ?"
            f" AND n.run_id IN ({marks}) AND n.kind = 'warning')",
            [tx.tenant, *runs],
        )

    def warned_count(self, wanted: BrowseFilter, runs: Sequence[str]) -> int:
        """How many listings the filter keeps when it asks for the warned ones (a count by query)."""
        with self.db.read() as tx:
            where, params = self._where(tx, wanted, runs, many=True)
            return int(tx.one(f"SELECT COUNT(*) FROM inv_listing l WHERE {' AND '.join(where)}", params)[0])

    def _where(self, tx: Tx, wanted: BrowseFilter, runs: Sequence[str], *, many: bool) -> tuple[list[str], list[Any]]:
        where = ["l.tenant_id = ?"]
        params: list[Any] = [tx.tenant]
        if wanted.sellers is not None:
            chosen = sorted(wanted.sellers)
            where.append(f"l.dealer_id IN ({', '.join('?' for _ in chosen)})" if chosen else "1 = 0")
            params += chosen
        for column, value in (
            ("l.dealer_id", wanted.dealer_id),
            ("l.rooftop", wanted.rooftop),
            ("l.condition", wanted.condition),
            ("l.vehicle_type", wanted.vehicle_type),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if wanted.no_photo:
            where.append("l.photos + 0 = 0" if many else "l.photos = 0")
        if wanted.no_price:
            where.append("l.price + 0 IS NULL" if many else "l.price IS NULL")
        if wanted.warned:
            sql, values = self._warned_runs(tx, runs)
            where.append(sql)
            params += values
        return where, params

    def page(
        self,
        wanted: BrowseFilter,
        *,
        matches: int,
        sort: str = "in_stock",
        cursor: Cursor | None = None,
        runs: Sequence[str] = (),
        limit: int = 50,
    ) -> tuple[list[BrowseRow], Cursor | None]:
        """One page in ``sort`` order and the cursor of the next (None: the last page).

        ``matches`` is how many listings the filter keeps (:meth:`BrowseFilter.counts`): it decides
        which index leads; ``runs`` are the imports whose warnings the warned filter reads.
        """
        segments = SORTS[sort]
        if matches == 0:
            return [], None
        # Few matches and a filter with an index of its own: that index leads, the few rows are sorted.
        few = matches <= FEW and bool(
            wanted.no_photo or wanted.no_price or wanted.warned or wanted.rooftop or wanted.dealer_id or wanted.sellers
        )
        with self.db.read() as tx:
            base, params = self._where(tx, wanted, runs, many=not few)

            def segment_rows(segment: Segment, start: tuple[str, list[Any]] | None, need: int) -> list[Any]:
                if wanted.no_price and segment.where == "l.price IS NOT NULL":
                    return []  # nothing without a price has one
                segment_where = segment.where or "1 = 1"
                if few:  # nor the segment's own bound (the sort keys are numbers: "+ 0" hides their index)
                    segment_where = segment_where.replace(" IS ", " + 0 IS ", 1)
                where, values = [*base, segment_where], list(params)
                if start is not None:
                    where.append(start[0])
                    values += start[1]
                order = segment.order if not few else _unindexed(segment)
                return tx.fetchall(
                    f"SELECT l.id, {segment.columns} FROM inv_listing l WHERE {' AND '.join(where)}"
                    f" ORDER BY {order} LIMIT {int(need)}",
                    values,
                )

            ids, next_cursor = walk(segments, cursor, limit, segment_rows)
            docs = self._docs(tx, ids)
            warned = self._warned(tx, ids, runs)
        return [BrowseRow(i, docs[i], i in warned) for i in ids if i in docs], next_cursor

    def _docs(self, tx: Tx, ids: list[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        return {
            r[0]: orjson.loads(r[1])
            for r in tx.fetchall(
                f"SELECT id, doc FROM inv_doc WHERE tenant_id = ? AND id IN ({marks})", [tx.tenant, *ids]
            )
        }

    def _warned(self, tx: Tx, ids: list[str], runs: Sequence[str]) -> set[str]:
        if not ids or not runs:
            return set()
        marks = ", ".join("?" for _ in ids)
        run_marks = ", ".join("?" for _ in runs)
        return {
            r[0]
            for r in tx.fetchall(
                f"SELECT DISTINCT listing_id FROM feed_notes WHERE tenant_id = ? AND run_id IN ({run_marks})"
                f" AND kind = 'warning' AND listing_id IN ({marks})",
                [tx.tenant, *runs, *ids],
            )
        }

    def listing_ids(
        self, identities: Sequence[tuple[str | None, str | None, str | None, str | None]], dealer_id: str | None
    ) -> list[str | None]:
        """The stored listing each feed row identity (vehicle_id, vin, stock, dealer_id) is, as an
        import finds it: by id, else by its seller's VIN, else by its seller's stock number; None
        where the store has none (a rejected row never published)."""
        found: list[str | None] = [None] * len(identities)
        with self.db.read() as tx:
            for start in range(0, len(identities), 400):
                chunk = list(enumerate(identities[start : start + 400], start))
                by: dict[str, dict[Any, str]] = {}
                for column in ("id", "vin", "stock"):
                    position = ("id", "vin", "stock").index(column)
                    wanted = sorted({v for _, ident in chunk if (v := ident[position]) is not None})
                    if not wanted:
                        by[column] = {}
                        continue
                    marks = ", ".join("?" for _ in wanted)
                    rows = tx.fetchall(
                        f"SELECT id, {column}, dealer_id FROM inv_listing WHERE tenant_id = ? AND {column} IN ({marks})"
                        " ORDER BY id",
                        [tx.tenant, *wanted],
                    )
                    by[column] = {}
                    for ident, value, dealer in rows:
                        by[column].setdefault((value, dealer) if column != "id" else value, ident)
                for i, (vehicle_id, vin, stock, dealer) in chunk:
                    seller = dealer or dealer_id
                    found[i] = (
                        (by["id"].get(vehicle_id) if vehicle_id else None)
                        or (by["vin"].get((vin, seller)) if vin else None)
                        or (by["stock"].get((stock, seller)) if stock else None)
                    )
        return found

    def listing(self, vehicle_id: str) -> dict[str, Any] | None:
        """One current listing's document (None: not in the inventory, removed or never there)."""
        with self.db.read() as tx:
            row = tx.fetchone("SELECT doc FROM inv_doc WHERE tenant_id = ? AND id = ?", (tx.tenant, vehicle_id))
        return orjson.loads(row[0]) if row else None

    def removed(self, vehicle_id: str) -> tuple[str | None, int] | None:
        """(dealer_id, removed_us) of a listing no longer in the inventory, or None."""
        with self.db.read() as tx:
            row = tx.fetchone(
                "SELECT dealer_id, removed_us FROM inv_tombstone WHERE tenant_id = ? AND id = ?",
                (tx.tenant, vehicle_id),
            )
        return (row[0], int(row[1])) if row else None
