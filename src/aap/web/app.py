"""The ASGI application: one DealerAgent, every binding's routes, shared middleware.

Bindings are listed in :data:`BINDINGS` as ``"module:function"`` strings; each
function takes the agent and returns :class:`~aap.web.parts.BindingParts`.
Adding a binding is one line here and never an edit to another binding.
:data:`STARTUP_HOOKS` lists background services (e.g. lead delivery) the same
way: each is a lifespan factory called with the app, entered after the bindings'
lifespans and left before them.

``app.state`` carries ``agent``, ``settings``, ``stores``, ``metrics`` and the
rendered ``agent_card`` for every route.
"""

from __future__ import annotations

import importlib
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Callable

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from aap.config.model import Settings
from aap.config.urls import public_url_problem
from aap.agent import DealerAgent
from aap.web.accesslog import AccessLogMiddleware
from aap.web.agent_card import AgentCardCache, agent_card_endpoint
from aap.web.bodylimit import BodyLimitMiddleware
from aap.web.health import healthz_endpoint
from aap.web.metrics import Metrics, metrics_endpoint
from aap.web.parts import BindingParts, Lifespan

# ``module:function`` taking the DealerAgent and returning BindingParts.
BINDINGS: list[str] = [
    "aap.bindings.a2a:build",
    "aap.bindings.mcp:build",
    "aap.discovery:build",
    "aap.poppy:build",
]

# ``module:function`` taking the Starlette app and returning an async context
# manager: started after the bindings, stopped before them.
STARTUP_HOOKS: list[str] = [
    "aap.leads.worker:delivery_lifespan",
]

AGENT_CARD_PATH = "/.well-known/agent-card.json"


class PublicUrlError(ValueError):
    """The public base URL cannot be published in the AAP discovery documents."""


def check_public_url(url: str) -> None:
    """Refuse a base URL the discovery documents may not carry: the configuration's own check."""
    problem = public_url_problem(url)
    if problem:
        raise PublicUrlError(f"public_url {url!r}: {problem}")


def _resolve(target: str) -> Callable[..., Any]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _lifespan(lifespans: list[Lifespan]) -> Callable[[Starlette], Any]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for factory in lifespans:
                await stack.enter_async_context(factory(app))
            yield

    return lifespan


async def _http_error(request: Request, exc: Exception) -> Response:
    """404/405 and friends as small JSON bodies instead of plain text."""
    assert isinstance(exc, HTTPException)
    body = {"error": {"status": exc.status_code, "message": exc.detail}}
    return Response(
        orjson.dumps(body), status_code=exc.status_code, media_type="application/json", headers=exc.headers
    )


def create_app(settings: Settings, stores: Any) -> Starlette:
    """Build the app for ``settings`` on ``stores`` (an :class:`aap.store.Stores`)."""
    check_public_url(settings.public_url)
    agent = DealerAgent(settings, stores)
    metrics = Metrics()

    routes: list[Any] = [
        Route(AGENT_CARD_PATH, agent_card_endpoint, methods=["GET"], name="agent_card"),
        Route("/healthz", healthz_endpoint, methods=["GET"], name="healthz"),
        Route("/metrics", metrics_endpoint, methods=["GET"], name="metrics"),
    ]
    lifespans: list[Lifespan] = []
    for target in BINDINGS:
        parts: BindingParts = _resolve(target)(agent)
        routes.extend(parts.routes)
        lifespans.extend(parts.lifespans)
    lifespans.extend(_resolve(target) for target in STARTUP_HOOKS)

    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(AccessLogMiddleware, metrics=metrics),
            Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
        ],
        exception_handlers={HTTPException: _http_error},
        lifespan=_lifespan(lifespans),
    )
    app.state.agent = agent
    app.state.settings = settings
    app.state.stores = stores
    app.state.metrics = metrics
    app.state.agent_card = AgentCardCache(settings, agent)
    return app
