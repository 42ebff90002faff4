"""Failures outside a binding's own handling, answered in the shape each surface speaks.

Every surface answers errors in its own shape: a JSON-RPC error on ``/a2a``
and ``/mcp``, OAuth error JSON on ``/oauth/*``, the ``aap.error`` object on
``/poppy/v1/*``. A few failures happen before or around the binding: a body
larger than the deployment accepts (413, :mod:`aap.web.body`), a request line
or header fields over the server's limits, or a head or body too slow (414,
431, 408: refused by :mod:`aap.server.protocol`, answered by :mod:`aap.web.body`),
a path or method that does not exist (404/405), an exception no endpoint caught (500).
Each binding declares the :data:`ErrorShape` of its paths in its
:class:`~aap.web.parts.BindingParts`; :class:`ErrorShapes` picks one by path,
and every other path gets the app's plain JSON shape
``{"error": {"status", "message"}}``.

:func:`aap.errors.unexpected` is the one place an unexpected exception becomes
``INTERNAL_ERROR``: one log line with the binding, the skill or endpoint, the
``error_id`` sent to the caller, the exception type and the innermost frame
(enough to find the bug), and never the exception text or a traceback (either
can quote a customer value).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from aap.errors import AapError, unexpected
from aap.web.accesslog import SCOPE_KEY

#: Renders a failure for one surface: the HTTP status, and the failure as an AAP error
#: (its ``message`` is fixed text, safe to show; its ``error_id`` is in the log line).
ErrorShape = Callable[[int, AapError], Response]


def plain_error(status: int, error: AapError) -> Response:
    """The app's own JSON shape, for paths no binding claims."""
    return plain_response(status, error.message)


def plain_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    body = {"error": {"status": status, "message": message}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def route_path(scope: Scope) -> str:
    """The path the routes see (without the ASGI ``root_path`` a proxy may set)."""
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class ErrorShapes:
    """Error shapes by path: a key ending in ``/`` is a prefix, any other key an exact path."""

    def __init__(self, shapes: Mapping[str, ErrorShape] | None = None) -> None:
        self.exact = {k: v for k, v in (shapes or {}).items() if not k.endswith("/")}
        # Longest prefix first, so /poppy/v1/ wins over a shorter /poppy/.
        self.prefixes = sorted(
            ((k, v) for k, v in (shapes or {}).items() if k.endswith("/")), key=lambda item: len(item[0]), reverse=True
        )

    def for_path(self, path: str) -> ErrorShape:
        if path in self.exact:
            return self.exact[path]
        for prefix, shape in self.prefixes:
            if path.startswith(prefix):
                return shape
        return plain_error

    def respond(self, scope: Scope, status: int, error: AapError) -> Response:
        return self.for_path(route_path(scope))(status, error)


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """404, 405 and friends in the app's plain JSON shape instead of plain text."""
    assert isinstance(exc, HTTPException)
    return plain_response(exc.status_code, exc.detail, exc.headers)


def server_error_handler(shapes: ErrorShapes) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler for an exception no endpoint caught: logged once, 500 in the path's shape.

    Starlette runs it outermost (after the access log has recorded the 500),
    then re-raises for the server, whose log formatter drops the traceback
    (:mod:`aap.server.logconfig`).
    """

    async def handle(request: Request, exc: Exception) -> Response:
        binding = request.scope.get(SCOPE_KEY, {}).get("binding", "http")
        error = unexpected(exc, binding=binding, endpoint=route_path(request.scope))
        return shapes.respond(request.scope, 500, error)

    return handle
