"""Signing in to the console: cookies, sessions, CSRF tokens, the sign-in and sign-out pages.

The session cookie carries a random token signed with ``itsdangerous`` (a key
kept in the database, the same for every worker), ``HttpOnly``,
``SameSite=Lax``, ``Secure`` when the deployment is served over https, scoped
to ``/console/``; the server keeps only the token's hash and ends the session
after the idle timeout (:mod:`aap.accounts`). Every form carries a CSRF token:
the session's own once signed in, a signed per-browser token on the sign-in
form. A POST whose ``Origin`` names another site is refused as well; signing
out is such a form too, so another site cannot sign anyone out.

A browser that signs in gets a device cookie (signed: the account and a random
token): its later sign-ins to that account are counted under it alone, so
strangers' failures never delay the account's owner there (OWASP, "Slow Down
Online Guessing Attacks with Device Cookies"). Every console request takes a
token of the rate limit of its session, or of its address before sign-in.

A console may also admit **guests**: on a platform, a tenant's console served under its
prefix on the platform host lets the platform's administrators in with the platform's own
session (:class:`Guests`, :mod:`aap.platform.console`; docs/platform.md, "Platform
administrators"). A guest acts as an admin of the tenant, and the audit log names them as
``platform:<email>``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from itsdangerous import BadSignature, TimestampSigner
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aap.accounts import Attempt, Device, HashingBusy, SignIn
from aap.errors import AapError
from aap.paths import CONSOLE_PREFIX
from aap.ratelimit import anonymous_caller_key, retry_after_seconds
from aap.store.console import Session, User
from aap.web.accesslog import annotate
from aap.web.callers import client_address
from aap.web.pages import url

if TYPE_CHECKING:
    from aap.console.core import Console

log = logging.getLogger("aap.console")

SESSION_COOKIE = "aap_console"
LOGIN_COOKIE = "aap_console_login"
DEVICE_COOKIE = "aap_console_device"
LOGIN_PATH = CONSOLE_PREFIX + "login"
MAX_FORM_FIELDS = 200


class Refused(Exception):
    """A request the console answers with an error page (status and a safe message)."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, *, visit: Visit | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.visit = visit  # the signed-in visit, when there is one: the page keeps its navigation


#: The longest query or path value a console page reads (a search, a date, a lead id, a link's key).
MAX_VALUE_CHARS = 1000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def refuse_odd_values(request: Request) -> None:
    """:class:`Refused` 400 for a query or path value no console page takes: a control character
    (a NUL, which PostgreSQL refuses in text) or one longer than :data:`MAX_VALUE_CHARS`."""
    values = [*request.path_params.values(), *(v for _, v in request.query_params.multi_items())]
    for value in values:
        if isinstance(value, str) and (len(value) > MAX_VALUE_CHARS or _CONTROL.search(value)):
            raise Refused(400, "This address has a value the console does not accept; open the page again.")


def _odd_form_value(form: FormData) -> bool:
    return any(
        isinstance(value, str) and _CONTROL.search(value) is not None and key not in ("password", "current", "again")
        for key, value in form.multi_items()
    )


class SignInNeeded(Exception):
    """No live session: a page asks the browser to sign in first."""


@dataclass(frozen=True)
class Guest:
    """A visit by someone who is not one of the console's own accounts: a platform administrator
    at a tenant's console (their session is the platform's)."""

    actor: str  # what the audit log names them: ``platform:<email>``
    email: str
    tenant_id: str
    home: str  # the platform console, on the platform host
    switch: str  # the "switch tenant" form's action (GET, ``tenant=ID``)
    tenants: tuple[str, ...] = ()  # the first tenants, for the switch control's choices


class Guests(Protocol):
    """Who may open a console besides its own accounts (:mod:`aap.platform.console`)."""

    def token(self, request: Request) -> str | None:
        """The guest's session token this request carries, if it may carry one at all here."""

    async def visit(self, request: Request, token: str) -> tuple[Session, Guest] | None:
        """The live guest session of ``token`` (None when there is none)."""

    async def sign_out(self, request: Request, token: str) -> Response:
        """End the guest's session: the answer to the console's sign-out form."""


