"""Platform hosting: one deployment serving every tenant's agent at its own domains (docs/platform.md).

A request is routed by its ``Host`` header, as the platform's reverse proxy forwards it:

- a tenant's domain → that tenant's agent at the ordinary paths, its public URL ``https://HOST``;
- the platform's own host → ``/t/ID/…`` is tenant ``ID`` under that prefix (public URL
  ``https://PLATFORM_HOST/t/ID``), the RFC 8414/9728 path-suffixed metadata of such an issuer
  (``/.well-known/oauth-authorization-server/t/ID``), ``POST /a2a`` for a tenant whose card
  declares an A2A ``tenant`` routing value, and the platform's own endpoints (``/_platform/…``,
  ``/healthz``, ``/metrics``);
- anything else → 404, with no tenant's data.

Each tenant is served by a :class:`TenantRuntime`: its Settings (parsed from the registry),
its Stores on its own database namespace (:mod:`aap.store.tenancy`), its
:class:`~aap.agent.DealerAgent` and :class:`~aap.gateway.Gateway` — over the worker's one
:class:`~aap.work.Work`, so a thousand tenants do not make a thousand executors — and, built on
the first request that needs each, the surfaces of :data:`aap.server.app.SURFACES`. The route
table is the deployment's, not the tenant's: which surface owns a path is found once, from a
probe build with every surface enabled (:class:`SurfaceTable`), so a tenant that is only ever
searched over ``/a2a`` holds its agent and its A2A door and nothing else. Runtimes are built
lazily, kept in a bounded least-recently-used table, and dropped when the registry says their
tenant changed (:class:`ChangeFeed`): every worker of every host follows the same change rows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import aap.console
from aap.agent import DealerAgent
from aap.bindings import jsonrpc as rpc
from aap.bindings.jsonrpc import RpcError
from aap.config.model import Settings
from aap.config.platform import PlatformSettings, host_problem, tenant_id_problem
from aap.errors import unexpected
from aap.gateway import Gateway
from aap.paths import A2A_PATH, HEALTHZ_PATH, METRICS_PATH, OAUTH_METADATA_PATH, PROTECTED_RESOURCE_PATH
from aap.platform.console import PlatformConsole
from aap.ratelimit import RateLimiter
from aap.server.operations import OperatorDoor, healthz_endpoint, metrics_endpoint
from aap.skills.catalog import SkillInfo
from aap.store import Stores
from aap.store.db import Database
from aap.store.platform import DELIVERIES, PlatformStore
from aap.tenants import TenantRegistry
from aap.web.accesslog import AccessLogMiddleware, annotate
from aap.web.body import REFUSED, BodyTooLarge, RequestLimitMiddleware, read_body
from aap.web.errors import ErrorShape, ErrorShapes, http_exception_handler, route_path, server_error_handler
from aap.web.metrics import Metrics
from aap.web.parts import BindingParts
from aap.work import Work

log = logging.getLogger("aap.platform")

PLATFORM_PREFIX = "/_platform/"
TLS_ALLOWED_PATH = "/_platform/tls-allowed"
TENANT_PREFIX = "/t/"
#: The scope key under which the routing hands a request's runtime to the dispatcher.
RUNTIME_KEY = "aap.runtime"
#: Hosts remembered (a tenant id, or "none") between changes.
HOSTS_KEPT = 100_000
#: How long a dropped runtime keeps serving the requests it has in flight before it is closed.
GRACE_SECONDS = 30.0
#: A tenant's inventory is counted in SQL until it holds this many listings, and only then
#: indexed in memory: a worker serving thousands of small tenants holds no index for each
#: (docs/platform.md, "Sizing").
INDEX_MIN_ROWS = 5_000
#: Facets objects a tenant keeps (a deployment that is one agent keeps 256).
FACET_CACHE = 16

Surface = Callable[[Gateway], BindingParts]


def _host(scope: Scope) -> str:
    """The request's host name, lower case, without its port ("" when absent)."""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):  # an IPv6 literal: never a tenant's domain
                return host
            return host.rsplit(":", 1)[0] if ":" in host else host
    return ""


