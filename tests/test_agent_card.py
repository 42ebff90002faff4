"""The agent card at /.well-known/agent-card.json: schema validity (seed 001),
content derived from the deployment, caching validators, public-URL rules."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from aap import AAP_VERSION, EXTENSION_URI, SCHEMA_BASE_URL
from aap.config.model import AgentIdentity
from aap.protocols import MCP_PROTOCOL_VERSIONS
from aap.server.app import PublicUrlError, create_app
from aap.spec import validate
from http_helpers import Deployment, make_settings

CARD = "/.well-known/agent-card.json"
HTTPS = "https://dealer.example"


@pytest.fixture(scope="module")
def https_deployment(tmp_path_factory):
    """Served on loopback, published as https://dealer.example (the card is HTTPS-only)."""
    with Deployment(tmp_path_factory.mktemp("card"), inventory=0, public_url=HTTPS) as dep:
        yield dep


@pytest.fixture(scope="module")
def card_response(https_deployment):
    return httpx.get(https_deployment.base_url + CARD)


@pytest.fixture(scope="module")
def card(card_response):
    assert card_response.status_code == 200
    return card_response.json()


def test_card_valid_against_seed_schema(card):
    assert validate(card, "agent-card") == []


def test_extension_params_valid(card):
    (extension,) = card["capabilities"]["extensions"]
    assert validate(extension["params"], "aap-extension-params") == []


