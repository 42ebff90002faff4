"""The public page's inventory pages: ``GET /`` (the profile, the search form, paged results, the
"connect an assistant" panel) and ``GET /vehicles/{vehicle_id}`` (one listing, with a form to
ask the dealer about it).

Each is a named handler ``handler(site, request)`` over :class:`~aap.site.core.PublicSite`;
the search form's fields and their reading are :mod:`aap.site.search_form`'s.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from aap.errors import AapError
from aap.inventory.labels import label
from aap.paths import API_DOCS_PREFIX, SITE_PATH
from aap.site.contact_pages import browser_of, contact_view, form_claims, with_browser
from aap.site.core import NO_STORE, PublicSite, vehicle_title
from aap.site.search_form import LABELS, RADII_MI, read_form, search_request, shown_fields, sort_options
from aap.web.accesslog import annotate
from aap.web.pages import render, url


def _problem_lines(error: AapError) -> list[str]:
    """An AAP error as lines a person can act on (the field's label, then the validator's words)."""
    lines = []
    for item in error.errors:
        location = str(item.get("instanceLocation", ""))
        name = location.split("/")[2] if location.startswith("/filters/") else location.strip("/")
        label = LABELS.get(name, name.replace("_", " ").capitalize() or "Search")
        lines.append(f"{label}: {item.get('error', '')}")
    return lines or [error.message]


# -- GET / --------------------------------------------------------------------------------------
async def _home(site: PublicSite, request: Request) -> tuple[dict[str, Any], int]:
    caller = await site.admit(request)
    caps = site.settings.search
    own, sellers = await site.profiles(caller)
    rooftops = [r for p in ([own] if not sellers else sellers) for r in p["rooftops"]]
    places = {r["name"]: r["geo"] for r in rooftops if isinstance(r.get("geo"), dict)}
    form, filters = read_form(request.query_params, caps, site.settings.features, places)
    facets_request: dict[str, Any] = {"type": "inventory.facets.request"}
    if form.currency in caps.currencies:
        facets_request["currency"] = form.currency
    facets = await site.run(caller, "inventory.facets", facets_request)
    status = 400 if form.problems else 200
    result: dict[str, Any] | None = None
    try:  # even with problems of its own, the form shows every problem the core finds too
        result = await site.run(caller, "inventory.search", search_request(form, filters, caps))
    except AapError as error:
        if error.code == "RATE_LIMITED":
            raise
        form.problems.extend(_problem_lines(error))
        status = error.spec.http_status
    if form.problems:
        result = None
    sellers_by_id = {s.get("dealer_id"): s["name"] for s in sellers}
    context = {
        **site.common(request),
        "dealer": own,
        "sellers": sellers,
        "sellers_by_id": sellers_by_id,
        "rooftops": rooftops,
        "caps": caps,
        "form": form,
        "fields": shown_fields(caps, facets, form, site.settings.features, label),
        "sort_options": sort_options(caps),
        "radii": RADII_MI,
        "places": sorted(places),
        "result": result,
        "pager": _pager(site, request, form, result),
        "connect": _connect(site, request),
    }
    return context, status


def _pager(site: PublicSite, request: Request, form: Any, result: dict[str, Any] | None) -> dict[str, Any]:
    """ "Next page" follows the agent's cursor, a keyset: the fortieth page costs what the
    first does. The links never ask for a page by offset (a ``skip`` sorts every match,
    docs/benchmarks.md); going back is the browser's Back, or the first page."""
    if not result:
        return {}
    caps = site.settings.search
    base = [(k, v) for k, v in request.query_params.multi_items() if k not in ("page", "cursor")]

    def link(extra: list[tuple[str, str]]) -> str:
        return url(request, SITE_PATH) + "?" + urlencode(base + extra) + "#results"

    total = result.get("total")
    limit = result.get("limit") or caps.default_limit
    out: dict[str, Any] = {
        "total": total,
        "page": form.page,
        "pages": None if total is None else max(1, -(-total // limit)),
    }
    if form.page > 1 or form.cursor:
        out["first"] = link([])
    if result.get("next_cursor"):
        out["next"] = link([("page", str(form.page + 1)), ("cursor", result["next_cursor"])])
    return out


def _connect(site: PublicSite, request: Request) -> list[dict[str, str]]:
    """What an assistant needs to connect, with the page's API docs where there are some."""
    urls = site.urls
    docs = url(request, API_DOCS_PREFIX)
    out = [
        {"label": "Agent card (A2A)", "url": urls.agent_card},
        {"label": "A2A JSON-RPC endpoint", "url": urls.a2a, "docs": docs + "a2a"},
        {"label": "MCP endpoint (streamable HTTP)", "url": urls.mcp},
        {"label": "llms.txt", "url": urls.llms_txt},
        {"label": "API catalog (RFC 9727)", "url": urls.api_catalog},
        {"label": "A2A OpenAPI document", "url": urls.a2a_openapi, "docs": docs + "a2a"},
    ]
    if site.settings.poppy.enabled:
        out += [
            {"label": "Poppy document", "url": urls.poppy},
            {"label": "Poppy OpenAPI document", "url": urls.poppy_openapi, "docs": docs + "poppy"},
        ]
    return out


async def home(site: PublicSite, request: Request) -> Response:
    annotate(request.scope, binding="site", skill="inventory.search")
    try:
        context, status = await _home(site, request)
    except AapError as error:
        return site.refused(request, error)
    return render(site.pages, request, "home.html", context, status_code=status)


# -- GET /vehicles/{vehicle_id} -------------------------------------------------------------------
async def _vehicle(site: PublicSite, request: Request, vehicle_id: str) -> dict[str, Any]:
    caller = await site.admit(request)
    vehicle = await site.run(
        caller, "inventory.vehicle", {"type": "inventory.vehicle.request", "vehicle_id": vehicle_id}
    )
    seller = {"dealer_id": vehicle["dealer_id"]} if vehicle.get("dealer_id") else {}
    dealer = await site.run(caller, "dealer.information", {"type": "dealer.information.request", **seller})
    rooftop = next((r for r in dealer["rooftops"] if r["name"] == vehicle.get("rooftop")), None)
    return {
        **site.common(request),
        "vehicle": vehicle,
        "dealer": dealer,
        "rooftop": rooftop,
        "connect": _connect(site, request),
    }


async def vehicle(site: PublicSite, request: Request) -> Response:
    annotate(request.scope, binding="site", skill="inventory.vehicle")
    try:
        context = await _vehicle(site, request, request.path_params["vehicle_id"])
    except AapError as error:
        return site.refused(request, error)
    if not site.settings.web.contact_form:
        return render(site.pages, request, "vehicle.html", context)
    vehicle, dealer, rooftop = context["vehicle"], context["dealer"], context["rooftop"]
    browser = browser_of(request)
    claims = form_claims(
        site,
        browser,
        dealer,
        rooftop,
        vehicle_id=vehicle["vehicle_id"],
        vehicle_title=vehicle_title(vehicle),
    )
    context["contact"] = await contact_view(site, request, claims)
    return with_browser(site, request, render(site.pages, request, "vehicle.html", context, headers=NO_STORE), browser)
