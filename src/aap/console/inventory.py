"""The console's inventory pages: the listings as the assistants see them, counted, browsed, looked up.

``/console/inventory`` is the browser — every listing as an assistant receives
it (photo, price, mileage, days in stock, warnings of the last import), paged
by keyset, sorted by price, mileage or days in stock, filtered by seller,
rooftop, condition, vehicle type, no photo, no price and "warned by the last
import" (:mod:`aap.store.inventory.browse`) — with the VIN/stock lookup, the
counts by rooftop and the latest imports. ``/console/inventory/{id}`` is one
listing with its import history: the warnings and rejections its rows drew.

Counts come from :class:`~aap.store.inventory.summary.InventorySummaries`
(remembered per inventory version): every filter choice shows how many
listings it keeps, and only what the inventory has is offered. The import
history comes from the feed store (:mod:`aap.store.feeds`) through
:func:`import_history`. A seller's staff see their seller's inventory only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from aap.config.localtime import local_today
from aap.console.auth import Refused, Visit
from aap.console.core import Console
from aap.inventory.labels import options
from aap.paths import CONSOLE_PREFIX, VEHICLE_PAGE_PREFIX
from aap.store import Stores
from aap.store.feeds import FeedRun
from aap.store.inventory.browse import SORT_LABELS, SORTS, BrowseFilter, BrowseRow
from aap.store.inventory.summary import Summary
from aap.store.keyset import BadCursor, Cursor
from aap.web.pages import url

PAGE = CONSOLE_PREFIX + "inventory"
PAGE_SIZE = 50


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
    run_id: str = ""
    feed: str | None = None


def run_counts(run: FeedRun) -> dict[str, int]:
    """A feed run's counts as staff read them, in the order an import makes them."""
    return {
        "rows": run.rows,
        "new": run.inserted,
        "updated": run.updated,
        "unchanged": run.unchanged,
        "removed": run.removed,
        "rejected": run.skipped or len(run.rejected_lines),
        "warnings": run.warnings,
        "available after": run.total or 0,
    }


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
                {k: n for k, n in run_counts(run).items() if k != "unchanged"},
                run.message,
                run.problems,
                run.rejected_lines,
                run.run_id,
                run.feed,
            )
        )
    return records[:limit]


def _choices(summary: Summary, sellers: frozenset[str] | None, field_name: str) -> list[tuple[str, str, int]]:
    """``(value, label, count)`` of one filter: only what the (sellers') inventory has."""
    counts: dict[str, int] = {}
    for row in summary.rows:
        if sellers is not None and row.dealer_id not in sellers:
            continue
        value = getattr(row, field_name)
        if value is not None:
            counts[value] = counts.get(value, 0) + row.listings
    return [(code, text, counts[code]) for code, text in options(field_name, counts)]


def _flag(params: Any, name: str) -> bool:
    return params.get(name) in ("1", "on", "true")


@dataclass(frozen=True)
class Shown:
    """A listing row as the page shows it."""

    row: BrowseRow
    days: int | None  # in stock, in its rooftop's local calendar

    @property
    def doc(self) -> dict[str, Any]:
        return self.row.doc


def _days_in_stock(console: Console, doc: dict[str, Any]) -> int | None:
    text = doc.get("inventory_date")
    try:
        day = date.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        day = None
    if day is None:
        return None
    return max(0, (local_today(console.zone(doc.get("dealer_id"), doc.get("rooftop"))) - day).days)


def scope_sellers(console: Console, visit: Visit) -> frozenset[str] | None:
    """The sellers whose inventory the person sees (None: every seller). A scope's staff see the
    whole inventory of its sellers (what assistants see of them; a rooftop's staff look up their
    seller's other rooftops' stock), never another seller's."""
    if console.settings.scope != "aggregate":
        return None
    return console.accounts.scope_of(visit.session.user).sellers


