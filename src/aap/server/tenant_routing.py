"""Which tenant a request is for, by its ``Host`` and path (docs/platform.md, "Routing").

- a tenant's domain → that tenant's agent at the ordinary paths, its public URL ``https://HOST``;
- the platform's own host → ``/t/ID/…`` is tenant ``ID`` under that prefix (public URL
  ``https://PLATFORM_HOST/t/ID``), the RFC 8414/9728 path-suffixed metadata of such an issuer
  (``/.well-known/oauth-authorization-server/t/ID``), ``POST /a2a`` for a tenant whose card
  declares an A2A ``tenant`` routing value, and the platform's own endpoints (``/_platform/…``,
  ``/healthz``, ``/livez``, ``/readyz``, ``/metrics``);
- anything else → 404, with no tenant's data;
- two ``Host`` fields, or a ``Host`` that is not ``host[:port]`` → 400 (RFC 9112 §3.2);
- ``/_platform/tls-allowed`` → the platform's answer on a direct loopback connection
  (the proxy's own question), whatever its ``Host``; 404 for everyone else;
- a tenant that is suspended, or whose stored configuration does not load → 503 with
  ``Retry-After``, in the shape of the surface the path belongs to (a JSON-RPC error with the
  ``aap.error`` detail on ``/a2a`` and ``/mcp``, Poppy's on ``/poppy/v1/``, else
  ``{"error": {"status", "code", "message", "retry_after_seconds"}}``, or a short page for a
  browser): :func:`unavailable_response`.

Hosts are remembered until the registry's change rows say otherwise (:class:`ChangeFeed`):
every worker of every host follows the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap.bindings import jsonrpc as rpc
from aap.bindings.jsonrpc import RpcError
from aap.config.platform import PlatformSettings, host_problem, normalise_domain, tenant_id_problem
from aap.errors import AapError, unexpected
from aap.paths import A2A_PATH, METRICS_PATH, OAUTH_METADATA_PATH, PROBE_PATHS, PROTECTED_RESOURCE_PATH
from aap.server.dispatch import RUNTIME_KEY, not_found
from aap.server.tenant_runtime import Runtimes, TenantUnavailable
from aap.store.platform import PlatformStore, TenantRecord
from aap.telemetry.logfields import working_for
from aap.web.accesslog import annotate
from aap.web.body import REFUSED, BodyTooLarge, read_body
from aap.web.errors import ErrorShapes, plain_error, prefers_html, route_path
from aap.web.host import BadHost, direct_loopback, request_host
from aap.web.middleware import HttpMiddleware
from aap.work import Work

log = logging.getLogger("aap.platform")


PLATFORM_PREFIX = "/_platform/"
TLS_ALLOWED_PATH = "/_platform/tls-allowed"
TENANT_PREFIX = "/t/"
#: Hosts remembered as a tenant's between changes: enough for every domain of a large platform,
#: since only the registry's own domains are remembered here (a request for any other host
#: name is remembered among :data:`NOBODY_KEPT`).
HOSTS_KEPT = 1_000_000
#: Host names remembered as nobody's (a client may send any): a bound of their own, so that
#: requests for made-up names never push a tenant's domains out.
NOBODY_KEPT = 10_000


def _host(scope: Scope) -> str:
    """The request's host name, lower case, without its port or a trailing dot ("" when absent
    or refused: :class:`TenantRouting` answers a bad ``Host`` before anything else)."""
    try:
        return request_host(scope)
    except BadHost:
        return ""


def bad_request(message: str) -> Response:
    body = {"error": {"status": 400, "message": message}}
    return Response(orjson.dumps(body), status_code=400, media_type="application/json")


#: What a suspended or broken tenant's callers are told (never the reason, which is the operator's).
UNAVAILABLE = {
    "suspended": ("TENANT_SUSPENDED", "This agent is suspended by its platform; try again later."),
    "broken": ("TENANT_UNAVAILABLE", "This agent is not available right now; try again later."),
}


def unavailable_response(shapes: ErrorShapes, scope: Scope, unavailable: TenantUnavailable) -> Response:
    """503 with ``Retry-After`` (RFC 9110 §10.2.3), in the shape of the surface of the path: the
    protocol doors' own error (``INTERNAL_ERROR``, retryable, with ``retry_after_ms``: seed
    ``Error.retryable``, ``details.retry_after_ms``), else a typed JSON body or, for a browser, a
    short page."""
    code, message = UNAVAILABLE[unavailable.state]
    seconds = unavailable.retry_after
    headers = {"Retry-After": str(seconds), "Cache-Control": "no-store"}
    error = AapError("INTERNAL_ERROR", message, retry_after_ms=seconds * 1000, retryable=True)
    shape = shapes.for_path(route_path(scope))
    if shape is plain_error:
        if prefers_html(Request(scope)):
            page = f"<!doctype html><title>Not available</title><h1>Not available</h1><p>{message}</p>"
            return Response(page, status_code=503, media_type="text/html", headers=headers)
        body = {"error": {"status": 503, "code": code, "message": message, "retry_after_seconds": seconds}}
        return Response(orjson.dumps(body), status_code=503, media_type="application/json", headers=headers)
    response = shape(503, error)
    response.status_code = 503
    response.headers.update(headers)
    return response


def _a2a_tenant_of(body: bytes) -> tuple[Any, str | None]:
    """(the JSON-RPC id to echo, ``params.tenant``) of a request body, whatever its shape."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(message, dict):
        return None, None
    request_id = message.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    params = message.get("params")
    value = params.get("tenant") if isinstance(params, dict) else None
    return request_id, value if isinstance(value, str) and value else None


