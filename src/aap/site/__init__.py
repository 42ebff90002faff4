"""The public dealer page: the dealership as AI assistants see it, for people (docs/console.md).

``GET /`` shows the profile (``dealer.information``), a search form with the
filters and sorts the agent advertises, paged results (``inventory.search``)
and a "connect an assistant" panel; ``GET /vehicles/{vehicle_id}`` one listing
(``inventory.vehicle``); ``GET /api-docs/a2a`` and ``/api-docs/poppy`` the
OpenAPI documents as readable pages. Every answer comes through the gateway
(:mod:`aap.gateway`) as door ``web`` — the same validation, the same data, the same
errors and the same prices as any assistant gets: a page view takes one token of the
caller's rate limit, like an API call, and each skill call it makes costs what its
work costs beyond that, as on the other doors.

The page holds no personal data: it only reads the inventory and the profile.
``[web] public_page = false`` removes these routes (an API-only host).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aap.errors import AapError
from aap.gateway import Caller, Gateway
from aap.jsontext import decoded
from aap.paths import (
    A2A_OPENAPI_PATH,
    API_DOCS_PREFIX,
    POPPY_OPENAPI_PATH,
    SITE_ASSETS_PREFIX,
    SITE_PATH,
    VEHICLE_PAGE_PREFIX,
)
from aap.ratelimit import retry_after_seconds
from aap.site import openapi_view
from aap.site.search_form import (
    LABELS,
    OPTION_LABELS,
    RADII_MI,
    offered,
    read_form,
    search_request,
    sort_options,
)
from aap.skills.catalog import SKILLS
from aap.web.accesslog import annotate
from aap.web.callers import anonymous_caller
from aap.web.pages import asset_routes, render, templates
from aap.web.parts import BindingParts

__all__ = ["build"]

API_DOCUMENTS = {"a2a": (A2A_OPENAPI_PATH, "A2A JSON-RPC binding"), "poppy": (POPPY_OPENAPI_PATH, "Poppy native API")}


def _problem_lines(error: AapError) -> list[str]:
    """An AAP error as lines a person can act on (the field's label, then the validator's words)."""
    lines = []
    for item in error.errors:
        location = str(item.get("instanceLocation", ""))
        name = location.split("/")[2] if location.startswith("/filters/") else location.strip("/")
        label = LABELS.get(name, name.replace("_", " ").capitalize() or "Search")
        lines.append(f"{label}: {item.get('error', '')}")
    return lines or [error.message]


class PublicSite:
    """The public page's endpoints over one agent, through its gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        self.urls = self.settings.urls
        self.pages = templates("aap.site")
        self._documents: dict[str, openapi_view.DocumentView | None] = {}

    # -- the core, as any caller ---------------------------------------------------------------
    async def _admit(self, request: Request) -> Caller:
        """The page view's caller, admitted with one token (a refusal is ``RATE_LIMITED``)."""
        caller = Caller("web", anonymous_caller(request))
        await self.gateway.admit(caller)
        return caller

    async def _run(self, caller: Caller, skill: str, payload: dict[str, Any]) -> dict[str, Any]:
        """One skill call of the page (its first token paid by the view), in plain values."""
        response: dict[str, Any] = decoded(await self.gateway.call(caller, SKILLS[skill], payload, paid=1))
        data: dict[str, Any] = response["data"]
        return data

    async def _profiles(self, caller: Caller) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The endpoint's profile, and each seller's on an aggregate endpoint."""
        own = await self._run(caller, "dealer.information", {"type": "dealer.information.request"})
        sellers = []
        if self.settings.scope == "aggregate":
            for profile in self.settings.dealers:
                if profile.dealer_id:
                    request = {"type": "dealer.information.request", "dealer_id": profile.dealer_id}
                    sellers.append(await self._run(caller, "dealer.information", request))
        return own, sellers

    def _common(self, request: Request) -> dict[str, Any]:
        return {
            "site_name": self.settings.agent.name,
            "assets": SITE_ASSETS_PREFIX,
            "poppy": self.settings.poppy.enabled,
            "layout": "site_layout.html",
        }

    def _refused(self, request: Request, error: AapError) -> Response:
        status = error.spec.http_status
        headers = {}
        retry = retry_after_seconds(error)
        if retry is not None:
            headers["Retry-After"] = str(retry)
        heading = "Too many requests" if error.code == "RATE_LIMITED" else "Not available"
        return render(
            self.pages,
            request,
            "error.html",
            {**self._common(request), "heading": heading, "message": error.message, "back": SITE_PATH},
            status_code=status,
            headers=headers,
        )

    # -- GET / --------------------------------------------------------------------------------
    async def _home(self, request: Request) -> tuple[dict[str, Any], int]:
        caller = await self._admit(request)
        caps = self.settings.search
        own, sellers = await self._profiles(caller)
        rooftops = [r for p in ([own] if not sellers else sellers) for r in p["rooftops"]]
        places = {r["name"]: r["geo"] for r in rooftops if isinstance(r.get("geo"), dict)}
        form, filters = read_form(request.query_params, caps, self.settings.features, places)
        facets_request: dict[str, Any] = {"type": "inventory.facets.request"}
        if form.currency in caps.currencies:
            facets_request["currency"] = form.currency
        facets = await self._run(caller, "inventory.facets", facets_request)
        status = 400 if form.problems else 200
        result: dict[str, Any] | None = None
        try:  # even with problems of its own, the form shows every problem the core finds too
            result = await self._run(caller, "inventory.search", search_request(form, filters, caps))
        except AapError as error:
            if error.code == "RATE_LIMITED":
                raise
            form.problems.extend(_problem_lines(error))
            status = error.spec.http_status
        if form.problems:
            result = None
        sellers_by_id = {s.get("dealer_id"): s["name"] for s in sellers}
        context = {
            **self._common(request),
            "dealer": own,
            "sellers": sellers,
            "sellers_by_id": sellers_by_id,
            "rooftops": rooftops,
            "caps": caps,
            "form": form,
            "fields": offered(caps),
            "facets": facets,
            "features": self.settings.features,
            "sort_options": sort_options(caps),
            "radii": RADII_MI,
            "places": sorted(places),
            "option_labels": OPTION_LABELS,
            "result": result,
            "pager": self._pager(request, form, result),
            "connect": self._connect(),
        }
        return context, status

    def _pager(self, request: Request, form: Any, result: dict[str, Any] | None) -> dict[str, Any]:
        """ "Next page" follows the agent's cursor, a keyset: the fortieth page costs what the
        first does. The links never ask for a page by offset (a ``skip`` sorts every match,
        docs/benchmarks.md); going back is the browser's Back, or the first page."""
        if not result:
            return {}
        caps = self.settings.search
        base = [(k, v) for k, v in request.query_params.multi_items() if k not in ("page", "cursor")]

        def link(extra: list[tuple[str, str]]) -> str:
            return SITE_PATH + "?" + urlencode(base + extra) + "#results"

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

    def _connect(self) -> list[dict[str, str]]:
        """What an assistant needs to connect, with the page's API docs where there are some."""
        urls = self.urls
        out = [
            {"label": "Agent card (A2A)", "url": urls.agent_card},
            {"label": "A2A JSON-RPC endpoint", "url": urls.a2a, "docs": API_DOCS_PREFIX + "a2a"},
            {"label": "MCP endpoint (streamable HTTP)", "url": urls.mcp},
            {"label": "llms.txt", "url": urls.llms_txt},
            {"label": "API catalog (RFC 9727)", "url": urls.api_catalog},
            {"label": "A2A OpenAPI document", "url": urls.a2a_openapi, "docs": API_DOCS_PREFIX + "a2a"},
        ]
        if self.settings.poppy.enabled:
            out += [
                {"label": "Poppy document", "url": urls.poppy},
                {"label": "Poppy OpenAPI document", "url": urls.poppy_openapi, "docs": API_DOCS_PREFIX + "poppy"},
            ]
        return out

    async def home(self, request: Request) -> Response:
        annotate(request.scope, binding="site", skill="inventory.search")
        try:
            context, status = await self._home(request)
        except AapError as error:
            return self._refused(request, error)
        return render(self.pages, request, "home.html", context, status_code=status)

    # -- GET /vehicles/{vehicle_id} -------------------------------------------------------------
    async def _vehicle(self, request: Request, vehicle_id: str) -> dict[str, Any]:
        caller = await self._admit(request)
        vehicle = await self._run(
            caller, "inventory.vehicle", {"type": "inventory.vehicle.request", "vehicle_id": vehicle_id}
        )
        seller = {"dealer_id": vehicle["dealer_id"]} if vehicle.get("dealer_id") else {}
        dealer = await self._run(caller, "dealer.information", {"type": "dealer.information.request", **seller})
        rooftop = next((r for r in dealer["rooftops"] if r["name"] == vehicle.get("rooftop")), None)
        return {
            **self._common(request),
            "vehicle": vehicle,
            "dealer": dealer,
            "rooftop": rooftop,
            "connect": self._connect(),
        }

    async def vehicle(self, request: Request) -> Response:
        annotate(request.scope, binding="site", skill="inventory.vehicle")
        try:
            context = await self._vehicle(request, request.path_params["vehicle_id"])
        except AapError as error:
            return self._refused(request, error)
        return render(self.pages, request, "vehicle.html", context)

    # -- GET /api-docs/{name} ------------------------------------------------------------------
    async def _document(self, request: Request, name: str) -> openapi_view.DocumentView | None:
        """The document this app serves at the path, read once through the app itself."""
        if name not in self._documents:
            transport = httpx.ASGITransport(app=request.app)
            async with httpx.AsyncClient(transport=transport, base_url=self.urls.base_url) as client:
                answer = await client.get(API_DOCUMENTS[name][0])
            self._documents[name] = openapi_view.build(answer.json()) if answer.status_code == 200 else None
        return self._documents[name]

    async def api_docs(self, request: Request) -> Response:
        annotate(request.scope, binding="site")
        name = request.path_params["name"]
        if name not in API_DOCUMENTS:
            return render(
                self.pages,
                request,
                "error.html",
                {
                    **self._common(request),
                    "heading": "No such API document",
                    "message": "The API documents are: " + ", ".join(API_DOCUMENTS),
                    "back": SITE_PATH,
                },
                status_code=404,
            )
        document = await self._document(request, name)
        if document is None:
            return render(
                self.pages,
                request,
                "error.html",
                {
                    **self._common(request),
                    "heading": "Not served here",
                    "message": f"This deployment does not serve the {API_DOCUMENTS[name][1]}.",
                    "back": SITE_PATH,
                },
                status_code=404,
            )
        return render(
            self.pages,
            request,
            "api_docs.html",
            {
                **self._common(request),
                "doc": document,
                "name": name,
                "json_url": API_DOCUMENTS[name][0],
                "documents": API_DOCUMENTS,
            },
        )


def build(gateway: Gateway) -> BindingParts:
    """The public page's routes, unless ``[web] public_page = false``."""
    if not gateway.settings.web.public_page:
        return BindingParts()
    site = PublicSite(gateway)
    routes: list[BaseRoute] = [
        Route(SITE_PATH, site.home, methods=["GET", "HEAD"], name="site_home"),
        Route(VEHICLE_PAGE_PREFIX + "{vehicle_id:str}", site.vehicle, methods=["GET", "HEAD"], name="site_vehicle"),
        Route(API_DOCS_PREFIX + "{name:str}", site.api_docs, methods=["GET", "HEAD"], name="site_api_docs"),
        *asset_routes(SITE_ASSETS_PREFIX),
    ]
    return BindingParts(routes=routes)