@dataclass(frozen=True)
class Visit:
    """A signed-in request: the session, its form (for POSTs), the client address, and the guest
    when the session is not one of the console's own (:class:`Guest`)."""

    session: Session
    form: FormData | None
    address: str | None
    guest: Guest | None = None

    @property
    def email(self) -> str:
        """Who the console names as the actor (the audit log, the pipeline's history)."""
        return self.guest.actor if self.guest is not None else self.session.user.email

    @property
    def is_admin(self) -> bool:
        return self.guest is not None or self.session.user.role == "admin"


class Auth:
    """The console's cookies and the checks every console request goes through."""

    session_cookie = SESSION_COOKIE
    login_cookie = LOGIN_COOKIE
    device_cookie = DEVICE_COOKIE
    #: Where a sign-in goes when it was not sent from a page.
    home = CONSOLE_PREFIX + "leads"

    def __init__(self, console: Console) -> None:
        self.console = console
        self.accounts = console.accounts
        secret = console.agent.stores.state.secret("console-cookie")
        self.sessions = TimestampSigner(secret, salt="aap-console-session")
        self.login_tokens = TimestampSigner(secret, salt="aap-console-login")
        self.devices = TimestampSigner(secret, salt="aap-console-device")
        self.max_age = console.settings.web.session_max_hours * 3600
        self.device_age = console.settings.web.known_device_days * 86_400

    @property
    def public_url(self) -> str:
        """Where the console is published: its ``Origin`` is this console's own, and an ``https://``
        one makes every cookie ``Secure``."""
        return self.console.settings.public_url

    def secure(self, request: Request) -> bool:
        return request.url.scheme == "https" or self.public_url.startswith("https://")

    def cookie_path(self, request: Request, name: str) -> str:
        """The ``Path`` of cookie ``name``: the console's own path where this request is served
        (``/t/ID/console/`` under a prefix)."""
        return url(request, CONSOLE_PREFIX)

    def may_sign_in(self, user: User) -> bool:
        """Whether ``user``, whose password was right, may have a session here."""
        return True

    def _cookie(self, response: Response, request: Request, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=self.cookie_path(request, name),
            httponly=True,
            secure=self.secure(request),
            samesite="lax",
        )

    # -- the checks --------------------------------------------------------------------
    def _token(self, request: Request) -> str | None:
        raw = request.cookies.get(self.session_cookie)
        if not raw:
            return None
        try:
            return self.sessions.unsign(raw, max_age=self.max_age).decode()
        except BadSignature:
            return None

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:  # not sent by this client: SameSite and the CSRF token still apply
            return True
        own = {f"{request.url.scheme}://{request.url.netloc}"}
        public = urlsplit(self.public_url)
        own.add(f"{public.scheme}://{public.netloc}")
        return origin in own

    async def limit(self, request: Request, token: str | None = None) -> None:
        """Take one token of the rate limit of the session of ``token`` (before signing in: of the
        client address); :class:`Refused` 429 with ``Retry-After`` when it is spent."""
        key = "console:" + hashlib.sha256(token.encode()).hexdigest()[:32] if token else None
        caller = key or anonymous_caller_key(client_address(request))
        try:
            await self.console.gateway.admit(caller)
        except AapError as error:
            if error.code != "RATE_LIMITED":
                raise
            retry = retry_after_seconds(error) or 1
            raise Refused(
                429,
                f"Too many requests; wait {retry} second{'s' if retry > 1 else ''}, then try again.",
                {"Retry-After": str(retry)},
            ) from None

    async def visit(self, request: Request, *, admin: bool = False) -> Visit:
        """The signed-in visit of ``request`` (and, for a POST, its form with a valid CSRF token).

        Raises :class:`SignInNeeded` without a live session and :class:`Refused`
        for a bad CSRF token, a foreign ``Origin``, a page only admins may see, or
        a spent rate limit (checked first: before the database is asked anything).
        Without a session of its own accounts, a guest's (:class:`Guests`) is looked for.
        """
        token = self._token(request)
        guests = self.console.guests
        guest_token = guests.token(request) if guests is not None else None
        await self.limit(request, token or guest_token)
        session = await self.console.gateway.blocking(self.accounts.session, token) if token else None
        guest = None
        if session is None and guests is not None and guest_token:
            found = await guests.visit(request, guest_token)
            if found is not None:
                session, guest = found
        if session is None:
            raise SignInNeeded()
        form = None
        if request.method == "POST":
            if not self._same_origin(request):
                raise Refused(403, "This form was sent from another site; it was not accepted.")
            form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
            if _odd_form_value(form):
                raise Refused(400, "The form has a character the console does not accept (a control character).")
            sent = form.get("csrf_token")
            if not isinstance(sent, str) or not hmac.compare_digest(sent, session.csrf_token):
                raise Refused(
                    403, "This form has expired or was not sent from the console; reload the page and try again."
                )
        visit = Visit(session, form, client_address(request), guest)
        if admin and not visit.is_admin:
            raise Refused(403, "Only an administrator may open this page.")
        return visit

    # -- sign-in and sign-out ---------------------------------------------------------------
    def _next(self, value: Any) -> str:
        """Where to go after signing in: a path of the console only (never another site), within
        the console's prefix (:func:`aap.web.pages.url` adds it)."""
        if (
            isinstance(value, str)
            and value.startswith(CONSOLE_PREFIX)
            and "//" not in value
            and "\\" not in value
            and value != LOGIN_PATH
        ):
            return value
        return self.home

    def _login_page(
        self,
        request: Request,
        *,
        status: int = 200,
        error: str | None = None,
        email: str = "",
        headers: dict[str, str] | None = None,
    ) -> Response:
        token = secrets.token_urlsafe(24)
        response = self.console.page(
            request,
            "login.html",
            {
                "csrf": token,
                "error": error,
                "email": email,
                "next": self._next(request.query_params.get("next")) if request.method == "GET" else None,
            },
            status_code=status,
            headers=headers,
        )
        self._cookie(response, request, self.login_cookie, self.login_tokens.sign(token).decode(), 3600)
        return response

    def _device(self, request: Request) -> Device | None:
        raw = request.cookies.get(self.device_cookie)
        if not raw:
            return None
        try:
            value = self.devices.unsign(raw, max_age=self.device_age).decode()
        except BadSignature:
            return None
        user_id, _, token = value.partition(" ")
        return Device(user_id, token) if user_id and token else None

    def _held_back(self, request: Request, email: str, outcome: SignIn) -> Response:
        seconds = max(1, -(-(outcome.wait_ms or 0) // 1000))
        wait = f"{seconds} second{'s' if seconds > 1 else ''}" if seconds < 120 else f"{-(-seconds // 60)} minutes"
        log.warning("console sign-in held back", extra={"fields": {"reason": "throttled", "wait_s": seconds}})
        return self._login_page(
            request,
            status=429,
            email=email,
            headers={"Retry-After": str(seconds)},
            error=f"Too many failed sign-ins. Try again in {wait}.",
        )

    async def _check(self, attempt: Attempt, password: str) -> SignIn | None:
        """The password of a counted attempt, checked under the hash gate; None when every hash of
        this process stayed taken for the whole wait (the attempt is given back)."""
        try:
            async with self.accounts.gate.slot():
                outcome: SignIn = await self.console.gateway.blocking(self.accounts.finish_sign_in, attempt, password)
                return outcome
        except HashingBusy:
            await self.console.gateway.blocking(self.accounts.abandon, attempt)
            log.warning("console sign-in refused: busy", extra={"fields": {"reason": "busy"}})
            return None

    async def login_page(self, request: Request) -> Response:
        """The sign-in page (GET) and the sign-in form's answer (POST): the endpoint of ``/console/login``."""
        annotate(request.scope, binding="console")
        try:
            await self.limit(request)
        except Refused as refused:
            return self._login_page(request, status=refused.status, error=refused.message, headers=refused.headers)
        if request.method == "GET":
            return self._login_page(request)
        if not self._same_origin(request):
            return self._login_page(request, status=403, error="This form was sent from another site.")
        form = await request.form(max_fields=10, max_files=0)
        try:
            expected = self.login_tokens.unsign(request.cookies.get(self.login_cookie, ""), max_age=3600).decode()
        except BadSignature:
            expected = None
        sent = form.get("csrf_token")
        email = form.get("email")
        password = form.get("password")
        if expected is None or not isinstance(sent, str) or not hmac.compare_digest(sent, expected):
            return self._login_page(request, status=403, error="The sign-in form expired. Please sign in again.")
        if not isinstance(email, str) or not isinstance(password, str) or not email or not password:
            return self._login_page(
                request,
                status=400,
                error="Enter your e-mail address and password.",
                email=email if isinstance(email, str) else "",
            )
        email = email[:320]
        address = client_address(request)
        begun = await self.console.gateway.blocking(self.accounts.begin_sign_in, email, address, self._device(request))
        if isinstance(begun, SignIn):
            return self._held_back(request, email, begun)
        outcome = await self._check(begun, password)
        if outcome is None:
            return self._login_page(
                request,
                status=503,
                email=email,
                headers={"Retry-After": "2"},
                error="The server is busy checking other sign-ins. Try again in a moment.",
            )
        if outcome.user is None or not self.may_sign_in(outcome.user):
            log.info("console sign-in refused", extra={"fields": {"reason": "credentials"}})
            return self._login_page(request, status=401, error="The e-mail address or password is wrong.", email=email)
        user = outcome.user
        await self.console.gateway.blocking(self.console.audit, user.email, "sign_in", None, {"address": address})
        response = RedirectResponse(url(request, self._next(form.get("next"))), status_code=303)
        await self.start_session(request, response, user)
        response.delete_cookie(self.login_cookie, path=self.cookie_path(request, self.login_cookie))
        return response

    async def start_session(self, request: Request, response: Response, user: User) -> None:
        """A new session for ``user`` in this browser: its cookie, and a new device cookie (a new
        token each time, OWASP) that makes this browser known to the account."""
        token = await self.console.gateway.blocking(
            self.accounts.start_session, user, request.headers.get("user-agent")
        )
        self._cookie(response, request, self.session_cookie, self.sessions.sign(token).decode(), self.max_age)
        device = f"{user.user_id} {secrets.token_urlsafe(16)}"
        self._cookie(response, request, self.device_cookie, self.devices.sign(device).decode(), self.device_age)

    def signed_out(self, request: Request) -> Response:
        """To the sign-in page, the session cookie deleted (its session has ended)."""
        response = RedirectResponse(url(request, LOGIN_PATH), status_code=303)
        response.delete_cookie(self.session_cookie, path=self.cookie_path(request, self.session_cookie))
        return response

    async def logout(self, request: Request) -> Response:
        """End this session: a form of the console (its CSRF token, this site's ``Origin``).

        A POST without them changes nothing, not even the cookie: from another site it is
        answered 403 (or, with no session cookie sent at all, sent on to the sign-in page).
        """
        annotate(request.scope, binding="console")
        token = self._token(request)
        guests = self.console.guests
        guest_token = guests.token(request) if guests is not None else None
        if not token and not guest_token:
            return RedirectResponse(url(request, LOGIN_PATH), status_code=303)
        try:
            visit = await self.visit(request)
        except SignInNeeded:
            return self.signed_out(request)  # the session had ended already
        except Refused as refused:  # a forged sign-out leaves the session and its cookie alone
            return self.console.page(
                request,
                "error.html",
                {"heading": "Not allowed", "message": refused.message, "back": url(request, CONSOLE_PREFIX)},
                status_code=refused.status,
                headers=refused.headers,
            )
        if visit.guest is not None and guests is not None and guest_token:
            return await guests.sign_out(request, guest_token)  # the one session they have: the platform's
        if token:
            await self.console.gateway.blocking(self.accounts.end_session, token)
        return self.signed_out(request)