def _tenant_of(body: bytes) -> tuple[Any, str | None]:
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


def not_found(message: str = "Not found") -> Response:
    """The 404 of an unknown host, tenant or path: the app's plain JSON shape, no tenant named."""
    body = {"error": {"status": 404, "message": message}}
    return Response(orjson.dumps(body), status_code=404, media_type="application/json")


# -- which surface owns a path ----------------------------------------------------------------


@dataclasses.dataclass
class SurfaceTable:
    """Path → the index of the surface (in ``SURFACES``) whose routes answer it."""

    exact: dict[str, int]
    patterned: list[tuple[BaseRoute, int]]
    shapes: dict[str, ErrorShape]

    @classmethod
    def probe(cls, surfaces: Sequence[Surface], parts: Sequence[BindingParts]) -> SurfaceTable:
        exact: dict[str, int] = {}
        patterned: list[tuple[BaseRoute, int]] = []
        shapes: dict[str, ErrorShape] = {}
        for index, built in enumerate(parts):
            shapes.update(built.error_shapes)
            for route in built.routes:
                path = getattr(route, "path", None)
                if isinstance(route, Route) and path is not None and "{" not in path:
                    exact.setdefault(path, index)
                else:
                    patterned.append((route, index))
            for path, _method in built.direct:
                exact.setdefault(path, index)
        return cls(exact, patterned, shapes)

    def owner(self, path: str, method: str) -> int | None:
        index = self.exact.get(path)
        if index is not None:
            return index
        probe = {"type": "http", "path": path, "root_path": "", "method": method}
        for route, index in self.patterned:
            match, _ = route.matches(probe)
            if match is not Match.NONE:
                return index
        return None


def probe_parts(surfaces: Sequence[Surface], deployment: Settings) -> list[BindingParts]:
    """Every surface built once, with every optional part on, for its routes (never served)."""
    from aap.config.poppy import PoppySettings
    from aap.config.web import WebSettings
    from aap.store import open_stores

    settings = dataclasses.replace(
        deployment,
        poppy=PoppySettings(enabled=True, mcp_enabled=True, feedback_enabled=True),
        web=WebSettings(public_page=True, console=True),
        platform=None,
    )
    stores = open_stores("sqlite://:memory:")
    try:
        gateway = Gateway.of(DealerAgent(settings, stores), Work(inline=True, threads=1))
        parts = [build(gateway) for build in surfaces]
        gateway.work.close()
        return parts
    finally:
        stores.close()


# -- one tenant, as served at one public URL ----------------------------------------------------


