"""The adversarial suite: hostile requests at every door, bounded by example
counts (CI replays the same examples: tests/conftest.py). bench/adversarial.py runs the same
generators and verdicts with ``--examples 20000`` and measures server CPU per refusal.

- schemathesis over ``/a2a/openapi.json`` (the seed's document) and ``/poppy/openapi.json``,
  valid and schema-violating bodies;
- hypothesis over A2A bodies carrying mutated AAP payloads, MCP JSON-RPC at both revisions,
  the Poppy native API with the same payloads, and the OAuth token endpoint;
- oversized bodies on every surface, with a declared length and chunked.

Every answer: no 5xx, in its surface's format and schema-valid, no request value echoed in an
error, no internals; and the validator's work per request stays within the request bounds
(tests/adversarial_support.py says how each is checked).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from aap.config.model import RateLimit
from aap.skills.catalog import SKILLS
from adversarial_support import (
    ACCEPT,
    LEGACY,
    MODERN,
    Verdicts,
    WorkMeter,
    a2a_bodies,
    aap_payloads,
    encode,
    mcp_exchanges,
    skill_of,
    token_requests,
)
from factories import live_dealer_fixture
from poppy_client import PersonalAgent, PoppyClient
from poppy_env import PoppyDeployment, agent_host, poppy_ca  # noqa: F401 (fixtures)

EXAMPLES = {"a2a": 800, "mcp": 1000, "poppy": 300, "token": 400, "schemathesis": 200, "poppy_schemathesis": 25}
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


#: Every surface of one app on loopback, rate limits off (the suite is one busy caller).
dealer = live_dealer_fixture("adversarial", count=60, rate_limit=RateLimit(enabled=False))


@pytest.fixture(scope="module")
def poppy(tmp_path_factory, poppy_ca, agent_host) -> Iterator[tuple[Any, PoppyClient]]:
    """The Poppy binding over HTTPS with a signed-in reference client; only that client is allowed,
    so no generated client_id is ever fetched."""
    from poppy_env import TEST_POPPY

    agent = PersonalAgent(agent_host, name="adversarial-agent")
    deployment = PoppyDeployment(
        tmp_path_factory.mktemp("adversarial-poppy"),
        poppy_ca,
        dataclasses.replace(TEST_POPPY, allowed_clients=(agent.client_id,)),
        inventory=30,
        rate_limit=RateLimit(enabled=False),
    )
    client = PoppyClient(agent, deployment.url, poppy_ca.context())
    client.discover()
    client.start_session()
    yield deployment, client
    client.close()
    deployment.stop()


@pytest.fixture
def meter(monkeypatch) -> WorkMeter:
    return WorkMeter(monkeypatch.setattr)


def assert_clean(verdicts: Verdicts) -> None:
    assert verdicts.failures == [], "\n".join(verdicts.failures[:10])


# -- A2A ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a2a_hostile_payloads(dealer, meter):
    verdicts = Verdicts()
    with httpx.Client(base_url=dealer.base_url, timeout=60) as http:

        @settings(max_examples=EXAMPLES["a2a"], **SETTINGS)
        @given(request=a2a_bodies())
        def exercise(request):
            body, headers = request
            response = http.post("/a2a", content=body, headers=headers)
            verdicts.a2a(response.status_code, response.headers, response.content)
            meter.check(verdicts, "a2a")

        exercise()
    assert_clean(verdicts)
    assert verdicts.answers >= EXAMPLES["a2a"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_a2a_openapi_document_by_schemathesis(dealer, meter, mode):
    """The seed's own document, served at /a2a/openapi.json, drives the requests."""
    document = httpx.get(dealer.base_url + "/a2a/openapi.json").json()
    document["paths"] = {"/a2a": document["paths"]["/"]}  # the seed's path is relative to servers[0]
    document["servers"] = [{"url": dealer.base_url}]
    operation = next(result.ok() for result in schemathesis.openapi.from_dict(document).get_all_operations())
    verdicts = Verdicts()

    @settings(max_examples=EXAMPLES["schemathesis"], **SETTINGS)
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case):
        response = case.call(base_url=dealer.base_url)
        verdicts.a2a(response.status_code, response.headers, response.content)
        meter.check(verdicts, "a2a")

    exercise()
    assert_clean(verdicts)


# -- MCP ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mcp_hostile_json_rpc_at_both_revisions(dealer, meter):
    verdicts = Verdicts()
    revisions: set[str] = set()
    with httpx.Client(base_url=dealer.base_url, timeout=60) as http:

        @settings(max_examples=EXAMPLES["mcp"], **SETTINGS)
        @given(exchange=mcp_exchanges())
        def exercise(exchange):
            body, headers, tool = exchange
            revisions.add(headers.get("MCP-Protocol-Version", ""))
            response = http.post("/mcp", content=body, headers=headers)
            verdicts.mcp(response.status_code, response.headers, response.content, tool)
            meter.check(verdicts, "mcp")

        exercise()
    assert_clean(verdicts)
    assert {MODERN, LEGACY} <= revisions
    assert verdicts.statuses.get(200, 0) > EXAMPLES["mcp"] // 6  # a good share reach the tools


