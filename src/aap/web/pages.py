"""HTML for the browser-facing surfaces: one Jinja2 environment, one stylesheet, one small script.

The public page (:mod:`aap.site`) and the staff console (:mod:`aap.console`)
render server-side with Jinja2 through Starlette, from templates shipped in
their packages, on a shared layout (``web/templates/layout.html``) and the one
stylesheet ``web/static/aap.css``; ``aap.js`` only adds copy buttons, so every
page works without JavaScript. No build step, no CDN: a server with no
internet serves every byte itself.

Jinja2 is loaded with the first page a worker renders (:class:`Templates`): a worker that
only answers agents never loads it (2 MiB, docs/benchmarks.md, "Memory").

Every link a page writes — in its templates (``{{ root }}/console/leads``) and in the Python that
builds its redirects, pager links and cookie paths (:func:`url`) — starts with the request's ASGI
``root_path``: ``""`` at a host's root, ``/t/ID`` for a tenant served under its prefix on a
platform's host (docs/platform.md, "Routing"), so a page never links out of where it is served.

Every page answer carries the same security headers: a Content-Security-Policy
that allows only this origin's stylesheet and script (no inline script), no
framing, no MIME sniffing, and a same-origin referrer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, tzinfo
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

from aap.config.localtime import abbreviation, format_day, format_local, format_rfc3339, zone_named
from aap.config.phones import DEFAULT_REGION
from aap.config.phones import display as display_phone
from aap.inventory.labels import label
from aap.util.memo import Memo
from aap.web.documents import StaticDocument

CURRENCY_SIGNS = {"USD": "$", "CAD": "CA$"}

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' https: data:; style-src 'self'; "
        "script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def money(amount: Any, currency: str | None = None) -> str:
    """``$35,500``, ``CA$42,000``; an amount in another currency is followed by its code."""
    if amount is None or isinstance(amount, bool) or not isinstance(amount, (int, float)):
        return ""
    code = currency or "USD"
    text = f"{amount:,.0f}" if float(amount).is_integer() else f"{amount:,.2f}"
    sign = CURRENCY_SIGNS.get(code)
    return f"{sign}{text}" if sign else f"{text} {code}"


def mileage(value: Any, unit: str | None = None) -> str:
    """``12,345 mi`` in the listing's own unit (AAP never converts a listed odometer)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    return f"{value:,.0f} {unit or 'mi'}"


def when(ms: Any, zone: tzinfo | None = None) -> str:
    """An epoch-milliseconds instant in ``zone`` (UTC without one): ``Mon 2 Mar 2026, 09:00 (PST)``
    (docs/console.md, "Local time")."""
    if ms is None:
        return ""
    return format_local(int(ms), zone or UTC)


def local(value: Any, zone: tzinfo | str | None = None) -> str:
    """An RFC 3339 date-time string (an appointment, a listing's ``updated_at``) read in ``zone`` (a
    zone, or an IANA name as ``DealerInformation.rooftops[].timezone`` gives it; UTC without one)."""
    if isinstance(zone, str) or zone is None:
        zone = zone_named(zone) or UTC
    return format_rfc3339(value, zone)


def zone_label(name: Any) -> str:
    """``Pacific time (America/Los_Angeles)``-style words for a rooftop's zone: its abbreviation now
    and its IANA name; nothing for no zone."""
    zone = zone_named(name)
    if zone is None:
        return ""
    return f"{abbreviation(datetime.now(zone))} ({name})"


def day(value: Any) -> str:
    """A ``YYYY-MM-DD`` date (or a ``date``) as ``Thu 3 Dec 2026``."""
    if isinstance(value, date):
        return format_day(value)
    try:
        return format_day(date.fromisoformat(str(value)))
    except ValueError:
        return "" if value is None else str(value)


def phone(value: Any, region: str | None = None) -> str:
    """A phone number as people of the rooftop's country write it (``(916) 555-0200``)."""
    if not isinstance(value, str) or not value:
        return ""
    return display_phone(value, region or DEFAULT_REGION)


def number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


class Templates:
    """The templates of one package (its ``templates/`` folder) — and of the packages it builds
    on, looked in next — over the shared layout, loaded with Jinja2 when the first page is rendered."""

    def __init__(self, package: str, *more: str) -> None:
        self.packages = (package, *more)
        self._engine: Memo[None, Jinja2Templates] = Memo(1)

    @property
    def engine(self) -> Jinja2Templates:
        return self._engine.get(None, lambda: _engine(self.packages))


def root(request: Request) -> str:
    """The path prefix ``request`` is served under: its ASGI ``root_path`` (``""`` at a host's root,
    ``/t/ID`` for a tenant under its prefix on the platform host), without a trailing slash."""
    prefix: str = request.scope.get("root_path", "")
    return prefix.rstrip("/")


def url(request: Request, path: str) -> str:
    """``path`` — a path of this app's own routes, ``/console/leads`` — as the link this request's
    pages, redirects and cookies use (under its :func:`root`)."""
    return root(request) + path


def _engine(packages: tuple[str, ...]) -> Jinja2Templates:
    # Jinja2 with the first page a worker renders, not at start (docs/architecture.md, "Memory").
    import jinja2
    from starlette.templating import Jinja2Templates

    environment = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [jinja2.PackageLoader(package, "templates") for package in dict.fromkeys((*packages, "aap.web"))]
        ),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        money=money,
        mileage=mileage,
        when=when,
        local=local,
        day=day,
        number=number,
        phone=phone,
        label=label,
        zone_label=zone_label,
    )
    return Jinja2Templates(env=environment)


def templates(package: str, *more: str) -> Templates:
    """The templates of ``package`` (its ``templates/`` folder), then of ``more``, over the shared layout."""
    return Templates(package, *more)


def render(
    pages: Templates,
    request: Request,
    name: str,
    context: Mapping[str, Any],
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """A page, with the security headers (and ``headers``); its templates get ``root`` (:func:`root`),
    the prefix of every path they write."""
    values = {"root": root(request), **context}
    response = pages.engine.TemplateResponse(request, name, values, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    if headers:
        response.headers.update(headers)
    return response


def _asset(name: str, media_type: str) -> StaticDocument:
    body = resources.files("aap.web").joinpath("static", name).read_bytes()
    return StaticDocument(body, media_type, max_age=3600)


def asset_routes(prefix: str) -> list[Route]:
    """``{prefix}aap.css`` and ``{prefix}aap.js``: each surface serves them under its own path."""
    documents = {
        "aap.css": _asset("aap.css", "text/css; charset=utf-8"),
        "aap.js": _asset("aap.js", "text/javascript; charset=utf-8"),
    }

    def endpoint_for(document: StaticDocument) -> Any:
        async def endpoint(request: Request) -> Response:
            return document.respond(request)

        return endpoint

    return [
        Route(prefix + name, endpoint_for(document), methods=["GET", "HEAD"]) for name, document in documents.items()
    ]