class _Built:
    """One surface of one runtime: its router, its direct paths, the lifespans it entered."""

    def __init__(self, parts: BindingParts) -> None:
        self.router = Router(routes=parts.routes)
        self.direct = dict(parts.direct)
        self.lifespans = list(parts.lifespans)
        self.stop = asyncio.Event()
        self.keeper: asyncio.Task[None] | None = None

    async def start(self, app: Any) -> None:
        """Enter the surface's lifespans in a task of their own, which leaves them when told to
        (a task group must be entered and left by one task, the MCP SDK's among them)."""
        if not self.lifespans:
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def keep() -> None:
            try:
                async with AsyncExitStack() as stack:
                    for lifespan in self.lifespans:
                        await stack.enter_async_context(lifespan(app))
                    ready.set_result(None)
                    await self.stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        self.keeper = asyncio.create_task(keep())
        await ready

    async def close(self) -> None:
        self.stop.set()
        if self.keeper is not None:
            try:
                await asyncio.wait_for(self.keeper, timeout=10)
            except Exception as exc:  # a surface that cannot stop cleanly must not stop the others
                log.warning("a tenant surface did not stop cleanly: %s", type(exc).__name__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.direct.get((route_path(scope), scope["method"])) or self.direct.get((route_path(scope), None))
        if handler is not None:
            await handler(scope, receive, send)
        else:
            await self.router(scope, receive, send)


class TenantRuntime:
    """One tenant's agent at one public URL: Settings, Stores, agent, gateway, surfaces built on demand."""

    def __init__(
        self, tenant_id: str, public_url: str, gateway: Gateway, surfaces: Sequence[Surface], app: Any
    ) -> None:
        self.tenant_id = tenant_id
        self.public_url = public_url
        self.gateway = gateway
        self._surfaces = surfaces
        self._app = app
        self._built: dict[int, _Built] = {}
        self._building: dict[int, asyncio.Future[_Built]] = {}
        self.closed = False

    async def surface(self, index: int) -> _Built:
        built = self._built.get(index)
        if built is not None:
            return built
        pending = self._building.get(index)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[_Built] = asyncio.get_running_loop().create_future()
        self._building[index] = future
        try:
            built = _Built(self._surfaces[index](self.gateway))
            await built.start(self._app)
            self._built[index] = built
            future.set_result(built)
            return built
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failed build is answered, never logged as unretrieved
            raise
        finally:
            del self._building[index]

    async def close(self) -> None:
        """Leave every surface's lifespans and give back unspent rate-limit tokens."""
        self.closed = True
        for built in list(self._built.values()):
            await built.close()
        self._built.clear()
        try:
            await self.gateway.blocking(self.gateway.release)
        except Exception as exc:
            log.warning("tenant %s: leases not returned: %s", self.tenant_id, type(exc).__name__)


# -- the tenants a worker serves ------------------------------------------------------------------


class Runtimes:
    """The tenant runtimes of one worker: built on first use, at most ``kept`` of them, least
    recently used dropped first; a tenant's Stores are shared by its runtimes (its domain and
    its /t/ID/ prefix) and closed with the last of them."""

    def __init__(
        self, registry: TenantRegistry, work: Work, surfaces: Sequence[Surface], app: Any, *, kept: int
    ) -> None:
        self.registry = registry
        self.work = work
        self.surfaces = surfaces
        self.app = app
        self.kept = kept
        self._runtimes: OrderedDict[tuple[str, str], TenantRuntime] = OrderedDict()
        self._stores: dict[str, tuple[Stores, int]] = {}
        self._building: dict[tuple[str, str], asyncio.Future[TenantRuntime | None]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._notes: set[asyncio.Task[None]] = set()  # referenced until done

    def __len__(self) -> int:
        return len(self._runtimes)

    async def get(self, tenant_id: str, public_url: str) -> TenantRuntime | None:
        """The runtime of ``tenant_id`` at ``public_url``, or None when there is no such tenant."""
        key = (tenant_id, public_url)
        runtime = self._runtimes.get(key)
        if runtime is not None:
            self._runtimes.move_to_end(key)
            return runtime
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[TenantRuntime | None] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            runtime = await self._build(tenant_id, public_url)
            if runtime is not None:
                self._runtimes[key] = runtime
                while len(self._runtimes) > self.kept:
                    _, oldest = self._runtimes.popitem(last=False)
                    self._retire(oldest)
            future.set_result(runtime)
            return runtime
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            del self._building[key]

    async def _build(self, tenant_id: str, public_url: str) -> TenantRuntime | None:
        record = await asyncio.to_thread(self.registry.store.tenant, tenant_id)
        if record is None:
            return None
        settings = await asyncio.to_thread(self.registry.settings_for, record, public_url)
        stores = await self._acquire(tenant_id)
        agent = DealerAgent(settings, stores)
        registry = self.registry.store

        def stored(skill: SkillInfo) -> None:  # a lead: its deliveries are due now, on any worker
            note = asyncio.to_thread(registry.set_due, tenant_id, DELIVERIES, int(time.time() * 1000))
            task = asyncio.get_running_loop().create_task(note)
            self._notes.add(task)
            task.add_done_callback(self._notes.discard)

        limiter = RateLimiter(stores.state, settings.rate_limit)
        gateway = Gateway(agent, limiter, self.work, after_write=stored)
        return TenantRuntime(tenant_id, public_url, gateway, self.surfaces, self.app)

    async def _acquire(self, tenant_id: str) -> Stores:
        held = self._stores.get(tenant_id)
        if held is not None:
            self._stores[tenant_id] = (held[0], held[1] + 1)
            return held[0]
        db: Database = await asyncio.to_thread(self.registry.namespaces.open, tenant_id)
        stores = Stores(db, index_min_rows=INDEX_MIN_ROWS, facet_cache_size=FACET_CACHE)
        again = self._stores.get(tenant_id)  # another build opened it meanwhile
        if again is not None:
            db.close()
            self._stores[tenant_id] = (again[0], again[1] + 1)
            return again[0]
        self._stores[tenant_id] = (stores, 1)
        return stores

    def drop(self, tenant_id: str) -> int:
        """Stop serving ``tenant_id`` from what was built for it (its next request rebuilds)."""
        keys = [key for key in self._runtimes if key[0] == tenant_id]
        for key in keys:
            self._retire(self._runtimes.pop(key))
        return len(keys)

    def _retire(self, runtime: TenantRuntime) -> None:
        """Close ``runtime`` after the grace its requests in flight may need."""

        async def later() -> None:
            await asyncio.sleep(GRACE_SECONDS)
            await self._close(runtime)

        task = asyncio.get_running_loop().create_task(later())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, runtime: TenantRuntime) -> None:
        await runtime.close()
        stores, refs = self._stores.get(runtime.tenant_id, (None, 0))
        if stores is runtime.gateway.stores:
            if refs <= 1:
                del self._stores[runtime.tenant_id]
                await asyncio.to_thread(stores.close)
            else:
                self._stores[runtime.tenant_id] = (stores, refs - 1)

    async def close(self) -> None:
        """Close every runtime now (the worker is stopping)."""
        for task in list(self._closing):
            task.cancel()
        runtimes = list(self._runtimes.values())
        self._runtimes.clear()
        for runtime in runtimes:
            await self._close(runtime)
        for stores, _ in list(self._stores.values()):
            stores.close()
        self._stores.clear()


class Hosts:
    """Host name → tenant id, read from the registry once and remembered until it changes."""

    def __init__(self, store: PlatformStore) -> None:
        self.store = store
        self._known: OrderedDict[str, str | None] = OrderedDict()

    async def tenant(self, host: str) -> str | None:
        if host in self._known:
            self._known.move_to_end(host)
            return self._known[host]
        if host_problem(host):
            return None  # not a name any tenant can have: no read
        tenant_id = await asyncio.to_thread(self.store.tenant_at, host)
        self._known[host] = tenant_id
        while len(self._known) > HOSTS_KEPT:
            self._known.popitem(last=False)
        return tenant_id

    async def a2a_tenant(self, value: str) -> str | None:
        """The tenant whose card declares the A2A routing value ``value``, or None."""
        key = "a2a:" + value
        if key in self._known:
            return self._known[key]
        if len(value) > 200:
            return None
        tenant_id = await asyncio.to_thread(self.store.tenant_for_a2a, value)
        self._known[key] = tenant_id
        while len(self._known) > HOSTS_KEPT:
            self._known.popitem(last=False)
        return tenant_id

    def forget(self, tenant_id: str) -> None:
        """Forget every host (and routing value) of ``tenant_id``, and every one known to be nobody's."""
        for host in [h for h, t in self._known.items() if t is None or t == tenant_id]:
            del self._known[host]


class ChangeFeed:
    """Follows the registry's change rows and drops what this worker built for changed tenants."""

    def __init__(self, store: PlatformStore, runtimes: Runtimes, hosts: Hosts, poll_ms: int) -> None:
        self.store, self.runtimes, self.hosts = store, runtimes, hosts
        self.poll = poll_ms / 1000
        self.seen = 0

    async def start(self) -> None:
        self.seen = await asyncio.to_thread(self.store.last_change)

    async def once(self) -> int:
        """Apply the changes made since the last look; returns how many there were."""
        changes = await asyncio.to_thread(self.store.changes_since, self.seen)
        for change in changes:
            self.runtimes.drop(change.tenant_id)
            self.hosts.forget(change.tenant_id)
            self.seen = change.seq
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


class TenantRouting:
    """Pure ASGI middleware: resolves the tenant of a request and hands it on (or answers 404).

    It runs ahead of the body limit so that a prefixed tenant's paths (``/t/ID/a2a``) are seen
    by everything after it as the tenant's own (``/a2a``, with ``root_path = /t/ID``): the body
    limit and the error handlers answer in the shape of the tenant's surface.
    """

    def __init__(
        self,
        app: ASGIApp,
        platform: PlatformSettings,
        runtimes: Runtimes,
        hosts: Hosts,
        platform_app: ASGIApp,
        max_body_bytes: int,
        operator_port: bool = False,
    ) -> None:
        self.app = app
        self.platform = platform
        self.max_body_bytes = max_body_bytes
        self.operator_port = operator_port
        self.runtimes = runtimes
        self.hosts = hosts
        self.platform_app = platform_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = _host(scope)
        path: str = scope.get("path", "")
        if host == self.platform.host:
            await self._platform_host(scope, receive, send, path)
            return
        if path == HEALTHZ_PATH or (path == METRICS_PATH and self.operator_port):
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
        request_id, value = _tenant_of(body)
        tenant_id = await self.hosts.a2a_tenant(value) if value else None
        record = await asyncio.to_thread(self.runtimes.registry.store.tenant, tenant_id) if tenant_id else None
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
        except Exception as exc:
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
        await self.app(scope, receive, send)


class TenantDispatch:
    """The innermost app: the request's tenant runtime, its owning surface, that surface's router."""

    def __init__(self, table: SurfaceTable) -> None:
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        runtime: TenantRuntime | None = scope.get(RUNTIME_KEY)
        if runtime is None:
            await not_found()(scope, receive, send)
            return
        index = self.table.owner(route_path(scope), scope["method"])
        if index is None:
            await not_found()(scope, receive, send)
            return
        built = await runtime.surface(index)
        await built(scope, receive, send)


# -- the platform's own endpoints ---------------------------------------------------------------------


def tls_allowed_endpoint(hosts: Hosts) -> Callable[[Request], Awaitable[Response]]:
    """``GET /_platform/tls-allowed?domain=HOST``: 200 for a tenant's domain, else 404.

    A proxy with on-demand certificates asks it before it gets a certificate for a name
    (Caddy's ``on_demand_tls ask``), so the platform obtains certificates for its tenants'
    domains and nothing else (docs/platform.md,
    "Walk-through: an empty platform to three dealers behind Caddy").
    """

    async def endpoint(request: Request) -> Response:
        annotate(request.scope, binding="platform")
        domain = request.query_params.get("domain", "").strip().lower()
        if domain and await hosts.tenant(domain) is not None:
            return Response(status_code=200)
        return Response(status_code=404)

    return endpoint


# -- the composition root of a platform deployment ------------------------------------------------------


Service = Callable[["PlatformContext"], AbstractAsyncContextManager[None]]


@dataclasses.dataclass
class PlatformContext:
    """What a platform's background services and surfaces are given."""

    deployment: Settings
    registry: TenantRegistry
    stores: Stores  # the platform's own namespace
    work: Work
    runtimes: Runtimes
    #: The platform's own gateway (its own namespace's buckets): the provisioning API's admission.
    gateway: Gateway
    #: The platform console at ``https://PLATFORM_HOST/console/`` (docs/platform.md, "Platform administrators").
    console: PlatformConsole


def tenant_surfaces(
    surfaces: Sequence[Surface], console: PlatformConsole, platform: PlatformSettings
) -> tuple[Surface, ...]:
    """``surfaces`` with the staff console's builder wrapped: a tenant's console served under its
    prefix on the platform host admits the platform's administrators as guests
    (:class:`aap.platform.console.TenantGuests`); at the tenant's own domains it is built as in a
    deployment that is one agent, without guests, so the platform's session is never accepted there."""

    def console_surface(gateway: Gateway) -> BindingParts:
        settings = gateway.settings
        prefixed = settings.public_url == platform.prefix_url(settings.deployment_id)
        return aap.console.build(gateway, guests=console.guests_of(settings.deployment_id) if prefixed else None)

    return tuple(console_surface if build is aap.console.build else build for build in surfaces)


def create_platform_app(
    deployment: Settings,
    platform_stores: Stores,
    *,
    surfaces: Sequence[Surface] | None = None,
    services: Sequence[Service] = (),
    platform_routes: Sequence[Callable[[PlatformContext], list[BaseRoute]]] = (),
) -> Starlette:
    """The ASGI app of a platform deployment: every tenant of its registry, routed by host."""
    from aap.server.app import SURFACES, metrics_token

    assert deployment.platform is not None, "a platform deployment has a [platform] table"
    work = Work(inline=platform_stores.db.in_process)
    registry = TenantRegistry(deployment, platform_stores.db)
    own_gateway = Gateway(
        DealerAgent(deployment, platform_stores), RateLimiter(platform_stores.state, deployment.rate_limit), work
    )
    console = PlatformConsole(own_gateway, registry)
    chosen = tenant_surfaces(SURFACES if surfaces is None else surfaces, console, deployment.platform)
    table = SurfaceTable.probe(chosen, probe_parts(chosen, deployment))
    metrics = Metrics()
    shapes = ErrorShapes(table.shapes)
    hosts = Hosts(registry.store)

    runtimes = Runtimes(registry, work, chosen, None, kept=deployment.platform.tenants_in_memory)
    context = PlatformContext(deployment, registry, platform_stores, work, runtimes, own_gateway, console)
    own: list[BaseRoute] = [
        Route(HEALTHZ_PATH, healthz_endpoint, methods=["GET"], name="healthz"),
        Route(METRICS_PATH, metrics_endpoint(metrics_token(deployment)), methods=["GET"], name="metrics"),
        Route(TLS_ALLOWED_PATH, tls_allowed_endpoint(hosts), methods=["GET"], name="platform_tls_allowed"),
        *console.routes(),
    ]
    for routes in platform_routes:
        own.extend(routes(context))
    handlers = {HTTPException: http_exception_handler, Exception: server_error_handler(shapes)}
    platform_app = Starlette(routes=own, exception_handlers=handlers)
    platform_app.state.settings = deployment
    platform_app.state.stores = platform_stores
    platform_app.state.metrics = metrics

    feed = ChangeFeed(registry.store, runtimes, hosts, deployment.platform.changes_poll_ms)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await feed.start()
        stop = asyncio.Event()
        follower = asyncio.create_task(feed.run(stop))
        try:
            async with AsyncExitStack() as stack:
                for service in services:
                    await stack.enter_async_context(service(context))
                yield
        finally:
            stop.set()
            await follower
            await runtimes.close()
            work.close()

    middleware = [
        Middleware(AccessLogMiddleware, metrics=metrics),
        Middleware(
            TenantRouting,
            platform=deployment.platform,
            runtimes=runtimes,
            hosts=hosts,
            platform_app=platform_app,
            max_body_bytes=deployment.max_body_bytes,
            operator_port=deployment.metrics_listen is not None,
        ),
        Middleware(RequestLimitMiddleware, max_bytes=deployment.max_body_bytes, shapes=shapes),
    ]
    if deployment.metrics_listen is not None:
        middleware.insert(1, Middleware(OperatorDoor, port=deployment.metrics_listen[1]))
    app = Starlette(
        routes=[Mount("/", app=TenantDispatch(table))],
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    runtimes.app = app  # what the tenants' surface lifespans are given
    app.state.settings = deployment
    app.state.stores = platform_stores
    app.state.metrics = metrics
    app.state.platform = context
    return app