class Hosts:
    """Host name → tenant id, read from the registry once and remembered until it changes.

    A worker learns every tenant's domains when it starts (:meth:`learn`, from the pages of the
    registry it loads tenants from), so that a request spread over many tenants finds its
    tenant without a read of its own; a name it does not know is read once, then remembered.
    """

    def __init__(self, store: PlatformStore, work: Work) -> None:
        self.store = store
        self.work = work
        #: A plain dict, oldest first, not kept in order of use: it holds every domain of the
        #: platform, which a dict holds in about half an ordered one's memory.
        self._known: dict[str, str] = {}
        self._nobody: OrderedDict[str, None] = OrderedDict()
        #: Counts the changes forgotten: what was read before one may be older than it.
        self.generation = 0

    async def tenant(self, host: str) -> str | None:
        known = self._known.get(host)
        if known is not None:
            return known
        if host in self._nobody or host_problem(host):
            return None  # known to be nobody's, or not a name any tenant can have: no read
        return await self._look_up(host, self.store.tenant_at, host)

    async def a2a_tenant(self, value: str) -> str | None:
        """The tenant whose card declares the A2A routing value ``value``, or None."""
        key = "a2a:" + value
        known = self._known.get(key)
        if known is not None or key in self._nobody or len(value) > 200:
            return known
        return await self._look_up(key, self.store.tenant_for_a2a, value)

    async def _look_up(self, name: str, read: Callable[[str], str | None], value: str) -> str | None:
        """``read(value)`` from the registry, remembered under ``name`` unless a change crossed the read."""
        generation = self.generation
        tenant_id = await self.work.blocking(read, value)
        if generation == self.generation:  # else asked again next time
            if tenant_id is None:
                self._nobody[name] = None
                while len(self._nobody) > NOBODY_KEPT:
                    self._nobody.popitem(last=False)
            else:
                self._known[name] = tenant_id
                self._bound()
        return tenant_id

    def learn(self, records: Sequence[TenantRecord], generation: int) -> None:
        """Remember the domains of ``records``, a page of the registry read at ``generation``
        (a page read before a change is not learned: its hosts are read when asked for)."""
        if generation != self.generation:
            return
        for record in records:
            for host in record.domains:
                self._known[host] = record.tenant_id
        self._bound()

    def _bound(self) -> None:
        """At most :data:`HOSTS_KEPT`, the oldest learned dropped first (read again when asked)."""
        while len(self._known) > HOSTS_KEPT:
            del self._known[next(iter(self._known))]

    def forget(self, *tenant_ids: str) -> None:
        """Forget every host (and routing value) of ``tenant_ids``, and every one known to be
        nobody's: one pass over what is known for all the changes of a look at the registry."""
        self.generation += 1
        changed = set(tenant_ids)
        for host in [h for h, t in self._known.items() if t in changed]:
            del self._known[host]
        self._nobody.clear()


