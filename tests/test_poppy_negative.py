"""One hostile request per rule: each gets the right OAuth/DPoP error, and the database
(Sessions, tokens, replay caches, feedback, leads — every table) is left exactly as it was."""

from __future__ import annotations

import time

import httpx
import pytest
from joserfc.jwk import ECKey

from poppy_client import PersonalAgent, PoppyClient, b64url, new_jti, public_jwk
from poppy_env import (  # noqa: F401
    agent_host,
    assert_api_refused,
    assert_refused,
    client,
    dealer,
    personal_agent,
    poppy_ca,
    session_client,
)

INFO = {"type": "dealer.information.request"}


# -- token endpoint: assertions ------------------------------------------------------------


def test_client_assertion_with_wrong_aud_is_invalid_client(dealer, client: PoppyClient):
    token_endpoint = client.issuer_metadata["token_endpoint"]
    for aud in (token_endpoint, client.issuer + "/", [client.issuer]):
        form = client.grant_form(client_assertion=client.agent.client_assertion(client.issuer, aud=aud))
        assert_refused(dealer, lambda: client.token_request(form=form), 401, "invalid_client")


def test_session_assertion_with_wrong_aud_is_invalid_grant(dealer, client: PoppyClient):
    form = client.grant_form(
        assertion=client.agent.session_assertion(
            client.issuer, client.user_id, aud=client.issuer_metadata["token_endpoint"]
        )
    )
    assert_refused(dealer, lambda: client.token_request(form=form), 400, "invalid_grant")


def test_expired_and_over_long_assertions_are_refused(dealer, client: PoppyClient):
    issuer, user = client.issuer, client.user_id
    expired = client.grant_form(assertion=client.agent.session_assertion(issuer, user, at=time.time() - 400))
    assert_refused(dealer, lambda: client.token_request(form=expired), 400, "invalid_grant")
    too_long = client.grant_form(assertion=client.agent.session_assertion(issuer, user, lifetime=301))
    assert_refused(dealer, lambda: client.token_request(form=too_long), 400, "invalid_grant")
    future = client.grant_form(assertion=client.agent.session_assertion(issuer, user, at=time.time() + 120))
    assert_refused(dealer, lambda: client.token_request(form=future), 400, "invalid_grant")
    client_expired = client.grant_form(client_assertion=client.agent.client_assertion(issuer, at=time.time() - 400))
    assert_refused(dealer, lambda: client.token_request(form=client_expired), 401, "invalid_client")
    client_long = client.grant_form(client_assertion=client.agent.client_assertion(issuer, lifetime=301))
    assert_refused(dealer, lambda: client.token_request(form=client_long), 401, "invalid_client")
    # Pinned: a lifetime of exactly 300 s is accepted; string or boolean dates and short jtis are not.
    exact = client.grant_form(assertion=client.agent.session_assertion(issuer, user, lifetime=300))
    assert client.token_request(form=exact).status_code == 200
    now = int(time.time())
    for bad in ({"iat": str(now)}, {"exp": True}, {"jti": "short-jti"}):
        form = client.grant_form(assertion=client.agent.session_assertion(issuer, user, **bad))
        assert_refused(dealer, lambda: client.token_request(form=form), 400, "invalid_grant")


def test_replayed_assertion_jtis_are_refused(dealer, client: PoppyClient):
    form = client.grant_form()
    assert client.token_request(form=form).status_code == 200
    # The whole request again: the client assertion is the first replay found.
    assert_refused(dealer, lambda: client.token_request(form=form), 401, "invalid_client")
    # Fresh client assertion, replayed Session assertion.
    replayed_session = dict(form, client_assertion=client.agent.client_assertion(client.issuer))
    assert_refused(dealer, lambda: client.token_request(form=replayed_session), 400, "invalid_grant")
    # One jti for both assertions is refused even when fresh.
    jti = new_jti()
    same = client.grant_form(
        client_assertion=client.agent.client_assertion(client.issuer, jti=jti),
        assertion=client.agent.session_assertion(client.issuer, client.user_id, jti=jti),
    )
    assert_refused(dealer, lambda: client.token_request(form=same), 400, "invalid_grant")


