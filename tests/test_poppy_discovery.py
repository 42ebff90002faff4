"""The Poppy discovery documents: valid against the seed schemas, linking the very same
URLs as the agent card, served with the right headers; signing keys rotate cleanly."""

from __future__ import annotations

import base64
import dataclasses
import json
import time

import httpx

from aap import EXTENSION_URI
from aap.config.poppy import PoppySettings
from aap.poppy import rotate_signing_key
from aap.poppy.api import openapi_document
from aap.poppy.context import PoppyContext
from aap.spec import validate
from aap.util import pointer
from poppy_client import PersonalAgent, PoppyClient
from poppy_env import TEST_POPPY, PoppyDeployment, agent_host, client, dealer, personal_agent, poppy_ca  # noqa: F401


def get(dealer, path: str, ca) -> httpx.Response:
    with httpx.Client(verify=ca.context()) as http:
        return http.get(dealer.url + path)


def test_poppy_json_is_the_aap_publication_profile(dealer, poppy_ca):
    response = get(dealer, "/.well-known/poppy.json", poppy_ca)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "public, max-age=300"
    document = response.json()
    assert validate(document, "poppy") == []
    assert document["protocol_version"] == "0.3"
    assert document["organization"] == {"name": "Bay Motors Group", "domain": "localhost"}
    assert document["auth"] == {"issuer": dealer.url}  # guest-only: no direct/device/scopes
    assert document["apis"] == [
        {
            "type": "openapi",
            "url": dealer.url + "/poppy/openapi.json",
            "description": document["apis"][0]["description"],
        },
        # native MCP for signed-in agents (on by default): tests/test_poppy_mcp.py
        {
            "type": "mcp",
            "url": dealer.url + "/mcp",
            "resource": dealer.url + "/mcp",
            "description": document["apis"][1]["description"],
        },
    ]
    assert document["feedback"] == {"endpoint": dealer.url + "/poppy/feedback"}
    assert document["excluded_tasks"] == {"url": dealer.url + "/poppy/excluded-tasks.json"}
    assert "agent" not in document
    # Revalidation: the ETag answers 304.
    with httpx.Client(verify=poppy_ca.context()) as http:
        again = http.get(dealer.url + "/.well-known/poppy.json", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304


def test_the_aap_bridge_links_the_same_urls_as_the_agent_card(dealer, poppy_ca):
    bridge = get(dealer, "/.well-known/poppy.json", poppy_ca).json()["extensions"]["autoagentprotocol.org/aap"]
    assert validate(bridge, "poppy-aap-extension") == []
    card = get(dealer, bridge["agent_card"].removeprefix(dealer.url), poppy_ca).json()
    assert validate(card, "agent-card") == []
    params = next(e["params"] for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION_URI)
    assert bridge["version"] == "1" and bridge["aap_version"] == "3.1.0"
    assert bridge["agent_card"] == dealer.url + "/.well-known/agent-card.json"
    assert bridge["mcp"] == params["mcp"]["url"]
    assert bridge["llms_txt"] == params["llms_txt"]
    assert params["poppy"] == dealer.url + "/.well-known/poppy.json"
    assert bridge["openapi"] == dealer.url + "/poppy/openapi.json"


def test_issuer_and_protected_resource_metadata(dealer, poppy_ca):
    metadata = get(dealer, "/.well-known/oauth-authorization-server", poppy_ca).json()
    assert validate(metadata, "poppy-oauth-metadata") == []
    assert metadata["issuer"] == dealer.url
    assert metadata["token_endpoint"] == dealer.url + "/oauth/token"
    assert metadata["revocation_endpoint"] == dealer.url + "/oauth/revoke"
    assert metadata["grant_types_supported"] == [
        "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:token-exchange",
    ]
    assert metadata["protected_resources"][0] == "https://localhost"
    assert "poppy_domains" not in metadata and "scopes_supported" not in metadata
    resource = get(dealer, "/.well-known/oauth-protected-resource", poppy_ca).json()
    assert resource["resource"] == dealer.url
    assert resource["authorization_servers"] == [dealer.url]
    assert resource["dpop_signing_alg_values_supported"] == ["ES256"]
    jwks = get(dealer, "/oauth/jwks.json", poppy_ca).json()
    assert jwks["keys"] and all(set(k) == {"kty", "crv", "x", "y", "kid", "alg", "use"} for k in jwks["keys"])


def test_excluded_tasks_document(dealer, poppy_ca, tmp_path):
    document = get(dealer, "/poppy/excluded-tasks.json", poppy_ca).json()
    assert validate(document, "poppy-excluded-tasks") == []
    assert document == {"tasks": [task.to_json() for task in TEST_POPPY.excluded_tasks]}
    empty = PoppyDeployment(tmp_path, poppy_ca, PoppySettings(feedback_enabled=False), inventory=0)
    try:
        assert get(empty, "/poppy/excluded-tasks.json", poppy_ca).json() == {"tasks": []}
        poppy = get(empty, "/.well-known/poppy.json", poppy_ca).json()
        assert validate(poppy, "poppy") == [] and "feedback" not in poppy
        assert get(empty, "/poppy/feedback", poppy_ca).status_code in (404, 405)
    finally:
        empty.stop()


def test_openapi_document(dealer, poppy_ca):
    document = get(dealer, "/poppy/openapi.json", poppy_ca).json()
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": dealer.url + "/poppy/v1"}]
    operations = {path: item["post"]["operationId"] for path, item in document["paths"].items()}
    assert operations == {
        "/dealer.information": "dealerInformation",
        "/inventory.facets": "inventoryFacets",
        "/inventory.search": "inventorySearch",
        "/inventory.vehicle": "inventoryVehicle",
        "/lead.submit": "leadSubmit",
    }
    assert set(document["paths"]["/lead.submit"]["post"]["responses"]) == {
        "200",
        "400",
        "401",
        "404",
        "408",
        "409",
        "413",
        "414",
        "429",
        "431",
        "500",
    }
    # The AAP 3.2 Poppy-Session header is a security scheme (seed 003): alone, or with the token.
    assert document["components"]["securitySchemes"]["poppySession"] == {
        "type": "apiKey",
        "in": "header",
        "name": "Poppy-Session",
        "description": document["components"]["securitySchemes"]["poppySession"]["description"],
    }
    assert document["security"] == [{"poppyDPoP": []}, {"poppySession": []}, {"poppyDPoP": [], "poppySession": []}]
    # Self-contained: every $ref points into this document and resolves.
    text = json.dumps(document)
    refs = {part.split('"')[0] for part in text.split('"$ref": "')[1:]}
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        node = document
        for token in pointer.tokens(ref[1:]):
            node = node[token]


def test_signing_keys_rotate_without_breaking_live_tokens(dealer, client: PoppyClient, poppy_ca):
    old = client.start_session()["access_token"]
    kids_before = {k["kid"] for k in get(dealer, "/oauth/jwks.json", poppy_ca).json()["keys"]}
    new_kid = rotate_signing_key(dealer.stores, dealer.settings)
    dealer.ctx.keys.reload()  # this worker re-reads the keys now instead of within 30 s
    assert new_kid not in kids_before
    assert client.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    other = PoppyClient(PersonalAgent(client.agent.host, name="rotation-agent"), dealer.url, poppy_ca.context())
    other.discover()
    fresh = other.start_session()["access_token"]
    header = json.loads(base64.urlsafe_b64decode(fresh.split(".")[0] + "=="))
    assert header["kid"] == new_kid
    kids_after = {k["kid"] for k in get(dealer, "/oauth/jwks.json", poppy_ca).json()["keys"]}
    assert kids_after == kids_before | {new_kid}
    # Once the retired key is dropped (its tokens' lifetime has passed), its tokens stop verifying.
    dealer.stores.poppy.drop_retired_keys(time.time() + 1)
    dealer.ctx.keys.reload()
    response = client.call("dealerInformation", {"type": "dealer.information.request"}, token=old)
    assert response.status_code == 401 and response.json()["error"] == "invalid_token"
    assert other.call("dealerInformation", {"type": "dealer.information.request"}).status_code == 200
    other.close()


def test_openapi_document_without_the_poppy_session_header(dealer):
    """With ``accept_poppy_session = false`` the header is no way in, so it is not declared."""
    ctx = PoppyContext(
        dealer.ctx.gateway, dataclasses.replace(dealer.ctx.settings, accept_poppy_session=False), dealer.ctx.store
    )
    document = openapi_document(ctx)
    assert set(document["components"]["securitySchemes"]) == {"poppyDPoP"}
    assert document["security"] == [{"poppyDPoP": []}]
