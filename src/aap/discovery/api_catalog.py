"""``/.well-known/api-catalog``: an RFC 9727 API catalog as an RFC 9264 linkset.

The first linkset entry is anchored at the catalog itself and lists each API
with ``item`` (and links the AI Catalog, ``ai-catalog``); then one entry per API (A2A JSON-RPC, MCP, Poppy native API)
anchors its description (``service-desc``), documentation (``service-doc``)
and metadata (``service-meta``: the agent card or poppy.json). Same URLs as
every other discovery document, from :class:`~aap.paths.DeploymentUrls`.
"""

from __future__ import annotations

from typing import Any

import orjson

from aap.config.model import Settings

PROFILE = "https://www.rfc-editor.org/info/rfc9727"
MEDIA_TYPE = f'application/linkset+json; profile="{PROFILE}"'
OPENAPI_JSON = "application/vnd.oai.openapi+json"


def _link(href: str, media_type: str, title: str | None = None) -> dict[str, str]:
    link = {"href": href, "type": media_type}
    if title:
        link["title"] = title
    return link


def build_linkset(settings: Settings) -> dict[str, Any]:
    """The linkset object of this deployment."""
    urls = settings.urls
    poppy = settings.poppy.enabled
    docs = [_link(urls.llms_txt, "text/markdown", "llms.txt: the dealer agent and how to call it")]
    if settings.agent.documentation_url:
        docs.append(_link(settings.agent.documentation_url, "text/html", "Documentation"))
    card = _link(urls.agent_card, "application/json", "A2A agent card with the AAP extension")
    items = [
        {"href": urls.a2a, "title": "AAP over A2A JSON-RPC 2.0"},
        {"href": urls.mcp, "title": "AAP over MCP (streamable HTTP)"},
    ]
    if poppy:
        items.append({"href": urls.poppy_api, "title": "AAP native API (Poppy / PAP 0.3)"})
    # The AI Catalog lists the same agent for AI clients (its "ai-catalog" link relation).
    ai_catalog = [_link(urls.ai_catalog, "application/ai-catalog+json", "AI Catalog of this agent")]
    linkset: list[dict[str, Any]] = [
        {"anchor": urls.api_catalog, "item": items, "ai-catalog": ai_catalog},
        {
            "anchor": urls.a2a,
            "service-desc": [_link(urls.a2a_openapi, OPENAPI_JSON, "OpenAPI of the A2A JSON-RPC binding")],
            "service-doc": docs,
            "service-meta": [card],
        },
        {"anchor": urls.mcp, "service-doc": docs, "service-meta": [card]},
    ]
    if poppy:
        linkset.append(
            {
                "anchor": urls.poppy_api,
                "service-desc": [_link(urls.poppy_openapi, OPENAPI_JSON, "OpenAPI of the native API")],
                "service-doc": docs,
                "service-meta": [_link(urls.poppy, "application/json", "Poppy discovery document")],
            }
        )
    return {"linkset": linkset}


def render(settings: Settings) -> bytes:
    return orjson.dumps(build_linkset(settings), option=orjson.OPT_INDENT_2)
