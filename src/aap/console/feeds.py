"""The console's feed pages: every configured feed, its schedule, its runs, their warnings and rejects.

``/console/feeds`` lists each ``[[feeds]]`` entry (docs/feeds.md, "Schedules")
with its source, schedule, next run and the lease (a run in progress, here
or on another worker), its latest runs with their counts, and the imports
made by hand; ``/console/feeds/runs/{run_id}`` is one run in full, its
warnings and rejected rows listed and downloadable as CSV.

**Run now** (admins; audited) imports a feed at once through
:meth:`aap.feeds.scheduler.FeedScheduler.run_feed` — the scheduler's own code,
under the same database lease (:meth:`aap.store.feeds.FeedStore.claim`), so
a feed never runs twice at a time however many workers, schedulers and
buttons there are. The import runs in the background of the worker that
got the click; the page polls the feed's state and reloads when the run is
recorded. A seller's staff (on a marketplace) see their sellers' feeds and runs only.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from aap.config.feeds import FeedSettings
from aap.console.auth import Refused, Visit
from aap.console.core import Console
from aap.console.inventory import run_counts, scope_sellers
from aap.feeds.fetch import display_source
from aap.paths import CONSOLE_PREFIX
from aap.store.feeds import NOTE_KINDS, FeedNote, FeedRun, FeedState
from aap.web.pages import url

log = logging.getLogger("aap.console")

PAGE = CONSOLE_PREFIX + "feeds"
RUNS_SHOWN = 5
NOTES_SHOWN = 500
CSV_COLUMNS = ("line", "kind", "listing", "location", "column", "value", "message")


class FeedRunner:
    """The "run now" imports this worker started, so that a stopping server waits for them."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, feed: FeedSettings, started_by: str) -> None:
        task = asyncio.create_task(self._run(feed, started_by))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, feed: FeedSettings, started_by: str) -> None:
        from aap.feeds.scheduler import FeedScheduler  # the import pipeline: loaded with the first run

        scheduler = FeedScheduler(self.console.stores, self.console.settings, work=self.console.gateway.work)
        try:
            result = await scheduler.run_feed(feed, due_only=False, trigger="console")
        except Exception as exc:  # no text: it may name the source's data
            log.error("feed run from the console failed", extra={"fields": {"error_type": type(exc).__name__}})
            return
        if result is None:
            log.info("feed run from the console skipped: the feed is running elsewhere", extra={"fields": {}})

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.tasks:
                await asyncio.wait(list(self.tasks), timeout=30)


def _visible(console: Console, visit: Visit) -> list[FeedSettings]:
    """The feeds of the sellers the person's scope reaches (every feed: admins, one dealer)."""
    sellers = scope_sellers(console, visit)
    return [f for f in console.settings.feeds if sellers is None or f.dealer_id in sellers]


def _running(state: FeedState | None, now_ms: int) -> bool:
    return bool(state and state.lease_token and (state.lease_until_ms or 0) > now_ms)


def _feed_state(state: FeedState | None, runs: list[FeedRun], now_ms: int) -> str:
    """What the page polls: it changes when a run starts, ends or is recorded."""
    latest = runs[0].run_id if runs else ""
    return f"{'running' if _running(state, now_ms) else 'idle'}:{latest}"


def _notice(params: Any, feeds: list[FeedSettings]) -> str | None:
    """The notice after "run now", by code and a feed the person sees (never text taken from the link)."""
    name = params.get("feed")
    if name not in {f.name for f in feeds}:
        return None
    return {
        "started": f"{name}: import started; its run appears below when it ends.",
        "busy": f"{name} is being imported already; its run appears below when it ends.",
    }.get(params.get("notice") or "")


async def feeds_page(console: Console, request: Request, visit: Visit) -> Response:
    now = console.now_ms()
    feeds = _visible(console, visit)
    states = {s.feed: s for s in await console.blocking(console.stores.feeds.states)}
    shown = []
    for feed in feeds:
        runs = await console.blocking(console.stores.feeds.runs, limit=RUNS_SHOWN, feed=feed.name)
        state = states.get(feed.name)
        shown.append(
            {
                "feed": feed,
                "source": display_source(feed.source),
                "state": state,
                "running": _running(state, now),
                "poll": _feed_state(state, runs, now),
                "runs": [(r, run_counts(r)) for r in runs],
            }
        )
    sellers = scope_sellers(console, visit)
    by_hand = [
        (r, run_counts(r))
        for r in await console.blocking(console.stores.feeds.runs, limit=40)
        if r.feed is None and not r.dry_run and (sellers is None or r.dealer_id in sellers)
    ][:10]
    return console.page(
        request,
        "feeds.html",
        {
            "feeds": shown,
            "by_hand": by_hand,
            "notice": _notice(request.query_params, feeds),
            "can_run": visit.is_admin,
        },
        visit=visit,
    )