# -- Poppy --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_poppy_api_hostile_payloads(poppy, meter):
    deployment, client = poppy
    verdicts = Verdicts()
    skills = [skill for skill in SKILLS.values()]

    @settings(max_examples=EXAMPLES["poppy"], **SETTINGS)
    @given(payload=aap_payloads(), index=st.integers(0, len(skills) - 1))
    def exercise(payload, index):
        skill = skill_of(payload) or skills[index]
        url = client.operation_url(skill.operation_id)
        headers = {**client.auth_headers("POST", url), "Content-Type": "application/json"}
        response = client.http.post(url, content=encode(payload), headers=headers)
        verdicts.poppy(response.status_code, response.headers, response.content, skill.id)
        meter.check(verdicts, "poppy")

    exercise()
    assert_clean(verdicts)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_poppy_openapi_document_by_schemathesis(poppy, poppy_ca, meter, mode):
    deployment, client = poppy
    schema = schemathesis.openapi.from_dict(client.openapi)
    server = client.openapi["servers"][0]["url"]
    verdicts = Verdicts()
    for operation in (result.ok() for result in schema.get_all_operations()):
        url = server + operation.path
        skill_id = operation.path.strip("/")

        @settings(max_examples=EXAMPLES["poppy_schemathesis"], **SETTINGS)
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case):
            response = case.call(
                base_url=server, headers=client.auth_headers("POST", url), verify=str(poppy_ca.ca_file)
            )
            verdicts.poppy(response.status_code, response.headers, response.content, skill_id)
            meter.check(verdicts, "poppy")

        exercise()
    assert_clean(verdicts)


@pytest.mark.slow
def test_token_endpoint_hostile_forms(poppy):
    deployment, client = poppy
    endpoint = client.issuer_metadata["token_endpoint"]
    verdicts = Verdicts()

    def proof() -> str:
        return client.agent.dpop_proof(client.session_key, "POST", endpoint)

    @settings(max_examples=EXAMPLES["token"], **SETTINGS)
    @given(request=st.builds(lambda: client.grant_form()).flatmap(lambda real: token_requests(real, proof)))
    def exercise(request):
        body, headers = request
        response = client.http.post(endpoint, content=body, headers=headers)
        verdicts.oauth(response.status_code, response.headers, response.content)

    exercise()
    assert_clean(verdicts)
    assert verdicts.statuses.get(200, 0) >= 1  # the real pieces still get a token


# -- oversized bodies, every surface in its own format --------------------------------------------


SURFACES = {
    "/a2a": "a2a",
    "/mcp": "mcp",
    "/oauth/token": "oauth",
    "/oauth/revoke": "oauth",
    "/poppy/feedback": "oauth",
    "/poppy/v1/inventory.search": "poppy",
    "/healthz": "plain",
    "/nowhere": "plain",
}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", sorted(SURFACES))
def test_an_oversized_body_is_answered_in_its_surfaces_format(dealer, path, chunked):
    limit = dealer.settings.max_body_bytes
    payload = b'{"padding": "' + b"Qzx" * (limit // 3) + b'"}'

    def pieces():
        for start in range(0, len(payload), 65_536):
            yield payload[start : start + 65_536]

    headers = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY}
    response = httpx.post(dealer.base_url + path, content=pieces() if chunked else payload, headers=headers, timeout=60)
    assert response.status_code == 413
    verdicts = Verdicts()
    body = response.content
    surface = SURFACES[path]
    if surface == "a2a":
        answer = response.json()
        assert answer["id"] is None and answer["error"]["code"] == -32600
        verdicts.common("a2a", 413, body, True)
    elif surface == "mcp":
        verdicts.mcp(413, response.headers, body, None)
    elif surface == "oauth":
        verdicts.oauth(413, response.headers, body)
    elif surface == "poppy":
        verdicts.poppy(413, response.headers, body, "inventory.search")
        assert response.json()["code"] == "SCHEMA_VALIDATION_FAILED"
    else:
        assert response.json() == {
            "error": {
                "status": 413,
                "message": (f"The request body is larger than this endpoint accepts ({limit} bytes)."),
            }
        }
    assert f"({limit} bytes)" in response.text
    assert_clean(verdicts)


# -- one problem list, every binding ---------------------------------------------------------------


BROKEN = [
    {"type": "inventory.search.request", "filters": {"features_all": ["no_such_feature"], "make": 5}},
    {"type": "inventory.search.request", "filters": {"make": ["x"] * 101}},
    {"type": "inventory.facets.request", "filters": {"price_max": "cheap", "rooftops": []}},
    {"type": "inventory.vehicle.request", "vin": "short", "stock": ""},
]


@pytest.mark.parametrize("payload", BROKEN, ids=["capability+schema", "bounds", "facets", "vehicle"])
def test_every_binding_lists_the_same_problems(dealer, poppy, payload):
    from http_helpers import AAP_HEADERS, aap_error_of, send_message

    skill = next(s for s in SKILLS.values() if s.request_type == payload["type"])
    a2a = aap_error_of(
        httpx.post(
            dealer.base_url + "/a2a", json=send_message(copy.deepcopy(payload)), headers=AAP_HEADERS, timeout=30
        ).json()
    )
    answers = {"a2a": a2a}
    for version in (LEGACY, MODERN):
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": skill.tool_name, "arguments": copy.deepcopy(payload)},
        }
        headers = {"Accept": ACCEPT, "MCP-Protocol-Version": version}
        if version == MODERN:
            message["params"]["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
            headers |= {"Mcp-Method": "tools/call", "Mcp-Name": skill.tool_name}
        result = httpx.post(dealer.base_url + "/mcp", json=message, headers=headers, timeout=30).json()["result"]
        assert result["isError"] is True
        answers[f"mcp {version}"] = result["structuredContent"]
    _, client = poppy
    client.start_session()  # the token endpoint's fuzzing may have replaced the Session
    answers["poppy"] = client.call(skill.operation_id, copy.deepcopy(payload)).json()
    codes = {name: (a["code"], a["details"]["errors"]) for name, a in answers.items()}
    assert len({repr(value) for value in codes.values()}) == 1, codes
