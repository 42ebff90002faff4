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

Lead volume and failed sign-ins are nobody else's business, so ``/metrics`` can
be kept from the public in two ways (docs/deployment.md, "Metrics"): a bearer
token (``[server] metrics_token_env`` names the variable holding it), and a
listen address of its own (``[server] metrics_listen``): the server then also
listens there, :class:`OperatorDoor` answers only ``/metrics`` and ``/healthz``
on that socket, and ``/metrics`` is not found on the public one.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import aap
from aap.config.model import Settings
from aap.feeds.status import FeedStatus, feed_statuses, render_metrics
from aap.paths import HEALTHZ_PATH, METRICS_PATH
from aap.store import Stores
from aap.web.accesslog import annotate
from aap.web.errors import plain_response, route_path
from aap.web.host import direct_loopback
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


def metrics_endpoint(
    token: str | None = None, *, loopback_only: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """``GET /metrics``; with ``token``, only for ``Authorization: Bearer <token>`` (RFC 6750);
    with ``loopback_only`` (a platform with neither a token nor a port of its own), only on a
    direct loopback connection, and not found for anyone else (docs/deployment.md, "Metrics")."""
    expected = f"Bearer {token}".encode() if token else None

    async def endpoint(request: Request) -> Response:
        annotate(request.scope, binding="metrics")
        if loopback_only and not direct_loopback(request.scope):
            return plain_response(404, "Not Found")
        if expected is not None:
            given = request.headers.get("authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, expected):
                challenge = 'Bearer realm="metrics"' + (', error="invalid_token"' if given else "")
                return plain_response(
                    401, "The metrics need the operator's bearer token.", {"WWW-Authenticate": challenge}
                )
        feeds = render_metrics(await run_in_threadpool(_feeds, request))
        return Response(
            request.app.state.metrics.render() + feeds, media_type=None, headers={"Content-Type": CONTENT_TYPE}
        )

    return endpoint


def platform_metrics_endpoint(deployment: Settings) -> Callable[[Request], Awaitable[Response]]:
    """A platform's ``/metrics``: private by default (**decision**, docs/deployment.md, "Metrics"):
    without ``metrics_token_env`` or ``metrics_listen`` it answers a direct loopback connection
    only (a scraper on the same host), since a platform's host name is public and its metrics
    are every tenant's lead volume."""
    from aap.server.app import metrics_token

    private = deployment.metrics_token_env is None and deployment.metrics_listen is None
    return metrics_endpoint(metrics_token(deployment), loopback_only=private)


class OperatorDoor:
    """Pure ASGI middleware for ``[server] metrics_listen``: requests that came in on the
    operator's port reach ``/metrics`` and ``/healthz`` only, and ``/metrics`` is not on any
    other port. Which socket a request came in on is its local address (``scope["server"]``),
    which no header changes."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app = app
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            server = scope.get("server")
            operator = server is not None and server[1] == self.port
            path = route_path(scope)
            allowed = path in (METRICS_PATH, HEALTHZ_PATH) if operator else path != METRICS_PATH
            if not allowed:
                annotate(scope, binding="metrics" if operator else "other")
                await plain_response(404, "Not Found")(scope, receive, send)
                return
        await self.app(scope, receive, send)
