"""The public page's shared parts: one :class:`PublicSite` over an agent's gateway.

Every page of the site is a caller of the core like any assistant (door ``web``): a view is
admitted with one rate-limit token (:meth:`PublicSite.admit`) and makes its skill calls
through the gateway (:meth:`PublicSite.run`). The page handlers (:mod:`~aap.site.pages`,
:mod:`~aap.site.contact_pages`, :mod:`~aap.site.api_docs`) are named functions
``handler(site, request)`` over this object; it also holds what the site derives once: the
signer of contact-form tokens and the API documents as read through the app.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from aap.config.phones import region_of
from aap.errors import AapError
from aap.gateway import Caller, Gateway
from aap.jsontext import decoded
from aap.paths import SITE_ASSETS_PREFIX, SITE_PATH, VEHICLE_PAGE_PREFIX
from aap.ratelimit import retry_after_seconds
from aap.site.contact import FormTokens
from aap.site.openapi_view import DocumentView
from aap.skills.catalog import SKILLS
from aap.web.callers import anonymous_caller
from aap.web.pages import render, templates, url

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


class PublicSite:
    """The public page's shared parts over one agent, through its gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        self.urls = self.settings.urls
        self.pages = templates("aap.site")
        #: The API documents this app serves, read once through the app (:mod:`aap.site.api_docs`).
        self.documents: dict[str, DocumentView | None] = {}
        self._tokens: FormTokens | None = None

    # -- the core, as any caller ---------------------------------------------------------------
    async def admit(self, request: Request) -> Caller:
        """The page view's caller, admitted with one token (a refusal is ``RATE_LIMITED``)."""
        caller = Caller("web", anonymous_caller(request))
        await self.gateway.admit(caller)
        return caller

    async def run(self, caller: Caller, skill: str, payload: dict[str, Any]) -> dict[str, Any]:
        """One skill call of the page (its first token paid by the view), in plain values."""
        response: dict[str, Any] = decoded(await self.gateway.call(caller, SKILLS[skill], payload, paid=1))
        data: dict[str, Any] = response["data"]
        return data

    async def profiles(self, caller: Caller) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The endpoint's profile, and each seller's on an aggregate endpoint."""
        own = await self.run(caller, "dealer.information", {"type": "dealer.information.request"})
        sellers = []
        if self.settings.scope == "aggregate":
            for profile in self.settings.dealers:
                if profile.dealer_id:
                    request = {"type": "dealer.information.request", "dealer_id": profile.dealer_id}
                    sellers.append(await self.run(caller, "dealer.information", request))
        return own, sellers

    # -- pages --------------------------------------------------------------------------------
    def common(self, request: Request) -> dict[str, Any]:
        """What every page of the site's templates is given besides its own context."""
        return {
            "site_name": self.settings.agent.name,
            "assets": url(request, SITE_ASSETS_PREFIX),
            "poppy": self.settings.poppy.enabled,
            "contact_form": self.settings.web.contact_form,
            "region_of": region_of,  # the country a rooftop's phone numbers are written for
            "layout": "site_layout.html",
        }

    def refused(self, request: Request, error: AapError) -> Response:
        """A page the core refused (rate limited, not found…) as an error page with the error's status."""
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
            {**self.common(request), "heading": heading, "message": error.message, "back": url(request, SITE_PATH)},
            status_code=status,
            headers=headers,
        )

    # -- contact forms (aap.site.contact) ---------------------------------------------------------
    async def form_tokens(self) -> FormTokens:
        """The signer of form tokens: its key is kept in the database, the same for every worker."""
        if self._tokens is None:
            secret = await self.gateway.blocking(self.gateway.stores.state.secret, "site-contact-form")
            self._tokens = FormTokens(secret, lambda: self.gateway.agent.deps.clock())
        return self._tokens
