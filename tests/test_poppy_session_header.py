"""The AAP 3.2 ``Poppy-Session`` header (seed 003) on the native API: accepted when the
delegation chain holds, refused — with nothing written — when any link is bad."""

from __future__ import annotations

import secrets
import time

from joserfc.jwk import ECKey

from aap.spec import validate
from poppy_client import PoppyClient, b64url, new_jti
from poppy_env import (  # noqa: F401
    agent_host,
    assert_api_refused,
    assert_refused,
    client,
    dealer,
    lead_request,
    personal_agent,
    poppy_ca,
)

INFO = {"type": "dealer.information.request"}


def session_headers(
    client: PoppyClient,
    url: str,
    *,
    delegated: ECKey | None = None,
    delegation: str | None = None,
    sid: str | None = None,
    **claims,
) -> dict[str, str]:
    delegated = delegated or client.session_key
    delegation = delegation or client.agent.delegation(delegated)
    jwt = client.agent.poppy_session(
        delegated,
        delegation,
        issuer=client.issuer,
        user_id=client.user_id,
        sid=sid or "sid_" + b64url(secrets.token_bytes(8)),
        method="POST",
        url=url,
        **claims,
    )
    return {"Poppy-Session": jwt}


def decoded(jwt: str) -> dict:
    import base64
    import json

    def part(segment: str) -> dict:
        return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))

    header, payload, _ = jwt.split(".")
    return {"header": part(header), "payload": part(payload)}


def test_signed_out_call_with_a_poppy_session_header(dealer, client: PoppyClient):
    url = client.operation_url("dealerInformation")
    headers = session_headers(client, url)
    assert validate(decoded(headers["Poppy-Session"]), "poppy-session-jwt-v3.2") == []
    response = client.http.post(url, json=INFO, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["type"] == "dealer.information.response"
    # The same JWT again is a replay.
    assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=headers), "invalid_token")


def test_poppy_session_and_dpop_token_share_the_caller_identity(client: PoppyClient):
    """Lead idempotency keys on (client, User ID), whichever credential carried the call."""
    client.start_session()
    lead = lead_request(None, "ps-" + secrets.token_hex(6))
    first = client.call("leadSubmit", lead)
    assert first.status_code == 200, first.text
    url = client.operation_url("leadSubmit")
    again = client.http.post(url, json=lead, headers=session_headers(client, url))
    assert again.status_code == 200, again.text
    assert again.json()["data"]["replayed"] is True
    assert again.json()["data"]["lead_id"] == first.json()["data"]["lead_id"]


def test_poppy_session_with_an_access_token_bound_to_the_delegated_key(dealer, client: PoppyClient):
    client.start_session()  # the token is bound to client.session_key, which is also the delegated key
    url = client.operation_url("dealerInformation")
    headers = {**session_headers(client, url, access_token=client.token), "Authorization": f"DPoP {client.token}"}
    assert client.http.post(url, json=INFO, headers=headers).status_code == 200
    # ath is required when a token is sent, and must be its hash.
    missing = {**session_headers(client, url), "Authorization": f"DPoP {client.token}"}
    assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=missing), "invalid_token")
    # A token bound to another key does not go with this Poppy-Session.
    other = ECKey.generate_key("P-256", private=True)
    foreign = {
        **session_headers(client, url, delegated=other, access_token=client.token),
        "Authorization": f"DPoP {client.token}",
    }
    assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=foreign), "invalid_token")
    # ath without a token, and a DPoP proof mixed in, are refused.
    stray = session_headers(client, url, ath=b64url(b"1" * 32))
    assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=stray), "invalid_token")
    mixed = {**session_headers(client, url), "DPoP": client.agent.dpop_proof(client.session_key, "POST", url)}
    assert_refused(dealer, lambda: client.http.post(url, json=INFO, headers=mixed), 400, "invalid_request")


def test_poppy_session_with_a_bad_delegation(dealer, client: PoppyClient):
    url = client.operation_url("dealerInformation")
    agent = client.agent
    delegated = client.session_key
    stranger = ECKey.generate_key("P-256", private=True)
    now = int(time.time())
    bad_delegations = {
        "signed by an unpublished key": agent.delegation(delegated, key=stranger),
        "vouches for another key": agent.delegation(stranger),
        "expired": agent.delegation(delegated, iat=now - 7200, exp=now - 3600),
        "not yet valid": agent.delegation(delegated, iat=now + 3600, exp=now + 7200),
        "lifetime too long": agent.delegation(delegated, lifetime=30 * 86400),
        "issued by another client": agent.delegation(delegated, iss="https://other.example/agent.json"),
        "for another user": agent.delegation(delegated, sub="usr_someone_else"),
        "for another audience": agent.delegation(delegated, aud="https://other-dealer.example"),
        "without cnf": agent.delegation(delegated, cnf={"kid": "x"}),
        "not a JWS": "a.b.c",
    }
    for why, delegation in bad_delegations.items():
        headers = session_headers(client, url, delegation=delegation)
        response = assert_api_refused(
            dealer, lambda: client.http.post(url, json=INFO, headers=headers), "invalid_token"
        )
        assert "poppy_dlg" in response.json()["error_description"] or "kid" in response.json()["error_description"], why


def test_poppy_session_jwt_rules(dealer, client: PoppyClient):
    url = client.operation_url("dealerInformation")
    agent = client.agent
    delegated = client.session_key
    delegation = agent.delegation(delegated)
    other = client.operation_url("inventoryFacets")
    cases = [
        session_headers(client, url, aud="https://other-dealer.example"),
        session_headers(client, url, htu=other),
        session_headers(client, url, htm="PUT"),
        session_headers(client, url, iat=int(time.time()) - 600),
        session_headers(client, url, sid="not valid!"),
        session_headers(client, url, sub=agent.client_id),
        session_headers(client, url, jti=""),
    ]
    # Signed by another key than the one the kid names.
    stranger = ECKey.generate_key("P-256", private=True)
    forged = agent.poppy_session(
        stranger,
        delegation,
        issuer=client.issuer,
        user_id=client.user_id,
        sid="s1",
        method="POST",
        url=url,
        kid=delegated.thumbprint(),
    )
    cases.append({"Poppy-Session": forged})
    for headers in cases:
        assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=headers), "invalid_token")
    unknown_client = agent.poppy_session(
        delegated,
        delegation,
        issuer=client.issuer,
        user_id=client.user_id,
        sid="s1",
        method="POST",
        url=url,
        iss="https://10.0.0.1/agent.json",
        jti=new_jti(),
    )
    assert_api_refused(
        dealer, lambda: client.http.post(url, json=INFO, headers={"Poppy-Session": unknown_client}), "invalid_token"
    )
