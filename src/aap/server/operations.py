"""The operator endpoints: ``GET /healthz`` and ``GET /metrics``.

A load balancer needs one cheap yes/no per worker: the health check runs one
trivial query in a worker thread; a failure answers 503 without the exception
text (which may name hosts or credentials). ``/metrics`` renders this worker's
:class:`~aap.web.metrics.Metrics` in the Prometheus text format.
"""

from __future__ import annotations

import logging

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

import aap
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


async def healthz_endpoint(request: Request) -> Response:
    """200 while the primary database answers. Read replicas are reported (``ok``,
    ``lagging`` or ``down``) but never fail the check: reads fall back to the primary."""
    annotate(request.scope, binding="health")
    stores: Stores = request.app.state.stores
    ok = await run_in_threadpool(database_ok, stores)
    checks: dict[str, object] = {"database": "ok" if ok else "unavailable"}
    if stores.reads.replicas:
        checks["replicas"] = await run_in_threadpool(stores.reads.status)
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": checks,
        "version": aap.__version__,
    }
    return Response(
        orjson.dumps(body),
        status_code=200 if ok else 503,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def metrics_endpoint(request: Request) -> Response:
    annotate(request.scope, binding="metrics")
    return Response(request.app.state.metrics.render(), media_type=None, headers={"Content-Type": CONTENT_TYPE})
