"""``AapClient``: one API for every AAP skill over A2A, MCP or Poppy.

::

    async with AapClient.discover("dealer.example", binding="a2a") as dealer:
        page = await dealer.search(filters={"make": ["Honda"]}, sort=("price", "asc"))
        async for car in dealer.iter_search(filters={"body": ["suv"]}):
            print(car.title, car.price)

The client talks to any conformant dealer: it reads the agent card, never
assumes this project's paths, and needs nothing from the server package
except the shared skill table.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from aap import __version__
from aap.cardsign import SignatureError
from aap.client.a2a import A2ATransport
from aap.client.card_signatures import verify_card
from aap.client.discovery import Discovery, discover
from aap.client.errors import AapClientError, DiscoveryError
from aap.client.mcp import MODERN, McpTransport
from aap.client.models import DealerInfo, Facets, LeadResult, Listing, SearchPage, VehicleDetail
from aap.client.poppy import PoppyTransport
from aap.client.poppy_auth import PoppyIdentity
from aap.client.transport import CallOutcome, Transport
from aap.skills.catalog import SKILLS
from aap.util.backoff import doubling

BINDINGS = ("a2a", "mcp", "poppy")
USER_AGENT = f"aap-client/{__version__}"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries for retryable failures.

    The delay is the longest of the dealer's ``details.retry_after_ms``, the
    HTTP ``Retry-After`` and an exponential backoff with jitter. A dealer that
    asks for more than ``max_delay_s`` is not waited for: the error is raised.
    """

    max_attempts: int = 3
    base_delay_s: float = 0.25
    max_delay_s: float = 30.0

    def delay(self, attempt: int, error: AapClientError) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to give up."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        asked = (error.retry_after_ms or 0) / 1000
        if asked > self.max_delay_s:
            return None
        backoff = doubling(attempt, self.base_delay_s, self.max_delay_s) * (1 + random.random() * 0.25)
        return max(backoff, asked)


NO_RETRY = RetryPolicy(max_attempts=1)


def _sort(sort: Any) -> dict[str, str] | None:
    """``("price", "asc")``, ``"price:asc"``, ``"-price"`` or a dict → the AAP sort object."""
    if sort is None or isinstance(sort, dict):
        return sort
    if isinstance(sort, str):
        if ":" in sort:
            field, order = sort.split(":", 1)
        elif sort.startswith("-"):
            field, order = sort[1:], "desc"
        else:
            field, order = sort, "asc"
        return {"field": field, "order": order}
    field, order = sort
    return {"field": field, "order": order}


class _Opening:
    """What ``AapClient.discover`` returns: usable with ``async with`` or ``await``."""

    def __init__(self, client: AapClient) -> None:
        self.client = client

    def __await__(self) -> Generator[Any, None, AapClient]:
        return self.client.open().__await__()

    async def __aenter__(self) -> AapClient:
        return await self.client.open()

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.aclose()


