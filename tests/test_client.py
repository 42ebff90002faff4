"""The buyer client against the independent fake dealer (in process) and its retry / error machinery."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from aap import EXTENSION_URI
from aap.client import (
    AapClient,
    AapRemoteError,
    DiscoveryError,
    InvalidCursorError,
    ProtocolError,
    RateLimitedError,
    RetryPolicy,
    SchemaValidationFailedError,
    UnsupportedFilterError,
    VehicleNotFoundError,
)
from aap.client.discovery import card_urls
from aap.client.errors import ERRORS_BY_CODE, remote_error
from aap.client.mcp import parse_sse
from aap.client.poppy import issuer_metadata_url, operation_map
from aap.client.transport import retry_after_ms
from aap.errors import CODES
from check_fakes import BASE, FakeDealer, make_inventory


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def fake_client(app: Any, **kwargs: Any) -> AapClient:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return AapClient.discover(BASE, http=http, **kwargs)


@pytest.fixture
def fake() -> FakeDealer:
    return FakeDealer()


async def test_discover_reads_the_card(fake):
    async with fake_client(fake.app) as dealer:
        found = dealer.discovery
        assert found.card_url == f"{BASE}/.well-known/agent-card.json"
        assert found.a2a_url == f"{BASE}/a2a"
        assert found.mcp_url == f"{BASE}/mcp"
        assert found.poppy_url == f"{BASE}/.well-known/poppy.json"
        assert found.llms_txt_url == f"{BASE}/llms.txt"
        assert found.capabilities["max_limit"] == 25
        assert found.supports("inventory.search") and not found.supports("lead.submit")


async def test_await_form_and_every_read_skill(fake):
    dealer = await fake_client(fake.app)
    try:
        info = await dealer.dealer_information()
        assert info.name == "Fake Motors" and info.rooftops[0]["name"] == "Fake Motors Main"
        facets = await dealer.facets()
        makes = {f.value: f.count for f in facets.terms("makes")}
        assert sum(makes.values()) == len(fake.inventory)
        assert facets.terms("trims") is None and facets.range("price_range") is None
        page = await dealer.search({"make": ["Honda"]}, sort=("price", "asc"), limit=5)
        assert page.total == makes["Honda"] and page.limit == 5 and len(page.vehicles) == 5
        assert all(car.make == "Honda" for car in page.vehicles)
        prices = [car.price for car in page.vehicles if car.price is not None]
        assert prices == sorted(prices)
        assert page.sort == {"field": "price", "order": "asc"}
        first = page.vehicles[0]
        detail = await dealer.vehicle(vin=first.vin)
        assert detail.vehicle.vehicle_id == first.vehicle_id
        assert detail.vehicle.currency == "USD" and detail.vehicle.vehicle_type == "car"
    finally:
        await dealer.aclose()


@pytest.mark.parametrize("sort", [None, "price:desc", "-year", ("make", "asc")])
async def test_iter_search_walks_every_listing_once(fake, sort):
    async with fake_client(fake.app) as dealer:
        seen = [car.key async for car in dealer.iter_search(sort=sort, limit=4)]
    assert len(seen) == len(fake.inventory) == len(set(seen))
    pages = []
    async with fake_client(fake.app) as dealer:
        async for page in dealer.iter_pages({"body": ["suv"]}, limit=3):
            pages.append(page)
    assert [p.next_cursor is None for p in pages] == [False] * (len(pages) - 1) + [True]
    assert sum(len(p.vehicles) for p in pages) == pages[0].total


async def test_iter_pages_refuses_a_cursor(fake):
    async with fake_client(fake.app) as dealer:
        with pytest.raises(ValueError):
            async for _ in dealer.iter_pages(cursor="x"):
                pass


async def test_typed_errors_carry_details(fake):
    async with fake_client(fake.app) as dealer:
        with pytest.raises(VehicleNotFoundError) as not_found:
            await dealer.vehicle(vin="AAPCHECK000000001")
        assert not_found.value.code == "VEHICLE_NOT_FOUND"
        assert not_found.value.error_id.startswith("err_")
        assert not_found.value.binding == "a2a" and not not_found.value.retryable
        with pytest.raises(SchemaValidationFailedError) as invalid:
            await dealer.search({"make": [], "year_min": 1800}, limit=0)
        locations = {e["instanceLocation"] for e in invalid.value.errors}
        assert locations == {"/filters/make", "/filters/year_min", "/pagination/limit"}
        with pytest.raises(UnsupportedFilterError):
            await dealer.search({"model": ["Civic"]})
        page = await dealer.search(limit=1)
        with pytest.raises(InvalidCursorError):
            await dealer.search({"make": ["Ford"]}, limit=1, cursor=page.next_cursor)


async def test_wrong_extension_uri_is_a_discovery_error():
    from check_fakes import Breaks

    with pytest.raises(DiscoveryError, match="does not declare the AAP extension"):
        async with fake_client(FakeDealer(Breaks(wrong_extension_uri=True)).app):
            pass


async def test_forbidden_error_type_is_not_mistaken_for_an_aap_error():
    from check_fakes import Breaks

    async with fake_client(FakeDealer(Breaks(legacy_error_type=True)).app) as dealer:
        with pytest.raises(ProtocolError) as exc:
            await dealer.vehicle(vin="AAPCHECK000000001")
    assert not isinstance(exc.value, AapRemoteError)
    assert exc.value.rpc_code == -32000


def test_error_classes_cover_every_code():
    assert set(ERRORS_BY_CODE) == set(CODES)
    for code, cls in ERRORS_BY_CODE.items():
        error = remote_error(
            {
                "type": "aap.error",
                "code": code,
                "message": "m",
                "retryable": False,
                "error_id": "e",
                "created_at": "2026-01-01T00:00:00Z",
            }
        )
        assert type(error) is cls and error.code == code
    unknown = remote_error({"type": "aap.error", "code": "SOMETHING_NEW", "message": "m", "retryable": True})
    assert type(unknown) is AapRemoteError and unknown.retryable


# -- retries ----------------------------------------------------------------------------------------------
def rate_limited_app(failures: int, retry_after_ms: int, header: str | None = None) -> tuple[Starlette, list]:
    """A dealer whose A2A endpoint answers RATE_LIMITED ``failures`` times, then the fake's answer."""
    fake = FakeDealer()
    calls: list[float] = []

    async def a2a(request: Request):
        calls.append(time.monotonic())
        if len(calls) <= failures:
            body = await request.json()
            error = {
                "type": "aap.error",
                "error_id": "err_1",
                "code": "RATE_LIMITED",
                "message": "slow down",
                "retryable": True,
                "created_at": "2026-05-01T10:00:00Z",
                "details": {"retry_after_ms": retry_after_ms},
            }
            data = [{"@type": "type.googleapis.com/google.protobuf.Struct", "value": error}]
            headers = {"Retry-After": header} if header else {}
            return JSONResponse(
                {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32000, "message": "slow down", "data": data}},
                headers=headers,
            )
        return await fake.a2a_endpoint(request)

    routes = [r for r in fake.app.routes if getattr(r, "path", "") != "/a2a"]
    return Starlette(routes=[*routes, Route("/a2a", a2a, methods=["POST"])]), calls