def test_interface(card):
    first = card["supportedInterfaces"][0]
    assert first == {"url": f"{HTTPS}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}


def test_identity_from_settings(card, https_deployment):
    agent = https_deployment.settings.agent
    assert (card["name"], card["description"], card["version"]) == (agent.name, agent.description, agent.version)
    assert card["provider"] == {"organization": agent.provider_organization, "url": agent.provider_url}
    assert card["documentationUrl"] == agent.documentation_url


def test_capabilities(card):
    capabilities = card["capabilities"]
    assert capabilities["streaming"] is False
    assert capabilities["pushNotifications"] is False
    aap_entries = [e for e in capabilities["extensions"] if e["uri"].startswith("https://autoagentprotocol.org/")]
    assert len(aap_entries) == 1
    assert aap_entries[0]["uri"] == EXTENSION_URI and aap_entries[0]["required"] is True


def test_extension_params(card, https_deployment):
    params = card["capabilities"]["extensions"][0]["params"]
    settings = https_deployment.settings
    assert params["id"] == settings.deployment_id
    assert params["version"] == AAP_VERSION
    assert params["schema_base_url"] == SCHEMA_BASE_URL
    mcp = params["mcp"]
    assert {k: v for k, v in mcp.items() if k != "protocol_versions"} == {
        "url": f"{HTTPS}/mcp",
        "transport": "streamable-http",
        "public_read": True,
    }
    # Both required revisions first, then the older ones the endpoint also serves.
    assert mcp["protocol_versions"][:2] == ["2026-07-28", "2025-11-25"]
    assert mcp["protocol_versions"] == list(MCP_PROTOCOL_VERSIONS)
    assert params["poppy"] == f"{HTTPS}/.well-known/poppy.json"
    assert params["llms_txt"] == f"{HTTPS}/llms.txt"
    assert params["skills"]["inventory.search"]["capabilities"] == settings.search.to_json()


def test_skills_match_the_agent(card, https_deployment):
    implemented = https_deployment.app.state.agent.skills
    ids = [s.id for s in implemented]
    assert [s["id"] for s in card["skills"]] == ids
    assert list(card["capabilities"]["extensions"][0]["params"]["skills"]) == ids
    assert card["defaultInputModes"] == [s.request_media_type for s in implemented]
    assert card["defaultOutputModes"] == [s.response_media_type for s in implemented]
    for declared, skill in zip(card["skills"], implemented):
        assert declared["inputModes"] == [skill.request_media_type]
        assert declared["outputModes"] == [skill.response_media_type]
        assert declared["tags"] and "examples" not in declared
        entry = card["capabilities"]["extensions"][0]["params"]["skills"][skill.id]
        assert entry["request_schema"] == SCHEMA_BASE_URL + skill.stem + "-request.schema.json"
        assert entry["response_schema"] == SCHEMA_BASE_URL + skill.stem + "-response.schema.json"
    assert {"dealer.information", "inventory.facets", "inventory.search", "inventory.vehicle"} <= set(ids)


# -- caching -----------------------------------------------------------------------------------------
def test_cache_headers(card_response):
    assert card_response.headers["content-type"].startswith("application/json")
    assert "max-age=" in card_response.headers["cache-control"]
    assert card_response.headers["etag"].startswith('"')


def test_if_none_match_304(https_deployment, card_response):
    etag = card_response.headers["etag"]
    for value in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = httpx.get(https_deployment.base_url + CARD, headers={"If-None-Match": value})
        assert response.status_code == 304, value
        assert response.content == b""
        assert response.headers["etag"] == etag
    stale = httpx.get(https_deployment.base_url + CARD, headers={"If-None-Match": '"stale"'})
    assert stale.status_code == 200 and stale.json()["name"]


def test_head(https_deployment, card_response):
    response = httpx.head(https_deployment.base_url + CARD)
    assert response.status_code == 200
    assert response.headers["etag"] == card_response.headers["etag"]


# -- variants -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tenant_declared(tmp_path):
    with Deployment(tmp_path, inventory=0, public_url=HTTPS, a2a_tenant="dealer-42") as dep:
        card = httpx.get(dep.base_url + CARD).json()
    assert card["supportedInterfaces"][0]["tenant"] == "dealer-42"
    assert validate(card, "agent-card") == []


@pytest.mark.slow
def test_provider_omitted_unless_complete(tmp_path):
    agent = AgentIdentity(name="Solo Motors", description="One store.", provider_organization="Solo")
    with Deployment(tmp_path, inventory=0, public_url=HTTPS, agent=agent) as dep:
        card = httpx.get(dep.base_url + CARD).json()
    assert "provider" not in card and "documentationUrl" not in card and "iconUrl" not in card
    assert card["name"] == "Solo Motors"
    assert validate(card, "agent-card") == []


@pytest.mark.slow
def test_loopback_http_interface(tmp_path):
    """Loopback http is allowed for development: the interface URL names the real server."""
    with Deployment(tmp_path, inventory=0) as dep:
        card = httpx.get(dep.base_url + CARD).json()
        assert card["supportedInterfaces"][0]["url"] == dep.base_url + "/a2a"


@pytest.mark.parametrize(
    "url",
    [
        "http://dealer.example",
        "http://10.0.0.8:8000",
        "http://127.0.0.2",
        "ftp://dealer.example",
        "https://dealer.example/?x=1",
        "https://user:pw@dealer.example",
        "dealer.example",
    ],
)
def test_public_url_refused(tmp_path, url):
    from aap.store import open_stores

    settings = make_settings("https://dealer.example", f"sqlite:///{tmp_path}/aap.db")
    settings = dataclasses.replace(settings, public_url=url)
    stores = open_stores(settings.database_url)
    try:
        with pytest.raises(PublicUrlError) as info:
            create_app(settings, stores)
    finally:
        stores.close()
    if url.startswith("http://"):
        assert "HTTPS is required" in str(info.value)


@pytest.mark.parametrize(
    "url", ["http://localhost:8000", "http://127.0.0.1", "http://[::1]:9000", "https://dealer.example/agents"]
)
def test_public_url_accepted(tmp_path, url):
    from aap.store import open_stores

    settings = dataclasses.replace(make_settings(HTTPS, f"sqlite:///{tmp_path}/aap.db"), public_url=url)
    stores = open_stores(settings.database_url)
    try:
        app = create_app(settings, stores)
        assert app.state.settings.public_url == url
    finally:
        stores.close()