class AapClient:
    """A buyer-side client for one dealer over one binding."""

    def __init__(
        self,
        target: str,
        *,
        binding: str = "a2a",
        http: httpx.AsyncClient | None = None,
        retry: RetryPolicy = RetryPolicy(),
        poppy_identity: PoppyIdentity | None = None,
        mcp_protocol_version: str = MODERN,
        timeout: float = 30.0,
        verify: ssl.SSLContext | str | bool = True,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        require_signed_card: bool = False,
        card_keys: Mapping[str, Any] | None = None,
    ) -> None:
        if binding not in BINDINGS:
            raise ValueError(f"binding must be one of {BINDINGS}")
        if binding == "poppy" and poppy_identity is None:
            raise ValueError("the Poppy binding needs a poppy_identity (client_id URL and its private key)")
        self.target = target
        self.binding = binding
        self.retry = retry
        self.poppy_identity = poppy_identity
        self.mcp_protocol_version = mcp_protocol_version
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=timeout, verify=verify, headers={"User-Agent": USER_AGENT}, follow_redirects=False
        )
        self._sleep = sleep
        #: Refuse a dealer whose agent card is unsigned; a signed card is verified either way
        #: (docs/client.md, "Signed agent cards"), with ``card_keys`` (a JWK Set) trusted first.
        self.require_signed_card = require_signed_card
        self.card_keys = card_keys
        #: The ``kid`` of the signature the card was verified with (None: unsigned).
        self.card_signed_by: str | None = None
        self.discovery: Discovery | None = None
        self.transport: Transport | None = None

    # -- lifecycle --------------------------------------------------------------
    @classmethod
    def discover(cls, target: str, **kwargs: Any) -> _Opening:
        """Read the dealer's agent card and pick the binding: ``async with`` or ``await`` it."""
        return _Opening(cls(target, **kwargs))

    async def open(self) -> AapClient:
        if self.transport is not None:
            return self
        try:
            self.discovery = await discover(self.http, self.target)
            await self._check_signatures(self.discovery)
            self.transport = self._make_transport(self.discovery)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _check_signatures(self, found: Discovery) -> None:
        """A signed card must verify (A2A §8.4.3); an unsigned one is refused when required."""
        if not found.card.get("signatures"):
            if self.require_signed_card:
                raise DiscoveryError(f"the agent card at {found.card_url} is not signed")
            return
        try:
            self.card_signed_by = await verify_card(self.http, found.card_url, found.card, self.card_keys)
        except SignatureError as exc:
            raise DiscoveryError(f"the agent card's signatures do not verify: {exc}") from None

    def _make_transport(self, found: Discovery) -> Transport:
        if self.binding == "a2a":
            return A2ATransport(self.http, found.a2a_url, a2a_tenant=found.a2a_tenant)
        if self.binding == "mcp":
            if not found.mcp_url:
                raise DiscoveryError("the agent card advertises no MCP endpoint (params.mcp)")
            return McpTransport(self.http, found.mcp_url, protocol_version=self.mcp_protocol_version)
        if not found.poppy_url:
            raise DiscoveryError("the agent card advertises no poppy.json (params.poppy)")
        assert self.poppy_identity is not None
        return PoppyTransport(self.http, found.poppy_url, self.poppy_identity)

    async def aclose(self) -> None:
        if self.transport is not None:
            await self.transport.aclose()
        if self._own_http:
            await self.http.aclose()

    async def __aenter__(self) -> AapClient:
        return await self.open()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- calls --------------------------------------------------------------------
    async def call_outcome(self, payload: Mapping[str, Any]) -> CallOutcome:
        """One attempt, with the wire evidence (no retry, nothing raised for AAP errors)."""
        await self.open()
        assert self.transport is not None
        kind = payload.get("type")
        skill = next((s for s in SKILLS.values() if s.request_type == kind), None)
        if skill is None:
            raise ValueError(f"not an AAP request type: {kind!r}")
        return await self.transport.call(skill, dict(payload))

    async def call(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Send any AAP request object; return the typed response object. Retries retryable failures."""
        attempt = 0
        while True:
            attempt += 1
            outcome = await self.call_outcome(payload)
            if outcome.error is None:
                return outcome.unwrap()
            delay = self.retry.delay(attempt, outcome.error)
            if delay is None:
                raise outcome.error
            await self._sleep(delay)

    async def dealer_information(self, dealer_id: str | None = None) -> DealerInfo:
        payload: dict[str, Any] = {"type": "dealer.information.request"}
        if dealer_id is not None:
            payload["dealer_id"] = dealer_id
        return DealerInfo(await self.call(payload))

    async def facets(
        self, filters: Mapping[str, Any] | None = None, *, currency: str | None = None, mileage_unit: str | None = None
    ) -> Facets:
        payload: dict[str, Any] = {"type": "inventory.facets.request"}
        if filters:
            payload["filters"] = dict(filters)
        if currency:
            payload["currency"] = currency
        if mileage_unit:
            payload["mileage_unit"] = mileage_unit
        return Facets.from_response(await self.call(payload))

    @staticmethod
    def search_request(
        filters: Mapping[str, Any] | None = None,
        *,
        sort: Any = None,
        limit: int | None = None,
        cursor: str | None = None,
        skip: int | None = None,
        currency: str | None = None,
        mileage_unit: str | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        """The ``inventory.search.request`` object for these arguments."""
        payload: dict[str, Any] = {"type": "inventory.search.request"}
        merged = dict(filters or {})
        if query is not None:
            merged["query"] = query
        if merged:
            payload["filters"] = merged
        if (sort_obj := _sort(sort)) is not None:
            payload["sort"] = sort_obj
        pagination = {k: v for k, v in (("limit", limit), ("cursor", cursor), ("skip", skip)) if v is not None}
        if pagination:
            payload["pagination"] = pagination
        if currency:
            payload["currency"] = currency
        if mileage_unit:
            payload["mileage_unit"] = mileage_unit
        return payload

    async def search(self, filters: Mapping[str, Any] | None = None, **kwargs: Any) -> SearchPage:
        """One page of ``inventory.search`` (``sort=("price", "asc")``, ``limit=``, ``cursor=``...)."""
        return SearchPage.from_response(await self.call(self.search_request(filters, **kwargs)))

    async def iter_pages(
        self, filters: Mapping[str, Any] | None = None, *, max_pages: int | None = None, **kwargs: Any
    ) -> AsyncIterator[SearchPage]:
        """Every page of a search, following ``next_cursor`` with the same query until it is null."""
        if "cursor" in kwargs or "skip" in kwargs:
            raise ValueError("iter_pages walks from the first page; do not pass cursor or skip")
        cursor: str | None = None
        pages = 0
        while True:
            page = await self.search(filters, cursor=cursor, **kwargs)
            yield page
            pages += 1
            cursor = page.next_cursor
            if cursor is None or (max_pages is not None and pages >= max_pages):
                return

    async def iter_search(self, filters: Mapping[str, Any] | None = None, **kwargs: Any) -> AsyncIterator[Listing]:
        """Every matching listing across all pages (the dealer's order)."""
        async for page in self.iter_pages(filters, **kwargs):
            for vehicle in page.vehicles:
                yield vehicle

    async def vehicle(
        self, *, vin: str | None = None, stock: str | None = None, vehicle_id: str | None = None
    ) -> VehicleDetail:
        payload: dict[str, Any] = {"type": "inventory.vehicle.request"}
        for name, value in (("vin", vin), ("stock", stock), ("vehicle_id", vehicle_id)):
            if value is not None:
                payload[name] = value
        if len(payload) == 1:
            raise ValueError("inventory.vehicle needs a vin, stock or vehicle_id")
        return VehicleDetail(await self.call(payload))

    async def submit_lead(
        self,
        *,
        customer: Mapping[str, Any],
        consent: Mapping[str, Any],
        source_agent: Mapping[str, Any],
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> LeadResult:
        """``lead.submit``. Retries reuse the same ``idempotency_key`` (generated when omitted), so a
        retried submission replays instead of creating a second lead."""
        payload: dict[str, Any] = {
            "type": "lead.submit.request",
            "customer": dict(customer),
            "consent": dict(consent),
            "source_agent": dict(source_agent),
            "idempotency_key": idempotency_key or str(uuid.uuid4()),
        }
        payload.update({k: v for k, v in fields.items() if v is not None})
        return LeadResult(await self.call(payload))
