"""The operator endpoints: ``GET /healthz`` and ``GET /metrics``.

A load balancer needs one cheap yes/no per worker: the health check runs one
trivial query in a worker thread; a failure answers 503 without the exception
text (which may name hosts or credentials). ``/metrics`` renders the
:class:`~aap.web.metrics.Metrics` in the Prometheus text format: every worker's
series when several workers share a multi-process directory.
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
    annotate(request.scope, binding="health")
    ok = await run_in_threadpool(database_ok, request.app.state.stores)
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {"database": "ok" if ok else "unavailable"},
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
