"""The operator endpoints: ``GET /healthz`` and ``GET /metrics``.

A load balancer needs one cheap yes/no per worker: the health check runs one
trivial query in a worker thread; a failure answers 503 without the exception
text (which may name hosts or credentials). With ``[[feeds]]`` it also names
each scheduled feed's state, and a feed that has not succeeded within twice its
schedule as ``overdue`` (still 200: the last good inventory is served).
``/metrics`` renders the :class:`~aap.web.metrics.Metrics` in the Prometheus
text format (every worker's series when several workers share a multi-process
directory), followed by each feed's last success and outcome (read from the
database, so every worker reports the same).
"""

from __future__ import annotations

import logging
import time

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

import aap
from aap.feeds.status import FeedStatus, feed_statuses, render_metrics
from aap.store import Stores
from aap.web.accesslog import annotate
from aap.web.metrics import CONTENT_TYPE

log = logging.getLogger("aap.health")


def database_ok(stores: Stores) -> bool:
    try:
        with stores.db.read() as tx:
            return tx.fetchone("SELECT 1") is not None
    except Exception as exc:  # any driver error means "not healthy"
        log.warning("health check failed", extra={"fields": {"error_type": type(exc).__name__}})
        return False


def _feeds(request: Request) -> list[FeedStatus]:
    """The scheduled feeds' statuses ([] without feeds, or when the database cannot say)."""
    settings = request.app.state.settings
    if not settings.feeds:
        return []
    try:
        return feed_statuses(request.app.state.stores, settings, time.time())
    except Exception as exc:  # the database check reports the database
        log.warning("feed status unavailable", extra={"fields": {"error_type": type(exc).__name__}})
        return []


async def healthz_endpoint(request: Request) -> Response:
    """200 while the primary database answers. Read replicas are reported (``ok``,
    ``lagging`` or ``down``) but never fail the check: reads fall back to the primary."""
    annotate(request.scope, binding="health")
    stores: Stores = request.app.state.stores
    ok = await run_in_threadpool(database_ok, stores)
    checks: dict[str, object] = {"database": "ok" if ok else "unavailable"}
    if stores.reads.replicas:
        checks["replicas"] = await run_in_threadpool(stores.reads.status)
    body: dict[str, object] = {
        "status": "ok" if ok else "unavailable",
        "checks": checks,
        "version": aap.__version__,
    }
    feeds = await run_in_threadpool(_feeds, request) if ok else []
    if feeds:
        # An overdue feed is reported, not fatal: the agent still serves the last good inventory.
        overdue = [f.name for f in feeds if f.overdue]
        checks["feeds"] = "overdue" if overdue else "ok"
        body["feeds"] = {f.name: f.to_json() for f in feeds}
    return Response(
        orjson.dumps(body),
        status_code=200 if ok else 503,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def metrics_endpoint(request: Request) -> Response:
    annotate(request.scope, binding="metrics")
    feeds = render_metrics(await run_in_threadpool(_feeds, request))
    return Response(request.app.state.metrics.render() + feeds, media_type=None, headers={"Content-Type": CONTENT_TYPE})
