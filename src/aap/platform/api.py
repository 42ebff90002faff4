"""The provisioning API: a platform's own systems add, change and remove tenants over HTTP.

Served on the platform host only (``https://PLATFORM_HOST/_platform/v1/…``), with the rules of
:class:`aap.tenants.TenantRegistry` that ``aap tenants`` applies too, and described by the
OpenAPI 3.1 document at ``/_platform/openapi.json`` (:mod:`aap.platform.openapi`):

``GET    /_platform/v1/tenants?after=ID&limit=N``   tenants in id order, keyset-paged
``POST   /_platform/v1/tenants``                    ``{"id", "config", "domains"}`` → 201
``GET    /_platform/v1/tenants/{id}``               the tenant, its configuration text included
``PUT    /_platform/v1/tenants/{id}``               ``{"config", "domains"}``: create or replace → 201/200
``DELETE /_platform/v1/tenants/{id}``               unregister it and delete its data → 204
``PUT    /_platform/v1/tenants/{id}/domains``       ``{"domains"}``: exactly these domains
``PATCH  /_platform/v1/tenants/{id}/domains``       ``{"add", "remove"}``: a change of them
``GET    /_platform/v1/tenants/{id}/secrets``       the names of its secrets (never a value)
``PUT    /_platform/v1/tenants/{id}/secrets/{name}``  ``{"value"}``: set one → 201 (new) or 200
``DELETE /_platform/v1/tenants/{id}/secrets/{name}``  remove one → 204
``POST   /_platform/v1/tenants/{id}/suspend``       stop serving it, its data kept (503 everywhere)
``POST   /_platform/v1/tenants/{id}/resume``        serve it again
``PUT    /_platform/v1/tenants/{id}/inventory``     a feed file: the tenant's whole inventory (replace)
``POST   /_platform/v1/tenants/{id}/inventory``     a feed file: listings added or updated (upsert)
``POST   /_platform/v1/tenants/{id}/feeds/{name}/run``  fetch and import one of its ``[[feeds]]`` now
``POST   /_platform/v1/tenants/{id}/erasures``      ``{"email", "phone", "dry_run"}``: erase a customer's leads

Every change is written to the platform's audit log by the registry, its actor
``api:NAME``: the name of the variable the token comes from (``[platform] api_token_env``),
which says which token was used, never the token.

How a request is answered, in order (docs/platform.md, "The provisioning API"):

1. no token configured (the variable ``[platform] api_token_env`` names is unset, or shorter
   than :data:`MIN_TOKEN_LENGTH`): 503, whatever the request — the API is never open;
2. the client address's token bucket, in the platform's own namespace (never a tenant's),
   before the credentials are looked at, so guessing tokens costs what any request costs: 429
   with ``Retry-After``;
3. ``Authorization: Bearer <token>`` compared in constant time (RFC 6750 §2.1): 401 with
   ``WWW-Authenticate: Bearer`` (and ``error="invalid_token"`` for a wrong one, §3.1);
4. a JSON body of at most :data:`MAX_BODY_BYTES`, read no further (413), of the media type
   ``application/json`` (415), every field checked at once (400);
5. the registry's answer: the tenant, or its ``TenantError`` with every problem and the status
   it carries (400, 404, 409; 503 when the platform's secret keys are missing or do not open a
   secret: docs/platform.md, "Secrets").

Every failure is ``{"error": {"status", "message", "problems": [...]}}``; an unexpected one is
logged once with an id and answered 503 with that id, never with its text.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from aap.config.model import Settings
from aap.config.platform import PlatformSettings, tenant_id_problem
from aap.errors import AapError, unexpected
from aap.feeds.job import FIRST_PROBLEMS, ImportResult, run_import
from aap.leads.erasure import DIGEST_SECRET, ErasureRefused, Subject, erase, plan
from aap.ratelimit import retry_after_seconds
from aap.store import Stores
from aap.store.console import ConsoleStore
from aap.store.erasure import Erasure, ErasureStore
from aap.store.platform import TenantRecord
from aap.store.state import StateStore
from aap.tenants import MAX_CONFIG_BYTES, TenantError, TenantRegistry
from aap.web.accesslog import annotate
from aap.web.body import BodyTooLarge, read_request_body
from aap.web.callers import anonymous_caller
from aap.work import Work

from . import uploads
from .fields import field_problems
from .openapi import API_PREFIX, OPENAPI_PATH, openapi_document
from .views import secret_view, tenant_view

log = logging.getLogger("aap.platform")

#: The shortest bearer token the API accepts as configured (``openssl rand -hex 32`` makes 64).
MIN_TOKEN_LENGTH = 32
#: The largest request body: a tenant's largest configuration, JSON-escaped, and its domains.
MAX_BODY_BYTES = 2 * MAX_CONFIG_BYTES + 64 * 1024
#: Tenants per page of the list: the default and the most a caller may ask for.
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
#: Lengths past which a value is refused as it is, without being quoted back (RFC 1035 §2.3.4).
MAX_HOST, MAX_ID = 253, 48
#: Bucket keys of the API's callers, apart from every other bucket of the platform's namespace.
BUCKET_PREFIX = "platform-api:"
REALM = 'Bearer realm="aap-platform"'
#: The longest ``Idempotency-Key`` a ``POST`` may carry.
MAX_IDEMPOTENCY_KEY = 255

Handler = Callable[[Request], Awaitable[Response]]
#: A tenant's agent as the serving worker has it: its stores and settings (the composition root
#: builds it from the worker's tenant runtimes); a ``TenantError`` when there is no such tenant
#: (404) or it is not served now (409: suspended, or its configuration does not load).
TenantAgent = Callable[[str], Awaitable[tuple[Stores, Settings]]]


def error_response(
    status: int, message: str, problems: Sequence[str] = (), headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    body = {"error": {"status": status, "message": message, "problems": list(problems), **extra}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json", headers=headers)


class _Asgi:
    """An ASGI callable that Starlette's ``Route`` takes as an app of its own (a plain function
    would be wrapped as a GET-only endpoint), so that every method reaches it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class Refused(Exception):
    """A request this API answers with an error before (or instead of) the registry."""

    def __init__(self, status: int, message: str, problems: Sequence[str] = (), headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.problems, self.headers = status, message, list(problems), headers


_MESSAGES = {
    400: "The request was refused: every problem is listed.",
    404: "No such tenant.",
    409: "The request conflicts with the registry.",
    503: 'The platform\'s secret keys are not available here (docs/platform.md, "Secrets").',
}


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


class ProvisioningApi:
    """The API's routes over one platform's registry; ``token`` is the configured bearer token."""

    def __init__(
        self,
        registry: TenantRegistry,
        admit: Callable[[str], Awaitable[None]],
        token: str | None,
        *,
        work: Work,
        max_body_bytes: int = MAX_BODY_BYTES,
        agent: TenantAgent | None = None,
        max_upload_bytes: int = 1_048_576,
    ) -> None:
        self.registry = registry
        self.agent = agent  # a tenant's stores and settings, for its inventory (None: not served here)
        self.max_upload_bytes = max_upload_bytes  # an inventory upload: the platform's [server] max_body_bytes
        self.work = work  # the worker's door for blocking work: the registry's reads and writes
        self.platform: PlatformSettings = registry.platform
        self.admit = admit  # the platform's own gateway: its buckets are never a tenant's
        self.max_body_bytes = max_body_bytes
        self.configured = token is not None and len(token) >= MIN_TOKEN_LENGTH
        # Only a digest is kept: compared in constant time, whatever the length of what is sent.
        self._token = _digest(token) if token is not None and self.configured else None
        if token and not self.configured:
            log.warning(
                "the provisioning API stays closed: %s is shorter than %d characters",
                self.platform.api_token_env,
                MIN_TOKEN_LENGTH,
            )
        self._document = orjson.dumps(openapi_document(self.platform))
        #: Who the audit log says made a change through the API.
        self.actor = f"api:{self.platform.api_token_env}"

    def routes(self) -> list[BaseRoute]:
        tenants, one = f"{API_PREFIX}/tenants", f"{API_PREFIX}/tenants/{{tenant_id}}"
        return [
            self._resource(OPENAPI_PATH, "platform_openapi", {"GET": self._guard(self.document, authenticated=False)}),
            self._resource(
                tenants,
                "platform_tenants",
                {"GET": self._guard(self.list_tenants), "POST": self._guard(self.create_tenant)},
            ),
            self._resource(
                one,
                "platform_tenant",
                {
                    "GET": self._guard(self.get_tenant),
                    "PUT": self._guard(self.put_tenant),
                    "DELETE": self._guard(self.remove_tenant),
                },
            ),
            self._resource(f"{one}/suspend", "platform_suspend", {"POST": self._guard(self.suspend_tenant)}),
            self._resource(f"{one}/resume", "platform_resume", {"POST": self._guard(self.resume_tenant)}),
            self._resource(
                f"{one}/domains",
                "platform_domains",
                {"PUT": self._guard(self.replace_domains), "PATCH": self._guard(self.change_domains)},
            ),
            self._resource(f"{one}/erasures", "platform_erasures", {"POST": self._guard(self.erase_customer)}),
            self._resource(f"{one}/secrets", "platform_secrets", {"GET": self._guard(self.list_secrets)}),
            *self._inventory_routes(one),
            self._resource(
                f"{one}/secrets/{{name}}",
                "platform_secret",
                {"PUT": self._guard(self.set_secret), "DELETE": self._guard(self.remove_secret)},
            ),
        ]

    @staticmethod
    def _resource(path: str, name: str, methods: dict[str, Handler]) -> Route:
        """One route per path: its methods, and for any other 405 with every method it has in
        ``Allow`` (RFC 9110 §15.5.6; ``OPTIONS`` too: the API has no CORS and says so this way),
        in the API's error shape."""
        if "GET" in methods:
            methods = {**methods, "HEAD": methods["GET"]}
        allow = ", ".join(sorted(methods))

        async def app(scope: Scope, receive: Receive, send: Send) -> None:  # every method reaches it
            request = Request(scope, receive)
            handler = methods.get(request.method)
            if handler is None:
                annotate(scope, binding="platform")
                response = error_response(405, f"This resource answers {allow} only.", (), {"Allow": allow})
            else:
                response = await handler(request)
            await response(scope, receive, send)

        return Route(path, _Asgi(app), name=name)

    # -- the order every request is answered in -------------------------------------------------
    def _guard(self, handler: Handler, *, authenticated: bool = True) -> Handler:
        async def endpoint(request: Request) -> Response:
            annotate(request.scope, binding="platform")
            try:
                if authenticated and not self.configured:
                    raise Refused(503, "The provisioning API is not configured on this platform (docs/platform.md).")
                await self._admit(request)
                if authenticated:
                    self._authenticate(request)
                return await handler(request)
            except Refused as refused:
                return error_response(refused.status, refused.message, refused.problems, refused.headers)
            except TenantError as exc:
                status = exc.status if exc.status in _MESSAGES else 400
                return error_response(status, _MESSAGES[status], exc.problems)
            except ClientDisconnect:
                return Response(status_code=400)
            except Exception as exc:  # logged once with an id; the caller gets the id, never the text
                error = unexpected(exc, binding="platform", endpoint=request.url.path)
                return error_response(503, "The registry is not available right now; try again.", (), id=error.error_id)

        return endpoint

    async def _admit(self, request: Request) -> None:
        key = BUCKET_PREFIX + anonymous_caller(request)
        try:
            await self.admit(key)
        except AapError as exc:
            if exc.code != "RATE_LIMITED":
                raise
            wait = retry_after_seconds(exc) or 1
            raise Refused(
                429, "Too many requests from this address; retry later.", (), {"Retry-After": str(wait)}
            ) from None

    def _authenticate(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise Refused(
                401, "A bearer token is required (Authorization: Bearer TOKEN).", (), {"WWW-Authenticate": REALM}
            )
        assert self._token is not None
        if not hmac.compare_digest(_digest(credentials.strip()), self._token):
            raise Refused(
                401,
                "The bearer token is not valid.",
                (),
                {"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
            )

    # -- request bodies and queries ---------------------------------------------------------------
    async def _body(self, request: Request, fields: dict[str, str], required: Sequence[str]) -> dict[str, Any]:
        """The JSON object of the request, its fields checked (``fields``: name → "string" or
        "strings"); every problem of its shape at once."""
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise Refused(415, "The request body must be application/json.")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise Refused(413, f"The request body is larger than {self.max_body_bytes} bytes.")
        try:
            raw = await read_request_body(request, self.max_body_bytes)
        except BodyTooLarge:
            raise Refused(413, f"The request body is larger than {self.max_body_bytes} bytes.") from None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise Refused(400, _MESSAGES[400], [f"(body): not JSON ({exc.msg} at character {exc.pos})"]) from None
        if not isinstance(body, dict):
            raise Refused(400, _MESSAGES[400], ["(body): must be a JSON object"])
        problems = field_problems(body, fields, required, of="this request", max_host=MAX_HOST, max_id=MAX_ID)
        if problems:
            raise Refused(400, _MESSAGES[400], problems)
        return body

    @staticmethod
    def _page(request: Request) -> tuple[str, int]:
        problems = []
        params = request.query_params
        for name in params:
            if name not in ("after", "limit"):
                problems.append(f"{name[:100]}: not a parameter of this request (parameters: after, limit)")
            elif len(params.getlist(name)) > 1:
                problems.append(f"{name}: given more than once")
        after = params.get("after", "")
        if after and tenant_id_problem(after):
            problems.append("after: must be a tenant id (the previous page's next_after)")
        text = params.get("limit")
        limit = DEFAULT_LIMIT
        if text is not None:
            if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LIMIT):
                problems.append(f"limit: must be a whole number from 1 to {MAX_LIMIT}")
            else:
                limit = int(text)
        if problems:
            raise Refused(400, _MESSAGES[400], problems)
        return after, limit

    # -- the operations ---------------------------------------------------------------------------
    async def document(self, request: Request) -> Response:
        return Response(self._document, media_type="application/json")

    async def list_tenants(self, request: Request) -> Response:
        after, limit = self._page(request)
        page = await self.work.blocking(self.registry.list, after=after, limit=limit + 1)
        more = len(page) > limit
        page = page[:limit]
        body = {
            "tenants": [tenant_view(self.registry, r, config=False) for r in page],
            "next_after": page[-1].tenant_id if more else None,
        }
        return json_response(body)

    async def create_tenant(self, request: Request) -> Response:
        """Add a tenant. With an ``Idempotency-Key``, a retry whose tenant now exists exactly as
        sent is answered as the first request was (201), not 409: the tenant's id is the natural
        key of the request, so the key itself is not stored (docs/platform.md, "Idempotent
        provisioning")."""
        key = request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY):
            raise Refused(400, _MESSAGES[400], [f"Idempotency-Key: 1 to {MAX_IDEMPOTENCY_KEY} characters"])
        body = await self._body(request, {"id": "string", "config": "string", "domains": "strings"}, ("id", "config"))
        tenant_id, config, domains = body["id"], body["config"], body.get("domains", [])

        def create() -> TenantRecord:
            try:
                return self.registry.add(tenant_id, config, domains, by=self.actor)
            except TenantError as exc:
                existing = self.registry.store.tenant(tenant_id) if key is not None and exc.status == 409 else None
                if existing is None or not self.registry.same(existing, config, domains):
                    raise
                return existing

        record = await self.work.blocking(create)
        location = f"{API_PREFIX}/tenants/{record.tenant_id}"
        return json_response(tenant_view(self.registry, record, config=True), 201, {"Location": location})

    async def get_tenant(self, request: Request) -> Response:
        record = await self.work.blocking(self.registry.get, request.path_params["tenant_id"])
        return json_response(tenant_view(self.registry, record, config=True))

    async def put_tenant(self, request: Request) -> Response:
        """Create or replace the tenant, idempotently (:meth:`TenantRegistry.put`): 201 when it is
        new, 200 when it was replaced or was already exactly this (then nothing is written)."""
        body = await self._body(request, {"config": "string", "domains": "strings"}, ("config",))
        tenant_id = request.path_params["tenant_id"]
        outcome, record = await self.work.blocking(
            self.registry.put, tenant_id, body["config"], body.get("domains"), by=self.actor
        )
        view = tenant_view(self.registry, record, config=True)
        if outcome == "added":
            return json_response(view, 201, {"Location": f"{API_PREFIX}/tenants/{record.tenant_id}"})
        return json_response(view)

    async def remove_tenant(self, request: Request) -> Response:
        await self.work.blocking(self.registry.remove, request.path_params["tenant_id"], by=self.actor)
        return Response(status_code=204)

    async def replace_domains(self, request: Request) -> Response:
        body = await self._body(request, {"domains": "strings"}, ("domains",))
        tenant_id = request.path_params["tenant_id"]

        def replace() -> Any:
            current = self.registry.get(tenant_id).domains
            wanted: list[str] = body["domains"]
            return self.registry.set_domains(
                tenant_id,
                [h for h in wanted if h not in current],
                [h for h in current if h not in wanted],
                by=self.actor,
            )

        record = await self.work.blocking(replace)
        return json_response(tenant_view(self.registry, record, config=True))

    async def change_domains(self, request: Request) -> Response:
        body = await self._body(request, {"add": "strings", "remove": "strings"}, ())
        add, remove = body.get("add", []), body.get("remove", [])
        if not add and not remove:
            raise Refused(400, _MESSAGES[400], ["(body): give add and/or remove, each an array of host names"])
        tenant_id = request.path_params["tenant_id"]
        record = await self.work.blocking(self.registry.set_domains, tenant_id, add, remove, by=self.actor)
        return json_response(tenant_view(self.registry, record, config=True))

    async def suspend_tenant(self, request: Request) -> Response:
        record = await self.work.blocking(self.registry.suspend, request.path_params["tenant_id"], by=self.actor)
        return json_response(tenant_view(self.registry, record, config=True))

    async def resume_tenant(self, request: Request) -> Response:
        record = await self.work.blocking(self.registry.resume, request.path_params["tenant_id"], by=self.actor)
        return json_response(tenant_view(self.registry, record, config=True))

    # -- secrets: values go in, never out (docs/platform.md, "Secrets") -----------------------------
    async def list_secrets(self, request: Request) -> Response:
        found = await self.work.blocking(self.registry.secret_list, request.path_params["tenant_id"])
        return json_response({"secrets": [secret_view(info) for info in found]})

    async def set_secret(self, request: Request) -> Response:
        body = await self._body(request, {"value": "string"}, ("value",))
        tenant_id, name = request.path_params["tenant_id"], request.path_params["name"]

        def store() -> tuple[bool, Any]:
            new = self.registry.set_secret(tenant_id, name, body["value"])
            return new, next(info for info in self.registry.secret_list(tenant_id) if info.name == name)

        new, info = await self.work.blocking(store)
        if new:
            location = f"{API_PREFIX}/tenants/{tenant_id}/secrets/{name}"
            return json_response(secret_view(info), 201, {"Location": location})
        return json_response(secret_view(info))

    async def remove_secret(self, request: Request) -> Response:
        await self.work.blocking(
            self.registry.remove_secret, request.path_params["tenant_id"], request.path_params["name"]
        )
        return Response(status_code=204)

    # -- a tenant's inventory: the import pipeline of `aap import --tenant ID` (aap.feeds.job) ------
    def _inventory_routes(self, one: str) -> list[BaseRoute]:
        if self.agent is None:
            return []
        return [
            self._resource(
                f"{one}/inventory",
                "platform_inventory",
                {"PUT": self._guard(self.replace_inventory), "POST": self._guard(self.merge_inventory)},
            ),
            self._resource(f"{one}/feeds/{{name}}/run", "platform_feed_run", {"POST": self._guard(self.run_feed)}),
        ]

    async def replace_inventory(self, request: Request) -> Response:
        """The body is the tenant's whole inventory: listings missing from it are removed (within
        the shrink guard), as ``aap import --replace``."""
        return await self._upload(request, replace=True)

    async def merge_inventory(self, request: Request) -> Response:
        """The body's listings are added or updated; the others stay, as ``aap import``."""
        return await self._upload(request, replace=False)

    async def _upload(self, request: Request, *, replace: bool) -> Response:
        assert self.agent is not None
        content_type = request.headers.get("content-type", "")
        problem = uploads.media_problem(content_type)
        if problem is not None:
            raise Refused(415, "The request body must be a feed file.", [f"(body): {problem}"])
        upload, problems = uploads.upload_of(request.query_params.multi_items(), content_type)
        if upload is None:
            raise Refused(400, _MESSAGES[400], problems)
        declared = request.headers.get("content-length")
        too_large = f"The feed is larger than {self.max_upload_bytes} bytes (compress it: gzip and zip are read)."
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > self.max_upload_bytes:
            raise Refused(413, too_large)
        stores, settings = await self.agent(request.path_params["tenant_id"])
        try:
            body = await read_request_body(request, self.max_upload_bytes)
        except BodyTooLarge:
            raise Refused(413, too_large) from None
        job, problems = uploads.import_request(upload, body, settings, replace=replace)
        if problems:
            raise Refused(400, _MESSAGES[400], problems)
        result = await run_import(stores, settings, job, work=self.work)
        return self._import_answer(result)

    async def run_feed(self, request: Request) -> Response:
        """Fetch and import one of the tenant's ``[[feeds]]`` now, as its schedule would (under the
        feed's lease: 409 while another worker runs it)."""
        from aap.feeds.scheduler import FeedScheduler

        assert self.agent is not None
        stores, settings = await self.agent(request.path_params["tenant_id"])
        name = request.path_params["name"]
        feed = next((f for f in settings.feeds if f.name == name), None)
        if feed is None:
            raise Refused(404, "No such feed.", [f"the tenant has no feed named {name[:100]!r} in its [[feeds]]"])
        scheduler = FeedScheduler(stores, settings, work=self.work)
        await self.work.blocking(stores.feeds.ensure, [feed.name], int(time.time() * 1000))
        result = await scheduler.run_feed(feed, due_only=False, trigger=uploads.TRIGGER)
        if result is None:
            raise Refused(409, "The feed is being imported right now; try again when that run ends.")
        return self._import_answer(result)

    @staticmethod
    def _import_answer(result: ImportResult) -> Response:
        """200 with the run as the import history records it (``aap import --json``) when the feed
        was published (or, in a dry run, would be); else nothing was published: 422 for a feed
        refused by its checks, 502 for one that could not be fetched, with its first problems (each
        naming its line) and the run itself."""
        run = result.run
        summary = run.to_json()
        if result.ok:
            return json_response(summary)
        found = result.file_problems or (result.report.problems if result.report else [])
        problems = [str(p) for p in found[:FIRST_PROBLEMS]] or [run.message or run.outcome]
        status = 422 if run.outcome in ("rejected", "refused") else 502
        return error_response(status, f"Nothing was imported: {run.message or run.outcome}", problems, run=summary)

    # -- a customer's erasure (docs/leads.md, "Erasure and retention") ------------------------------
    async def erase_customer(self, request: Request) -> Response:
        """Erase one customer's leads from the tenant, recorded in the tenant's audit log (and the
        platform's, with the counts) by the API's actor; ``dry_run`` changes nothing."""
        body = await self._body(request, {"email": "string", "phone": "string", "dry_run": "boolean"}, ())
        tenant_id = request.path_params["tenant_id"]
        dry_run = body.get("dry_run", False)
        problems = [] if isinstance(dry_run, bool) else ["dry_run: must be true or false"]
        try:
            subject = Subject.parse(body.get("email"), body.get("phone"))
        except ErasureRefused as refused:
            problems += refused.problems
        if problems:
            raise Refused(400, _MESSAGES[400], problems)

        def run() -> Erasure:
            self.registry.get(tenant_id)  # 404 for an unknown tenant
            db = self.registry.data.open(tenant_id)
            now_ms = int(time.time() * 1000)
            if dry_run:
                return plan(ErasureStore(db), subject, actor=self.actor, now_ms=now_ms)
            key = StateStore(db).secret(DIGEST_SECRET)
            done = erase(ErasureStore(db), subject, key=key, actor=self.actor, now_ms=now_ms)
            detail = {"erasure_id": done.erasure_id, "leads": len(done.lead_ids), "counts": done.counts}
            ConsoleStore(self.registry.store.db).audit(self.actor, "tenant.erasure", tenant_id, detail, now_ms)
            return done

        done = await self.work.blocking(run)
        return json_response({**done.view(), "dry_run": dry_run}, 200 if dry_run else 201)
