"""The console's inventory page: what the assistants see, counted; the last imports; a VIN/stock lookup.

Counts come from :class:`~aap.store.inventory.summary.InventorySummaries`
(remembered per inventory version). The import history — when the feed last
went in, and the listings it rejected or warned about — comes from the feed
store (:mod:`aap.store.feeds`) through :func:`import_history`.
A seller's staff see their seller's inventory only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from aap.console.auth import Visit
from aap.paths import CONSOLE_PREFIX, VEHICLE_PAGE_PREFIX
from aap.store import Stores

if TYPE_CHECKING:
    from aap.console import Console

PAGE = CONSOLE_PREFIX + "inventory"


@dataclass(frozen=True)
class ImportRecord:
    """One feed import as the page shows it."""

    started_ms: int
    finished_ms: int
    source: str
    outcome: str
    dealer_id: str | None
    counts: dict[str, int]
    message: str | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    rejected_lines: list[int] = field(default_factory=list)


def import_history(stores: Stores, *, dealer_id: str | None = None, limit: int = 10) -> list[ImportRecord]:
    """The latest imports, newest first, from the feed import history (``stores.feeds``, docs/feeds.md):
    counts, outcome, and the first problems with the lines of the rows the feed rejected.

    A seller's staff (``dealer_id``) see their seller's imports only. Dry runs are left out.
    """
    records = []
    for run in stores.feeds.runs(limit=limit * 3 if dealer_id else limit):
        if run.dry_run or (dealer_id is not None and run.dealer_id != dealer_id):
            continue
        records.append(
            ImportRecord(
                run.started_ms,
                run.finished_ms,
                run.feed or run.source,
                run.outcome,
                run.dealer_id,
                {
                    "rows": run.rows,
                    "new": run.inserted,
                    "updated": run.updated,
                    "removed": run.removed,
                    "rejected": run.skipped or len(run.rejected_lines),
                    "warnings": run.warnings,
                    "available after": run.total or 0,
                },
                run.message,
                run.problems,
                run.rejected_lines,
            )
        )
    return records[:limit]


async def page(console: Console, request: Request, visit: Visit) -> Response:
    # A scope's staff see the whole inventory of its sellers (what assistants see of them; a
    # rooftop's staff look up their seller's other rooftops' stock), never another seller's.
    sellers = console.accounts.scope_of(visit.session.user).sellers if console.settings.scope == "aggregate" else None
    seller = next(iter(sellers)) if sellers is not None and len(sellers) == 1 else None
    summary = await console.blocking(console.stores.inventory_summaries.summary)
    rows = [r for r in summary.rows if sellers is None or r.dealer_id in sellers]
    by_rooftop: dict[tuple[str | None, str | None], dict[str, int]] = {}
    for row in rows:
        cell = by_rooftop.setdefault((row.dealer_id, row.rooftop), {})
        for key in (row.condition or "unknown", row.status, "total"):
            cell[key] = cell.get(key, 0) + row.listings
    totals: dict[str, int] = {}
    for cell in by_rooftop.values():
        for key, value in cell.items():
            totals[key] = totals.get(key, 0) + value
    removed = sum(n for d, n in summary.removed.items() if sellers is None or d in sellers)
    term = (request.query_params.get("q") or "").strip()[:40]
    found = await console.blocking(console.stores.inventory_summaries.lookup, term, dealer_id=seller) if term else []
    found = [f for f in found if sellers is None or f.dealer_id in sellers]
    history = await console.blocking(import_history, console.stores, dealer_id=seller)
    history = [h for h in history if sellers is None or h.dealer_id in sellers]
    return console.page(
        request,
        "inventory.html",
        {
            "by_rooftop": sorted(by_rooftop.items(), key=lambda item: (item[0][0] or "", item[0][1] or "")),
            "totals": totals,
            "removed": removed,
            "term": term,
            "found": found,
            "history": history,
            "vehicle_prefix": VEHICLE_PAGE_PREFIX if console.settings.web.public_page else None,
            "version": summary.version,
        },
        visit=visit,
    )


def routes(console: Console) -> list[Route]:
    async def endpoint(request: Request, visit: Visit) -> Response:
        return await page(console, request, visit)

    return [Route(PAGE, console.guarded(endpoint), methods=["GET"])]
