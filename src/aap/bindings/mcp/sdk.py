"""The SDK's session manager, built and started when the first request needs it.

The MCP SDK and the pydantic models it brings are about a quarter of a
worker's memory at start (docs/benchmarks.md, "Memory"). Plain tool calls never
need them (:mod:`.fastpath`), so they are imported on the first request that
does — ``initialize``, ``tools/list``, ``server/discover``, anything unusual —
in a worker thread, so the event loop keeps serving meanwhile.

The manager's task group must be entered and left by one task, so the binding's
lifespan runs a task that waits to be asked, builds the manager, runs it until
the app stops, and leaves it.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Receive, Scope, Send

from aap.bindings.mcp.calls import ToolRunner
from aap.gateway import Gateway

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class LazySdk:
    """``handle_request`` of the SDK's stateless, JSON-response session manager, made on first use."""

    def __init__(self, gateway: Gateway, runner: ToolRunner) -> None:
        self.gateway = gateway
        self.runner = runner
        self.manager: StreamableHTTPSessionManager | None = None
        self._failure: BaseException | None = None
        self._wanted = self._ready = self._stop = None  # type: anyio.Event | None

    def build(self) -> StreamableHTTPSessionManager:
        """The session manager (imports the SDK: blocking, run it in a thread)."""
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from aap.bindings.mcp.server import make_server
        from aap.bindings.mcp.tools import build_tools

        settings = self.gateway.settings
        full = settings.mcp.tool_schemas == "full"
        tools = build_tools(self.gateway.agent.skills, settings.search.to_json(), full_schemas=full)
        server = make_server(self.gateway, tools, self.runner, ttl_ms=settings.mcp.tools_cache_ttl_ms)
        manager = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            stateless=True,
            # Host/Origin are checked in front (OriginPolicy), with deployment-derived lists.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.max_body_bytes,
        )
        if gc.get_freeze_count():  # the server froze what it had built (aap.server.runner.settled)
            gc.freeze()  # so is the SDK, now
        return manager

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        self._wanted, self._ready, self._stop = anyio.Event(), anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._serve)
            try:
                yield
            finally:
                self._stop.set()
                self._wanted.set()

    async def _serve(self) -> None:
        assert self._wanted is not None and self._ready is not None and self._stop is not None
        await self._wanted.wait()
        if self._stop.is_set():
            return
        try:
            manager = await self.gateway.blocking(self.build)
        except Exception as exc:  # answered as an internal error by the endpoint, every time
            self._failure = exc
            self._ready.set()
            return
        async with manager.run():
            self.manager = manager
            self._ready.set()
            await self._stop.wait()

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.manager is None:
            if self._wanted is None or self._ready is None:
                raise RuntimeError("the MCP binding's lifespan is not running")
            self._wanted.set()
            await self._ready.wait()
            if self._failure is not None:
                raise RuntimeError("the MCP SDK could not be started") from self._failure
            assert self.manager is not None
        await self.manager.handle_request(scope, receive, send)
