"""The shape every one of the project's middlewares shares: pure ASGI, acting on HTTP alone.

A lifespan or websocket scope passes through untouched (the server's start-up and shutdown
reach the app through the whole stack); only an HTTP request reaches :meth:`HttpMiddleware.http`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware(ABC):
    """A pure ASGI middleware over ``app`` whose work is an HTTP request's (:meth:`http`)."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    @abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (its scope's ``type`` is ``"http"``)."""
