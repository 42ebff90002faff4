"""The HTTP server span of each request, when tracing is on (:mod:`aap.telemetry`).

:class:`TracingMiddleware` is the outermost middleware of an app whose process traces; the
composition root leaves it out otherwise, so a process that does not trace pays nothing here.
The span continues the trace of an incoming W3C ``traceparent`` and follows the OpenTelemetry
HTTP semantic conventions: named ``{method} {http.route}`` (``{method}`` when no route matched),
with ``http.request.method``, ``url.scheme``, ``url.path``, ``http.route``,
``http.response.status_code``, ``server.address``, ``server.port`` and
``network.protocol.version``; ``error.type`` and an error status for a 5xx answer. The facts a
door records (:func:`aap.web.accesslog.annotate`: binding, skill, AAP or JSON-RPC error code,
error id, platform tenant) become ``aap.*`` attributes.

**Decision** (docs/deployment.md, "Traces"): no query string (``url.query``: search terms), no
client address (``client.address``: the access log keeps only a hash of it) and no
``User-Agent`` are recorded; the path is, as the access log records it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap.telemetry.tracing import Tracing, failed
from aap.web.accesslog import SCOPE_KEY
from aap.web.errors import route_path
from aap.web.middleware import HttpMiddleware
from aap.web.surface import SurfaceTable

#: The methods the HTTP conventions name; any other is recorded as ``_OTHER``.
METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"})
#: A platform's tenant prefix (docs/platform.md, "Routing"): ``/t/ID`` in a route is ``/t/{tenant}``.
TENANT_PREFIX = "/t/"
TRACE_HEADERS = (b"traceparent", b"tracestate", b"baggage")
#: A path parameter's converter (``{vehicle_id:str}``), left out of ``http.route``.
CONVERTER = re.compile(r"\{(\w+):\w+\}")


def _tenant_prefix(path: str) -> tuple[str, str]:
    """(``/t/{tenant}`` or ``""``, the rest of ``path``): a tenant's prefix is one template for all."""
    if path.startswith(TENANT_PREFIX):
        _tenant, slash, rest = path[len(TENANT_PREFIX) :].partition("/")
        if slash:
            return "/t/{tenant}", "/" + rest
    return "", path


class RouteTemplates:
    """Request path → the template of the route that answers it (``http.route``: low cardinality,
    ``/vehicles/{vehicle_id}``, never the id itself)."""

    def __init__(self, routes: Iterable[BaseRoute], exact: Iterable[str] = ()) -> None:
        self.exact = set(exact)
        self.patterned: list[tuple[BaseRoute, str]] = []
        for route in routes:
            path = getattr(route, "path", None)
            if not isinstance(path, str):
                continue
            if isinstance(route, Route) and "{" not in path:
                self.exact.add(path)
            else:
                self.patterned.append((route, CONVERTER.sub(r"{\1}", path)))

    def template(self, path: str, method: str) -> str | None:
        prefix, path = _tenant_prefix(path)
        if path in self.exact:
            return prefix + path
        probe = {"type": "http", "path": path, "root_path": "", "method": method}
        for route, template in self.patterned:
            match, _ = route.matches(probe)
            if match is not Match.NONE:
                return prefix + template
        return None


class SurfaceTemplates:
    """The route templates of an app whose agents' surfaces are built on demand: the deployment's
    own routes, then the surface declaring the path (:class:`~aap.web.surface.SurfaceTable`), by the
    routes it was first built with (a declared exact path before then)."""

    def __init__(self, table: SurfaceTable, own: Iterable[BaseRoute]) -> None:
        self.table = table
        self.own = RouteTemplates(own)
        self._templates: dict[int, RouteTemplates] = {}

    def template(self, path: str, method: str) -> str | None:
        prefix, path = _tenant_prefix(path)
        found = self.own.template(path, method)
        if found is not None:
            return prefix + found
        index = self.table.owner(path)
        if index is None:
            return None
        templates = self._templates.get(index)
        if templates is None:
            routes = self.table.routes.get(index)
            if routes is None:
                return prefix + path if path in self.table.exact else None
            templates = self._templates[index] = RouteTemplates(routes)
        found = templates.template(path, method)
        return None if found is None else prefix + found


def _incoming(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The trace context headers of a request (the first of each)."""
    found: dict[str, str] = {}
    for name, value in headers:
        if name in TRACE_HEADERS:
            found.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return found


def _host(headers: Iterable[tuple[bytes, bytes]], scope: Scope) -> dict[str, str | int | bool]:
    """``server.address`` and ``server.port``: the ``Host`` the client named, else the socket's."""
    for name, value in headers:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                address, _, rest = host[1:].partition("]")
                port = rest[1:] if rest.startswith(":") else ""
            else:
                address, _, port = host.partition(":")
            found: dict[str, str | int | bool] = {"server.address": address}
            if port.isdigit():
                found["server.port"] = int(port)
            return found
    server = scope.get("server")
    return {"server.address": server[0], "server.port": server[1]} if server else {}


@dataclass(eq=False)
class TracingMiddleware(HttpMiddleware):
    """One HTTP server span per request."""

    app: ASGIApp
    tracing: Tracing
    routes: RouteTemplates | SurfaceTemplates

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", ())
        method = scope["method"] if scope["method"] in METHODS else "_OTHER"
        path: str = scope.get("path", "")
        attributes: dict[str, str | int | bool] = {
            "http.request.method": method,
            "url.scheme": scope.get("scheme", "http"),
            "url.path": path,
            "network.protocol.version": scope.get("http_version", "1.1"),
            **_host(headers, scope),
        }
        route = self.routes.template(route_path(scope), scope["method"])
        if route is not None:
            attributes["http.route"] = route
        name = f"{method} {route}" if route is not None else method
        context = self.tracing.extract(_incoming(headers))
        status = 500  # what the client sees if the app dies before answering

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with self.tracing.span(name, SpanKind.SERVER, attributes, context) as span:
            try:
                await self.app(scope, receive, observed)
            except BaseException as exc:
                failed(span, type(exc).__qualname__)
                raise
            else:
                if status >= 500:
                    failed(span, str(status))
            finally:
                span.set_attribute("http.response.status_code", status)
                info: Mapping[str, Any] = scope.get(SCOPE_KEY) or {}
                self.tracing.annotate_span(span, info)