def _feed(console: Console, name: str, visit: Visit) -> FeedSettings:
    found = next((f for f in _visible(console, visit) if f.name == name), None)
    if found is None:
        raise Refused(404, "There is no such feed.", visit=visit)
    return found


async def run_now(console: Console, runner: FeedRunner, request: Request, visit: Visit) -> Response:
    """POST (admins): the feed imported at once in this worker's background, unless it runs already (audited)."""
    feed = _feed(console, request.path_params["name"], visit)
    state = await console.blocking(console.stores.feeds.state, feed.name)
    busy = _running(state, console.now_ms())
    await console.blocking(console.audit, visit.email, "feed.run", feed.name, {"started": not busy})
    if not busy:
        runner.start(feed, visit.email)
    notice = "busy" if busy else "started"
    query = urlencode({"notice": notice, "feed": feed.name})
    return RedirectResponse(url(request, f"{PAGE}?{query}#feed-{feed.name}"), status_code=303)


async def feed_state(console: Console, request: Request, visit: Visit) -> Response:
    """What the page polls while a run goes on (:func:`_feed_state`)."""
    feed = _feed(console, request.path_params["name"], visit)
    state = await console.blocking(console.stores.feeds.state, feed.name)
    runs = await console.blocking(console.stores.feeds.runs, limit=1, feed=feed.name)
    return JSONResponse({"state": _feed_state(state, runs, console.now_ms())}, headers={"Cache-Control": "no-store"})


async def _run_or_404(console: Console, request: Request, visit: Visit) -> FeedRun:
    run = await console.blocking(console.stores.feeds.run, request.path_params["run_id"][:64])
    sellers = scope_sellers(console, visit)
    if run is None or (sellers is not None and run.dealer_id not in sellers):
        raise Refused(404, "There is no such import in the history.", visit=visit)
    return run


async def run_page(console: Console, request: Request, visit: Visit) -> Response:
    run = await _run_or_404(console, request, visit)
    notes = await console.blocking(console.stores.feeds.notes, run.run_id, limit=NOTES_SHOWN + 1)
    counts = (await console.blocking(console.stores.feeds.note_counts, [run.run_id])).get(run.run_id, {})
    return console.page(
        request,
        "feed_run.html",
        {
            "run": run,
            "counts": run_counts(run),
            "notes": notes[:NOTES_SHOWN],
            "more_notes": len(notes) > NOTES_SHOWN,
            "note_counts": counts,
            "kinds": NOTE_KINDS,
        },
        visit=visit,
    )


async def run_notes(console: Console, request: Request, visit: Visit) -> Response:
    """A run's warnings and rejects (``kind``: one of them) as CSV."""
    run = await _run_or_404(console, request, visit)
    kind = request.query_params.get("kind") or None
    if kind is not None and kind not in NOTE_KINDS:
        raise Refused(400, "Kind: warning or rejected.", visit=visit)
    notes = await console.blocking(console.stores.feeds.notes, run.run_id, kind=kind)
    name = f"{run.run_id}-{kind or 'notes'}.csv"
    return StreamingResponse(
        _csv(notes),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
    )


def routes(console: Console, runner: FeedRunner) -> list[Route]:
    return [
        Route(PAGE, console.endpoint(feeds_page), methods=["GET"]),
        Route(PAGE + "/runs/{run_id:str}", console.endpoint(run_page), methods=["GET"]),
        Route(PAGE + "/runs/{run_id:str}/notes.csv", console.endpoint(run_notes), methods=["GET"]),
        Route(
            PAGE + "/{name:str}/run", console.guarded(partial(run_now, console, runner), admin=True), methods=["POST"]
        ),
        Route(PAGE + "/{name:str}/state", console.endpoint(feed_state), methods=["GET"]),
    ]


def _cell(value: Any) -> str:
    """A CSV cell a spreadsheet will not run as a formula (a feed's values are the dealer's, but may
    be anyone's: a provider's export)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv(notes: list[FeedNote]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for n in notes:
        writer.writerow([_cell(v) for v in (n.line, n.kind, n.listing_id, n.location, n.column, n.value, n.message)])
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
