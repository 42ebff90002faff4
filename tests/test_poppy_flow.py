"""The reference personal agent walks the whole publication over real HTTPS on loopback:
discovery → guest token → every API operation → feedback → revocation."""

from __future__ import annotations

import copy
import secrets

import httpx

from aap.spec import validate
from poppy_client import PoppyClient
from poppy_env import (  # noqa: F401
    TEST_POPPY,
    PoppyDeployment,
    agent_host,
    client,
    dealer,
    lead_request,
    personal_agent,
    poppy_ca,
    session_client,
)

FORBIDDEN_IN_GUEST_RESPONSE = (
    "scope",
    "refresh_token",
    "refresh_token_expires_in",
    "issued_token_type",
    "session_id",
    "signed_in",
)


def assert_api_response(response: httpx.Response, schema: str) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert validate(body, schema) == [], body
    return body


def test_reference_client_walks_discovery_token_every_operation_and_feedback(client: PoppyClient, dealer):
    # 1. discovery
    poppy = client.poppy
    assert validate(poppy, "poppy") == []
    assert poppy["protocol_version"] == "0.3"
    assert poppy["organization"]["domain"] == "localhost"
    assert [api["type"] for api in poppy["apis"]] == ["openapi", "mcp"]
    metadata = client.issuer_metadata
    assert validate(metadata, "poppy-oauth-metadata") == []
    assert metadata["issuer"] == poppy["auth"]["issuer"] == dealer.url
    assert "https://localhost" in metadata["protected_resources"]
    assert client.openapi["openapi"] == "3.1.0"

    # 2. a guest Session token (JWT bearer grant, private_key_jwt, DPoP)
    response = client.token_request()
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    token = response.json()
    assert validate(token, "poppy-guest-token-response") == []
    assert token["token_type"] == "DPoP" and token["expires_in"] == TEST_POPPY.access_token_ttl
    assert not set(FORBIDDEN_IN_GUEST_RESPONSE) & set(token)
    client.token = token["access_token"]

    # 3. every operation of the OpenAPI document
    operation_ids = {item["post"]["operationId"] for item in client.openapi["paths"].values()}
    assert operation_ids == {
        "dealerInformation",
        "inventoryFacets",
        "inventorySearch",
        "inventoryVehicle",
        "leadSubmit",
    }
    info = assert_api_response(
        client.call("dealerInformation", {"type": "dealer.information.request"}), "dealer-information-response"
    )
    assert info["type"] == "dealer.information.response"
    facets = assert_api_response(
        client.call("inventoryFacets", {"type": "inventory.facets.request"}), "inventory-facets-response"
    )
    assert facets["type"] == "inventory.facets.response"
    search = assert_api_response(
        client.call("inventorySearch", {"type": "inventory.search.request", "pagination": {"limit": 3}}),
        "inventory-search-response",
    )
    listings = search["data"]["vehicles"]
    assert 1 <= len(listings) <= 3
    vin = next(item["vin"] for item in listings if item.get("vin"))
    vehicle = assert_api_response(
        client.call("inventoryVehicle", {"type": "inventory.vehicle.request", "vin": vin}), "vehicle-detail-response"
    )
    assert vehicle["type"] == "inventory.vehicle.response"

    lead_body = lead_request(vin, "poppy-walk-" + secrets.token_hex(8))
    lead = assert_api_response(client.call("leadSubmit", lead_body), "lead-submit-response")
    assert lead["data"].get("replayed") in (None, False)
    again = assert_api_response(client.call("leadSubmit", lead_body), "lead-submit-response")
    assert again["data"]["replayed"] is True
    assert again["data"]["lead_id"] == lead["data"]["lead_id"]

    # 4. feedback: unknown kinds accepted; an excluded task gets its alternative
    assert (
        client.feedback(
            {
                "kind": "missing",
                "task": "trade-in appraisal",
                "description": "The user wanted an instant trade-in offer.",
            }
        ).status_code
        == 202
    )
    assert (
        client.feedback(
            {"kind": "something-new", "task": "trade-in appraisal", "description": "A future kind."}
        ).status_code
        == 202
    )
    alternative = client.feedback(
        {"kind": "missing", "task": "Financing  Pre-Approval", "description": "The user asked to be pre-approved."}
    )
    assert alternative.status_code == 200
    assert validate(alternative.json(), "poppy-alternative") == []
    assert alternative.json() == TEST_POPPY.excluded_tasks[0].alternative
    stored = dealer.ctx.store.list_feedback()
    mine = [row for row in stored if row["client_id"] == client.agent.client_id]
    assert {row["kind"] for row in mine} == {"missing", "something-new"}
    assert all(row["sub"] == client.user_id for row in mine)

    # 5. revocation: 200 {} and the token stops working at once
    revoked = client.revoke(client.token)
    assert revoked.status_code == 200 and revoked.json() == {}
    after = client.call("dealerInformation", {"type": "dealer.information.request"})
    assert after.status_code == 401
    assert after.json()["error"] == "invalid_token"


