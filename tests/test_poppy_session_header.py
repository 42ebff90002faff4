"""The AAP 3.2 ``Poppy-Session`` header (seed 003) on the native API: accepted when the
delegation chain holds, refused — with nothing written — when any link is bad, including the
time claims of RFC 7519 §4.1.4/§4.1.5 on the session JWT and on the delegation (with
``[poppy] clock_skew`` of leeway, docs/poppy.md)."""

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
    delegation = delegation or client.agent.delegation(delegated, sub=client.user_id)
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
    user = client.user_id
    bad_delegations = {
        "signed by an unpublished key": agent.delegation(delegated, key=stranger, sub=user),
        "vouches for another key": agent.delegation(stranger, sub=user),
        "expired": agent.delegation(delegated, iat=now - 7200, exp=now - 3600, sub=user),
        "not yet valid": agent.delegation(delegated, iat=now + 3600, exp=now + 7200, sub=user),
        "nbf in the future": agent.delegation(delegated, nbf=now + 3600, sub=user),
        "nbf not a NumericDate": agent.delegation(delegated, nbf=str(now), sub=user),
        "exp not a NumericDate": agent.delegation(delegated, exp=str(now + 60), sub=user),
        "lifetime too long": agent.delegation(delegated, lifetime=30 * 86400, sub=user),
        "issued by another client": agent.delegation(delegated, iss="https://other.example/agent.json", sub=user),
        "for another user": agent.delegation(delegated, sub="usr_someone_else"),
        "for no user (no sub)": agent.delegation(delegated),
        "for another audience": agent.delegation(delegated, aud="https://other-dealer.example", sub=user),
        "without cnf": agent.delegation(delegated, cnf={"kid": "x"}, sub=user),
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
    delegation = agent.delegation(delegated, sub=client.user_id)
    other = client.operation_url("inventoryFacets")
    now = int(time.time())
    cases = [
        session_headers(client, url, aud="https://other-dealer.example"),
        session_headers(client, url, htu=other),
        session_headers(client, url, htm="PUT"),
        session_headers(client, url, iat=now - 600),
        session_headers(client, url, sid="not valid!"),
        session_headers(client, url, sub=agent.client_id),
        session_headers(client, url, jti=""),
        # RFC 7519 §4.1.4: exp in the past (beyond the leeway), or not a NumericDate.
        session_headers(client, url, exp=now - 600),
        session_headers(client, url, exp=str(now + 60)),
        session_headers(client, url, exp=True),
        # RFC 7519 §4.1.5: nbf in the future (beyond the leeway), or not a NumericDate.
        session_headers(client, url, nbf=now + 600),
        session_headers(client, url, nbf="now"),
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


def test_poppy_session_time_claims_within_the_leeway(dealer, client: PoppyClient):
    """``exp`` and ``nbf`` are optional; when present they hold with ``clock_skew`` (30 s) of leeway."""
    url = client.operation_url("dealerInformation")
    now = int(time.time())
    for claims in ({"exp": now + 60, "nbf": now - 60}, {"exp": now - 5}, {"nbf": now + 5}, {"exp": now + 0.5}):
        response = client.http.post(url, json=INFO, headers=session_headers(client, url, **claims))
        assert response.status_code == 200, (claims, response.text)
    # The delegation's own nbf, in the past, is fine.
    delegation = client.agent.delegation(client.session_key, sub=client.user_id, nbf=now - 60)
    response = client.http.post(url, json=INFO, headers=session_headers(client, url, delegation=delegation))
    assert response.status_code == 200, response.text


def test_the_identity_key_is_not_a_delegated_key(dealer, client: PoppyClient):
    """A delegation hands another key the right to sign; naming the identity key itself (and
    signing the session JWT with it) is refused."""
    url = client.operation_url("dealerInformation")
    identity = client.agent.identity
    delegation = client.agent.delegation(identity, sub=client.user_id)
    headers = session_headers(client, url, delegated=identity, delegation=delegation)
    response = assert_api_refused(dealer, lambda: client.http.post(url, json=INFO, headers=headers), "invalid_token")
    assert "identity" in response.json()["error_description"]


def test_a_delegation_without_sub_vouches_for_no_user(dealer, client: PoppyClient):
    """Without ``sub`` the delegation would serve any User ID the session JWT names."""
    url = client.operation_url("dealerInformation")
    unbound = client.agent.delegation(client.session_key)
    for user in (client.user_id, "usr_someone_else"):
        jwt = client.agent.poppy_session(
            client.session_key,
            unbound,
            issuer=client.issuer,
            user_id=user,
            sid="s1",
            method="POST",
            url=url,
        )
        response = assert_api_refused(
            dealer, lambda jwt=jwt: client.http.post(url, json=INFO, headers={"Poppy-Session": jwt}), "invalid_token"
        )
        assert "sub" in response.json()["error_description"]
