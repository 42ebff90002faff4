"""The platform console: the platform's administrators manage tenants in the browser.

On the platform host, ``https://PLATFORM_HOST/console/`` is the platform's own console
(docs/platform.md, "Platform administrators"). Its accounts are the platform administrators
of the platform's own namespace (``aap users add EMAIL --platform-admin``); they sign in and
out with the machinery of a tenant's console (:mod:`aap.console.auth`: the hash gate, the
sign-in delays, CSRF tokens, sessions kept in the database), and every change they make is
written to the platform's own audit log.

- **Tenants**: every tenant in id order, a page at a time (keyset), filtered by a part of its
  id or of one of its domains; one tenant with its configuration as stored, its domains, its
  public URLs, revision and times; forms to add a tenant, replace its configuration, add and
  remove domains and remove it (after a confirmation). Every change goes through
  :class:`aap.tenants.TenantRegistry` — the rules of ``aap tenants`` and of the provisioning
  API — and a refused one is shown next to its form with every problem listed.
- **Opening a tenant's console**: ``/console/open?tenant=ID`` (audited here) leads to
  ``https://PLATFORM_HOST/t/ID/console/``, where the tenant's console admits the platform's
  session as a guest (:class:`TenantGuests`, :class:`aap.console.auth.Guests`) and the
  administrator acts as an admin of that tenant; its audit log names them ``platform:<email>``.

The platform's session cookie is the platform host's, ``Path=/``, so that it reaches the
tenants' consoles under ``/t/ID/``; it is checked against the platform's namespace alone, and
only where the request's host is the platform's: a tenant's own domains never admit it (their
consoles are built without guests at all, :func:`aap.server.platform.create_platform_app`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC
from typing import Any
from urllib.parse import urlencode

from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from aap.config.platform import tenant_id_problem
from aap.config.tenant_template import tenant_template
from aap.console.auth import LOGIN_PATH, Auth, Guest, Refused, Visit
from aap.console.core import Console
from aap.gateway import Gateway
from aap.paths import CONSOLE_PREFIX
from aap.store.console import Session, User
from aap.store.platform import TenantRecord
from aap.tenants import MAX_CONFIG_BYTES, TenantError, TenantRegistry
from aap.util.memo import Memo
from aap.web.accesslog import annotate
from aap.web.body import BodyTooLarge, read_request_body, replay
from aap.web.errors import route_path
from aap.web.pages import asset_routes, templates, url

from .views import tenant_state, tenant_urls

ASSETS = CONSOLE_PREFIX + "assets/"
TENANTS = CONSOLE_PREFIX + "tenants"
OPEN = CONSOLE_PREFIX + "open"
AUDIT = CONSOLE_PREFIX + "audit"
#: Tenants on a page of the list.
PAGE_SIZE = 50
#: Tenants the "switch tenant" control of a tenant's console offers to pick from (any id can be typed).
SWITCH_CHOICES = 100
#: The largest form the platform console reads: a configuration of the largest size the registry
#: accepts, form-encoded (at most three bytes a byte), and room for the other fields.
FORM_LIMIT = 3 * MAX_CONFIG_BYTES + 64 * 1024
_SEPARATORS = re.compile(r"[\s,]+")

NOTICES = {
    "added": "Tenant {tenant} added: it is served now.",
    "updated": "The configuration of {tenant} was replaced: every worker serves it within seconds.",
    "domains": "The domains of {tenant} were changed.",
    "removed": "The tenant was removed, with its data.",
    "secret": "The secret was set: every worker uses it within seconds.",
    "secret-removed": "The secret was removed.",
    "suspended": "{tenant} is suspended: every surface answers 503, its feeds and deliveries wait.",
    "resumed": "{tenant} is served again.",
}
#: Platform administrators' visits to tenants' consoles remembered per worker, so that a visit
#: is audited once per session and tenant, not once per page (nor again when the tenant's runtime
#: is built again between two pages).
VISITS_KEPT = 10_000


def _hosts(text: str) -> list[str]:
    """Host names as typed: separated by spaces, commas or lines (the registry checks each)."""
    return [h for h in _SEPARATORS.split(text.strip()) if h]


def _lines(text: str) -> str:
    """A configuration as a browser sends a text area (CRLF line ends, RFC 9110's form encoding of
    ``textarea``) with the line ends ``aap tenants show --toml`` gives back."""
    return text.replace("\r\n", "\n")


class PlatformAuth(Auth):
    """The platform console's sign-in: the console's machinery on the platform's own namespace,
    with the platform's cookies (the session's on ``Path=/``: it opens the tenants' consoles
    under ``/t/ID/`` too) and only platform administrators admitted."""

    session_cookie = "aap_platform"
    login_cookie = "aap_platform_login"
    device_cookie = "aap_platform_device"
    home = TENANTS
    console: PlatformConsole

    @property
    def public_url(self) -> str:
        return self.console.registry.platform.base_url

    def cookie_path(self, request: Request, name: str) -> str:
        return "/" if name == self.session_cookie else CONSOLE_PREFIX

    def may_sign_in(self, user: User) -> bool:
        return self.accounts.is_platform_admin(user)

    async def visit(self, request: Request, *, admin: bool = False) -> Visit:
        visit = await super().visit(request)
        if not self.accounts.is_platform_admin(visit.session.user):
            raise Refused(403, "Only a platform administrator may open the platform console.")
        return visit

    def token(self, request: Request) -> str | None:
        """The platform session token of ``request``'s cookie (signature checked), or None."""
        return self._token(request)


