"""The AI Catalog (``/.well-known/ai-catalog.json``, docs/a2a.md "AI Catalog", docs/platform.md
"AI Catalog of the platform"): every agent's, and the platform host's index of every tenant in
bounded pages, validated against a JSON Schema of AI Catalog 0.9.

No JSON Schema of AI Catalog is published (the specification's normative schema is CDDL, its
section "CDDL Schema"): :data:`AI_CATALOG_SCHEMA` is that CDDL written as JSON Schema, member for
member — required members, the ``url``/``data`` choice, the optional ones with their types —
plus the specification's prose rules a schema can hold (``specVersion`` is "Major.Minor"; a
``trustManifest`` is substantive). The embedded MCP Server Card is checked against the members
the MCP Server Card extension's schema (v2) requires and bounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from aap.discovery import platform_catalog
from aap.paths import AI_CATALOG_PATH
from aap.server.app import create_app
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database, open_stores
from aap.store.platform import PlatformStore
from aap.tenants import TenantRegistry
from http_helpers import LiveServer, make_settings
from platform_support import PLATFORM_HOST, platform_settings, tenant_config

_TEXT = {"type": "string"}
_EXTENSIONS = {"type": "object", "additionalProperties": True}
AI_CATALOG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$ref": "#/$defs/AICatalog",
    "$defs": {
        "AICatalog": {
            "type": "object",
            "required": ["specVersion", "entries"],
            "properties": {
                "specVersion": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"},
                "host": {"$ref": "#/$defs/HostInfo"},
                "entries": {"type": "array", "items": {"$ref": "#/$defs/CatalogEntry"}},
                "extensions": _EXTENSIONS,
                "signature": _TEXT,
            },
        },
        "HostInfo": {
            "type": "object",
            "required": ["displayName"],
            "properties": {"displayName": _TEXT, "identifier": _TEXT, "documentationUrl": _TEXT, "logoUrl": _TEXT},
        },
        "CatalogEntry": {
            "type": "object",
            "required": ["identifier", "type"],
            "oneOf": [{"required": ["url"]}, {"required": ["data"]}],
            "properties": {
                "identifier": _TEXT,
                "displayName": _TEXT,
                "type": _TEXT,
                "url": _TEXT,
                "data": {},
                "version": _TEXT,
                "description": _TEXT,
                "tags": {"type": "array", "items": _TEXT},
                "publisher": {"$ref": "#/$defs/Publisher"},
                "trustManifest": {"type": "object", "required": ["identity"]},
                "updatedAt": {"type": "string", "format": "date-time"},
                "extensions": _EXTENSIONS,
            },
        },
        "Publisher": {
            "type": "object",
            "required": ["identifier", "displayName"],
            "properties": {"identifier": _TEXT, "displayName": _TEXT, "identityType": _TEXT},
        },
    },
}
SERVER_CARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["$schema", "description", "name", "version"],
    "additionalProperties": False,
    "properties": {
        "$schema": {"const": "https://static.modelcontextprotocol.io/schemas/v2/server-card.schema.json"},
        "name": {"type": "string", "minLength": 3, "maxLength": 200, "pattern": "^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"},
        "title": {"type": "string", "minLength": 1, "maxLength": 100},
        "description": {"type": "string", "minLength": 1, "maxLength": 100},
        "version": {"type": "string", "maxLength": 255},
        "websiteUrl": {"type": "string"},
        "remotes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "url"],
                "additionalProperties": False,
                "properties": {
                    "type": {"enum": ["sse", "streamable-http"]},
                    "url": {"type": "string", "pattern": r"^(https?://[^\s]+|\{[a-zA-Z_][a-zA-Z0-9_]*\}[^\s]*)$"},
                    "supportedProtocolVersions": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}


def assert_catalog(document: Any) -> None:
    jsonschema.Draft202012Validator(AI_CATALOG_SCHEMA).validate(document)
    assert document["specVersion"] == "0.9"
    keys = [(e["identifier"], e.get("version")) for e in document["entries"]]
    assert len(keys) == len(set(keys)), "identifier (and version) are unique within a catalog"
    for entry in document["entries"]:
        assert entry["identifier"].startswith("urn:air:")


def test_the_schema_can_fail():
    validator = jsonschema.Draft202012Validator(AI_CATALOG_SCHEMA)
    assert not validator.is_valid({"entries": []})  # no specVersion
    assert not validator.is_valid({"specVersion": "0.9", "entries": [{"identifier": "x", "type": "t"}]})  # no url/data
    assert not validator.is_valid(
        {"specVersion": "0.9", "entries": [{"identifier": "x", "type": "t", "url": "u", "data": {}}]}
    )  # both
    assert validator.is_valid({"specVersion": "0.9", "entries": []})


@pytest.fixture(scope="module")
def dealer(tmp_path_factory) -> Iterator[str]:
    server = LiveServer()
    settings = make_settings(server.base_url, f"sqlite:///{tmp_path_factory.mktemp('catalog')}/aap.db")
    stores = open_stores(settings.database_url)
    server.start(create_app(settings, stores, services=()))
    try:
        yield server.base_url
    finally:
        server.stop()
        stores.close()


def test_an_agent_lists_its_card_and_mcp_endpoint(dealer):
    answer = httpx.get(dealer + AI_CATALOG_PATH)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/ai-catalog+json"
    assert answer.headers["etag"] and answer.headers["cache-control"].startswith("public")
    catalog = answer.json()
    assert_catalog(catalog)
    by_type = {e["type"]: e for e in catalog["entries"]}
    card = httpx.get(by_type["application/a2a-agent-card+json"]["url"]).json()
    assert by_type["application/a2a-agent-card+json"]["url"] == dealer + "/.well-known/agent-card.json"
    server_card = by_type["application/mcp-server-card+json"]["data"]
    jsonschema.Draft202012Validator(SERVER_CARD_SCHEMA).validate(server_card)
    mcp = card["capabilities"]["extensions"][0]["params"]["mcp"]
    assert server_card["remotes"] == [
        {"type": "streamable-http", "url": mcp["url"], "supportedProtocolVersions": mcp["protocol_versions"]}
    ]
    assert catalog["host"]["identifier"] == "127.0.0.1"
    # Nothing the card carries itself is repeated (the specification's authoritative-source rule).
    assert "displayName" not in by_type["application/a2a-agent-card+json"]
    assert httpx.head(dealer + AI_CATALOG_PATH).status_code == 200
    assert httpx.get(dealer + AI_CATALOG_PATH, headers={"If-None-Match": answer.headers["etag"]}).status_code == 304


def test_llms_txt_and_the_api_catalog_link_it(dealer):
    url = dealer + AI_CATALOG_PATH
    assert f"[AI Catalog]({url})" in httpx.get(dealer + "/llms.txt").text
    linkset = httpx.get(dealer + "/.well-known/api-catalog").json()["linkset"]
    assert linkset[0]["ai-catalog"] == [
        {"href": url, "type": "application/ai-catalog+json", "title": "AI Catalog of this agent"}
    ]


@pytest.fixture
def platform(tmp_path, monkeypatch) -> Iterator[tuple[str, TenantRegistry]]:
    monkeypatch.setattr(platform_catalog, "PAGE", 3)  # pages of three: seven tenants make three of them
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    for number in range(7):
        domains = [f"dealer-{number}.example"] if number % 2 == 0 else []
        registry.add(f"dealer-{number}", tenant_config(f"Dealer {number}"), domains)
    server = LiveServer().start(create_platform_app(settings, stores))
    try:
        yield server.base_url, registry
    finally:
        server.stop()
        stores.close()


def get(origin: str, url: str, host: str = PLATFORM_HOST) -> httpx.Response:
    """``url`` (an https:// URL of the platform or a tenant) from the server at ``origin``."""
    path = url.split("://", 1)[1].partition("/")[2]
    return httpx.get(f"{origin}/{path}", headers={"host": url.split("://", 1)[1].partition("/")[0] or host})


@pytest.mark.slow
def test_the_platform_host_lists_every_tenant_in_bounded_pages(platform):
    origin, registry = platform
    index = get(origin, f"https://{PLATFORM_HOST}{AI_CATALOG_PATH}")
    assert index.status_code == 200 and index.headers["content-type"] == "application/ai-catalog+json"
    assert_catalog(index.json())
    pages = index.json()["entries"]
    assert [p["type"] for p in pages] == ["application/ai-catalog+json"] * 3
    seen = []
    for page in pages:
        answer = get(origin, page["url"])
        assert answer.status_code == 200 and answer.headers["etag"], page
        assert_catalog(answer.json())
        entries = answer.json()["entries"]
        assert 0 < len(entries) <= 3
        seen += [e["identifier"].rsplit(":", 1)[1] for e in entries]
        for entry in entries:  # each tenant's own catalog, at its primary public URL
            tenant = get(origin, entry["url"])
            assert tenant.status_code == 200, entry
            assert_catalog(tenant.json())
    assert seen == [f"dealer-{n}" for n in range(7)]  # each once, in id order
    first = get(origin, pages[0]["url"]).json()["entries"]
    assert first[0]["url"] == "https://dealer-0.example/.well-known/ai-catalog.json"
    assert first[1]["url"] == f"https://{PLATFORM_HOST}/t/dealer-1/.well-known/ai-catalog.json"
    # A tenant added between two pages' ends goes in its range's page; none is skipped.
    registry.add("dealer-10", tenant_config("Dealer 10"), [])
    again = get(origin, pages[0]["url"]).json()["entries"]
    assert [e["identifier"].rsplit(":", 1)[1] for e in again] == ["dealer-0", "dealer-1", "dealer-10", "dealer-2"]
    fresh = get(origin, f"https://{PLATFORM_HOST}{AI_CATALOG_PATH}")
    assert fresh.headers["etag"] != index.headers["etag"]  # the index follows the registry


@pytest.mark.slow
def test_a_page_that_is_not_one_is_refused(platform):
    origin, _ = platform
    for query in ("?after=dealer-1", "?through=Not_An_Id", "?through=dealer-2&limit=5", "?through=a&through=b"):
        refused = get(origin, f"https://{PLATFORM_HOST}{AI_CATALOG_PATH}{query}")
        assert refused.status_code == 400, query
        assert refused.json()["error"]["problems"]


def test_page_ends_and_ranges_on_both_backends(database_url_factory):
    db = open_platform_database(database_url_factory("platform"))
    try:
        store = PlatformStore(db)
        assert store.boundaries(1000) == [] and store.directory(through="z") == []
        for number in range(25):
            store.add(f"t{number:03d}", "", None, [f"h{number}.example"] if number % 3 else [], 1)
        assert store.boundaries(10) == ["t009", "t019", "t024"]
        assert store.boundaries(5)[-1] == "t024" and len(store.boundaries(5)) == 5
        page = store.directory(after="t009", through="t019", limit=100)
        assert [r.tenant_id for r in page] == [f"t{n:03d}" for n in range(10, 20)]
        assert page[0].domains == ("h10.example",) and page[2].domains == ()  # t012: none
        assert all(r.config == "" for r in page)  # never read
        assert len(store.directory(limit=7)) == 7
    finally:
        db.close()
