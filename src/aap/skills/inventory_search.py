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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aap.errors import AapError, Problem
from aap.inventory.query import SearchQuery, build_search_query, capability_problems, feature_vocabulary
from aap.jsontext import StoredJson
from aap.skills.context import CallContext, SkillDeps
from aap.skills.cursor import CursorCodec
from aap.spec import problem_order
from aap.store.dialect import StatementTimeout

if TYPE_CHECKING:
    from aap.store.inventory import Hit, InventorySnapshot


@contextmanager
def within_budget(inventory: InventorySnapshot, milliseconds: int) -> Iterator[None]:
    """The inventory reads inside may take ``milliseconds`` in all (``[server] search_timeout_ms``;
    0: no limit); past it the request is refused with a typed error, never left running.

    ``INTERNAL_ERROR`` because no code of the closed vocabulary says "too much work", with
    ``retryable: false`` (the same request would cost as much again) and a hint to narrow it
    (docs/search.md, "Request bounds").
    """
    try:
        with inventory.dialect.time_limit(inventory.tx, milliseconds):
            yield
    except StatementTimeout:
        raise AapError(
            "INTERNAL_ERROR",
            "The request needed more work than this endpoint spends on one request.",
            retryable=False,
            hint="Narrow the request: fewer keyword tokens, fewer filter values, or more selective filters.",
        ) from None


def make_classifier(deps: SkillDeps, *, sort: bool = True) -> Callable[[Any, list[Problem]], AapError]:
    """The error of a request that fails its schema: the schema's problems and the capability
    problems (unadvertised filters, unknown feature codes, unsupported sort) in one list.

    The code stays ``SCHEMA_VALIDATION_FAILED``, the first stage of docs/search.md
    "Validation order"; the list is what the caller needs to fix it in one go.
    """

    def vocabulary() -> list[str]:
        return [code for code, _ in feature_vocabulary(deps.settings, deps.stores.inventory)]

    def classify(request: Any, problems: list[Problem]) -> AapError:
        found = capability_problems(request, deps.settings, vocabulary, sort=sort)
        return AapError("SCHEMA_VALIDATION_FAILED", errors=sorted(problems + found, key=problem_order))

    return classify


def run(deps: SkillDeps, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    settings = deps.settings
    codec = CursorCodec(deps.stores.state, settings.cursor_ttl_seconds)
    token = (request.get("pagination") or {}).get("cursor")
    # Read before the snapshot: reading a cursor may need the state store.
    cursor = codec.read(token, ctx.now) if token is not None else None

    def answer(inventory: InventorySnapshot) -> tuple[SearchQuery, list[Hit], int | None, int]:
        with within_budget(inventory, settings.search_timeout_ms):
            query = build_search_query(
                request,
                settings,
                lambda: [code for code, _ in feature_vocabulary(settings, inventory)],
                lambda: deps.rooftops,
            )
            if cursor is not None:
                query = replace(query, after=cursor.continue_from(query.digest))
            hits, total = inventory.search(query, count_timeout_ms=settings.count_timeout_ms)
            return query, hits, total, inventory.version

    # A read replica may answer; a continuation never from an inventory older than its cursor's.
    query, hits, total, version = deps.stores.inventory.read(
        answer, min_version=cursor.min_version if cursor is not None else 0
    )

    page = hits[: query.limit]
    next_cursor = None
    if len(hits) > query.limit:
        next_cursor = codec.encode(query.digest, page[-1].position, ctx.now, version)

    vehicles: list[Any]
    if query.criteria.places is not None:
        vehicles = []
        for hit in page:
            listing = hit.listing
            listing["distance_mi"] = hit.distance_mi
            vehicles.append(listing)
    else:
        vehicles = [StoredJson(hit.doc) for hit in page]  # as stored: the door decides (aap.jsontext)

    criteria = query.criteria
    data: dict[str, Any] = {
        "currency": criteria.currency,
        "mileage_unit": criteria.mileage_unit,
        "total": total,
    }
    if query.skip is not None:
        data["skip"] = query.skip
    data.update(
        {
            "limit": query.limit,
            "vehicles": vehicles,
            "next_cursor": next_cursor,
            "applied_filters": criteria.applied,
            "sort": query.sort,
        }
    )
    if criteria.tokens:
        data["query_terms"] = list(criteria.tokens)
    return {"type": "inventory.search.response", "data": data}
