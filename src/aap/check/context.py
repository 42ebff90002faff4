"""Shared state of one conformance run: options, HTTP client, and memoised discovery.

Rules ask the context for what they need (the card, poppy.json, the MCP tool
list, a transport per binding, facets...). Each is fetched once; if it cannot
be had, the rule that asked is skipped with the reason, and the rule that owns
that document reports the failure itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload
from urllib.parse import urlsplit

import httpx

from aap.check.registry import Fail, Skip
from aap.client.a2a import A2ATransport, find_aap_error
from aap.client.discovery import Discovery, fetch_card, parse_card
from aap.client.errors import AapClientError, AapRemoteError, DiscoveryError, UnreachableError
from aap.client.mcp import MODERN, McpTransport
from aap.client.poppy import PoppyTransport
from aap.client.poppy_auth import PoppyIdentity
from aap.client.transport import CallOutcome, json_body
from aap.errors import Problem
from aap.loopback import is_loopback_host
from aap.skills.catalog import SKILLS, SkillInfo
from aap.spec import validate

ALL_BINDINGS = ("a2a", "mcp", "poppy")
#: The client transport of one binding (rules reach for binding-specific probes on them).
BindingTransport = A2ATransport | McpTransport | PoppyTransport
MAX_PROBLEMS = 8
T = TypeVar("T")


@dataclass
class CheckOptions:
    allow_writes: bool = False
    bindings: tuple[str, ...] = ALL_BINDINGS
    poppy_identity: PoppyIdentity | None = None
    # Upper bound on listings walked by the pagination rules (keeps runs short on big dealers).
    max_walk: int = 500


def is_loopback_http(url: str) -> bool:
    """A plain ``http://`` URL on a loopback host (:mod:`aap.loopback`): a development server."""
    try:
        parts = urlsplit(url)
        return parts.scheme == "http" and is_loopback_host(parts.hostname)
    except ValueError:
        return False


def loopback_as_https(value: Any) -> Any:
    """``value`` with every loopback ``http://`` URL read as ``https://`` — the development allowance.

    The seed admits plain http only for loopback development (seed 001,
    ``AgentCard.url``); documents of a loopback dev server are validated as if
    they had been published over TLS so that every other constraint is still
    checked.
    """
    if isinstance(value, str):
        return "https://" + value[len("http://") :] if is_loopback_http(value) else value
    if isinstance(value, dict):
        return {k: loopback_as_https(v) for k, v in value.items()}
    if isinstance(value, list):
        return [loopback_as_https(v) for v in value]
    return value


def problems_text(problems: list[Problem]) -> list[str]:
    out = [f"{p.get('instanceLocation') or '/'}: {p.get('error')} ({p.get('keyword')})" for p in problems]
    if len(out) > MAX_PROBLEMS:
        out = out[:MAX_PROBLEMS] + [f"... and {len(out) - MAX_PROBLEMS} more"]
    return out


RATE_LIMIT_ATTEMPTS = 6


def is_rate_limited(error: BaseException | None) -> bool:
    """A RATE_LIMITED aap.error, or an HTTP 429 / 503 protocol failure."""
    if isinstance(error, AapRemoteError):
        return error.code == "RATE_LIMITED"
    return getattr(error, "http_status", None) in (429, 503)


class _Memo(Generic[T]):
    """An async value computed once; a Skip/Fail raised while computing is replayed to every asker."""

    def __init__(self, compute: Callable[[], Awaitable[T]]) -> None:
        self.compute = compute
        self.result: tuple[T] | None = None  # (value,) once computed
        self.error: Skip | Fail | None = None

    async def get(self) -> T:
        if self.result is None:
            if self.error is None:
                try:
                    self.result = (await self.compute(),)
                    return self.result[0]
                except (Skip, Fail) as exc:
                    self.error = exc
            raise Skip(self.error.reason if isinstance(self.error, Skip) else self.error.message)
        return self.result[0]


