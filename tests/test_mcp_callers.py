"""Who calls /mcp: anonymous reads and leads, optional Bearer tokens that scope lead
idempotency, refused tokens, and the per-caller rate limit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from aap.bindings.mcp.auth import BearerAuth
from aap.config.model import RateLimit
from aap.spec import validate
from factories import live_dealer_fixture
from mcp_helpers import MODERN, Dealer, lead_request, live_dealer, modern_call


@dataclass(frozen=True)
class Identity:
    caller_id: str
    client_id: str | None


SEEN: list[tuple[str, str]] = []


def verify(authorization: str, resource_url: str) -> Identity | None:
    """Stands in for the Poppy issuer's verifier (tests/test_poppy_mcp.py): two known tokens, one broken."""
    SEEN.append((authorization, resource_url))
    if authorization == "Bearer token-a":
        return Identity("poppy:agent-a-user-1", "https://agent-a.example/client")
    if authorization == "Bearer token-b":
        return Identity("poppy:agent-b-user-2", "https://agent-b.example/client")
    if authorization == "Bearer crash":
        raise RuntimeError("database is down")
    return None


dealer = live_dealer_fixture("mcp-callers", verifier=verify)


def call(dealer: Dealer, name: str, arguments: dict[str, Any], token: str | None = None) -> httpx.Response:
    body, headers = modern_call("tools/call", {"name": name, "arguments": arguments})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(dealer.mcp_url, json=body, headers=headers, timeout=30)


def lead(dealer: Dealer, request: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    response = call(dealer, "aap_lead_submit", request, token)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]["data"]


def test_reads_and_protocol_calls_need_no_token(dealer: Dealer) -> None:
    response = call(dealer, "aap_dealer_information", {"type": "dealer.information.request"})
    assert response.json()["result"]["isError"] is False
    body, headers = modern_call("tools/list")
    assert httpx.post(dealer.mcp_url, json=body, headers=headers).status_code == 200


@pytest.mark.parametrize("authorization", ["Bearer unknown", "Bearer", "DPoP token-a", "Basic dXNlcjpwYXNz"])
def test_a_token_that_does_not_verify_is_refused_with_401(dealer: Dealer, authorization: str) -> None:
    body, headers = modern_call("tools/list")
    response = httpx.post(dealer.mcp_url, json=body, headers={**headers, "Authorization": authorization})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{dealer.settings.url("/.well-known/oauth-protected-resource/mcp")}"' in challenge
    assert response.headers["cache-control"] == "no-store"
    assert response.json()["error"] == "invalid_token"


def test_the_verifier_gets_the_exact_mcp_url_as_resource(dealer: Dealer) -> None:
    SEEN.clear()
    call(dealer, "aap_dealer_information", {"type": "dealer.information.request"}, "token-a")
    assert SEEN == [("Bearer token-a", dealer.settings.url("/mcp"))]


def test_a_broken_verifier_is_a_retryable_503_without_detail(dealer: Dealer) -> None:
    response = call(dealer, "aap_dealer_information", {"type": "dealer.information.request"}, "crash")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "database" not in response.text
    assert response.json()["error"]["code"] == -32603


def test_verified_identity_scopes_lead_idempotency(dealer: Dealer) -> None:
    vehicle = next(v for v in dealer.listings if v.get("vin"))
    request = lead_request(vehicle, "shared-key-" + uuid.uuid4().hex)
    anonymous = lead(dealer, request)
    as_a = lead(dealer, request, "token-a")
    as_a_again = lead(dealer, request, "token-a")
    as_b = lead(dealer, request, "token-b")
    assert len({anonymous["lead_id"], as_a["lead_id"], as_b["lead_id"]}) == 3  # three callers, three leads
    assert not as_a.get("replayed", False) and not as_b.get("replayed", False)
    assert as_a_again["replayed"] is True and as_a_again["lead_id"] == as_a["lead_id"]
    assert lead(dealer, request)["lead_id"] == anonymous["lead_id"]


async def test_official_client_with_a_bearer_token(dealer: Dealer) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer token-b"}) as http:
        async with Client(streamable_http_client(dealer.mcp_url, http_client=http), mode=MODERN) as client:
            result = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
    assert result.is_error is False


@pytest.fixture
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dealer]:
    rule = RateLimit(enabled=True, per_minute=1, burst=2)
    with live_dealer(tmp_path_factory.mktemp("mcp-limited"), count=5, rate_limit=rule) as live:
        yield live


@pytest.mark.slow
def test_rate_limited_calls_are_is_error_results_with_retry_after(limited: Dealer) -> None:
    info = {"type": "dealer.information.request"}
    for _ in range(2):
        assert call(limited, "aap_dealer_information", info).json()["result"]["isError"] is False
    result = call(limited, "aap_dealer_information", info).json()["result"]
    assert result["isError"] is True
    error = result["structuredContent"]
    assert validate(error, "error") == []
    assert error["code"] == "RATE_LIMITED" and error["retryable"] is True
    assert error["details"]["retry_after_ms"] > 0
    # protocol calls run no skill and take no token
    body, headers = modern_call("tools/list")
    assert httpx.post(limited.mcp_url, json=body, headers=headers).status_code == 200


async def test_without_a_verifier_no_token_is_valid() -> None:
    auth = BearerAuth("https://dealer.example/mcp", "https://dealer.example/meta", verifier=None)
    assert await auth.verify("Bearer anything") is None
    challenge = auth.challenge()
    assert challenge.status_code == 401
    # no issuer publishes metadata for this endpoint: the challenge names none (RFC 9728 §5.1)
    assert "resource_metadata" not in challenge.headers["www-authenticate"]
