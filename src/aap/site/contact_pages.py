"""The public page's contact forms as pages: ``GET /contact`` (the general form) and ``POST /contact``
(where every contact form is sent, as ``lead.submit`` through the gateway), and the form a
vehicle's page carries (:func:`contact_view`).

What a form means — its token, the shopper's values, the request it becomes, the problems
shown back — is :mod:`aap.site.contact`'s; this module is the door around it: the browser
cookie a form is bound to, the same-site check, the rate limit, and the pages shown.
Each endpoint is a named handler ``handler(site, request)`` over :class:`~aap.site.core.PublicSite`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response

from aap.config.phones import DEFAULT_REGION, region_of
from aap.errors import AapError
from aap.gateway import Caller
from aap.jsontext import decoded
from aap.paths import CONTACT_PAGE_PATH, SITE_PATH
from aap.ratelimit import retry_after_seconds
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
from aap.site.core import NO_STORE, PublicSite, vehicle_page
from aap.skills.catalog import SKILLS
from aap.web.accesslog import annotate
from aap.web.callers import anonymous_caller
from aap.web.pages import render, url


# -- the form, wherever it is shown ---------------------------------------------------------------
def browser_of(request: Request) -> str:
    """The browser's form cookie, or a new one (set with the page that shows a form)."""
    cookie = request.cookies.get(BROWSER_COOKIE)
    return cookie if cookie and 16 <= len(cookie) <= 64 else new_browser_id()


def with_browser(site: PublicSite, request: Request, response: Response, browser: str) -> Response:
    """``response`` with the browser cookie its forms are bound to (renewed with each form)."""
    secure = request.url.scheme == "https" or site.settings.public_url.startswith("https://")
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


def form_claims(
    site: PublicSite,
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
        consent_text=consent_text(site.settings.web.contact_consent_text, dealer["name"]),
        region=region_of(place) if isinstance(place, dict) else DEFAULT_REGION,
        vehicle_id=vehicle_id,
        vehicle_title=vehicle_title,
        seller_id=seller_id,
    )


async def contact_view(
    site: PublicSite,
    request: Request,
    claims: FormClaims,
    *,
    token: str | None = None,
    values: ContactValues | None = None,
    problems: Problems | None = None,
) -> dict[str, Any]:
    """What ``contact_form.html`` shows: the form's token, the shopper's values, the problems."""
    if token is None:
        token = (await site.form_tokens()).issue(claims)
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
    site: PublicSite,
    request: Request,
    view: dict[str, Any],
    *,
    status: int = 200,
    browser: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    claims: FormClaims = view["claims"]
    context = {
        **site.common(request),
        "contact": view,
        "vehicle_url": vehicle_page(request, claims.vehicle_id),
    }
    response = render(
        site.pages, request, "contact.html", context, status_code=status, headers={**NO_STORE, **(headers or {})}
    )
    return with_browser(site, request, response, browser) if browser else response


# -- GET /contact -----------------------------------------------------------------------------------
async def contact(site: PublicSite, request: Request) -> Response:
    """``GET /contact``: the general form (``?seller=DEALER_ID``: for one seller of an aggregate endpoint)."""
    annotate(request.scope, binding="site", skill="dealer.information")
    try:
        caller = await site.admit(request)
        dealer = await site.run(caller, "dealer.information", {"type": "dealer.information.request"})
        seller = request.query_params.get("seller")
        sellers = {p.dealer_id for p in site.settings.dealers if p.dealer_id}
        if site.settings.scope == "aggregate" and seller in sellers:
            request_info = {"type": "dealer.information.request", "dealer_id": seller}
            dealer = await site.run(caller, "dealer.information", request_info)
        else:
            seller = None
    except AapError as error:
        return site.refused(request, error)
    browser = browser_of(request)
    view = await contact_view(site, request, form_claims(site, browser, dealer, None, seller_id=seller))
    return _contact_page(site, request, view, browser=browser)


