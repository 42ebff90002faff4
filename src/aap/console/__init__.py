"""The staff console at ``/console/``: leads, inventory, agent health, accounts (docs/console.md).

Server-rendered pages behind a sign-in (:mod:`aap.console.auth`), one module
per page group: :mod:`~aap.console.leads` (inbox, lead detail, retry, handled,
CSV export), :mod:`~aap.console.inventory` (counts, import history, VIN/stock
lookup), :mod:`~aap.console.health` (the conformance checker run on demand,
discovery links, counters from ``/metrics``, the delivery backlog) and
:mod:`~aap.console.users` (accounts and the audit log, for admins).

Everything the console shows lives in the database (accounts, sessions,
sign-in counts, the audit log, check reports), so several workers serve one console.
This is the one surface that shows customer data, and it writes an audit entry
each time someone views or exports it. ``[web] console = false`` removes it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from aap.accounts import Accounts
from aap.console import health, inventory, leads, users
from aap.console.auth import LOGIN_PATH, Auth, Refused, SignInNeeded, Visit, refuse_odd_values
from aap.errors import unexpected
from aap.gateway import Gateway
from aap.paths import CONSOLE_PREFIX
from aap.web.accesslog import annotate
from aap.web.pages import asset_routes, render, templates
from aap.web.parts import BindingParts

__all__ = ["build", "Console"]

ASSETS = CONSOLE_PREFIX + "assets/"
NO_STORE = {"Cache-Control": "no-store"}

Handler = Callable[[Request, Visit], Awaitable[Response]]


class Console:
    """The console's shared parts: the agent, accounts, templates, the audit log."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.agent = agent = gateway.agent
        self.settings = agent.settings
        self.stores = agent.stores
        self.accounts = Accounts(agent.stores.console, agent.settings)
        self.pages = templates("aap.console")
        self.auth = Auth(self)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def audit(self, actor: str, action: str, subject: str | None, detail: Mapping[str, Any]) -> None:
        """One audit entry (blocking): who did what to which lead or account."""
        self.stores.console.audit(actor, action, subject, dict(detail), self.now_ms())

    def page(
        self,
        request: Request,
        name: str,
        context: Mapping[str, Any],
        *,
        status_code: int = 200,
        visit: Visit | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        common = {
            "site_name": f"{self.settings.agent.name} · Console",
            "assets": ASSETS,
            "layout": "console_layout.html",
            "visit": visit,
            "path": request.url.path,
            "csrf": visit.session.csrf_token if visit else None,
            "aggregate": self.settings.scope == "aggregate",
        }
        return render(
            self.pages,
            request,
            name,
            {**common, **context},
            status_code=status_code,
            headers={**NO_STORE, **(headers or {})},
        )

    def guarded(self, handler: Handler, *, admin: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """An endpoint that needs a signed-in visit (an admin's with ``admin``); errors become pages."""

        async def endpoint(request: Request) -> Response:
            annotate(request.scope, binding="console")
            try:
                refuse_odd_values(request)
                visit = await self.auth.visit(request, admin=admin)
                return await handler(request, visit)
            except SignInNeeded:
                if request.method == "GET":
                    return RedirectResponse(f"{LOGIN_PATH}?next={request.url.path}", status_code=303)
                return self.page(
                    request,
                    "error.html",
                    {
                        "heading": "Signed out",
                        "message": "Your session ended. Sign in again, then repeat the action.",
                        "back": LOGIN_PATH,
                    },
                    status_code=401,
                )
            except Refused as refused:
                return self.page(
                    request,
                    "error.html",
                    {"heading": "Not allowed", "message": refused.message, "back": CONSOLE_PREFIX},
                    status_code=refused.status,
                    headers=refused.headers,
                )
            except Exception as exc:  # logged once without its text (it may quote customer data)
                error = unexpected(exc, binding="console", endpoint=request.url.path)
                return self.page(
                    request,
                    "error.html",
                    {
                        "heading": "Something went wrong",
                        "message": f"The console could not show this page (error {error.error_id}).",
                        "back": CONSOLE_PREFIX,
                    },
                    status_code=500,
                )

        return endpoint

    def blocking(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return run_in_threadpool(func, *args, **kwargs)


def build(gateway: Gateway, *, console: Console | None = None) -> BindingParts:
    """The console's routes, unless ``[web] console = false`` (``console``: its parts, made here
    unless given: a test holds the hash gate of the console it serves)."""
    if not gateway.settings.web.console:
        return BindingParts()
    console = console or Console(gateway)
    runner = health.CheckRunner(console)

    async def home(request: Request) -> Response:
        return RedirectResponse(CONSOLE_PREFIX + "leads", status_code=303)

    async def login(request: Request) -> Response:
        annotate(request.scope, binding="console")
        return await console.auth.login_page(request)

    async def logout(request: Request) -> Response:
        annotate(request.scope, binding="console")
        return await console.auth.logout(request)

    routes: list[BaseRoute] = [
        Route(CONSOLE_PREFIX, home, methods=["GET"]),
        Route(LOGIN_PATH, login, methods=["GET", "POST"]),
        Route(CONSOLE_PREFIX + "logout", logout, methods=["POST"]),
        *leads.routes(console),
        *inventory.routes(console),
        *health.routes(console, runner),
        *users.routes(console),
        *asset_routes(ASSETS),
    ]
    return BindingParts(routes=routes, lifespans=[runner.lifespan])