class ChangeFeed:
    """Follows the registry's change rows and drops what this worker built for changed tenants."""

    def __init__(self, store: PlatformStore, runtimes: Runtimes, hosts: Hosts, poll_ms: int) -> None:
        self.store, self.runtimes, self.hosts = store, runtimes, hosts
        self.poll = poll_ms / 1000
        self.seen = 0
        self.followed_at: float | None = None  # monotonic time of the last look that succeeded
        #: ``/readyz`` fails once the last look is older than this (a few missed polls).
        self.max_age = max(10.0, 20 * self.poll)

    def age(self) -> float | None:
        """Seconds since the registry was last read successfully (None: never)."""
        return None if self.followed_at is None else time.monotonic() - self.followed_at

    async def start(self) -> None:
        self.seen = await self.runtimes.work.blocking(self.store.last_change)
        self.followed_at = time.monotonic()

    async def once(self) -> int:
        """Apply the changes made since the last look; returns how many there were."""
        changes = await self.runtimes.work.blocking(self.store.changes_since, self.seen)
        for change in changes:
            self.runtimes.drop(change.tenant_id)
            self.seen = change.seq
        if changes:
            self.hosts.forget(*(change.tenant_id for change in changes))
        self.followed_at = time.monotonic()
        # A configuration that passed its checks where it was written (another process, its own
        # environment) may not load here: found and reported now, not at a customer's request.
        loaded = {c.tenant_id: None for c in changes if c.kind in ("added", "updated", "resumed")}
        if loaded:
            self.runtimes.check_soon(list(loaded))
        return len(changes)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.once()
            except Exception as exc:  # the database may be briefly unavailable: keep following
                log.warning("tenant changes unavailable: %s", type(exc).__name__)
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.poll)
            except TimeoutError:
                pass


