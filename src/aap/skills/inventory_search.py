"""``inventory.search``: filters, keyword tokens, sort and cursor paging.

Checks run in the order of docs/search.md, "Validation order": the request
schema (done by the agent), then semantic and capability checks (building the
effective query), then the cursor. Everything the search reads of the
inventory — the feature vocabulary the capability checks use, the total and
the page — comes from one snapshot, so an import landing midway cannot make
them disagree. The snapshot may be a read replica's; a cursor carries the
inventory version of its page, so the next page is never read from an older one. The store returns ``limit + 1`` hits so that ``next_cursor`` is
null exactly when the matching set is exhausted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aap.inventory.query import SearchQuery, build_search_query, feature_vocabulary
from aap.skills.cursor import CursorCodec

if TYPE_CHECKING:
    from aap.agent import CallContext, DealerAgent
    from aap.store.inventory import Hit, InventorySnapshot


def run(agent: DealerAgent, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    settings = agent.settings
    codec = CursorCodec(agent.stores.state, settings.cursor_ttl_seconds)
    token = (request.get("pagination") or {}).get("cursor")
    # Read before the snapshot: reading a cursor may need the state store.
    cursor = codec.read(token, ctx.now) if token is not None else None

    def answer(inventory: InventorySnapshot) -> tuple[SearchQuery, list[Hit], int | None, int]:
        query = build_search_query(
            request, settings, lambda: [code for code, _ in feature_vocabulary(settings, inventory)]
        )
        if cursor is not None:
            query = replace(query, after=cursor.continue_from(query.digest))
        hits, total = inventory.search(query, count_timeout_ms=settings.count_timeout_ms)
        return query, hits, total, inventory.version

    # A read replica may answer; a continuation never from an inventory older than its cursor's.
    query, hits, total, version = agent.stores.inventory.read(
        answer, min_version=cursor.min_version if cursor is not None else 0)

    page = hits[: query.limit]
    next_cursor = None
    if len(hits) > query.limit:
        next_cursor = codec.encode(query.digest, page[-1].position, ctx.now, version)

    near = query.criteria.places is not None
    vehicles = []
    for hit in page:
        listing = hit.listing
        if near:
            listing["distance_mi"] = hit.distance_mi
        vehicles.append(listing)

    criteria = query.criteria
    data: dict[str, Any] = {
        "currency": criteria.currency,
        "mileage_unit": criteria.mileage_unit,
        "total": total,
    }
    if query.skip is not None:
        data["skip"] = query.skip
    data.update({
        "limit": query.limit,
        "vehicles": vehicles,
        "next_cursor": next_cursor,
        "applied_filters": criteria.applied,
        "sort": query.sort,
    })
    if criteria.tokens:
        data["query_terms"] = list(criteria.tokens)
    return {"type": "inventory.search.response", "data": data}
