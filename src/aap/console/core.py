"""The console's shared machinery: one :class:`Console` (the agent, accounts, templates, the audit
log), the page and error rendering of every console page, and the guard every page goes through
(:meth:`Console.guarded`: a signed-in visit, errors as pages or JSON).

The page areas (:mod:`~aap.console.leads`, :mod:`~aap.console.inventory`, :mod:`~aap.console.feeds`,
:mod:`~aap.console.health`, :mod:`~aap.console.users`) are named handlers
``handler(console, request, visit)`` made endpoints by :meth:`Console.endpoint`; the platform
console (:mod:`aap.platform.console`) is a :class:`Console` too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import tzinfo
from typing import Any, Self
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aap.accounts import Accounts
from aap.config.localtime import zone_for
from aap.config.phones import region_of
from aap.console.auth import LOGIN_PATH, Auth, Guests, Refused, SignInNeeded, Visit, refuse_odd_values
from aap.errors import unexpected
from aap.gateway import Gateway
from aap.paths import CONSOLE_PREFIX
from aap.web.accesslog import annotate
from aap.web.errors import plain_response, route_path, wants_json
from aap.web.pages import render, templates, url

ASSETS = CONSOLE_PREFIX + "assets/"
NO_STORE = {"Cache-Control": "no-store"}

#: What :meth:`Console.guarded` makes an endpoint of: a page's work once the visit is known.
Handler = Callable[[Request, Visit], Awaitable[Response]]
#: A Starlette endpoint.
Endpoint = Callable[[Request], Awaitable[Response]]


class Console:
    """The console's shared parts: the agent, accounts, templates, the audit log, and who else
    may come in (``guests``: a platform's administrators at a tenant's console, docs/platform.md)."""

    auth_type: type[Auth] = Auth

    def __init__(self, gateway: Gateway, *, guests: Guests | None = None) -> None:
        self.gateway = gateway
        self.agent = agent = gateway.agent
        self.settings = agent.settings
        self.stores = agent.stores
        self.guests = guests
        self.accounts = Accounts(agent.stores.console, agent.settings)
        self.pages = templates("aap.console")
        self.auth = self.auth_type(self)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # -- local time (docs/console.md, "Local time") ------------------------------------------
    def zone(self, dealer_id: str | None = None, rooftop: str | None = None) -> tzinfo:
        """The zone a lead's or listing's instants are read in: its rooftop's, else its dealer's."""
        return zone_for(self.settings, dealer_id, rooftop)

    def viewer_zone(self, visit: Visit | None, rooftop: str | None = None) -> tzinfo:
        """The zone of what belongs to no one rooftop (date filters, the audit log, feed runs): the
        rooftop asked for, else the person's one rooftop, else their seller's (or the dealer's) zone."""
        user = visit.session.user if visit is not None else None
        dealer_id = user.dealer_id if user is not None else None
        if rooftop is None and user is not None and len(user.rooftops) == 1:
            seller, rooftop = user.rooftops[0]  # a (seller, rooftop) pair
            dealer_id = seller or dealer_id
        return self.zone(dealer_id, rooftop)

    def region(self, dealer_id: str | None, rooftop: str | None) -> str:
        """The country a phone number of this rooftop is written for."""
        profile = self.settings.profile_for(dealer_id) or self.settings.dealer
        found = profile.rooftop(rooftop) if rooftop else None
        return region_of(found or (profile.rooftops[0] if profile.rooftops else {}))

    def audit(self, actor: str, action: str, subject: str | None, detail: Mapping[str, Any]) -> None:
        """One audit entry (blocking): who did what to which lead or account."""
        self.stores.console.audit(actor, action, subject, dict(detail), self.now_ms())

    def page_context(self, request: Request, visit: Visit | None) -> dict[str, Any]:
        """What every page of this console's templates is given besides its own context."""
        return {
            "site_name": f"{self.settings.agent.name} · Console",
            "assets": url(request, ASSETS),
            "layout": "console_layout.html",
            "visit": visit,
            "path": route_path(request.scope),
            "csrf": visit.session.csrf_token if visit else None,
            "aggregate": self.settings.scope == "aggregate",
            "zone": self.viewer_zone(visit),
            "zone_of": self.zone,
            "region_of": self.region,
        }

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
        return render(
            self.pages,
            request,
            name,
            {**self.page_context(request, visit), **context},
            status_code=status_code,
            headers={**NO_STORE, **(headers or {})},
        )

    def refusal(
        self,
        request: Request,
        status: int,
        heading: str,
        message: str,
        *,
        back: str = CONSOLE_PREFIX,
        visit: Visit | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """An error as a page for a browser, as the app's JSON error for a script (by ``Accept``)."""
        if wants_json(request):
            return plain_response(status, message, {**NO_STORE, **(headers or {})})
        context = {"heading": heading, "message": message, "back": url(request, back)}
        return self.page(request, "error.html", context, status_code=status, visit=visit, headers=headers)

    def guarded(self, handler: Handler, *, admin: bool = False) -> Endpoint:
        """An endpoint that needs a signed-in visit (an admin's with ``admin``); errors become pages
        (or JSON for a client that asks for it)."""

        async def endpoint(request: Request) -> Response:
            annotate(request.scope, binding="console")
            try:
                refuse_odd_values(request)
                visit = await self.auth.visit(request, admin=admin)
                return await handler(request, visit)
            except SignInNeeded:
                if request.method == "GET" and not wants_json(request):
                    # ``next`` is the page's path within the console; the sign-in adds the prefix back.
                    query = urlencode({"next": route_path(request.scope)}, safe="/")
                    return RedirectResponse(f"{url(request, LOGIN_PATH)}?{query}", status_code=303)
                return self.refusal(
                    request,
                    401,
                    "Signed out",
                    "Your session ended. Sign in again, then repeat the action.",
                    back=LOGIN_PATH,
                )
            except Refused as refused:
                heading = {404: "Not found", 400: "Please check the request"}.get(refused.status, "Not allowed")
                return self.refusal(
                    request, refused.status, heading, refused.message, visit=refused.visit, headers=refused.headers
                )
            except Exception as exc:  # logged once without its text (it may quote customer data)
                error = unexpected(exc, binding="console", endpoint=request.url.path)
                return self.refusal(
                    request,
                    500,
                    "Something went wrong",
                    f"The console could not show this page (error {error.error_id}).",
                )

        return endpoint

    def endpoint(
        self, handler: Callable[[Self, Request, Visit], Awaitable[Response]], *, admin: bool = False
    ) -> Endpoint:
        """A page area's handler, ``handler(console, request, visit)``, as a guarded endpoint of this
        console (:meth:`guarded`)."""
        return self.guarded(functools.partial(handler, self), admin=admin)

    def blocking(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """``func`` on the worker's one executor (:class:`~aap.work.Work`), as every store read and
        write of a page."""
        return self.gateway.blocking(func, *args, **kwargs)
