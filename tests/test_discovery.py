"""Discovery documents: llms.txt, api-catalog, /a2a/openapi.json, /schemas/ — content, types, caching, agreement."""

from __future__ import annotations

import dataclasses
import re

import orjson
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from aap import EXTENSION_URI, SCHEMA_BASE_URL
from aap.config.model import AgentIdentity, DealerProfile
from aap.discovery import build
from aap.discovery.agent_card import build_agent_card
from aap.gateway import Gateway
from aap.paths import DeploymentUrls
from aap.spec import openapi_document, schema_bytes, schema_names, validate
from conftest import make_settings

LINKSET = 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"'


def app_for(agent) -> Starlette:
    return Starlette(routes=build(Gateway.of(agent)).routes)


@pytest.fixture
def client(agent) -> TestClient:
    return TestClient(app_for(agent), base_url="https://dealer.example")


# -- llms.txt ---------------------------------------------------------------------------------------------
def test_llms_txt_describes_dealer_skills_and_bindings(agent, client):
    response = client.get("/llms.txt")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    text = response.text
    lines = text.splitlines()
    assert lines[0] == "# Bay Motors agent"
    assert lines[2].startswith(
        "> Test dealer agent. Bay Motors Group (3 rooftops) on the Auto Agent Protocol (AAP) "
        "3.1.0. Skills: dealer.information, inventory.facets, inventory.search"
    )
    urls = DeploymentUrls(agent.settings.public_url)
    for url in (
        urls.agent_card,
        urls.a2a,
        urls.a2a_openapi,
        urls.mcp,
        urls.poppy,
        urls.poppy_openapi,
        urls.api_catalog,
        urls.schemas,
    ):
        assert url in text, url
    assert EXTENSION_URI in text
    for rooftop in agent.settings.dealer.rooftops:
        assert f"**{rooftop['name']}**" in text
    for skill in agent.skills:
        assert f"[{skill.id}]({urls.schema(skill.request_schema + '.schema.json')})" in text
        assert f"`{skill.tool_name}`" in text
        assert f"POST {urls.poppy_operation(skill.id)}" in text
    assert "## Optional" in text


def test_llms_txt_a2a_example_is_a_valid_request(client):
    text = client.get("/llms.txt").text
    block = re.search(r"```json\n(.+?)\n```", text, re.S)
    assert block is not None
    body = orjson.loads(block.group(1))
    body["params"]["message"]["messageId"] = "m1"
    assert validate(body, "json-rpc-request") == []
    data = body["params"]["message"]["parts"][0]["data"]
    assert validate(data, "inventory-search-request") == []


def test_llms_txt_links_only_this_deployment_and_protocol_sites(agent, client):
    text = client.get("/llms.txt").text
    for url in re.findall(r"https?://[^\s)`\"]+", text):
        assert url.startswith(("https://dealer.example/", "https://autoagentprotocol.org")), url


def test_llms_txt_welcome_message_and_configured_text_cannot_break_markdown(agent_factory):
    settings = make_settings()
    info = dict(settings.dealer.info, welcome_message="Welcome!\n\n## Injected heading")
    settings = dataclasses.replace(
        settings,
        dealer=DealerProfile(info),
        agent=AgentIdentity(
            name="Bay\nMotors",
            description="Line one.\n# not a heading",
            documentation_url="https://docs.dealer.example/agent",
        ),
    )
    client = TestClient(app_for(agent_factory(settings)), base_url="https://dealer.example")
    text = client.get("/llms.txt").text
    assert text.splitlines()[0] == "# Bay Motors"
    assert "Welcome! ## Injected heading" in text
    assert "\n## Injected heading" not in text
    assert "\n# not a heading" not in text
    assert "[Documentation](https://docs.dealer.example/agent)" in text


def test_llms_txt_revalidates_and_answers_head(client):
    first = client.get("/llms.txt")
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "public, max-age=300"
    again = client.get("/llms.txt", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    stale = client.get("/llms.txt", headers={"If-None-Match": '"something-else"'})
    assert stale.status_code == 200
    head = client.head("/llms.txt")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(first.content))
    assert head.headers["etag"] == etag


# -- api-catalog ----------------------------------------------------------------------------------------------
def test_api_catalog_is_an_rfc9727_linkset(agent, client):
    response = client.get("/.well-known/api-catalog")
    assert response.status_code == 200
    assert response.headers["content-type"] == LINKSET
    urls = DeploymentUrls(agent.settings.public_url)
    assert response.headers["link"] == f'<{urls.api_catalog}>; rel="api-catalog"'
    linkset = response.json()["linkset"]
    anchors = [entry["anchor"] for entry in linkset]
    assert anchors[0] == urls.api_catalog
    assert [item["href"] for item in linkset[0]["item"]] == anchors[1:]
    by_anchor = {entry["anchor"]: entry for entry in linkset}
    a2a = by_anchor[urls.a2a]
    assert a2a["service-desc"][0] == {
        "href": urls.a2a_openapi,
        "type": "application/vnd.oai.openapi+json",
        "title": "OpenAPI of the A2A JSON-RPC binding",
    }
    assert a2a["service-meta"][0]["href"] == urls.agent_card
    assert by_anchor[urls.mcp]["service-meta"][0]["href"] == urls.agent_card
    poppy_api = agent.settings.url("/poppy/v1")
    assert by_anchor[poppy_api]["service-desc"][0]["href"] == urls.poppy_openapi
    assert by_anchor[poppy_api]["service-meta"][0]["href"] == urls.poppy
    for entry in linkset:
        for relation, targets in entry.items():
            if relation != "anchor":
                assert all(set(t) >= {"href"} for t in targets)
    docs = a2a["service-doc"]
    assert docs == [
        {"href": urls.llms_txt, "type": "text/markdown", "title": "llms.txt: the dealer agent and how to call it"}
    ]


