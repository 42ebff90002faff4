"""What the staff console shows of the inventory: counts by seller, rooftop, condition and status,
and a VIN or stock-number lookup that also finds removed listings.

Counts are one grouped scan of the narrow listing rows; they are remembered
per inventory version (bumped by every import), so the scan runs once per
import, not once per page view, and never serves numbers of another version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aap.store.db import Database, Tx
from aap.store.inventory.schema import read_version
from aap.util.memo import Memo


@dataclass(frozen=True)
class CountRow:
    """How many listings share these values (``no_photo``, ``no_price``: of those lacking one)."""

    dealer_id: str | None
    rooftop: str | None
    condition: str | None
    status: str
    listings: int
    vehicle_type: str = "car"
    no_photo: bool = False
    no_price: bool = False


@dataclass(frozen=True)
class Summary:
    version: int
    rows: tuple[CountRow, ...]
    removed: dict[str | None, int]  # tombstones by seller

    def total(self, dealer_id: str | None = None, *, everyone: bool = True) -> int:
        return sum(r.listings for r in self.rows if everyone or r.dealer_id == dealer_id)


@dataclass(frozen=True)
class Found:
    """One listing (or removed listing) a lookup found."""

    vehicle_id: str
    dealer_id: str | None
    vin: str | None
    stock: str | None
    available: bool
    rooftop: str | None = None
    status: str | None = None
    label: str = ""


def _upper_bound(prefix: str) -> str:
    return prefix + "\U0010ffff"


class InventorySummaries:
    """Counts remembered per inventory version, and the VIN/stock lookup."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: The summary of the newest version asked for (an import makes a new one).
        self._latest: Memo[int, Summary] = Memo(1)

    def summary(self) -> Summary:
        with self.db.read() as tx:
            version = read_version(tx)
            return self._latest.get(version, lambda: _count(tx, version))

    def lookup(self, term: str, *, dealer_id: str | None = None, limit: int = 50) -> list[Found]:
        """Listings whose VIN or stock number starts with ``term`` (VINs compared in capitals).

        The limit is written into the SQL: a PostgreSQL plan prepared for "any limit" may scan.
        """
        term = term.strip()
        if not term:
            return []
        vin = term.upper()
        seller = " AND dealer_id = ?" if dealer_id is not None else ""
        extra: tuple[Any, ...] = (dealer_id,) if dealer_id is not None else ()
        with self.db.read() as tx:
            params = (tx.tenant, vin, _upper_bound(vin), term, _upper_bound(term), *extra)
            matching = f"tenant_id = ? AND ((vin >= ? AND vin < ?) OR (stock >= ? AND stock < ?)){seller}"
            live = tx.fetchall(
                f"SELECT id, dealer_id, vin, stock, rooftop, status, year, make, model"
                f" FROM inv_listing WHERE {matching} ORDER BY vin, id LIMIT {int(limit)}",
                params,
            )
            gone = tx.fetchall(
                f"SELECT id, dealer_id, vin, stock FROM inv_tombstone WHERE {matching}"
                f" ORDER BY vin, id LIMIT {int(limit)}",
                params,
            )
        found = [
            Found(r[0], r[1], r[2], r[3], True, r[4], r[5], " ".join(str(v) for v in (r[6], r[7], r[8]) if v))
            for r in live
        ]
        found += [Found(r[0], r[1], r[2], r[3], False) for r in gone]
        return found[:limit]


def _count(tx: Tx, version: int) -> Summary:
    flags = "CASE WHEN photos = 0 THEN 1 ELSE 0 END, CASE WHEN price IS NULL THEN 1 ELSE 0 END"
    rows = tuple(
        CountRow(r[0], r[1], r[2], r[3], int(r[7]), r[4], bool(r[5]), bool(r[6]))
        for r in tx.fetchall(
            f"SELECT dealer_id, rooftop, condition, status, vehicle_type, {flags}, COUNT(*) FROM inv_listing"
            f" WHERE tenant_id = ? GROUP BY dealer_id, rooftop, condition, status, vehicle_type, {flags}"
            " ORDER BY dealer_id, rooftop, condition, status, vehicle_type",
            (tx.tenant,),
        )
    )
    removed = {
        r[0]: int(r[1])
        for r in tx.fetchall(
            "SELECT dealer_id, COUNT(*) FROM inv_tombstone WHERE tenant_id = ? GROUP BY dealer_id", (tx.tenant,)
        )
    }
    return Summary(version, rows, removed)