class PlatformConsole(Console):
    """The platform console over the platform's own gateway (its namespace: accounts, sessions,
    the audit log, rate-limit buckets) and the tenant registry."""

    auth_type = PlatformAuth
    auth: PlatformAuth

    def __init__(self, gateway: Gateway, registry: TenantRegistry) -> None:
        self.registry = registry
        super().__init__(gateway)
        self.pages = templates("aap.platform", "aap.console")
        self._template: str | None = None
        # (tenant, session digest): held here, not by a tenant's runtime, which the worker
        # retires and builds again whenever the tenant changes or falls out of memory.
        self._visited: Memo[tuple[str, str], bool] = Memo(VISITS_KEPT)

    def first_visit(self, tenant_id: str, session: Session) -> bool:
        """Whether ``session`` opens tenant ``tenant_id``'s console for the first time in this
        worker (remembering it, the oldest forgotten past :data:`VISITS_KEPT`)."""
        key = (tenant_id, session.session_hash)  # a digest already, never the token
        if key in self._visited:
            return False
        self._visited.put(key, True)
        return True

    def guests_of(self, tenant_id: str) -> TenantGuests:
        """What tenant ``tenant_id``'s console, served under its prefix, admits of this console."""
        return TenantGuests(self, tenant_id)

    # -- pages -------------------------------------------------------------------------------
    def page_context(self, request: Request, visit: Visit | None) -> dict[str, Any]:
        return {
            "site_name": f"Platform console · {self.registry.platform.host}",
            "assets": url(request, ASSETS),
            "layout": "platform_layout.html",
            "visit": visit,
            "path": route_path(request.scope),
            "csrf": visit.session.csrf_token if visit else None,
            "zone": UTC,
            "prefix": self.registry.platform.tenant_prefix,
        }

    def guarded(
        self, handler: Callable[[Request, Visit], Awaitable[Response]], *, admin: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        return self.bounded(super().guarded(handler, admin=admin))

    def bounded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """``endpoint`` with a POST's body read first, at most :data:`FORM_LIMIT` bytes: the
        platform host's own endpoints are not behind the tenants' body limit."""

        async def bounded_endpoint(request: Request) -> Response:
            if request.method == "POST":
                annotate(request.scope, binding="console")
                try:
                    body = await read_request_body(request, FORM_LIMIT)
                except BodyTooLarge:
                    message = f"The form is larger than the console accepts ({FORM_LIMIT // 1024} KiB)."
                    return self.refusal(request, 413, "Too large", message, headers={"Connection": "close"})
                except ClientDisconnect:
                    return Response(status_code=400)
                request = Request(request.scope, replay(body, request.receive))
            return await endpoint(request)

        return bounded_endpoint

    def template(self) -> str:
        """The commented tenant document ``aap init --tenant`` writes: the add form starts from it."""
        if self._template is None:
            self._template = tenant_template()
        return self._template

    def view(self, record: TenantRecord) -> dict[str, Any]:
        return {"record": record, "urls": tenant_urls(self.registry, record), "state": tenant_state(record)}

    # -- routes ------------------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        """The platform console's route table; each endpoint is a named handler of this module."""
        one = TENANTS + "/{tenant_id:str}"
        return [
            Route(CONSOLE_PREFIX, home, methods=["GET"]),
            Route(LOGIN_PATH, self.bounded(self.auth.login_page), methods=["GET", "POST"]),
            Route(CONSOLE_PREFIX + "logout", self.bounded(self.auth.logout), methods=["POST"]),
            Route(TENANTS, self.endpoint(tenants_page), methods=["GET"]),
            Route(TENANTS, self.endpoint(add_tenant), methods=["POST"]),
            Route(TENANTS + "/new", self.endpoint(new_tenant), methods=["GET"]),
            Route(one, self.endpoint(tenant_page), methods=["GET"]),
            Route(one + "/config", self.endpoint(update_config), methods=["POST"]),
            Route(one + "/domains", self.endpoint(change_domains), methods=["POST"]),
            Route(one + "/secrets", self.endpoint(set_secret), methods=["POST"]),
            Route(one + "/secrets/remove", self.endpoint(remove_secret), methods=["POST"]),
            Route(one + "/remove", self.endpoint(confirm_remove), methods=["GET"]),
            Route(one + "/remove", self.endpoint(remove_tenant), methods=["POST"]),
            Route(one + "/suspend", self.endpoint(suspend_tenant), methods=["POST"]),
            Route(one + "/resume", self.endpoint(resume_tenant), methods=["POST"]),
            Route(OPEN, self.endpoint(open_tenant), methods=["GET"]),
            Route(AUDIT, self.endpoint(audit_page), methods=["GET"]),
            *asset_routes(ASSETS),
            Route(CONSOLE_PREFIX + "{rest:path}", self.endpoint(not_found), methods=["GET"]),
        ]

    def done(self, request: Request, tenant_id: str, what: str) -> Response:
        """After a change: the tenant's page, saying what was done (by code, never text of the link)."""
        return RedirectResponse(url(request, f"{TENANTS}/{tenant_id}?done={what}"), status_code=303)

    def notice(self, request: Request, tenant_id: str | None = None) -> str | None:
        template = NOTICES.get(request.query_params.get("done") or "")
        if template is None or ("{tenant}" in template and tenant_id is None):
            return None
        return template.format(tenant=tenant_id)


# -- the pages ---------------------------------------------------------------------------------
def _field(visit: Visit, name: str) -> str:
    value = visit.form.get(name) if visit.form is not None else None
    return value if isinstance(value, str) else ""


async def home(request: Request) -> Response:
    return RedirectResponse(url(request, TENANTS), status_code=303)


async def tenants_page(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    """Every tenant in id order, a page at a time, filtered by a part of its id or of a domain."""
    registry = console.registry
    params = request.query_params
    matching = (params.get("q") or "").strip()[:200]
    after = params.get("after") or ""
    problems = []
    if after and tenant_id_problem(after):
        problems.append("This page link is not valid any more; start from the first page.")
        after = ""
    rows = await console.blocking(registry.list, after=after, limit=PAGE_SIZE + 1, matching=matching or None)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    query = {"q": matching} if matching else {}
    total = await console.blocking(registry.store.count)
    return console.page(
        request,
        "platform_tenants.html",
        {
            "rows": [console.view(r) for r in rows],
            "matching": matching,
            "total": total,
            "problems": problems,
            "next": f"{url(request, TENANTS)}?{urlencode({**query, 'after': rows[-1].tenant_id})}" if more else None,
            "first": f"{url(request, TENANTS)}?{urlencode(query)}" if after else None,
            "notice": console.notice(request),
        },
        visit=visit,
        status_code=400 if problems else 200,
    )


def _new_page(
    console: PlatformConsole,
    request: Request,
    visit: Visit,
    form: Mapping[str, str],
    problems: list[str],
    status: int = 200,
) -> Response:
    return console.page(
        request,
        "platform_tenant_new.html",
        {"form": form, "problems": problems, "max_kib": MAX_CONFIG_BYTES // 1024},
        visit=visit,
        status_code=status,
    )


async def new_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    """The add form, starting from the commented tenant document."""
    return _new_page(console, request, visit, {"id": "", "domains": "", "config": console.template()}, [])


async def add_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    tenant_id = _field(visit, "id").strip()
    domains = _hosts(_field(visit, "domains"))
    config = _lines(_field(visit, "config"))
    try:
        record = await console.blocking(console.registry.add, tenant_id, config, domains, by=visit.email)
    except TenantError as refused:
        form = {"id": tenant_id, "domains": "\n".join(domains), "config": config}
        return _new_page(console, request, visit, form, refused.problems, refused.status)
    return console.done(request, record.tenant_id, "added")


async def _record_or_404(console: PlatformConsole, request: Request, visit: Visit) -> TenantRecord:
    tenant_id = request.path_params["tenant_id"]
    record = (
        await console.blocking(console.registry.store.tenant, tenant_id) if not tenant_id_problem(tenant_id) else None
    )
    if record is None:
        raise Refused(404, "There is no such tenant (it may have been removed).", visit=visit)
    return record


async def _tenant_page_of(
    console: PlatformConsole,
    request: Request,
    visit: Visit,
    record: TenantRecord,
    *,
    config: str | None = None,
    config_problems: list[str] | None = None,
    domain_problems: list[str] | None = None,
    secret_problems: list[str] | None = None,
    status: int = 200,
) -> Response:
    secrets = await console.blocking(console.registry.secret_list, record.tenant_id)  # names, never values
    return console.page(
        request,
        "platform_tenant.html",
        {
            **console.view(record),
            "config": record.config if config is None else config,
            "config_problems": config_problems or [],
            "domain_problems": domain_problems or [],
            "secrets": secrets,
            "secret_problems": secret_problems or [],
            "notice": console.notice(request, record.tenant_id),
        },
        visit=visit,
        status_code=status,
    )


async def tenant_page(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    return await _tenant_page_of(console, request, visit, await _record_or_404(console, request, visit))


async def update_config(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    config = _lines(_field(visit, "config"))
    try:
        await console.blocking(console.registry.update, record.tenant_id, config, by=visit.email)
    except TenantError as refused:
        return await _tenant_page_of(
            console, request, visit, record, config=config, config_problems=refused.problems, status=refused.status
        )
    return console.done(request, record.tenant_id, "updated")


async def change_domains(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    add, remove = _hosts(_field(visit, "add")), _hosts(_field(visit, "remove"))
    if not add and not remove:
        return await _tenant_page_of(
            console, request, visit, record, domain_problems=["Enter a domain to add."], status=400
        )
    try:
        await console.blocking(console.registry.set_domains, record.tenant_id, add, remove, by=visit.email)
    except TenantError as refused:
        return await _tenant_page_of(
            console, request, visit, record, domain_problems=refused.problems, status=refused.status
        )
    return console.done(request, record.tenant_id, "domains")


async def set_secret(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    """A tenant secret from the form (docs/platform.md, "Secrets"); the value is never shown back,
    not even when the form is refused, and the audit log records the name alone."""
    record = await _record_or_404(console, request, visit)
    name, value = _field(visit, "name").strip(), _field(visit, "value")
    try:
        await console.blocking(console.registry.set_secret, record.tenant_id, name, value)
    except TenantError as refused:
        return await _tenant_page_of(
            console, request, visit, record, secret_problems=refused.problems, status=refused.status
        )
    await console.blocking(console.audit, visit.email, "tenant.secret.set", record.tenant_id, {"name": name})
    return console.done(request, record.tenant_id, "secret")


async def remove_secret(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    name = _field(visit, "name").strip()
    try:
        await console.blocking(console.registry.remove_secret, record.tenant_id, name)
    except TenantError as refused:
        return await _tenant_page_of(
            console, request, visit, record, secret_problems=refused.problems, status=refused.status
        )
    await console.blocking(console.audit, visit.email, "tenant.secret.remove", record.tenant_id, {"name": name})
    return console.done(request, record.tenant_id, "secret-removed")


def _remove_page(
    console: PlatformConsole, request: Request, visit: Visit, record: TenantRecord, error: str | None = None
) -> Response:
    return console.page(
        request,
        "platform_tenant_remove.html",
        {**console.view(record), "error": error},
        visit=visit,
        status_code=400 if error else 200,
    )


async def confirm_remove(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    return _remove_page(console, request, visit, await _record_or_404(console, request, visit))


async def remove_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    if _field(visit, "confirm").strip() != record.tenant_id:
        return _remove_page(console, request, visit, record, "Type the tenant's id to confirm; nothing was removed.")
    try:
        await console.blocking(console.registry.remove, record.tenant_id, by=visit.email)
    except TenantError as refused:
        raise Refused(refused.status, " ".join(refused.problems), visit=visit) from None
    return RedirectResponse(url(request, f"{TENANTS}?done=removed"), status_code=303)


async def suspend_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    await console.blocking(console.registry.suspend, record.tenant_id, by=visit.email)
    return console.done(request, record.tenant_id, "suspended")


async def resume_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    record = await _record_or_404(console, request, visit)
    await console.blocking(console.registry.resume, record.tenant_id, by=visit.email)
    return console.done(request, record.tenant_id, "resumed")


async def open_tenant(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    """To a tenant's console under its prefix, where this session is admitted (audited)."""
    registry = console.registry
    tenant_id = (request.query_params.get("tenant") or "").strip()
    if not registry.platform.tenant_prefix:
        raise Refused(
            404,
            "Tenants are not served under /t/ID/ on this platform ([platform] tenant_prefix = false), "
            "so their consoles open at their own domains, with their own accounts.",
            visit=visit,
        )
    record = await console.blocking(registry.store.tenant, tenant_id) if not tenant_id_problem(tenant_id) else None
    if record is None:
        raise Refused(404, "There is no such tenant.", visit=visit)
    await console.blocking(console.audit, visit.email, "tenant.open", tenant_id, {})
    return RedirectResponse(f"/t/{tenant_id}{CONSOLE_PREFIX}", status_code=303)


async def audit_page(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    before = request.query_params.get("before") or ""
    subject = (request.query_params.get("subject") or "")[:300] or None
    if before and not (before.isdigit() and len(before) <= 15):
        raise Refused(400, "This page link is not valid: open the audit log again.", visit=visit)
    entries = await console.blocking(
        console.stores.console.audit_entries,
        subject=subject,
        before_ms=int(before) if before else None,
        limit=100,
    )
    older = entries[-1].at_ms if len(entries) == 100 else None
    return console.page(
        request, "platform_audit.html", {"entries": entries, "older": older, "subject": subject}, visit=visit
    )


async def not_found(console: PlatformConsole, request: Request, visit: Visit) -> Response:
    raise Refused(404, "There is no such page in the platform console.", visit=visit)


class TenantGuests:
    """The platform's administrators as guests of one tenant's console, served under its prefix
    on the platform host (:class:`aap.console.auth.Guests`)."""

    def __init__(self, console: PlatformConsole, tenant_id: str) -> None:
        self.console = console
        self.tenant_id = tenant_id

    def token(self, request: Request) -> str | None:
        # Only on the platform's own host: its cookie is never accepted at a tenant's domain.
        if request.url.hostname != self.console.registry.platform.host:
            return None
        return self.console.auth.token(request)

    async def visit(self, request: Request, token: str) -> tuple[Session, Guest] | None:
        accounts = self.console.accounts
        session = await self.console.gateway.blocking(accounts.session, token)
        if session is None or not accounts.is_platform_admin(session.user):
            return None
        choices: tuple[str, ...] = ()
        if request.method == "GET":  # a page, whose menu offers the other tenants
            records = await self.console.gateway.blocking(self.console.registry.list, limit=SWITCH_CHOICES)
            choices = tuple(r.tenant_id for r in records)
        email = session.user.email
        guest = Guest(f"platform:{email}", email, self.tenant_id, TENANTS, OPEN, choices)
        await self._audit_visit(session, email)
        return session, guest

    async def _audit_visit(self, session: Session, email: str) -> None:
        """The platform's audit log records an administrator in this tenant's console: once per
        session in this worker (``tenant.visit``), however the console was reached (the tenants
        list's link, or ``/t/ID/console/`` typed in)."""
        if not self.console.first_visit(self.tenant_id, session):
            return
        await self.console.gateway.blocking(self.console.audit, email, "tenant.visit", self.tenant_id, {})

    async def sign_out(self, request: Request, token: str) -> Response:
        auth = self.console.auth
        await self.console.gateway.blocking(self.console.accounts.end_session, token)
        response = RedirectResponse(LOGIN_PATH, status_code=303)
        response.delete_cookie(auth.session_cookie, path=auth.cookie_path(request, auth.session_cookie))
        return response