# -- routing ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class TenantRouting(HttpMiddleware):
    """Resolves the tenant of a request and hands it on (or answers 404).

    It runs ahead of the body limit so that a prefixed tenant's paths (``/t/ID/a2a``) are seen
    by everything after it as the tenant's own (``/a2a``, with ``root_path = /t/ID``): the body
    limit and the error handlers answer in the shape of the tenant's surface.
    """

    app: ASGIApp
    platform: PlatformSettings
    runtimes: Runtimes
    hosts: Hosts
    platform_app: ASGIApp
    max_body_bytes: int
    operator_port: bool = False
    shapes: ErrorShapes = field(default_factory=ErrorShapes)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            host = request_host(scope)
        except BadHost as exc:  # RFC 9112 §3.2: routed by Host, so never a guess at it
            annotate(scope, binding="platform")
            await bad_request(f"Bad Host header: {exc}.")(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path == TLS_ALLOWED_PATH:
            # The proxy's own question, whatever Host it sends (Caddy's ask carries its URL's
            # host, 127.0.0.1:PORT); hidden from everyone else (docs/platform.md, "Certificates").
            if direct_loopback(scope):
                await self.platform_app(scope, receive, send)
            else:
                await not_found()(scope, receive, send)
            return
        if host == self.platform.host:
            await self._platform_host(scope, receive, send, path)
            return
        if path in PROBE_PATHS or (path == METRICS_PATH and self.operator_port):
            # A load balancer may ask any host; with [server] metrics_listen the operator's port
            # serves /metrics whatever its Host (OperatorDoor keeps it off the public port).
            await self.platform_app(scope, receive, send)
            return
        tenant_id = await self.hosts.tenant(host) if host else None
        if tenant_id is None:
            await not_found("No agent is served at this host.")(scope, receive, send)
            return
        await self._tenant(tenant_id, f"https://{host}", scope, receive, send)

    async def _platform_host(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        if path == A2A_PATH and scope["method"] == "POST" and REFUSED not in scope:
            await self._shared_a2a(scope, receive, send)
            return
        if self.platform.tenant_prefix:
            for well_known in (OAUTH_METADATA_PATH, PROTECTED_RESOURCE_PATH):
                # RFC 8414 §3 / RFC 9728 §3.1: an issuer or resource with a path has its metadata
                # at the well-known path followed by that path, on the host root.
                if path.startswith(well_known + TENANT_PREFIX):
                    tenant_id, _, rest = path[len(well_known) + len(TENANT_PREFIX) :].partition("/")
                    if tenant_id_problem(tenant_id) is None:
                        inner = well_known + ("/" + rest if rest else "")
                        rewritten = f"/t/{tenant_id}{inner}"
                        scope = dict(scope, path=rewritten, raw_path=rewritten.encode("latin-1"))
                        await self._tenant(tenant_id, self.platform.prefix_url(tenant_id), scope, receive, send)
                        return
            if path.startswith(TENANT_PREFIX):
                tenant_id, slash, _rest = path[len(TENANT_PREFIX) :].partition("/")
                if tenant_id_problem(tenant_id) is None:
                    if not slash:  # /t/ID: the tenant's public page lives at /t/ID/
                        await Response(status_code=308, headers={"Location": path + "/"})(scope, receive, send)
                        return
                    await self._tenant(tenant_id, self.platform.prefix_url(tenant_id), scope, receive, send)
                    return
                await not_found("No such tenant.")(scope, receive, send)
                return
        await self.platform_app(scope, receive, send)

    async def _shared_a2a(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST https://PLATFORM_HOST/a2a``: the tenant whose card declares the request's
        ``params.tenant`` (A2A §8.3.2, seed ``JsonRpcRequest.params.tenant``), served as at its
        primary URL; a request naming no such tenant is answered here, in JSON-RPC."""
        try:
            body = await read_body(receive, self.max_body_bytes, scope)
        except ClientDisconnect:
            return
        except BodyTooLarge:
            await Response(status_code=413)(scope, receive, send)
            return
        request_id, value = _a2a_tenant_of(body)
        tenant_id = await self.hosts.a2a_tenant(value) if value else None
        record = (
            await self.runtimes.work.blocking(self.runtimes.registry.store.tenant, tenant_id) if tenant_id else None
        )
        if record is None:
            error = RpcError.listing(
                rpc.INVALID_PARAMS,
                "Invalid params",
                "INVALID_PARAMS",
                [("tenant", "must name an agent served at this endpoint (its agent card gives the value)")],
            )
            answer = orjson.dumps(rpc.failure(request_id, error.to_error()))
            await Response(answer, media_type="application/json")(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        public_url = self.runtimes.registry.public_url(record)
        await self._tenant(record.tenant_id, public_url, scope, replay, send, shared=True)

    async def _tenant(
        self,
        tenant_id: str,
        public_url: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        shared: bool = False,
    ) -> None:
        try:
            runtime = await self.runtimes.get(tenant_id, public_url)
        except TenantUnavailable as unavailable:  # logged once per change by Runtimes, not per request
            if public_url != f"https://{_host(scope)}" and not shared:
                scope = dict(scope, root_path=scope.get("root_path", "") + f"/t/{tenant_id}")
            annotate(scope, tenant=tenant_id, aap_code=UNAVAILABLE[unavailable.state][0])
            await unavailable_response(self.shapes, scope, unavailable)(scope, receive, send)
            return
        except Exception as exc:
            with working_for(tenant_id):
                error = unexpected(exc, binding="platform", endpoint="tenant")
            body = {"error": {"status": 503, "message": "This agent is not available right now.", "id": error.error_id}}
            response = Response(orjson.dumps(body), status_code=503, media_type="application/json")
            await response(scope, receive, send)
            return
        if runtime is None:
            await not_found("No such tenant." if "/t/" in public_url else "No agent is served at this host.")(
                scope, receive, send
            )
            return
        if public_url != f"https://{_host(scope)}" and not shared:
            prefix = f"/t/{tenant_id}"
            scope = dict(scope, root_path=scope.get("root_path", "") + prefix)
        scope[RUNTIME_KEY] = runtime
        annotate(scope, tenant=tenant_id)
        with working_for(tenant_id):  # every log line of the request names its tenant
            async with runtime.gateway.arrival(
                scope["method"]
            ):  # the tenant's share (docs/platform.md, "Fair sharing")
                await self.app(scope, receive, send)


# -- the platform's own endpoints ---------------------------------------------------------------------


def tls_allowed_endpoint(hosts: Hosts) -> Callable[[Request], Awaitable[Response]]:
    """``GET /_platform/tls-allowed?domain=HOST``: 200 for a tenant's domain, else 404.

    A proxy with on-demand certificates asks it before it gets a certificate for a name
    (Caddy's ``on_demand_tls ask``), so the platform obtains certificates for its tenants'
    domains and nothing else (docs/platform.md, "Certificates"). The name is read as a
    domain is stored (:func:`aap.config.platform.normalise_domain`): an IP address, or
    anything that is not a domain, is never allowed. :class:`TenantRouting` lets only a
    direct loopback connection reach it.
    """

    async def endpoint(request: Request) -> Response:
        annotate(request.scope, binding="platform")
        domain, problem = normalise_domain(request.query_params.get("domain", ""))
        if problem is None and await hosts.tenant(domain) is not None:
            return Response(status_code=200)
        return Response(status_code=404)

    return endpoint