@dataclass
class CheckContext:
    target: str
    http: httpx.AsyncClient
    options: CheckOptions = field(default_factory=CheckOptions)

    def __post_init__(self) -> None:
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._memos: dict[str, _Memo[Any]] = {}  # each key is always asked with one type
        self._transports: dict[str, BindingTransport] = {}
        self.card_url: str | None = None
        self.card_response: httpx.Response | None = None
        self.card_raw: Any = None
        self.card_error: str | None = None
        #: Why nothing answered at the target at all (then no rule can say anything more).
        self.unreachable: str | None = None

    # -- helpers ------------------------------------------------------------------
    @property
    def loopback_dev(self) -> bool:
        """True when checking a plain-http loopback development server."""
        return is_loopback_http(self.card_url or (self.target if "://" in self.target else ""))

    def validate(self, instance: Any, schema: str) -> list[Problem]:
        return validate(loopback_as_https(instance) if self.loopback_dev else instance, schema)

    def require_valid(self, instance: Any, schema: str, what: str) -> None:
        problems = self.validate(instance, schema)
        if problems:
            raise Fail(f"{what} does not validate against {schema}", problems_text(problems))

    def memo(self, key: str, compute: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        if key not in self._memos:
            self._memos[key] = _Memo(compute)
        return self._memos[key].get()

    async def get(self, url: str, **headers: str) -> httpx.Response:
        try:
            return await self.http.get(url, headers=headers or None)
        except httpx.HTTPError as exc:
            raise Fail(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc

    # -- discovery ----------------------------------------------------------------
    async def card_fetch(self) -> tuple[str, Any, httpx.Response]:
        async def compute() -> tuple[str, Any, httpx.Response]:
            try:
                url, card, response = await fetch_card(self.http, self.target)
            except DiscoveryError as exc:
                self.card_error = exc.message
                if isinstance(exc, UnreachableError):
                    self.unreachable = exc.message
                raise Skip(f"no agent card: {exc.message}") from exc
            self.card_url, self.card_raw, self.card_response = url, card, response
            return url, card, response

        return await self.memo("card-fetch", compute)

    async def discovery(self) -> Discovery:
        async def compute() -> Discovery:
            url, card, _ = await self.card_fetch()
            try:
                return parse_card(url, card)
            except DiscoveryError as exc:
                raise Skip(f"the agent card is unusable: {exc.message}") from exc

        return await self.memo("discovery", compute)

    async def capabilities(self) -> dict[str, Any]:
        found = await self.discovery()
        caps = found.capabilities
        if caps is None:
            raise Skip("the card advertises no inventory.search capabilities")
        return caps

    async def json_document(self, key: str, url: str, what: str) -> tuple[Any, httpx.Response]:
        async def compute() -> tuple[Any, httpx.Response]:
            response = await self.get(url, Accept="application/json")
            if response.status_code != 200:
                raise Skip(f"{what} at {url}: HTTP {response.status_code}")
            body = json_body(response)
            if not isinstance(body, dict):
                raise Skip(f"{what} at {url} is not a JSON object")
            return body, response

        return await self.memo(key, compute)

    async def poppy_document(self) -> tuple[dict[str, Any], httpx.Response]:
        found = await self.discovery()
        if not found.poppy_url:
            raise Skip("the card advertises no poppy.json")
        return await self.json_document("poppy.json", found.poppy_url, "poppy.json")

    # -- bindings -----------------------------------------------------------------
    async def advertised(self, binding: str) -> bool:
        found = await self.discovery()
        if binding == "a2a":
            return True
        if binding == "mcp":
            return found.mcp_url is not None
        return found.poppy_url is not None

    @overload
    async def transport(self, binding: Literal["a2a"]) -> A2ATransport: ...
    @overload
    async def transport(self, binding: Literal["mcp"], *, mcp_version: str = MODERN) -> McpTransport: ...
    @overload
    async def transport(self, binding: Literal["poppy"]) -> PoppyTransport: ...
    @overload
    async def transport(self, binding: str, *, mcp_version: str = MODERN) -> BindingTransport: ...

    async def transport(self, binding: str, *, mcp_version: str = MODERN) -> BindingTransport:
        """The binding's client transport, or Skip when it is not advertised / not selected."""
        if binding not in self.options.bindings:
            raise Skip(f"binding {binding} not selected (--binding)")
        found = await self.discovery()
        key = f"{binding}:{mcp_version}" if binding == "mcp" else binding
        if key in self._transports:
            return self._transports[key]
        if binding == "a2a":
            transport: BindingTransport = A2ATransport(self.http, found.a2a_url, a2a_tenant=found.a2a_tenant)
        elif binding == "mcp":
            if not found.mcp_url:
                raise Skip("the card advertises no MCP endpoint")
            transport = McpTransport(self.http, found.mcp_url, protocol_version=mcp_version)
        else:
            if not found.poppy_url:
                raise Skip("the card advertises no poppy.json")
            if self.options.poppy_identity is None:
                raise Skip("no Poppy client identity: pass --poppy-client-id and --poppy-client-key")
            transport = PoppyTransport(self.http, found.poppy_url, self.options.poppy_identity)
        self._transports[key] = transport
        return transport

    async def bindings(self) -> list[str]:
        """Bindings this run exercises: advertised, selected, and usable."""
        usable = []
        for binding in ALL_BINDINGS:
            try:
                await self.transport(binding)
            except Skip:
                continue
            usable.append(binding)
        return usable

    async def call(self, binding: str, payload: dict[str, Any], *, mcp_version: str = MODERN) -> CallOutcome:
        """One AAP call; a rate-limited answer is waited out (bounded), never reported as a finding."""
        transport = await self.transport(binding, mcp_version=mcp_version)
        skill = next(s for s in SKILLS.values() if s.request_type == payload["type"])
        for attempt in range(RATE_LIMIT_ATTEMPTS):
            outcome = await transport.call(skill, payload)
            error = outcome.error
            if error is None or not is_rate_limited(error) or attempt == RATE_LIMIT_ATTEMPTS - 1:
                return outcome
            await self.wait(error.retry_after_ms)
        raise AssertionError("unreachable")

    async def post_a2a(self, body: Any, headers: dict[str, Any] | None = None) -> httpx.Response:
        """POST a raw JSON-RPC body to the A2A endpoint, waiting out RATE_LIMITED answers."""
        transport = await self.transport("a2a")
        for attempt in range(RATE_LIMIT_ATTEMPTS):
            response = await transport.post(body, headers)
            answer = json_body(response)
            limited = find_aap_error(answer.get("error")) if isinstance(answer, dict) else None
            if not (limited and limited.get("code") == "RATE_LIMITED") or attempt == RATE_LIMIT_ATTEMPTS - 1:
                return response
            await self.wait((limited.get("details") or {}).get("retry_after_ms"))
        raise AssertionError("unreachable")

    async def wait(self, retry_after_ms: int | None) -> None:
        """Honour a dealer's rate limit: sleep its delay (1 s when it names none; at most 30 s)."""
        delay = retry_after_ms / 1000 if isinstance(retry_after_ms, int) and retry_after_ms >= 0 else 1.0
        await self.sleep(min(delay, 30.0))

    async def ok(self, binding: str, payload: dict[str, Any], *, validate: bool = True) -> dict[str, Any]:
        """Call and require a success response that validates against the skill's response schema."""
        outcome = await self.call(binding, payload)
        if outcome.error is not None:
            raise Fail(f"{payload['type']} over {binding} failed: {describe(outcome.error)}")
        response = outcome.response or {}
        if validate:
            self.require_valid(response, outcome.skill.response_schema, f"{outcome.skill.response_type} over {binding}")
        return response

    async def expect_error(self, binding: str, payload: dict[str, Any], codes: set[str], what: str) -> AapRemoteError:
        """Call and require an aap.error with one of ``codes``."""
        outcome = await self.call(binding, payload)
        if outcome.error is None:
            raise Fail(f"{what}: the dealer answered successfully instead of {' or '.join(sorted(codes))}")
        if not isinstance(outcome.error, AapRemoteError):
            raise Fail(f"{what}: expected aap.error {' or '.join(sorted(codes))}, got {describe(outcome.error)}")
        if outcome.error.code not in codes:
            raise Fail(f"{what}: expected {' or '.join(sorted(codes))}, got {outcome.error.code}")
        return outcome.error

    async def implements(self, skill_id: str) -> SkillInfo:
        found = await self.discovery()
        if not found.supports(skill_id):
            raise Skip(f"the card does not declare {skill_id}")
        return SKILLS[skill_id]

    # -- shared samples ----------------------------------------------------------------
    async def facets(self) -> dict[str, Any]:
        async def compute() -> dict[str, Any]:
            await self.implements("inventory.facets")
            response = await self.ok("a2a", {"type": "inventory.facets.request"})
            return response.get("data") or {}

        return await self.memo("facets", compute)

    async def first_page(self) -> dict[str, Any]:
        async def compute() -> dict[str, Any]:
            await self.implements("inventory.search")
            response = await self.ok("a2a", {"type": "inventory.search.request"})
            return response.get("data") or {}

        return await self.memo("first-page", compute)

    async def sample_listing(self) -> dict[str, Any]:
        page = await self.first_page()
        vehicles = page.get("vehicles") or []
        if not vehicles:
            raise Skip("the dealer's inventory is empty")
        return vehicles[0]

    async def close(self) -> None:
        for transport in self._transports.values():
            try:
                await transport.aclose()
            except AapClientError:
                pass


def describe(error: BaseException) -> str:
    if isinstance(error, AapRemoteError):
        text = f"aap.error {error.code}: {error.message}"
        if error.errors:
            text += " [" + "; ".join(f"{e.get('instanceLocation')}: {e.get('error')}" for e in error.errors[:3]) + "]"
        return text
    return str(error)