async def test_retries_honour_retry_after_ms():
    app, calls = rate_limited_app(failures=2, retry_after_ms=1500)
    sleeps = Sleeps()
    async with fake_client(app, sleep=sleeps, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01)) as dealer:
        info = await dealer.dealer_information()
    assert info.name == "Fake Motors"
    assert len(calls) == 3
    assert sleeps.delays == [1.5, 1.5]


async def test_retry_after_header_wins_when_longer():
    app, calls = rate_limited_app(failures=1, retry_after_ms=200, header="3")
    sleeps = Sleeps()
    async with fake_client(app, sleep=sleeps) as dealer:
        await dealer.dealer_information()
    assert sleeps.delays == [3.0]


async def test_retries_are_bounded_and_the_error_is_typed():
    app, calls = rate_limited_app(failures=10, retry_after_ms=10)
    sleeps = Sleeps()
    async with fake_client(app, sleep=sleeps, retry=RetryPolicy(max_attempts=4, base_delay_s=0.001)) as dealer:
        with pytest.raises(RateLimitedError) as exc:
            await dealer.dealer_information()
    assert len(calls) == 4 and len(sleeps.delays) == 3
    assert exc.value.retry_after_ms == 10


async def test_a_delay_longer_than_the_policy_allows_is_not_waited_for():
    app, calls = rate_limited_app(failures=1, retry_after_ms=120_000)
    sleeps = Sleeps()
    async with fake_client(app, sleep=sleeps, retry=RetryPolicy(max_delay_s=30)) as dealer:
        with pytest.raises(RateLimitedError):
            await dealer.dealer_information()
    assert len(calls) == 1 and sleeps.delays == []