def test_assertions_must_be_es256_signed_by_a_published_key(dealer, client: PoppyClient):
    issuer = client.issuer
    stranger = ECKey.generate_key("P-256", private=True)
    cases = [
        client.agent.client_assertion(issuer, key=stranger),  # right kid, wrong key
        client.agent.client_assertion(issuer, header={"alg": "ES256", "kid": "unknown-kid"}),
        client.agent.client_assertion(
            issuer, header={"alg": "ES256", "kid": client.agent.kid, "jwk": public_jwk(stranger)}, key=stranger
        ),
        client.agent.client_assertion(issuer, header={"alg": "ES256", "kid": client.agent.kid, "typ": "dpop+jwt"}),
    ]
    unsigned = client.agent.client_assertion(issuer).rsplit(".", 1)[0]
    header = b64url(b'{"alg":"none"}')
    cases.append(header + "." + unsigned.split(".")[1] + ".")
    cases.append(header + "." + unsigned.split(".")[1] + ".AAAA")
    cases.append(
        b64url(b'{"alg":"HS256","kid":"' + client.agent.kid.encode() + b'"}') + "." + unsigned.split(".")[1] + ".AAAA"
    )
    for assertion in cases:
        form = client.grant_form(client_assertion=assertion)
        assert_refused(dealer, lambda: client.token_request(form=form), 401, "invalid_client")


# -- token endpoint: the request itself ------------------------------------------------------


def test_token_request_shape_errors(dealer, client: PoppyClient):
    cases = [
        (client.grant_form(grant_type="refresh_token", refresh_token="x"), 400, "invalid_grant"),
        (client.grant_form(grant_type="authorization_code", code="x"), 400, "unsupported_grant_type"),
        (client.grant_form(scope="profile"), 400, "invalid_scope"),
        (client.grant_form(session_id="abc"), 400, "invalid_request"),
        (client.grant_form(resource="https://elsewhere.example"), 400, "invalid_target"),
        (client.grant_form(client_assertion_type="urn:other"), 401, "invalid_client"),
        (client.grant_form(client_assertion=None), 401, "invalid_client"),
        (client.grant_form(assertion=None), 400, "invalid_request"),
    ]
    for form, status, error in cases:
        assert_refused(dealer, lambda: client.token_request(form=form), status, error)
    # A repeated parameter is invalid (RFC 6749 §3.2).
    endpoint = client.issuer_metadata["token_endpoint"]
    pairs = list(client.grant_form().items()) + [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")]
    assert_refused(
        dealer,
        lambda: client.http.post(
            endpoint,
            content=httpx.QueryParams(pairs).__str__().encode(),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "DPoP": client.agent.dpop_proof(client.session_key, "POST", endpoint),
            },
        ),
        400,
        "invalid_request",
    )
    # An advertised protected resource is accepted.
    ok = client.token_request(form=client.grant_form(resource="https://localhost"))
    assert ok.status_code == 200


def test_token_endpoint_dpop_rules(dealer, client: PoppyClient):
    endpoint = client.issuer_metadata["token_endpoint"]
    key = client.session_key
    assert_refused(dealer, lambda: client.token_request(proof=None), 400, "invalid_dpop_proof")
    proofs = [
        client.agent.dpop_proof(key, "POST", endpoint, ath=b64url(b"x" * 32)),  # ath present
        client.agent.dpop_proof(key, "POST", endpoint + "/other"),  # htu mismatch
        client.agent.dpop_proof(key, "GET", endpoint),  # htm mismatch
        client.agent.dpop_proof(key, "POST", endpoint, iat=time.time() - 300),  # stale
        client.agent.dpop_proof(
            key, "POST", endpoint, header={"typ": "JWT", "alg": "ES256", "jwk": public_jwk(key)}
        ),  # wrong typ
        client.agent.dpop_proof(
            key, "POST", endpoint, header={"typ": "dpop+jwt", "alg": "ES256", "jwk": key.as_dict(private=True)}
        ),  # private jwk
        client.agent.dpop_proof(client.agent.identity, "POST", endpoint),  # identity key
    ]
    for proof in proofs:
        assert_refused(dealer, lambda: client.token_request(proof=proof), 400, "invalid_dpop_proof")
    two = [
        ("DPoP", client.agent.dpop_proof(key, "POST", endpoint)),
        ("DPoP", client.agent.dpop_proof(key, "POST", endpoint)),
    ]
    assert_refused(
        dealer, lambda: client.http.post(endpoint, data=client.grant_form(), headers=two), 400, "invalid_dpop_proof"
    )


