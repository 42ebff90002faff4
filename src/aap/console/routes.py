"""The console as a surface: the paths it answers and its route table, one row per endpoint.

Each page area's endpoints are named handlers in its module (``handler(console, request,
visit)``, guarded by :meth:`~aap.console.core.Console.endpoint`); this module holds the
table and the endpoints of no page area: the console's home, and its 404 page.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from aap.console import feeds, health, inventory, leads, users
from aap.console.auth import LOGIN_PATH, Guests, Refused, Visit
from aap.console.core import ASSETS, Console
from aap.gateway import Gateway
from aap.paths import CONSOLE_PREFIX
from aap.web.errors import ErrorShape
from aap.web.pages import asset_routes, url
from aap.web.parts import BindingParts

#: The paths this surface answers (:mod:`aap.web.surface`); errors in the app's plain shape.
PATHS = (CONSOLE_PREFIX,)
ERROR_SHAPES: dict[str, ErrorShape] = {}


async def home(request: Request) -> Response:
    """``/console/``: the lead inbox."""
    return RedirectResponse(url(request, CONSOLE_PREFIX + "leads"), status_code=303)


async def not_found(console: Console, request: Request, visit: Visit) -> Response:
    raise Refused(404, "There is no such page in the console.", visit=visit)


def build(gateway: Gateway, *, console: Console | None = None, guests: Guests | None = None) -> BindingParts:
    """The console's routes, unless ``[web] console = false`` (``console``: its parts, made here
    unless given: a test holds the hash gate of the console it serves; ``guests``: who else may
    sign in, :class:`~aap.console.auth.Guests`)."""
    if not gateway.settings.web.console:
        return BindingParts()
    console = console or Console(gateway, guests=guests)
    runner = health.CheckRunner(console)
    feed_runner = feeds.FeedRunner(console)
    routes: list[BaseRoute] = [
        Route(CONSOLE_PREFIX, home, methods=["GET"]),
        Route(LOGIN_PATH, console.auth.login_page, methods=["GET", "POST"], name="login"),
        Route(CONSOLE_PREFIX + "logout", console.auth.logout, methods=["POST"], name="logout"),
        *leads.routes(console),
        *inventory.routes(console),
        *health.routes(console, runner),
        *users.routes(console),
        *feeds.routes(console, feed_runner),
        *asset_routes(ASSETS),
        # Last: any other console path is a console page that does not exist (a 404 page for a
        # browser, JSON for a script). GET only: a POST to a known path keeps its 405.
        Route(CONSOLE_PREFIX + "{rest:path}", console.endpoint(not_found), methods=["GET"]),
    ]
    return BindingParts(routes=routes, lifespans=[runner.lifespan, feed_runner.lifespan])