async def test_non_retryable_errors_are_not_retried(fake):
    sleeps = Sleeps()
    async with fake_client(fake.app, sleep=sleeps) as dealer:
        with pytest.raises(VehicleNotFoundError):
            await dealer.vehicle(stock="NOPE")
    assert sleeps.delays == []


async def test_http_503_with_retry_after_is_retried():
    fake = FakeDealer()
    calls = []

    async def a2a(request: Request):
        calls.append(1)
        if len(calls) == 1:
            return JSONResponse({"error": "maintenance"}, status_code=503, headers={"Retry-After": "2"})
        return await fake.a2a_endpoint(request)

    routes = [r for r in fake.app.routes if getattr(r, "path", "") != "/a2a"]
    app = Starlette(routes=[*routes, Route("/a2a", a2a, methods=["POST"])])
    sleeps = Sleeps()
    async with fake_client(app, sleep=sleeps) as dealer:
        await dealer.dealer_information()
    assert sleeps.delays == [2.0] and len(calls) == 2


async def test_requests_carry_the_a2a_headers_and_integers(fake):
    seen: list[dict[str, Any]] = []

    async def a2a(request: Request):
        seen.append({"headers": dict(request.headers), "body": await request.json()})
        return await fake.a2a_endpoint(request)

    routes = [r for r in fake.app.routes if getattr(r, "path", "") != "/a2a"]
    app = Starlette(routes=[*routes, Route("/a2a", a2a, methods=["POST"])])
    async with fake_client(app) as dealer:
        await dealer.search({"make": ["Honda"]}, limit=3)
    headers, body = seen[0]["headers"], seen[0]["body"]
    assert headers["a2a-version"] == "1.0" and headers["a2a-extensions"] == EXTENSION_URI
    part = body["params"]["message"]["parts"][0]
    assert part["mediaType"] == "application/vnd.autoagent.inventory-search-request+json"
    assert part["data"] == {
        "type": "inventory.search.request",
        "filters": {"make": ["Honda"]},
        "pagination": {"limit": 3},
    }
    assert isinstance(part["data"]["pagination"]["limit"], int)
    assert body["params"]["configuration"]["acceptedOutputModes"] == [
        "application/vnd.autoagent.inventory-search-response+json"
    ]