# -- POST /contact ----------------------------------------------------------------------------------
def _same_site(site: PublicSite, request: Request) -> bool:
    """Was the form sent from this site? ``Origin`` (and ``Sec-Fetch-Site``) when the browser says."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return False
    origin = request.headers.get("origin")
    if origin is None:  # not sent by this client: the cookie-bound token still applies
        return True
    public = urlsplit(site.settings.public_url)
    return origin in (f"{request.url.scheme}://{request.url.netloc}", f"{public.scheme}://{public.netloc}")


def _not_sent(site: PublicSite, request: Request, status: int, message: str) -> Response:
    context = {
        **site.common(request),
        "heading": "The form was not sent",
        "message": message,
        "back": url(request, SITE_PATH),
    }
    return render(site.pages, request, "error.html", context, status_code=status, headers=NO_STORE)


async def contact_submit(site: PublicSite, request: Request) -> Response:
    """``POST /contact``: a filled-in contact form, sent as ``lead.submit`` through the gateway."""
    annotate(request.scope, binding="site", skill="lead.submit")
    if not _same_site(site, request):
        return _not_sent(site, request, 403, "This form was sent from another site, so it was not accepted.")
    try:
        form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
    except MultiPartException:
        return _not_sent(site, request, 400, "The form could not be read. Open it again and send it from there.")
    return await _submitted(site, request, form)


async def _submitted(site: PublicSite, request: Request, form: FormData) -> Response:
    tokens = await site.form_tokens()
    read = tokens.read(form.get(TOKEN_FIELD))
    if read is None:
        return _not_sent(
            site,
            request,
            400,
            "The form could not be read (it may come from an older page). Open it again and send it.",
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
            browser = browser_of(request)
            shown = values if keep else ContactValues()
            view = await contact_view(
                site, request, claims.renewed(browser_digest(browser)), values=shown, problems=problems
            )
        else:
            view = await contact_view(site, request, claims, token=token, values=values, problems=problems)
        return _contact_page(site, request, view, status=status, browser=browser, **extra)

    caller = Caller("web", anonymous_caller(request))
    try:
        await site.gateway.admit(caller)
    except AapError as error:
        return await _rate_limited(again, error)
    if not same_browser(claims, request.cookies.get(BROWSER_COOKIE)):
        return await again(
            403,
            "Your browser did not send back this site's cookie for the form, so it was not sent. "
            "Allow cookies for this site, then send the form again.",
            renew=True,
            # without an Origin that says this site, the values may be another site's: not shown back
            keep=request.headers.get("origin") is not None,
        )
    web = site.settings.web
    age = (site.gateway.agent.deps.clock() - read.issued).total_seconds()
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
    payload = lead_request(values, read, site.urls.url(SITE_PATH))
    try:
        answer = decoded(await site.gateway.call(caller, SKILLS["lead.submit"], payload, paid=1))
    except AapError as error:
        if error.code == "RATE_LIMITED":
            return await _rate_limited(again, error)
        if error.code == "IDEMPOTENCY_CONFLICT":
            return await again(
                409,
                "You already sent this form, with other details; the changes were not sent. "
                "To send them as a new message, send the form again.",
                renew=True,
            )
        problems = problems_of(error, values, claims.dealer_name)
        view = await contact_view(site, request, claims, token=token, values=values, problems=problems)
        return _contact_page(site, request, view, status=error.spec.http_status)
    return _sent(site, request, claims, values, answer)


async def _rate_limited(again: Any, error: AapError) -> Response:
    retry = retry_after_seconds(error)
    wait = f" Please wait {retry} seconds, then send it again." if retry else " Please send it again later."
    headers = {"Retry-After": str(retry)} if retry is not None else {}
    response: Response = await again(
        error.spec.http_status,
        "Too many requests came from your network, so the form was not sent." + wait,
        headers=headers,
    )
    return response


def _sent(
    site: PublicSite, request: Request, claims: FormClaims, values: ContactValues, answer: dict[str, Any]
) -> Response:
    data = answer["data"]
    context = {
        **site.common(request),
        "lead": data,
        "message": answer.get("message"),
        "claims": claims,
        "channels": channel_phrase(values.channels),
        "vehicle_url": vehicle_page(request, claims.vehicle_id),
    }
    return render(site.pages, request, "contact_sent.html", context, headers=NO_STORE)