def test_api_catalog_head_matches_get(client):
    get = client.get("/.well-known/api-catalog")
    head = client.head("/.well-known/api-catalog")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == LINKSET
    assert head.headers["etag"] == get.headers["etag"]
    assert head.headers["content-length"] == str(len(get.content))
    assert client.get("/.well-known/api-catalog", headers={"If-None-Match": get.headers["etag"]}).status_code == 304


def test_without_poppy_no_document_links_it(agent_factory):
    from aap.config.poppy import PoppySettings

    settings = dataclasses.replace(make_settings(), poppy=PoppySettings(enabled=False))
    client = TestClient(app_for(agent_factory(settings)), base_url="https://dealer.example")
    llms = client.get("/llms.txt").text
    catalog = client.get("/.well-known/api-catalog").json()
    assert "poppy" not in llms.lower()
    assert "poppy" not in orjson.dumps(catalog).decode().lower()
    assert [e["anchor"] for e in catalog["linkset"]][1:] == ["https://dealer.example/a2a", "https://dealer.example/mcp"]


# -- A2A OpenAPI ------------------------------------------------------------------------------------------------
def test_a2a_openapi_is_the_seed_with_this_server(agent, client):
    response = client.get("/a2a/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.oai.openapi+json"
    assert response.headers["etag"]
    document = response.json()
    assert document["servers"] == [
        {"url": "https://dealer.example/a2a", "description": "Bay Motors agent: AAP over A2A JSON-RPC 2.0"}
    ]
    seed = openapi_document()
    assert {k: v for k, v in document.items() if k != "servers"} == {k: v for k, v in seed.items() if k != "servers"}
    assert seed["servers"][0]["url"] == "https://dealer.example/a2a"  # the seed itself is untouched


def test_a2a_openapi_follows_the_public_url(agent_factory):
    settings = dataclasses.replace(make_settings(), public_url="https://motors.example.com/dealers/42")
    client = TestClient(app_for(agent_factory(settings)), base_url="https://motors.example.com")
    document = client.get("/a2a/openapi.json").json()
    assert document["servers"][0]["url"] == "https://motors.example.com/dealers/42/a2a"


# -- schemas ------------------------------------------------------------------------------------------------------
def test_schemas_index_and_files(agent, client):
    index = client.get("/schemas/")
    assert index.status_code == 200
    body = index.json()
    assert body["schema_base_url"] == SCHEMA_BASE_URL
    assert body["local_base_url"] == "https://dealer.example/schemas/"
    names = {entry["name"] for entry in body["schemas"]}
    assert names == {f"{n}.schema.json" for n in schema_names()}
    for skill in agent.skills:
        assert f"{skill.request_schema}.schema.json" in names
        assert f"{skill.response_schema}.schema.json" in names
    for entry in body["schemas"]:
        response = client.get(f"/schemas/{entry['name']}")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/schema+json"
        assert response.headers["cache-control"] == "public, max-age=86400"
        assert response.content == schema_bytes(entry["name"].removesuffix(".schema.json"))
        assert entry["url"] == "https://dealer.example/schemas/" + entry["name"]
        assert entry.get("$id") == orjson.loads(response.content).get("$id")


def test_card_schema_ids_resolve_locally(agent, client):
    """Every schema URL the agent card names is served under /schemas/ with the same file name."""
    card = client.get("/.well-known/agent-card.json").json()
    params = card["capabilities"]["extensions"][0]["params"]
    for entry in params["skills"].values():
        for key in ("request_schema", "response_schema"):
            name = entry[key].removeprefix(SCHEMA_BASE_URL)
            assert client.get(f"/schemas/{name}").status_code == 200, name


def test_unknown_schema_is_a_json_404(client):
    response = client.get("/schemas/nope.schema.json")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


# -- agreement with the agent card -------------------------------------------------------------------------------
@pytest.mark.parametrize("public_url", ["https://dealer.example", "https://platform.example/d/17"])
def test_every_document_names_the_card_urls(agent_factory, public_url):
    settings = dataclasses.replace(make_settings(), public_url=public_url)
    agent = agent_factory(settings)
    client = TestClient(app_for(agent), base_url="https://" + public_url.split("/")[2])
    card = build_agent_card(settings, agent.skills)
    params = card["capabilities"]["extensions"][0]["params"]
    llms = client.get("/llms.txt").text  # a proxy maps the public path prefix onto the app's root
    catalog = client.get("/.well-known/api-catalog").text
    card_url = settings.url("/.well-known/agent-card.json")
    assert params["llms_txt"] == settings.url("/llms.txt")
    for url in (params["mcp"]["url"], params["poppy"], card_url, card["supportedInterfaces"][0]["url"]):
        assert url.startswith(public_url)
        assert url in llms
    for url in (params["mcp"]["url"], card_url, params["llms_txt"], card["supportedInterfaces"][0]["url"]):
        assert url in catalog


def test_the_discovery_documents_load_no_protocol_sdk():
    """The card and llms.txt name the MCP revisions from aap.protocols, never from the MCP binding."""
    import subprocess
    import sys

    code = (
        "import sys, aap.discovery.agent_card, aap.discovery.llms_txt; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'a2a') "
        "or m.startswith('aap.bindings'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
