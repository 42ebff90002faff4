"""MCP for signed-in Poppy agents, end to end over HTTPS on loopback (docs/poppy.md, "MCP for signed-in agents").

Guest Session with DPoP → RFC 8693 token exchange for the MCP URL poppy.json lists →
``lead.submit`` over MCP with the Bearer token: idempotency and rate limits follow the
signed-in caller exactly as on the native API. Every refusal is checked for its status, its
error and, at the token endpoint, for leaving the database untouched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from joserfc.jwk import ECKey

from aap.agent import DealerAgent
from aap.bindings.mcp.results import summarized
from aap.config.model import RateLimit
from aap.config.poppy import PoppySettings
from aap.gateway import Gateway
from aap.poppy.bearer import McpBearerVerifier
from aap.poppy.context import caller_identity
from aap.spec import validate
from factories import signed_in_dealer_fixture
from mcp_helpers import lead_request, modern_call
from poppy_client import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE, PoppyClient
from signed_in_env import SignedInAgent, SignedInDealer, signed_in_dealer

dealer = signed_in_dealer_fixture("poppy-mcp")


@pytest.fixture
def agent(dealer: SignedInDealer) -> SignedInAgent:
    return dealer.new_agent()


def database(dealer: SignedInDealer) -> sqlite3.Connection:
    return sqlite3.connect(dealer.settings.database_url.removeprefix("sqlite:///"))


def snapshot(dealer: SignedInDealer) -> dict[str, list[str]]:
    """Every Poppy row (rate-limit buckets count attempts on purpose and are left out)."""
    with database(dealer) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if r[0].startswith("poppy_")
        ]
        return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in tables}


def assert_token_refused(dealer: SignedInDealer, send: Callable[[], httpx.Response], status: int, error: str) -> None:
    before = snapshot(dealer)
    response = send()
    assert response.status_code == status, response.text
    assert response.json()["error"] == error
    assert response.headers["cache-control"] == "no-store"
    assert snapshot(dealer) == before, "a refused token request wrote to the database"


def assert_mcp_refused(dealer: SignedInDealer, response: httpx.Response) -> None:
    """401 with a Bearer challenge whose resource_metadata resolves to the MCP metadata."""
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == "invalid_token"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
    assert metadata_url == PoppyClient.protected_resource_metadata_url(dealer.mcp_url)
    metadata = httpx.get(metadata_url, verify=dealer.ca.context())
    assert metadata.status_code == 200 and metadata.json()["resource"] == dealer.mcp_url


def lead_data(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]["data"]


# -- discovery -----------------------------------------------------------------------------
@pytest.mark.slow
def test_poppy_json_lists_the_mcp_endpoint_and_its_metadata_resolves(
    dealer: SignedInDealer, agent: SignedInAgent
) -> None:
    poppy, metadata = agent.client.poppy, agent.client.issuer_metadata
    assert validate(poppy, "poppy") == []
    entry = agent.client.mcp_api()
    assert entry["url"] == entry["resource"] == dealer.mcp_url
    assert poppy["extensions"]["autoagentprotocol.org/aap"]["mcp"] == dealer.mcp_url  # one MCP URL everywhere
    assert validate(metadata, "poppy-oauth-metadata") == []
    assert TOKEN_EXCHANGE in metadata["grant_types_supported"]
    assert dealer.mcp_url in metadata["protected_resources"]
    response = agent.http.get(PoppyClient.protected_resource_metadata_url(dealer.mcp_url))
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    resource = response.json()
    assert validate(resource, "poppy-mcp-resource-metadata") == []
    assert resource["resource"] == dealer.mcp_url
    assert resource["authorization_servers"] == [poppy["auth"]["issuer"]]
    assert resource["bearer_methods_supported"] == ["header"]
    assert "dpop_signing_alg_values_supported" not in resource  # Bearer tokens here: no DPoP promise


def test_the_exchange_answers_a_short_lived_bearer_token(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    response = agent.client.token_request(form=agent.client.exchange_form())
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert validate(body, "poppy-token-exchange-response") == []
    assert body["token_type"] == "Bearer" and body["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert not {"refresh_token", "scope", "session_id", "signed_in"} & set(body)
    assert 0 < body["expires_in"] <= dealer.settings.poppy.mcp_token_ttl


# -- the signed-in flow ----------------------------------------------------------------------
def test_a_signed_in_lead_over_mcp_is_idempotent_per_caller(dealer: SignedInDealer) -> None:
    first_agent, second_agent = dealer.new_agent(), dealer.new_agent()
    token = first_agent.mcp_token()
    request = lead_request(dealer.available_vehicle(), "signed-in-" + uuid.uuid4().hex)
    first = lead_data(first_agent.mcp_call("aap_lead_submit", request, token))
    again = lead_data(first_agent.mcp_call("aap_lead_submit", request, token))
    assert not first.get("replayed", False)
    assert again["replayed"] is True and again["lead_id"] == first["lead_id"]
    other = lead_data(second_agent.mcp_call("aap_lead_submit", request, second_agent.mcp_token()))
    assert not other.get("replayed", False) and other["lead_id"] != first["lead_id"]
    anonymous = lead_data(first_agent.mcp_call("aap_lead_submit", request, None))
    assert anonymous["lead_id"] not in (first["lead_id"], other["lead_id"])
    # the same caller on the native API: the same idempotency scope, so the original replays
    over_api = first_agent.client.call("leadSubmit", request)
    assert over_api.status_code == 200, over_api.text
    assert over_api.json()["data"]["replayed"] is True and over_api.json()["data"]["lead_id"] == first["lead_id"]


def test_reads_and_tools_list_work_with_a_token_too(agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    response = agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, token)
    assert response.json()["result"]["isError"] is False


# -- tokens the MCP endpoint refuses ------------------------------------------------------------
def test_a_token_for_another_resource_is_refused(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    with database(dealer) as conn:
        conn.execute(
            "UPDATE poppy_tokens SET resource = ? WHERE token_type = 'Bearer' AND token_hash = ?",
            (dealer.url + "/other-mcp", _hash(token)),
        )
    assert_mcp_refused(dealer, agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, token))
    # the guest Session token is DPoP-bound and bound to no MCP resource: refused as a Bearer token
    session_token = agent.client.token
    assert_mcp_refused(
        dealer, agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, session_token)
    )


def test_an_expired_token_is_refused(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    with database(dealer) as conn:
        conn.execute("UPDATE poppy_tokens SET expires_at = ? WHERE token_hash = ?", (time.time() - 1, _hash(token)))
    assert_mcp_refused(dealer, agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, token))


def test_revoking_the_session_token_ends_its_mcp_tokens(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    info = {"type": "dealer.information.request"}
    assert agent.mcp_call("aap_dealer_information", info, token).status_code == 200
    assert agent.client.revoke(agent.client.token).status_code == 200
    assert_mcp_refused(dealer, agent.mcp_call("aap_dealer_information", info, token))


def test_a_revoked_mcp_token_is_refused_and_its_session_lives_on(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    assert agent.client.revoke(token).status_code == 200
    assert_mcp_refused(dealer, agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, token))
    assert agent.client.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    assert (
        agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, agent.mcp_token()).status_code
        == 200
    )


def test_a_renewed_session_ends_the_older_mcp_tokens(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    agent.client.start_session()  # the same key: the Session is renewed, older tokens stop working
    assert_mcp_refused(dealer, agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, token))


@pytest.mark.parametrize(
    "authorization", ["Bearer", "Bearer a b", "Basic dXNlcjpwYXNz", "DPoP {token}", "Bearer {token}x", "bearer {token}"]
)
def test_malformed_or_altered_credentials(dealer: SignedInDealer, agent: SignedInAgent, authorization: str) -> None:
    token = agent.mcp_token()
    body = {"type": "dealer.information.request"}
    header = authorization.format(token=token)
    payload, headers = modern_call("tools/call", {"name": "aap_dealer_information", "arguments": body})
    answered = agent.http.post(dealer.mcp_url, json=payload, headers={**headers, "Authorization": header})
    if authorization == "bearer {token}":  # the scheme is case-insensitive (RFC 9110 §11.1)
        assert answered.status_code == 200
    else:
        assert_mcp_refused(dealer, answered)


def test_a_bearer_token_on_the_poppy_api_is_refused(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    url = agent.client.operation_url("dealerInformation")
    body = {"type": "dealer.information.request"}
    as_bearer = agent.http.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    assert as_bearer.status_code == 401 and as_bearer.json()["error"] == "invalid_token"
    assert as_bearer.headers["www-authenticate"].startswith("DPoP ")
    as_dpop = agent.http.post(url, json=body, headers=agent.client.auth_headers("POST", url, token=token))
    assert as_dpop.status_code == 401 and as_dpop.json()["error"] == "invalid_token"


# -- token-exchange refusals (each leaves the database as it was) -----------------------------------
def test_exchange_refusals(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    client = agent.client
    endpoint = client.issuer_metadata["token_endpoint"]
    other = dealer.new_agent()
    stranger_key = ECKey.generate_key("P-256", private=True)
    bearer = agent.mcp_token()
    cases: list[tuple[str, Callable[[], httpx.Response], int, str]] = [
        (
            "another resource",
            lambda: client.token_request(form=client.exchange_form(resource=dealer.url)),
            400,
            "invalid_target",
        ),
        (
            "the API as resource",
            lambda: client.token_request(form=client.exchange_form(resource=client.operation_url("dealerInformation"))),
            400,
            "invalid_target",
        ),
        ("no resource", lambda: client.token_request(form=client.exchange_form(resource=None)), 400, "invalid_target"),
        (
            "MCP URL with a slash",
            lambda: client.token_request(form=client.exchange_form(resource=dealer.mcp_url + "/")),
            400,
            "invalid_target",
        ),
        (
            "another audience",
            lambda: client.token_request(form=client.exchange_form(audience="https://elsewhere.example/mcp")),
            400,
            "invalid_target",
        ),
        ("a scope", lambda: client.token_request(form=client.exchange_form(scope="leads")), 400, "invalid_scope"),
        ("session_id", lambda: client.token_request(form=client.exchange_form(session_id="s")), 400, "invalid_request"),
        (
            "wrong subject type",
            lambda: client.token_request(
                form=client.exchange_form(subject_token_type="urn:ietf:params:oauth:token-type:jwt")
            ),
            400,
            "invalid_request",
        ),
        (
            "an actor token",
            lambda: client.token_request(form=client.exchange_form(actor_token="x")),
            400,
            "invalid_request",
        ),
        (
            "unknown subject",
            lambda: client.token_request(form=client.exchange_form(subject_token="nope")),
            400,
            "invalid_request",
        ),
        (
            "a Bearer token as subject",
            lambda: client.token_request(form=client.exchange_form(subject_token=bearer)),
            400,
            "invalid_request",
        ),
        (
            "another client's subject",
            lambda: client.token_request(form=client.exchange_form(subject_token=other.client.token)),
            400,
            "invalid_request",
        ),
        (
            "no DPoP proof",
            lambda: client.token_request(form=client.exchange_form(), proof=None),
            400,
            "invalid_dpop_proof",
        ),
        (
            "a proof by another key",
            lambda: client.token_request(
                form=client.exchange_form(), proof=client.agent.dpop_proof(stranger_key, "POST", endpoint)
            ),
            400,
            "invalid_dpop_proof",
        ),
        (
            "a proof with ath",
            lambda: client.token_request(
                form=client.exchange_form(),
                proof=client.agent.dpop_proof(client.session_key, "POST", endpoint, access_token=client.token),
            ),
            400,
            "invalid_dpop_proof",
        ),
        (
            "no client assertion",
            lambda: client.token_request(form=client.exchange_form(client_assertion=None)),
            401,
            "invalid_client",
        ),
    ]
    for label, send, status, error in cases:
        try:
            assert_token_refused(dealer, send, status, error)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc


def test_a_replayed_exchange_proof_is_refused(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    client = agent.client
    proof = client.agent.dpop_proof(client.session_key, "POST", client.issuer_metadata["token_endpoint"])
    assert client.token_request(form=client.exchange_form(), proof=proof).status_code == 200
    assert_token_refused(
        dealer, lambda: client.token_request(form=client.exchange_form(), proof=proof), 400, "invalid_dpop_proof"
    )


def test_a_revoked_subject_cannot_be_exchanged(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    client = agent.client
    assert client.revoke(client.token).status_code == 200
    assert_token_refused(dealer, lambda: client.token_request(form=client.exchange_form()), 400, "invalid_request")


def test_the_guest_grant_gives_no_token_for_the_mcp_resource(dealer: SignedInDealer) -> None:
    agent = dealer.new_agent(session=False)
    form = agent.client.grant_form(resource=dealer.mcp_url)
    assert_token_refused(dealer, lambda: agent.client.token_request(form=form), 400, "invalid_target")


# -- the same numbers and limits as on the native API -----------------------------------------
def test_integers_beyond_64_bits_answer_as_over_the_poppy_api(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    search = {"type": "inventory.search.request", "filters": {"price_max": 424242}, "pagination": {"limit": 2}}
    literal = b"1" + b"0" * 30
    url = agent.client.operation_url("inventorySearch")
    over_api = agent.http.post(
        url,
        content=orjson.dumps(search).replace(b"424242", literal),
        headers={**agent.client.auth_headers("POST", url), "Content-Type": "application/json"},
    )
    body, headers = modern_call("tools/call", {"name": "aap_inventory_search", "arguments": search})
    over_mcp = agent.http.post(
        dealer.mcp_url,
        content=orjson.dumps(body).replace(b"424242", literal),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert over_api.status_code == 200, over_api.text
    by_mcp, by_api = over_mcp.json()["result"]["structuredContent"], over_api.json()
    # the continuation cursor carries its issue second: compared by presence only
    assert bool(by_mcp["data"].pop("next_cursor", None)) == bool(by_api["data"].pop("next_cursor", None))
    assert by_mcp == summarized(by_api)  # MCP: search listings as summaries
    assert math.isclose(by_api["data"]["applied_filters"]["price_max"], 1e30)


@pytest.mark.slow
def test_rate_limits_are_per_signed_in_caller_across_mcp_and_the_api(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    rule = RateLimit(enabled=True, per_minute=1, burst=2)
    with signed_in_dealer(tmp_path_factory.mktemp("poppy-mcp-limited"), inventory=5, rate_limit=rule) as live:
        agent = live.new_agent()  # the issuer's per-network bucket: the grant, then the exchange
        token = agent.mcp_token()
        info = {"type": "dealer.information.request"}
        assert agent.client.call("dealerInformation", info).status_code == 200  # the caller's bucket: 1
        assert agent.mcp_call("aap_dealer_information", info, token).json()["result"]["isError"] is False  # 2
        limited = agent.mcp_call("aap_dealer_information", info, token)
        error = limited.json()["result"]["structuredContent"]
        assert error["code"] == "RATE_LIMITED"
        assert int(limited.headers["retry-after"]) == math.ceil(error["details"]["retry_after_ms"] / 1000)
        assert agent.client.call("dealerInformation", info).status_code == 429  # the same bucket on the API
        anonymous = agent.mcp_call("aap_dealer_information", info, None)  # another caller: its own bucket
        assert anonymous.json()["result"]["isError"] is False


# -- the verifier, unit by unit (real token records) ------------------------------------------------
def verifier_for(dealer: SignedInDealer, **poppy: Any) -> McpBearerVerifier:
    settings = dataclasses.replace(dealer.settings.poppy, **poppy)
    return McpBearerVerifier(Gateway.of(DealerAgent(dealer.settings, dealer.stores)), settings)


def test_the_verifier_names_the_caller_the_native_api_names(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    caller = verifier_for(dealer)(f"Bearer {token}", dealer.mcp_url)
    assert caller is not None
    assert caller.caller_id == caller_identity(agent.client.agent.client_id, agent.client.user_id)
    assert caller.client_id == agent.client.agent.client_id


def test_the_verifier_refuses(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    verify = verifier_for(dealer)
    assert verify(f"Bearer {token}", dealer.url + "/mcp/") is None  # the exact URL only
    assert verify(f"DPoP {token}", dealer.mcp_url) is None
    assert verify(f"Bearer {agent.client.token}", dealer.mcp_url) is None  # a DPoP Session token
    assert verify("Bearer " + "A" * 5000, dealer.mcp_url) is None
    assert verify("Bearer ???", dealer.mcp_url) is None
    blocked = verifier_for(dealer, blocked_clients=(agent.client.agent.client_id,))
    assert blocked(f"Bearer {token}", dealer.mcp_url) is None  # client policy applies at once


def test_mcp_use_keeps_the_session_alive(dealer: SignedInDealer, agent: SignedInAgent) -> None:
    token = agent.mcp_token()
    with database(dealer) as conn:
        conn.execute(
            "UPDATE poppy_sessions SET last_used_at = ? WHERE id = "
            "(SELECT session_id FROM poppy_tokens WHERE token_hash = ?)",
            (time.time() - 3600, _hash(token)),
        )
    assert verifier_for(dealer)(f"Bearer {token}", dealer.mcp_url) is not None
    with database(dealer) as conn:
        (last_used,) = conn.execute(
            "SELECT s.last_used_at FROM poppy_sessions s JOIN poppy_tokens t "
            "ON t.session_id = s.id WHERE t.token_hash = ?",
            (_hash(token),),
        ).fetchone()
    assert time.time() - last_used < 600


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- switched off -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_without_mcp_tokens_nothing_is_promised(tmp_path_factory: pytest.TempPathFactory) -> None:
    poppy = PoppySettings(allow_loopback_clients=True, mcp_enabled=False)
    with signed_in_dealer(tmp_path_factory.mktemp("poppy-no-mcp"), inventory=5, poppy=poppy) as live:
        agent = live.new_agent()
        assert [api["type"] for api in agent.client.poppy["apis"]] == ["openapi"]
        assert TOKEN_EXCHANGE not in agent.client.issuer_metadata["grant_types_supported"]
        assert live.mcp_url not in agent.client.issuer_metadata["protected_resources"]
        metadata_url = PoppyClient.protected_resource_metadata_url(live.mcp_url)
        assert agent.http.get(metadata_url).status_code == 404
        form = agent.client.exchange_form(resource=live.mcp_url)
        refused = agent.client.token_request(form=form)
        assert refused.status_code == 400 and refused.json()["error"] == "unsupported_grant_type"
        denied = agent.mcp_call("aap_dealer_information", {"type": "dealer.information.request"}, agent.client.token)
        assert denied.status_code == 401
        assert "resource_metadata" not in denied.headers["www-authenticate"]  # nothing published to point at
