"""The public dealer page: the dealership as AI assistants see it, for people (docs/console.md).

``GET /`` shows the profile (``dealer.information``), a search form with the
filters and sorts the agent advertises, paged results (``inventory.search``)
and a "connect an assistant" panel; ``GET /vehicles/{vehicle_id}`` one listing
(``inventory.vehicle``) with a form to ask the dealer about it; ``GET /contact``
the general contact form, and ``POST /contact`` where every contact form is sent
(``lead.submit``, :mod:`aap.site.contact`); ``GET /api-docs/a2a`` and
``/api-docs/poppy`` the OpenAPI documents as readable pages. Every answer comes
through the gateway (:mod:`aap.gateway`) as door ``web`` — the same validation, the
same data, the same errors and the same prices as any assistant gets: a page view
takes one token of the caller's rate limit, like an API call, and each skill call it
makes costs what its work costs beyond that, as on the other doors (a lead four in all).

The page shows no stored personal data: it reads the inventory and the profile, and a
contact form's answer shows the shopper only what they sent. ``[web] public_page =
false`` removes these routes (an API-only host); ``[web] contact_form = false`` the forms.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aap.config.phones import DEFAULT_REGION, region_of
from aap.errors import AapError
from aap.gateway import Caller, Gateway
from aap.inventory.labels import label
from aap.jsontext import decoded
from aap.paths import (
    A2A_OPENAPI_PATH,
    API_DOCS_PREFIX,
    CONTACT_PAGE_PATH,
    POPPY_OPENAPI_PATH,
    SITE_ASSETS_PREFIX,
    SITE_PATH,
    VEHICLE_PAGE_PREFIX,
)
from aap.ratelimit import retry_after_seconds
from aap.site import openapi_view
from aap.site.contact import (
    BROWSER_COOKIE,
    BROWSER_COOKIE_SECONDS,
    CHANNELS,
    FIELD_LABELS,
    HONEYPOT_FIELD,
    MAX_FORM_FIELDS,
    MAX_LENGTHS,
    PREFERENCES,
    TOKEN_FIELD,
    ContactValues,
    FormClaims,
    FormTokens,
    Problems,
    browser_digest,
    channel_phrase,
    consent_text,
    lead_request,
    new_browser_id,
    new_nonce,
    problems_of,
    same_browser,
)
from aap.site.search_form import (
    LABELS,
    RADII_MI,
    read_form,
    search_request,
    shown_fields,
    sort_options,
)
from aap.skills.catalog import SKILLS
from aap.web.accesslog import annotate
from aap.web.callers import anonymous_caller
from aap.web.errors import ErrorShape
from aap.web.pages import asset_routes, render, templates, url
from aap.web.parts import BindingParts

__all__ = ["build"]

API_DOCUMENTS = {"a2a": (A2A_OPENAPI_PATH, "A2A JSON-RPC binding"), "poppy": (POPPY_OPENAPI_PATH, "Poppy native API")}
#: Pages that carry a contact form (a token of their own) or what a shopper sent: never stored by
#: a cache, shared or not.
NO_STORE = {"Cache-Control": "no-store"}


def vehicle_page(request: Request, vehicle_id: str | None) -> str | None:
    """The link of a vehicle's page (the id quoted, as the cards link it), under the request's prefix."""
    return url(request, VEHICLE_PAGE_PREFIX + quote(vehicle_id, safe="")) if vehicle_id else None


def vehicle_title(vehicle: dict[str, Any]) -> str:
    """``2024 Honda CR-V EX-L`` (what ``macros.html:vehicle_title`` shows)."""
    words = [str(vehicle[k]) for k in ("year", "make", "model", "trim") if vehicle.get(k)]
    return " ".join(words) or str(vehicle.get("vin") or vehicle.get("stock") or vehicle.get("vehicle_id") or "")


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
        self._tokens: FormTokens | None = None

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
            "assets": url(request, SITE_ASSETS_PREFIX),
            "poppy": self.settings.poppy.enabled,
            "contact_form": self.settings.web.contact_form,
            "region_of": region_of,  # the country a rooftop's phone numbers are written for
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
            {**self._common(request), "heading": heading, "message": error.message, "back": url(request, SITE_PATH)},
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
            "fields": shown_fields(caps, facets, form, self.settings.features, label),
            "sort_options": sort_options(caps),
            "radii": RADII_MI,
            "places": sorted(places),
            "result": result,
            "pager": self._pager(request, form, result),
            "connect": self._connect(request),
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

    def _connect(self, request: Request) -> list[dict[str, str]]:
        """What an assistant needs to connect, with the page's API docs where there are some."""
        urls = self.urls
        docs = url(request, API_DOCS_PREFIX)
        out = [
            {"label": "Agent card (A2A)", "url": urls.agent_card},
            {"label": "A2A JSON-RPC endpoint", "url": urls.a2a, "docs": docs + "a2a"},
            {"label": "MCP endpoint (streamable HTTP)", "url": urls.mcp},
            {"label": "llms.txt", "url": urls.llms_txt},
            {"label": "API catalog (RFC 9727)", "url": urls.api_catalog},
            {"label": "A2A OpenAPI document", "url": urls.a2a_openapi, "docs": docs + "a2a"},
        ]
        if self.settings.poppy.enabled:
            out += [
                {"label": "Poppy document", "url": urls.poppy},
                {"label": "Poppy OpenAPI document", "url": urls.poppy_openapi, "docs": docs + "poppy"},
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
            "connect": self._connect(request),
        }

    async def vehicle(self, request: Request) -> Response:
        annotate(request.scope, binding="site", skill="inventory.vehicle")
        try:
            context = await self._vehicle(request, request.path_params["vehicle_id"])
        except AapError as error:
            return self._refused(request, error)
        if not self.settings.web.contact_form:
            return render(self.pages, request, "vehicle.html", context)
        vehicle, dealer, rooftop = context["vehicle"], context["dealer"], context["rooftop"]
        browser = self._browser(request)
        claims = self._claims(
            browser,
            dealer,
            rooftop,
            vehicle_id=vehicle["vehicle_id"],
            vehicle_title=vehicle_title(vehicle),
        )
        context["contact"] = await self._contact_view(request, claims)
        return self._with_browser(
            request, render(self.pages, request, "vehicle.html", context, headers=NO_STORE), browser
        )

    # -- contact forms (aap.site.contact) ---------------------------------------------------------
    async def _form_tokens(self) -> FormTokens:
        """The signer of form tokens: its key is kept in the database, the same for every worker."""
        if self._tokens is None:
            secret = await self.gateway.blocking(self.gateway.stores.state.secret, "site-contact-form")
            self._tokens = FormTokens(secret, lambda: self.gateway.agent.deps.clock())
        return self._tokens

    def _browser(self, request: Request) -> str:
        """The browser's form cookie, or a new one (set with the page that shows a form)."""
        cookie = request.cookies.get(BROWSER_COOKIE)
        return cookie if cookie and 16 <= len(cookie) <= 64 else new_browser_id()

    def _with_browser(self, request: Request, response: Response, browser: str) -> Response:
        """``response`` with the browser cookie its forms are bound to (renewed with each form)."""
        secure = request.url.scheme == "https" or self.settings.public_url.startswith("https://")
        response.set_cookie(
            BROWSER_COOKIE,
            browser,
            max_age=BROWSER_COOKIE_SECONDS,
            path=url(request, SITE_PATH),
            httponly=True,
            secure=secure,
            samesite="lax",
        )
        return response

    def _claims(
        self,
        browser: str,
        dealer: dict[str, Any],
        rooftop: dict[str, Any] | None,
        *,
        vehicle_id: str | None = None,
        vehicle_title: str | None = None,
        seller_id: str | None = None,
    ) -> FormClaims:
        """A new form for ``dealer`` (the seller of the vehicle, or of a general form)."""
        place = rooftop or next(iter(dealer.get("rooftops") or []), None)
        return FormClaims(
            nonce=new_nonce(),
            browser=browser_digest(browser),
            dealer_name=dealer["name"],
            consent_text=consent_text(self.settings.web.contact_consent_text, dealer["name"]),
            region=region_of(place) if isinstance(place, dict) else DEFAULT_REGION,
            vehicle_id=vehicle_id,
            vehicle_title=vehicle_title,
            seller_id=seller_id,
        )

    async def _contact_view(
        self,
        request: Request,
        claims: FormClaims,
        *,
        token: str | None = None,
        values: ContactValues | None = None,
        problems: Problems | None = None,
    ) -> dict[str, Any]:
        """What ``contact_form.html`` shows: the form's token, the shopper's values, the problems."""
        if token is None:
            token = (await self._form_tokens()).issue(claims)
        return {
            "action": url(request, CONTACT_PAGE_PATH),
            "token": token,
            "token_field": TOKEN_FIELD,
            "claims": claims,
            "values": values or ContactValues(),
            "problems": problems or Problems(),
            "channels": CHANNELS,
            "preferences": PREFERENCES,
            "labels": FIELD_LABELS,
            "max": MAX_LENGTHS,
            "honeypot": HONEYPOT_FIELD,
        }

    def _contact_page(
        self,
        request: Request,
        view: dict[str, Any],
        *,
        status: int = 200,
        browser: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        claims: FormClaims = view["claims"]
        context = {
            **self._common(request),
            "contact": view,
            "vehicle_url": vehicle_page(request, claims.vehicle_id),
        }
        response = render(
            self.pages, request, "contact.html", context, status_code=status, headers={**NO_STORE, **(headers or {})}
        )
        return self._with_browser(request, response, browser) if browser else response

    async def contact(self, request: Request) -> Response:
        """``GET /contact``: the general form (``?seller=DEALER_ID``: for one seller of an aggregate endpoint)."""
        annotate(request.scope, binding="site", skill="dealer.information")
        try:
            caller = await self._admit(request)
            dealer = await self._run(caller, "dealer.information", {"type": "dealer.information.request"})
            seller = request.query_params.get("seller")
            sellers = {p.dealer_id for p in self.settings.dealers if p.dealer_id}
            if self.settings.scope == "aggregate" and seller in sellers:
                request_info = {"type": "dealer.information.request", "dealer_id": seller}
                dealer = await self._run(caller, "dealer.information", request_info)
            else:
                seller = None
        except AapError as error:
            return self._refused(request, error)
        browser = self._browser(request)
        view = await self._contact_view(request, self._claims(browser, dealer, None, seller_id=seller))
        return self._contact_page(request, view, browser=browser)

    def _same_site(self, request: Request) -> bool:
        """Was the form sent from this site? ``Origin`` (and ``Sec-Fetch-Site``) when the browser says."""
        if request.headers.get("sec-fetch-site") == "cross-site":
            return False
        origin = request.headers.get("origin")
        if origin is None:  # not sent by this client: the cookie-bound token still applies
            return True
        public = urlsplit(self.settings.public_url)
        return origin in (f"{request.url.scheme}://{request.url.netloc}", f"{public.scheme}://{public.netloc}")

    def _not_sent(self, request: Request, status: int, message: str) -> Response:
        context = {
            **self._common(request),
            "heading": "The form was not sent",
            "message": message,
            "back": url(request, SITE_PATH),
        }
        return render(self.pages, request, "error.html", context, status_code=status, headers=NO_STORE)

    async def contact_submit(self, request: Request) -> Response:
        """``POST /contact``: a filled-in contact form, sent as ``lead.submit`` through the gateway."""
        annotate(request.scope, binding="site", skill="lead.submit")
        if not self._same_site(request):
            return self._not_sent(request, 403, "This form was sent from another site, so it was not accepted.")
        try:
            form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
        except MultiPartException:
            return self._not_sent(request, 400, "The form could not be read. Open it again and send it from there.")
        return await self._submitted(request, form)

    async def _submitted(self, request: Request, form: FormData) -> Response:
        tokens = await self._form_tokens()
        read = tokens.read(form.get(TOKEN_FIELD))
        if read is None:
            return self._not_sent(
                request, 400, "The form could not be read (it may come from an older page). Open it again and send it."
            )
        claims = read.claims
        values = ContactValues.of(form, form.getlist("channels"))
        token = str(form.get(TOKEN_FIELD))

        async def again(status: int, message: str, *, renew: bool = False, keep: bool = True, **extra: Any) -> Response:
            """The form once more, with what to do and (``keep``) the shopper's values; ``renew``: as
            a new form."""
            problems = Problems(form=[message])
            browser = None
            if renew:
                browser = self._browser(request)
                shown = values if keep else ContactValues()
                view = await self._contact_view(
                    request, claims.renewed(browser_digest(browser)), values=shown, problems=problems
                )
            else:
                view = await self._contact_view(request, claims, token=token, values=values, problems=problems)
            return self._contact_page(request, view, status=status, browser=browser, **extra)

        caller = Caller("web", anonymous_caller(request))
        try:
            await self.gateway.admit(caller)
        except AapError as error:
            return await self._rate_limited(again, error)
        if not same_browser(claims, request.cookies.get(BROWSER_COOKIE)):
            return await again(
                403,
                "Your browser did not send back this site's cookie for the form, so it was not sent. "
                "Allow cookies for this site, then send the form again.",
                renew=True,
                # without an Origin that says this site, the values may be another site's: not shown back
                keep=request.headers.get("origin") is not None,
            )
        web = self.settings.web
        age = (self.gateway.agent.deps.clock() - read.issued).total_seconds()
        if age < web.contact_form_min_seconds:
            return await again(400, "The form was sent very quickly after it was opened. Check it, then send it again.")
        if age > web.contact_form_max_hours * 3600:
            return await again(
                400,
                f"The form was open for more than {web.contact_form_max_hours} hours. Check it, then send it again.",
                renew=True,
            )
        if values.honeypot:
            values.honeypot = ""  # a person never sees it; an autofill that filled it is cleared
            return await again(400, "The form could not be sent as it was. Please check it and send it again.")
        payload = lead_request(values, read, self.urls.url(SITE_PATH))
        try:
            answer = decoded(await self.gateway.call(caller, SKILLS["lead.submit"], payload, paid=1))
        except AapError as error:
            if error.code == "RATE_LIMITED":
                return await self._rate_limited(again, error)
            if error.code == "IDEMPOTENCY_CONFLICT":
                return await again(
                    409,
                    "You already sent this form, with other details; the changes were not sent. "
                    "To send them as a new message, send the form again.",
                    renew=True,
                )
            problems = problems_of(error, values, claims.dealer_name)
            view = await self._contact_view(request, claims, token=token, values=values, problems=problems)
            return self._contact_page(request, view, status=error.spec.http_status)
        return self._sent(request, claims, values, answer)

    async def _rate_limited(self, again: Any, error: AapError) -> Response:
        retry = retry_after_seconds(error)
        wait = f" Please wait {retry} seconds, then send it again." if retry else " Please send it again later."
        headers = {"Retry-After": str(retry)} if retry is not None else {}
        response: Response = await again(
            error.spec.http_status,
            "Too many requests came from your network, so the form was not sent." + wait,
            headers=headers,
        )
        return response

    def _sent(self, request: Request, claims: FormClaims, values: ContactValues, answer: dict[str, Any]) -> Response:
        data = answer["data"]
        context = {
            **self._common(request),
            "lead": data,
            "message": answer.get("message"),
            "claims": claims,
            "channels": channel_phrase(values.channels),
            "vehicle_url": vehicle_page(request, claims.vehicle_id),
        }
        return render(self.pages, request, "contact_sent.html", context, headers=NO_STORE)

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
                    "back": url(request, SITE_PATH),
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
                    "back": url(request, SITE_PATH),
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
                "json_url": url(request, API_DOCUMENTS[name][0]),
                "documents": API_DOCUMENTS,
            },
        )


#: The paths this surface answers (:mod:`aap.web.surface`); errors in the app's plain shape.
PATHS = (SITE_PATH, VEHICLE_PAGE_PREFIX, API_DOCS_PREFIX, SITE_ASSETS_PREFIX, CONTACT_PAGE_PATH)
ERROR_SHAPES: dict[str, ErrorShape] = {}


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
    if gateway.settings.web.contact_form:
        routes += [
            Route(CONTACT_PAGE_PATH, site.contact, methods=["GET", "HEAD"], name="site_contact"),
            Route(CONTACT_PAGE_PATH, site.contact_submit, methods=["POST"], name="site_contact_submit"),
        ]
    return BindingParts(routes=routes)
