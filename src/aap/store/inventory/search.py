"""One page of a search and its total, read in one snapshot.

The page is a keyset walk (``Position``: last sort key and id) over the
ordering's index-friendly slices, or an ``OFFSET`` for a ``skip`` entry. The
store returns ``limit + 1`` hits, so that ``next_cursor`` is null exactly when
the matching set is exhausted (``InventorySearchResponse.next_cursor``, seed 004).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import orjson

from aap.inventory.query import Position, SearchQuery
from aap.store.db import Tx
from aap.store.inventory.counts import BackgroundWork, matching_key
from aap.store.inventory.sql import (
    Clause,
    distance_case,
    full_order,
    in_list,
    keywords_per_row,
    segments,
    where_clause,
)

if TYPE_CHECKING:
    from aap.store.inventory.snapshot import InventorySnapshot

# Walking a sort index to find ``want`` matches visits about want * N / total rows, each a
# random lookup worth ~10 sequential row reads; a scan reads N. So walk only when
# total >= WALK_FACTOR * want.
WALK_FACTOR = 10


@dataclass
class Hit:
    """One search result: the listing document and, in a near search, its distance.

    The document is kept as stored (JSON text, ``doc``) and decoded only when read as
    ``listing``: the search skill hands it on as text (:class:`aap.jsontext.StoredJson`),
    which saves decoding and re-encoding every listing of every page when the door writes
    the answer (docs/benchmarks.md, "The HTTP path").

    Not a frozen dataclass, though nothing changes a hit: a page makes one per listing, and
    a frozen one sets each field through ``object.__setattr__``, several times slower.
    """

    id: str
    doc: str | bytes
    distance_mi: float | None = None
    key: tuple[Any, ...] | None = None  # sort key (None: missing value), for the next cursor

    @cached_property
    def listing(self) -> dict[str, Any]:
        """The listing document, decoded (a fresh dict for this hit: the caller may add to it)."""
        listing: dict[str, Any] = orjson.loads(self.doc)
        return listing

    @property
    def position(self) -> Position:
        return Position(self.key, self.id)


# One row of the page: (listing id, distance or None, sort key or None).
_Found = tuple[str, Any, Any]


def documents(tx: Tx, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The stored listing documents of ``ids``, by id."""
    return {ident: orjson.loads(doc) for ident, doc in stored_documents(tx, ids).items()}


def stored_documents(tx: Tx, ids: list[str]) -> dict[str, str | bytes]:
    """The stored listing documents of ``ids`` as stored (JSON text), by id."""
    if not ids:
        return {}
    sql, params = in_list("id", ids)
    rows = tx.fetchall(f"SELECT id, doc FROM inv_doc WHERE tenant_id = ? AND {sql}", [tx.tenant, *params])
    return {row[0]: row[1] for row in rows}


def search_page(
    snapshot: InventorySnapshot, query: SearchQuery, count_budget_ms: float
) -> tuple[list[Hit], int | None, BackgroundWork | None]:
    """Up to ``query.limit + 1`` hits, the exact total (None past the budget), and
    background work to start once the snapshot has closed."""
    tx = snapshot.tx
    want = query.limit + 1
    criteria = snapshot.effective(query.criteria)
    bits = snapshot.bits_for(criteria)
    matched = snapshot.matched(criteria)
    if matched is not None:  # the posting index knows the set: exact total, no count
        where, listed = snapshot.matched_where(criteria, bits, matched, want)
        found = _page(tx, query, where, len(matched), want, sort_rows=listed)
        docs = stored_documents(tx, [ident for ident, _distance, _key in found])
        return [Hit(ident, docs[ident], distance, key) for ident, distance, key in found], len(matched), None
    started = time.perf_counter()
    if snapshot.small():
        where = snapshot.where(criteria, bits)
        total, _ = snapshot.totals.count(tx, where, count_budget_ms, snapshot.version, "", started, remember=False)
        found = _page(tx, query, where, total, want)
        docs = stored_documents(tx, [ident for ident, _distance, _key in found])
        return [Hit(ident, docs[ident], distance, key) for ident, distance, key in found], total, None
    # The canonical form (keyword tokens as a subquery) keys remembered totals; it is also
    # what runs, unless the dialect resolves keyword tokens first.
    canonical = where_clause(tx.tenant, criteria, bits)
    matching = matching_key(canonical)
    total, later = snapshot.totals.remembered(tx, snapshot.version, matching, canonical)
    counted = total is not None
    where = canonical
    if criteria.tokens and snapshot.dialect.scans_keywords_first:
        if total is not None and query.skip is None and total >= WALK_FACTOR * want:
            # Dense keyword matches of a known total: walk the sort index and test each
            # row's own text, instead of scanning every listing's text for the ids.
            where = where_clause(tx.tenant, criteria, bits, keywords_per_row(criteria.tokens))
        else:
            where = snapshot.scanned_where(criteria, bits)
    if not counted:
        total, later = snapshot.totals.count(tx, where, count_budget_ms, snapshot.version, matching, started)
    found = _page(tx, query, where, total, want)
    docs = stored_documents(tx, [ident for ident, _distance, _key in found])
    return [Hit(ident, docs[ident], distance, key) for ident, distance, key in found], total, later


def _page(
    tx: Tx, query: SearchQuery, where: Clause, total: int | None, want: int, *, sort_rows: bool = False
) -> list[_Found]:
    if total == 0 or (query.skip is not None and total is not None and query.skip >= total):
        return []
    places = query.criteria.places
    distance, distance_params = distance_case(places) if places else ("NULL", [])
    where_sql, where_params = where
    if query.skip is not None:
        (keys, key_params), (order, order_params) = full_order(query)
        rows = tx.fetchall(
            f"SELECT l.id, {distance}, {keys} FROM inv_listing l WHERE {where_sql} ORDER BY {order} LIMIT ? OFFSET ?",
            distance_params + key_params + where_params + order_params + [want, query.skip],
        )
        return [(row[0], row[1], None if row[2] is None else tuple(row[2:])) for row in rows]
    # Sparse: scanning and sorting beat an index walk. No total: the count outran its
    # budget, so the set is large.
    defeat_index = sort_rows or (total is not None and total < WALK_FACTOR * want)
    found: list[_Found] = []
    for segment in segments(query, defeat_index):
        columns = "".join(f", l.{c}" for c in segment.columns)
        rows = tx.fetchall(
            f"SELECT l.id, {distance}{columns} FROM inv_listing l "
            f"WHERE {where_sql} AND {segment.where} ORDER BY {segment.order} LIMIT ?",
            distance_params + where_params + segment.params + [want - len(found)],
        )
        for row in rows:
            found.append((row[0], row[1], tuple(row[2:]) if segment.columns else segment.fixed_key))
        if len(found) >= want:
            break
    return found