async def page(console: Console, request: Request, visit: Visit) -> Response:
    sellers = scope_sellers(console, visit)
    seller = next(iter(sellers)) if sellers is not None and len(sellers) == 1 else None
    params = request.query_params
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
    term = (params.get("q") or "").strip()[:40]
    found = await console.blocking(console.stores.inventory_summaries.lookup, term, dealer_id=seller) if term else []
    found = [f for f in found if sellers is None or f.dealer_id in sellers]
    history = await console.blocking(import_history, console.stores, dealer_id=seller, limit=5)
    history = [h for h in history if sellers is None or h.dealer_id in sellers]

    # -- the browser ---------------------------------------------------------------------
    problems: list[str] = []
    seller_choices = (
        [
            (p.dealer_id, p.name)
            for p in console.settings.dealers
            if p.dealer_id and (sellers is None or p.dealer_id in sellers)
        ]
        if console.settings.scope == "aggregate" and seller is None
        else []
    )

    def chosen(name: str, allowed: list[Any]) -> str | None:
        value = (params.get(name) or "").strip()
        if not value:
            return None
        if value not in allowed:
            problems.append(f"{name.replace('_', ' ').capitalize()}: choose one of the listed values.")
            return None
        return value

    rooftops = _choices(summary, sellers, "rooftop")
    conditions = _choices(summary, sellers, "condition")
    types = _choices(summary, sellers, "vehicle_type")
    dealer_id = seller or chosen("seller", [d for d, _ in seller_choices])
    wanted = BrowseFilter(
        sellers=sellers,
        dealer_id=dealer_id,
        rooftop=chosen("rooftop", [r[0] for r in rooftops]),
        condition=chosen("condition", [c[0] for c in conditions]),
        vehicle_type=chosen("vehicle_type", [t[0] for t in types]),
        no_photo=_flag(params, "no_photo"),
        no_price=_flag(params, "no_price"),
        warned=_flag(params, "warned"),
    )
    sort = params.get("sort") or "in_stock"
    if sort not in SORTS:
        problems.append("Sort: choose one of the listed orders.")
        sort = "in_stock"
    cursor = None
    if params.get("after"):
        try:
            cursor = Cursor.decode(params["after"], SORTS[sort])
        except BadCursor:
            problems.append("This page link is not valid any more; start from the first page.")
    runs = await console.blocking(console.stores.feeds.latest_imports)
    browser = console.stores.inventory_browser
    matches = await console.blocking(browser.warned_count, wanted, runs) if wanted.warned else wanted.counts(summary)
    listed, next_cursor = await console.blocking(
        browser.page, wanted, matches=matches, sort=sort, cursor=cursor, runs=runs, limit=PAGE_SIZE
    )
    shown = [Shown(r, _days_in_stock(console, r.doc)) for r in listed]
    kept = [(k, v) for k, v in params.multi_items() if k not in ("after", "q")]
    here = url(request, PAGE)
    flags = {
        "no_photo": BrowseFilter(sellers, dealer_id, no_photo=True).counts(summary),
        "no_price": BrowseFilter(sellers, dealer_id, no_price=True).counts(summary),
    }
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
            "vehicle_prefix": url(request, VEHICLE_PAGE_PREFIX) if console.settings.web.public_page else None,
            "version": summary.version,
            "filter": params,
            "problems": problems,
            "rows": shown,
            "matches": matches,
            "sorts": list(SORT_LABELS.items()),
            "sort": sort,
            "rooftops": rooftops,
            "conditions": conditions,
            "types": types,
            "sellers": seller_choices,
            "flags": flags,
            "active_filters": len([k for k, v in kept if v and k != "sort"]),
            "next": f"{here}?{urlencode(kept + [('after', next_cursor.encode())])}" if next_cursor else None,
            "first": f"{here}?{urlencode(kept)}" if cursor else None,
        },
        visit=visit,
        status_code=400 if problems else 200,
    )


async def listing(console: Console, request: Request, visit: Visit) -> Response:
    """One listing as the assistants see it, and its import history."""
    sellers = scope_sellers(console, visit)
    vehicle_id = request.path_params["vehicle_id"][:200]
    doc = await console.blocking(console.stores.inventory_browser.listing, vehicle_id)
    gone = None if doc is not None else await console.blocking(console.stores.inventory_browser.removed, vehicle_id)
    owner = doc.get("dealer_id") if doc is not None else (gone[0] if gone else None)
    if (doc is None and gone is None) or (sellers is not None and owner not in sellers):
        raise Refused(404, "There is no such listing, or it is not one of your seller's.", visit=visit)
    notes = await console.blocking(console.stores.feeds.listing_notes, vehicle_id)
    history = await console.blocking(import_history, console.stores, dealer_id=owner if sellers else None, limit=10)
    zone = console.zone(owner, (doc or {}).get("rooftop"))
    return console.page(
        request,
        "listing.html",
        {
            "doc": doc,
            "vehicle_id": vehicle_id,
            "removed_us": gone[1] if gone else None,
            "notes": notes,
            "history": history,
            "zone": zone,
            "days": _days_in_stock(console, doc) if doc else None,
            "vehicle_prefix": url(request, VEHICLE_PAGE_PREFIX) if console.settings.web.public_page else None,
        },
        visit=visit,
    )


def routes(console: Console) -> list[Route]:
    return [
        Route(PAGE, console.endpoint(page), methods=["GET"]),
        Route(PAGE + "/{vehicle_id:str}", console.endpoint(listing), methods=["GET"]),
    ]
