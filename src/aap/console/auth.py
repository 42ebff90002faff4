"""Signing in to the console: cookies, sessions, CSRF tokens, the sign-in and sign-out pages.

The session cookie carries a random token signed with ``itsdangerous`` (a key
kept in the database, the same for every worker), ``HttpOnly``,
``SameSite=Lax``, ``Secure`` when the deployment is served over https, scoped
to ``/console/``; the server keeps only the token's hash and ends the session
after the idle timeout (:mod:`aap.accounts`). Every form carries a CSRF token:
the session's own once signed in, a signed per-browser token on the sign-in
form. A POST whose ``Origin`` names another site is refused as well.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from itsdangerous import BadSignature, TimestampSigner
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aap.paths import CONSOLE_PREFIX
from aap.store.console import Session
from aap.web.callers import client_address

if TYPE_CHECKING:
    from aap.console import Console

log = logging.getLogger("aap.console")

SESSION_COOKIE = "aap_console"
LOGIN_COOKIE = "aap_console_login"
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


class SignInNeeded(Exception):
    """No live session: a page asks the browser to sign in first."""


@dataclass(frozen=True)
class Visit:
    """A signed-in request: the session, its form (for POSTs) and the client address."""

    session: Session
    form: FormData | None
    address: str | None

    @property
    def email(self) -> str:
        return self.session.user.email

    @property
    def is_admin(self) -> bool:
        return self.session.user.role == "admin"


class Auth:
    """The console's cookies and the checks every console request goes through."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.accounts = console.accounts
        secret = console.agent.stores.state.secret("console-cookie")
        self.sessions = TimestampSigner(secret, salt="aap-console-session")
        self.login_tokens = TimestampSigner(secret, salt="aap-console-login")
        self.max_age = console.settings.web.session_max_hours * 3600

    def secure(self, request: Request) -> bool:
        return request.url.scheme == "https" or self.console.settings.public_url.startswith("https://")

    def _cookie(self, response: Response, request: Request, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=CONSOLE_PREFIX,
            httponly=True,
            secure=self.secure(request),
            samesite="lax",
        )

    # -- the checks --------------------------------------------------------------------
    def _token(self, request: Request) -> str | None:
        raw = request.cookies.get(SESSION_COOKIE)
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
        public = urlsplit(self.console.settings.public_url)
        own.add(f"{public.scheme}://{public.netloc}")
        return origin in own

    async def visit(self, request: Request, *, admin: bool = False) -> Visit:
        """The signed-in visit of ``request`` (and, for a POST, its form with a valid CSRF token).

        Raises :class:`SignInNeeded` without a live session and :class:`Refused`
        for a bad CSRF token, a foreign ``Origin`` or a page only admins may see.
        """
        token = self._token(request)
        session = await run_in_threadpool(self.accounts.session, token) if token else None
        if session is None:
            raise SignInNeeded()
        form = None
        if request.method == "POST":
            if not self._same_origin(request):
                raise Refused(403, "This form was sent from another site; it was not accepted.")
            form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
            sent = form.get("csrf_token")
            if not isinstance(sent, str) or not hmac.compare_digest(sent, session.csrf_token):
                raise Refused(
                    403, "This form has expired or was not sent from the console; reload the page and try again."
                )
        if admin and session.user.role != "admin":
            raise Refused(403, "Only an administrator may open this page.")
        return Visit(session, form, client_address(request))

    # -- sign-in and sign-out ---------------------------------------------------------------
    def _next(self, value: Any) -> str:
        """Where to go after signing in: a console path only (never another site)."""
        if (
            isinstance(value, str)
            and value.startswith(CONSOLE_PREFIX)
            and "//" not in value
            and "\\" not in value
            and value != LOGIN_PATH
        ):
            return value
        return CONSOLE_PREFIX + "leads"

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
        self._cookie(response, request, LOGIN_COOKIE, self.login_tokens.sign(token).decode(), 3600)
        return response

    async def login_page(self, request: Request) -> Response:
        if request.method == "GET":
            return self._login_page(request)
        if not self._same_origin(request):
            return self._login_page(request, status=403, error="This form was sent from another site.")
        form = await request.form(max_fields=10, max_files=0)
        try:
            expected = self.login_tokens.unsign(request.cookies.get(LOGIN_COOKIE, ""), max_age=3600).decode()
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
        address = client_address(request)
        outcome = await run_in_threadpool(self.accounts.sign_in, email, password, address)
        if outcome.user is None:
            if outcome.locked_until_ms is not None:
                minutes = max(1, -(-(outcome.locked_until_ms - self.accounts.now_ms()) // 60_000))
                log.warning("console sign-in refused: locked out", extra={"fields": {"reason": "locked"}})
                return self._login_page(
                    request,
                    status=429,
                    email=email,
                    headers={"Retry-After": str(minutes * 60)},
                    error=f"Too many failed sign-ins. Try again in {minutes} minute{'s' if minutes > 1 else ''}.",
                )
            log.info("console sign-in refused", extra={"fields": {"reason": "credentials"}})
            return self._login_page(request, status=401, error="The e-mail address or password is wrong.", email=email)
        token = await run_in_threadpool(self.accounts.start_session, outcome.user)
        await run_in_threadpool(self.console.audit, outcome.user.email, "sign_in", None, {"address": address})
        response = RedirectResponse(self._next(form.get("next")), status_code=303)
        self._cookie(response, request, SESSION_COOKIE, self.sessions.sign(token).decode(), self.max_age)
        response.delete_cookie(LOGIN_COOKIE, path=CONSOLE_PREFIX)
        return response

    async def logout(self, request: Request) -> Response:
        token = self._token(request)
        if token:
            try:
                await self.visit(request)
            except SignInNeeded:
                return RedirectResponse(LOGIN_PATH, status_code=303)
            except Refused as refused:  # a forged sign-out leaves the session alone
                return self.console.page(
                    request,
                    "error.html",
                    {"heading": "Not allowed", "message": refused.message, "back": CONSOLE_PREFIX},
                    status_code=refused.status,
                )
            await run_in_threadpool(self.accounts.end_session, token)
        response = RedirectResponse(LOGIN_PATH, status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=CONSOLE_PREFIX)
        return response