def test_lead_idempotency_is_scoped_to_the_verified_user(dealer, agent_host, poppy_ca):
    """Same idempotency key from two User IDs: two leads; the caller identity is (client, User ID)."""
    from poppy_client import PersonalAgent

    agent = PersonalAgent(agent_host, name="idem-agent")
    first = PoppyClient(agent, dealer.url, poppy_ca.context())
    second = PoppyClient(agent, dealer.url, poppy_ca.context())
    try:
        for c in (first, second):
            c.discover()
            c.start_session()
        body = lead_request(None, "shared-key-" + secrets.token_hex(6))
        a = assert_api_response(first.call("leadSubmit", body), "lead-submit-response")
        b = assert_api_response(second.call("leadSubmit", body), "lead-submit-response")
        assert a["data"]["lead_id"] != b["data"]["lead_id"]
        assert b["data"].get("replayed") in (None, False)
        changed = copy.deepcopy(body)
        changed["customer"]["last_name"] = "Other"
        conflict = first.call("leadSubmit", changed)
        assert conflict.status_code == 409
        assert validate(conflict.json(), "error") == []
        assert conflict.json()["code"] == "IDEMPOTENCY_CONFLICT"
    finally:
        first.close()
        second.close()


def test_skill_failures_are_aap_errors_with_http_statuses(session_client: PoppyClient):
    missing = session_client.call("inventoryVehicle", {"type": "inventory.vehicle.request", "vin": "1HGCY2F57RA000001"})
    assert missing.status_code == 404
    assert validate(missing.json(), "error") == []
    assert missing.json()["code"] == "VEHICLE_NOT_FOUND"
    invalid = session_client.call("inventorySearch", {"type": "inventory.search.request", "pagination": {"limit": 0}})
    assert invalid.status_code == 400
    assert invalid.json()["type"] == "aap.error"
    wrong_type = session_client.call("inventorySearch", {"type": "dealer.information.request"})
    assert wrong_type.status_code == 400
    assert wrong_type.json()["code"] == "SCHEMA_VALIDATION_FAILED"
    url = session_client.operation_url("inventorySearch")
    not_json = session_client.http.post(
        url, content=b"{", headers={**session_client.auth_headers("POST", url), "Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and not_json.json()["code"] == "SCHEMA_VALIDATION_FAILED"


def test_rate_limited_calls_get_429_with_retry_after(tmp_path, poppy_ca, agent_host):
    from aap.config.model import RateLimit
    from poppy_client import PersonalAgent

    limited = PoppyDeployment(tmp_path, poppy_ca, inventory=0, rate_limit=RateLimit(per_minute=1, burst=1))
    c = PoppyClient(PersonalAgent(agent_host, name="rate-agent"), limited.url, poppy_ca.context())
    try:
        c.discover()
        c.start_session()
        assert c.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
        limited_response = c.call("dealerInformation", {"type": "dealer.information.request"})
        assert limited_response.status_code == 429
        assert int(limited_response.headers["retry-after"]) >= 1
        assert validate(limited_response.json(), "error") == []
        assert limited_response.json()["code"] == "RATE_LIMITED"
        # The issuer counts unauthenticated traffic per network address: OAuth shape, 429.
        token = c.token_request()
        assert token.status_code == 429 and token.json()["error"] == "rate_limited"
        assert int(token.headers["retry-after"]) >= 1
    finally:
        c.close()
        limited.stop()


def test_a_renewed_session_invalidates_older_tokens_and_keys_identify_sessions(client: PoppyClient):
    first = client.start_session()["access_token"]
    second = client.start_session()["access_token"]
    assert first != second
    old = client.call("dealerInformation", {"type": "dealer.information.request"}, token=first)
    assert old.status_code == 401 and old.json()["error"] == "invalid_token"
    assert client.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    # The same Session key for another User ID is refused: one key pair per User ID.
    form = client.grant_form(assertion=client.agent.session_assertion(client.issuer, "usr_someone_else"))
    refused = client.token_request(form=form)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"


def test_workers_share_tokens_replay_caches_and_keys_through_the_database(tmp_path, poppy_ca, agent_host):
    """Two app instances on one database (two workers, or one after a restart) agree on everything.

    Worker B listens elsewhere but has A's public URL, as behind a load balancer: ``htu``
    is judged against the public URL, never the address a request arrived on.
    """
    from poppy_client import PersonalAgent

    database = str(tmp_path / "shared.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = PoppyDeployment(tmp_path / "a", poppy_ca, inventory=0, database=database)
    b = PoppyDeployment(tmp_path / "b", poppy_ca, inventory=0, database=database, public_url=a.url)
    c = PoppyClient(PersonalAgent(agent_host, name="worker-agent"), a.url, poppy_ca.context())
    try:
        c.discover()
        c.start_session()
        assert c.http.get(f"{a.url}/oauth/jwks.json").json() == c.http.get(f"{b.listen_url}/oauth/jwks.json").json()
        url = c.operation_url("dealerInformation")
        at_b = url.replace(a.url, b.listen_url)
        headers = c.auth_headers("POST", url)
        assert c.http.post(url, json={"type": "dealer.information.request"}, headers=headers).status_code == 200
        replay = c.http.post(at_b, json={"type": "dealer.information.request"}, headers=headers)
        assert replay.status_code == 401 and replay.json()["error"] == "invalid_dpop_proof"
        fresh = c.http.post(at_b, json={"type": "dealer.information.request"}, headers=c.auth_headers("POST", url))
        assert fresh.status_code == 200
        a.stop()  # "restart": only B is left
        revoked = c.http.post(
            at_b.replace("/poppy/v1/dealer.information", "/oauth/revoke"),
            data={
                "token": c.token,
                "client_id": c.agent.client_id,
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": c.agent.client_assertion(c.issuer),
            },
        )
        assert revoked.status_code == 200
        after = c.http.post(at_b, json={"type": "dealer.information.request"}, headers=c.auth_headers("POST", url))
        assert after.status_code == 401 and after.json()["error"] == "invalid_token"
    finally:
        c.close()
        b.stop()


def test_an_idle_session_ends_and_its_key_starts_a_fresh_one(dealer, client: PoppyClient):
    import sqlite3

    client.start_session()
    assert client.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    idle = dealer.poppy_settings.session_idle_ttl
    with sqlite3.connect(dealer.database_path) as conn:  # the Session was last used long ago
        conn.execute(
            "UPDATE poppy_sessions SET last_used_at = last_used_at - ? WHERE client_id = ?",
            (idle + 1, client.agent.client_id),
        )
    ended = client.call("dealerInformation", {"type": "dealer.information.request"})
    assert ended.status_code == 401 and ended.json()["error"] == "invalid_token"
    client.start_session()  # the same key, a new Session
    assert client.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    with sqlite3.connect(dealer.database_path) as conn:
        sessions = conn.execute(
            "SELECT COUNT(*) FROM poppy_sessions WHERE client_id = ?", (client.agent.client_id,)
        ).fetchone()[0]
    assert sessions == 1
