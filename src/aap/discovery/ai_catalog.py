"""``/.well-known/ai-catalog.json``: an AI Catalog (``specVersion`` 0.9) of this agent.

AI Catalog (``application/ai-catalog+json``) lists typed entries, each referencing or embedding
an artifact's own document; A2A's discovery points buyers at it because a well-known agent card
can only name one agent a host. This agent's catalog holds (docs/a2a.md, "AI Catalog"):

- its A2A agent card, by URL (``application/a2a-agent-card+json``);
- its MCP endpoint as an MCP Server Card (``application/mcp-server-card+json``, the v2 shape of
  the MCP Server Card extension), embedded as ``data``: aap serves no card document of its own
  for it, and an embedded one cannot disagree with a second URL;
- with Poppy on, its ``poppy.json`` (**decision:** ``application/json``: Poppy registers no media
  type of its own, and an invented one would be worse than the plain truth).

Identifiers follow the catalog's ``urn:air:{publisher}:{namespace}:{name}`` form with the host
the agent is served at as publisher and its deployment id as name, so they are the same in every
catalog that lists it (the platform's, :mod:`aap.discovery.platform_catalog`). No entry repeats
a name, description or version the referenced artifact carries itself (the specification's
"authoritative source" rule).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import orjson

import aap
from aap.config.model import Settings
from aap.protocols import MCP_PROTOCOL_VERSIONS

MEDIA_TYPE = "application/ai-catalog+json"
SPEC_VERSION = "0.9"
A2A_CARD = "application/a2a-agent-card+json"
MCP_SERVER_CARD = "application/mcp-server-card+json"
SERVER_CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/v2/server-card.schema.json"
POPPY_DOCUMENT = "application/json"
#: Text limits of the MCP Server Card (``title`` and ``description``).
SERVER_CARD_TEXT = 100


def publisher(url: str) -> str:
    """The ``{publisher}`` of an identifier: the host a URL names (without its port)."""
    return urlsplit(url).hostname or "localhost"


def identifier(url: str, namespace: str, name: str) -> str:
    """``urn:air:{host of url}:{namespace}:{name}``."""
    return f"urn:air:{publisher(url)}:{namespace}:{name}"


def _short(text: str, limit: int = SERVER_CARD_TEXT) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def server_card(settings: Settings) -> dict[str, Any]:
    """This agent's MCP endpoint as an MCP Server Card (v2): identity, transport, revisions."""
    host = publisher(settings.public_url)
    name = re.sub(r"[^a-zA-Z0-9._-]", "-", settings.deployment_id) or "aap"
    return {
        "$schema": SERVER_CARD_SCHEMA,
        "name": ".".join(reversed(host.split("."))) + "/" + name,
        "title": _short(settings.agent.name),
        "description": _short(settings.agent.description),
        "version": aap.__version__,  # the serverInfo version an MCP client sees
        "websiteUrl": settings.urls.origin,
        "remotes": [
            {
                "type": "streamable-http",
                "url": settings.urls.mcp,
                "supportedProtocolVersions": list(MCP_PROTOCOL_VERSIONS),
            }
        ],
    }


def host_info(settings: Settings) -> dict[str, Any]:
    """Who runs the catalog: the agent's provider, else the dealer; its host as identifier."""
    agent = settings.agent
    info: dict[str, Any] = {
        "displayName": agent.provider_organization or settings.dealer.name,
        "identifier": publisher(settings.public_url),
    }
    if agent.documentation_url:
        info["documentationUrl"] = agent.documentation_url
    return info


def build_catalog(settings: Settings) -> dict[str, Any]:
    """The catalog object of this agent."""
    urls = settings.urls
    name = settings.deployment_id
    entries: list[dict[str, Any]] = [
        {
            "identifier": identifier(urls.base_url, "a2a", name),
            "type": A2A_CARD,
            "url": urls.agent_card,
            "tags": ["automotive", "aap"],
        },
        {
            "identifier": identifier(urls.base_url, "mcp", name),
            "type": MCP_SERVER_CARD,
            "data": server_card(settings),
            "tags": ["automotive", "aap"],
        },
    ]
    if settings.poppy.enabled:
        entries.append(
            {
                "identifier": identifier(urls.base_url, "poppy", name),
                "displayName": _short(f"{settings.agent.name}: Poppy discovery document"),
                "type": POPPY_DOCUMENT,
                "url": urls.poppy,
                "tags": ["automotive", "aap", "poppy"],
            }
        )
    return {"specVersion": SPEC_VERSION, "host": host_info(settings), "entries": entries}


def render(settings: Settings) -> bytes:
    return orjson.dumps(build_catalog(settings), option=orjson.OPT_INDENT_2)