def test_replayed_dpop_jti_at_the_token_endpoint(dealer, client: PoppyClient):
    proof = client.agent.dpop_proof(client.session_key, "POST", client.issuer_metadata["token_endpoint"])
    assert client.token_request(proof=proof).status_code == 200
    assert_refused(dealer, lambda: client.token_request(proof=proof), 400, "invalid_dpop_proof")


# -- client identity documents -------------------------------------------------------------


def test_client_metadata_whose_client_id_differs_from_its_url(dealer, agent_host, poppy_ca):
    agent = PersonalAgent(agent_host, name="liar", publish=False)
    agent.publish({**agent.metadata(), "client_id": f"{agent_host.base_url}/someone-else/agent.json"})
    c = PoppyClient(agent, dealer.url, poppy_ca.context())
    c.discover()
    response = assert_refused(dealer, lambda: c.token_request(), 401, "invalid_client")
    assert "differs" in response.json()["error_description"]
    c.close()


@pytest.mark.parametrize(
    "client_id",
    [
        "https://10.0.0.8/agent.json",
        "https://192.168.1.20/agent.json",
        "https://169.254.169.254/latest/meta-data",
        "https://[fd00::1]/agent.json",
        "https://100.64.0.1/agent.json",
    ],
)
def test_private_address_client_id_is_refused(dealer, client: PoppyClient, client_id):
    form = client.grant_form(client_id=client_id)
    response = assert_refused(dealer, lambda: client.token_request(form=form), 401, "invalid_client")
    assert "not allowed" in response.json()["error_description"]


def test_blocked_and_unlisted_clients_are_refused(tmp_path, poppy_ca, agent_host):
    from aap.config.poppy import PoppySettings
    from poppy_env import PoppyDeployment

    agent = PersonalAgent(agent_host, name="blocked")
    other = PersonalAgent(agent_host, name="not-blocked")
    deployment = PoppyDeployment(
        tmp_path, poppy_ca, PoppySettings(allow_loopback_clients=True, blocked_clients=(agent.client_id,)), inventory=0
    )
    try:
        c = PoppyClient(agent, deployment.url, poppy_ca.context())
        c.discover()
        response = assert_refused(deployment, lambda: c.token_request(), 401, "invalid_client")
        assert agent_host.hits.get(f"/{agent.name}/agent.json", 0) == 0  # policy before any fetch
        ok = PoppyClient(other, deployment.url, poppy_ca.context())
        ok.discover()
        assert ok.token_request().status_code == 200
        c.close()
        ok.close()
        assert response.json()["error_description"] == "this personal agent is not allowed"
    finally:
        deployment.stop()


# -- API calls ---------------------------------------------------------------------------


def test_replayed_dpop_jti_at_the_api(dealer, session_client: PoppyClient):
    url = session_client.operation_url("dealerInformation")
    headers = session_client.auth_headers("POST", url)
    assert session_client.http.post(url, json=INFO, headers=headers).status_code == 200
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=headers), "invalid_dpop_proof")


def test_dpop_htu_and_htm_must_match(dealer, session_client: PoppyClient):
    url = session_client.operation_url("dealerInformation")
    other = session_client.operation_url("inventoryFacets")
    for headers in (
        session_client.auth_headers("POST", other),
        session_client.auth_headers("PUT", url),
        session_client.auth_headers("POST", url + "?x=1"),
        session_client.auth_headers("POST", url.replace("https://", "http://")),
        session_client.auth_headers("POST", url, iat=time.time() - 300),
    ):
        assert_api_refused(
            dealer, lambda: session_client.http.post(url, json=INFO, headers=headers), "invalid_dpop_proof"
        )
    # Pinned: scheme/host case and the default port are normalised.
    upper = url.replace("https://localhost", "HTTPS://LOCALHOST")
    assert (
        session_client.http.post(url, json=INFO, headers=session_client.auth_headers("POST", upper)).status_code == 200
    )


