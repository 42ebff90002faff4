"""The hot paths, answered by plain ASGI callables ahead of Starlette's routing.

Buyers' agents call ``POST /a2a`` and ``/mcp`` for every search. Through the
router, each such request also passes the exception middleware, a scan of the
route table, a ``Request`` and a ``Response`` object and two more ``send``
wrappers: about a tenth of a whole search's CPU on the 100k-listing benchmark
(docs/benchmarks.md, "The HTTP path"). A surface names such a path and method in
:attr:`~aap.web.parts.BindingParts.direct`; the dispatch to an agent's surface
(:class:`aap.server.dispatch.AgentDispatch`) hands those requests straight to its callable.

Nothing else changes: the access log, the body limit and the unexpected-error
handler wrap the dispatch (a direct callable still gets its 413 and its
logged 500 in the path's shape), and every other path or method goes on to the
router, so a ``GET /a2a`` still gets the router's 405. A direct path keeps its
``Route`` too, for those answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send


def endpoint_app(endpoint: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """A Starlette-style endpoint (a ``Request`` in, a ``Response`` out) as a direct callable."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)

    return app
