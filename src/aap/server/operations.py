"""The operator endpoints: ``GET /healthz``, ``GET /livez``, ``GET /readyz`` and ``GET /metrics``.

Two questions an orchestrator asks are kept apart (docs/deployment.md, "Health, liveness and
readiness"): ``/livez`` says the process serves, and never touches the database — a database
that blips must not get every worker restarted; ``/readyz`` says this worker can answer now: the
database answers, its schema is the one this code was written for, and on a platform the
registry of tenants has been followed recently (a worker that stopped following it would serve
removed tenants). ``/healthz`` stays what load balancers and the console already read.

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

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import aap
from aap.config.model import Settings
from aap.feeds.status import FeedStatus, feed_statuses, render_metrics
from aap.paths import METRICS_PATH, PROBE_PATHS
from aap.store import Stores
from aap.store.db import Database, Migrations
from aap.store.migrations import pending
from aap.web.accesslog import annotate
from aap.web.errors import plain_response, route_path
from aap.web.host import direct_loopback
from aap.web.metrics import CONTENT_TYPE

log = logging.getLogger("aap.health")


def database_ok(stores: Stores) -> bool:
    """The database answers, and on SQLite its file is still where the agent serves it from: a
    connection opened earlier keeps answering from a file removed or replaced meanwhile."""
    path = getattr(stores.db, "path", None)
    if stores.db.in_process and path and path != ":memory:" and not os.path.isfile(path):
        log.warning("health check failed", extra={"fields": {"error_type": "DatabaseFileMissing"}})
        return False
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
    ok = await request.app.state.work.blocking(database_ok, stores)
    checks: dict[str, object] = {"database": "ok" if ok else "unavailable"}
    if stores.reads.replicas:
        checks["replicas"] = await request.app.state.work.blocking(stores.reads.status)
    body: dict[str, object] = {
        "status": "ok" if ok else "unavailable",
        "checks": checks,
        "version": aap.__version__,
    }
    feeds = await request.app.state.work.blocking(_feeds, request) if ok else []
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


def _probe_answer(ok: bool, body: dict[str, object]) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=200 if ok else 503,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def livez_endpoint(request: Request) -> Response:
    """200 whenever the process answers at all: nothing else is asked, the database least."""
    annotate(request.scope, binding="health")
    return _probe_answer(True, {"status": "ok"})


@dataclass(frozen=True)
class Readiness:
    """What ``/readyz`` checks: the database and its schema, and on a platform the registry."""

    db: Database
    domains: tuple[Migrations, ...]
    #: Seconds since the platform's registry was last followed (None: not yet); absent when the
    #: deployment is one agent.
    registry_age: Callable[[], float | None] | None = None
    #: How old the last look at the registry may be and the worker still ready.
    registry_max_age: float = 10.0

    def check(self) -> dict[str, str]:
        """Each check's outcome (``ok`` or why not); run in a worker thread."""
        checks: dict[str, str] = {}
        try:
            behind = pending(self.db, self.domains)
            checks["database"] = "ok"
            checks["migrations"] = "pending" if behind else "current"
        except Exception as exc:  # any driver error means "not ready"; its text may name hosts
            log.warning("readiness check failed", extra={"fields": {"error_type": type(exc).__name__}})
            checks["database"] = "unavailable"
        if self.registry_age is not None:
            age = self.registry_age()
            checks["registry"] = "followed" if age is not None and age <= self.registry_max_age else "stale"
        return checks


READY = {"database": "ok", "migrations": "current", "registry": "followed"}
#: A probe gets its answer within this, even from a database that hangs (a probe's own timeout
#: is a few seconds; the check left running ends with the connection pool's timeout).
READY_TIMEOUT = 5.0


def readyz_endpoint(readiness: Readiness) -> Callable[[Request], Awaitable[Response]]:
    """``GET /readyz``: 200 when every check passes, else 503 naming the ones that did not."""

    async def endpoint(request: Request) -> Response:
        annotate(request.scope, binding="health")
        try:
            checks = await asyncio.wait_for(request.app.state.work.blocking(readiness.check), READY_TIMEOUT)
        except TimeoutError:
            checks = {"database": "timeout"}
        ok = all(READY[name] == outcome for name, outcome in checks.items())
        return _probe_answer(ok, {"status": "ready" if ok else "unready", "checks": checks})

    return endpoint


def metrics_endpoint(
    token: str | None = None, *, loopback_only: bool = False, extra: Callable[[], str] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """``GET /metrics``; with ``token``, only for ``Authorization: Bearer <token>`` (RFC 6750);
    with ``loopback_only`` (a platform with neither a token nor a port of its own), only on a
    direct loopback connection, and not found for anyone else (docs/deployment.md, "Metrics").
    ``extra``: more series read from the database (blocking; a platform's tenant states)."""
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
        feeds = render_metrics(await request.app.state.work.blocking(_feeds, request))
        if extra is not None:
            feeds += await request.app.state.work.blocking(_extra, extra)
        # Off the event loop: on a platform the series of every tenant served make the text
        # long, and with several workers each of their files is read.
        text = await request.app.state.work.blocking(request.app.state.metrics.render)
        return Response(text + feeds, media_type=None, headers={"Content-Type": CONTENT_TYPE})

    return endpoint


def metrics_token(settings: Settings) -> str | None:
    """The bearer token ``/metrics`` requires: the value of ``[server] metrics_token_env``
    (the server refuses to start while it is unset, :mod:`aap.config.environment`)."""
    if settings.metrics_token_env is None:
        return None
    token = os.environ.get(settings.metrics_token_env)
    if not token:
        raise ValueError(f"[server] metrics_token_env: environment variable {settings.metrics_token_env} is not set")
    return token


def _extra(render: Callable[[], str]) -> str:
    try:
        return render()
    except Exception as exc:  # the database check reports the database
        log.warning("metrics from the database unavailable", extra={"fields": {"error_type": type(exc).__name__}})
        return ""


def platform_metrics_endpoint(
    deployment: Settings, token: str | None, tenant_states: Callable[[], str] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """A platform's ``/metrics``: private by default (**decision**, docs/deployment.md, "Metrics"):
    without ``metrics_token_env`` or ``metrics_listen`` it answers a direct loopback connection
    only (a scraper on the same host), since a platform's host name is public and its metrics
    are every tenant's lead volume. ``token``: the one ``metrics_token_env`` names;
    ``tenant_states``: the broken and suspended tenants' gauges."""
    private = deployment.metrics_token_env is None and deployment.metrics_listen is None
    return metrics_endpoint(token, loopback_only=private, extra=tenant_states)


class OperatorDoor:
    """Pure ASGI middleware for ``[server] metrics_listen``: requests that came in on the
    operator's port reach ``/metrics`` and the probes (``/healthz``, ``/livez``, ``/readyz``) only, and ``/metrics`` is not on any
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
            allowed = (path == METRICS_PATH or path in PROBE_PATHS) if operator else path != METRICS_PATH
            if not allowed:
                annotate(scope, binding="metrics" if operator else "other")
                await plain_response(404, "Not Found")(scope, receive, send)
                return
        await self.app(scope, receive, send)