def test_proof_signed_by_another_key_than_the_tokens(dealer, session_client: PoppyClient):
    url = session_client.operation_url("dealerInformation")
    other = ECKey.generate_key("P-256", private=True)
    headers = session_client.auth_headers("POST", url, key=other)
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=headers), "invalid_dpop_proof")


def test_missing_or_wrong_ath(dealer, session_client: PoppyClient):
    url = session_client.operation_url("dealerInformation")
    missing = session_client.auth_headers("POST", url)
    missing["DPoP"] = session_client.agent.dpop_proof(session_client.session_key, "POST", url)
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=missing), "invalid_dpop_proof")
    wrong = session_client.auth_headers("POST", url, ath=b64url(b"\0" * 32))
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=wrong), "invalid_dpop_proof")


def test_token_used_after_revocation(dealer, session_client: PoppyClient):
    assert session_client.revoke(session_client.token).status_code == 200
    url = session_client.operation_url("dealerInformation")
    assert_api_refused(
        dealer,
        lambda: session_client.http.post(url, json=INFO, headers=session_client.auth_headers("POST", url)),
        "invalid_token",
    )


def test_token_presentation_rules(dealer, session_client: PoppyClient):
    url = session_client.operation_url("dealerInformation")
    token = session_client.token
    bearer = session_client.auth_headers("POST", url)
    bearer["Authorization"] = f"Bearer {token}"
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=bearer), "invalid_token")
    nothing = {"DPoP": session_client.agent.dpop_proof(session_client.session_key, "POST", url)}
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=nothing), "invalid_token")
    forged = session_client.auth_headers("POST", url, token=token[:-4] + "AAAA")
    assert_api_refused(dealer, lambda: session_client.http.post(url, json=INFO, headers=forged), "invalid_token")
    in_query = session_client.auth_headers("POST", url)
    assert_refused(
        dealer,
        lambda: session_client.http.post(url, params={"access_token": token}, json=INFO, headers=in_query),
        400,
        "invalid_request",
    )


def test_revocation_requires_client_authentication_and_is_scoped_to_the_client(dealer, session_client, agent_host):
    endpoint = session_client.issuer_metadata["revocation_endpoint"]
    assert_refused(
        dealer, lambda: session_client.http.post(endpoint, data={"token": session_client.token}), 401, "invalid_client"
    )
    # Another agent cannot revoke this agent's token: 200 {} (RFC 7009) and the token still works.
    other = PersonalAgent(agent_host, name="other-revoker")
    response = session_client.http.post(
        endpoint,
        data={
            "token": session_client.token,
            "client_id": other.client_id,
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": other.client_assertion(session_client.issuer),
        },
    )
    assert response.status_code == 200 and response.json() == {}
    assert session_client.call("dealerInformation", INFO).status_code == 200
    # Unknown tokens: 200 {} too.
    assert session_client.revoke("not-a-token").json() == {}


def test_feedback_rules(dealer, session_client: PoppyClient):
    url = session_client.poppy["feedback"]["endpoint"]
    for body in (
        {"kind": "missing", "task": "x" * 201, "description": "d"},
        {"kind": "", "task": "t", "description": "d"},
        {"kind": "missing", "task": "   ", "description": "d"},
        {"kind": "missing", "task": "t"},
    ):
        assert_refused(
            dealer,
            lambda: session_client.http.post(url, json=body, headers=session_client.auth_headers("POST", url)),
            400,
            "invalid_request",
        )
    assert_api_refused(
        dealer,
        lambda: session_client.http.post(url, json={"kind": "missing", "task": "t", "description": "d"}),
        "invalid_token",
    )