# -- helpers ------------------------------------------------------------------------------------------------
def test_retry_after_parsing():
    assert retry_after_ms(httpx.Headers({"Retry-After": "7"})) == 7000
    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55_000 <= retry_after_ms(httpx.Headers({"Retry-After": when})) <= 60_000
    assert retry_after_ms(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after_ms(httpx.Headers({})) is None


def test_card_urls_for_domains_paths_and_card_urls():
    assert card_urls("dealer.example") == ["https://dealer.example/.well-known/agent-card.json"]
    assert card_urls("127.0.0.1:8000") == ["http://127.0.0.1:8000/.well-known/agent-card.json"]
    assert card_urls("https://p.example/d/7/") == [
        "https://p.example/d/7/.well-known/agent-card.json",
        "https://p.example/.well-known/agent-card.json",
    ]
    assert card_urls("https://d.example/custom/card.json?x=1") == ["https://d.example/custom/card.json"]


def test_sse_parsing_and_issuer_metadata_location():
    text = (
        'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        'data: {"jsonrpc":"2.0","id":3,\ndata: "result":{}}\n\n'
    )
    assert parse_sse(text) == [
        {"jsonrpc": "2.0", "method": "notifications/progress"},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
    ]
    assert issuer_metadata_url("https://d.example") == "https://d.example/.well-known/oauth-authorization-server"
    assert (
        issuer_metadata_url("https://p.example/dealers/7")
        == "https://p.example/.well-known/oauth-authorization-server/dealers/7"
    )


def test_operation_map_finds_skills_by_marker_body_type_operation_id_or_path():
    document = {
        "servers": [{"url": "/api"}],
        "components": {"schemas": {"Search": {"properties": {"type": {"const": "inventory.search.request"}}}}},
        "paths": {
            "/find": {
                "post": {
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Search"}}}
                    }
                }
            },
            "/info": {"post": {"x-aap-skill": "dealer.information"}},
            "/x": {"post": {"operationId": "inventoryFacets"}},
            "/v1/inventory.vehicle": {"post": {}},
            "/v1/inventory.search": {"post": {}},
        },
    }
    mapping = operation_map(document, "https://d.example/poppy/openapi.json")
    assert mapping == {
        "inventory.search": "https://d.example/api/find",
        "dealer.information": "https://d.example/api/info",
        "inventory.facets": "https://d.example/api/x",
        "inventory.vehicle": "https://d.example/api/v1/inventory.vehicle",
    }


def test_poppy_binding_needs_an_identity():
    with pytest.raises(ValueError, match="poppy_identity"):
        AapClient("dealer.example", binding="poppy")


def test_inventory_helper_is_deterministic():
    assert make_inventory() == make_inventory()


async def test_discovery_follows_https_redirects_but_not_downgrades(fake):
    from starlette.responses import RedirectResponse

    async def moved(request: Request):
        return RedirectResponse(f"{BASE}/.well-known/agent-card.json", status_code=301)

    routes = [Route("/old/.well-known/agent-card.json", moved), *fake.app.routes]
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=Starlette(routes=routes)))
    async with AapClient.discover(f"{BASE}/old", http=http) as dealer:
        assert dealer.discovery.card_url == f"{BASE}/.well-known/agent-card.json"

    async def downgrade(request: Request):
        if request.url.scheme == "https":
            return RedirectResponse("http://dealer.example/.well-known/agent-card.json", status_code=302)
        return JSONResponse(fake.card())

    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=Starlette(routes=[Route("/.well-known/agent-card.json", downgrade)]))
    )
    with pytest.raises(DiscoveryError, match="redirects from HTTPS"):
        await AapClient.discover("https://dealer.example", http=http)


def test_the_client_loads_nothing_from_the_dealer_side():
    import subprocess
    import sys

    code = "import sys, aap.client; print(' '.join(sorted(m for m in sys.modules if m.startswith('aap'))))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    # Besides its own modules: the package, the skill catalog and the foundation's paths,
    # protocol constants, loopback rule, JSON Pointer, backoff and card signatures (none of which
    # imports anything of the dealer).
    foundation = {"aap", "aap.skills", "aap.skills.catalog", "aap.paths", "aap.protocols", "aap.loopback"}
    foundation |= {"aap.cardsign"}
    foundation |= {"aap.util", "aap.util.pointer", "aap.util.backoff"}
    assert loaded - foundation == {m for m in loaded if m.startswith("aap.client")}
