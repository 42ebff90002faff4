"""The A2A agent card with the AAP 3.1 extension (seed 001), at ``/.well-known/agent-card.json``.

The card is rendered from the settings and the skills the agent really
implements, so what it declares is what ``/a2a`` serves: the same skill list,
the same media types, the same ``inventory.search`` capabilities. Every URL
comes from :class:`~aap.paths.DeploymentUrls` and every protocol version from
:mod:`aap.protocols`, shared with the other discovery documents and the
bindings themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from aap import AAP_VERSION, EXTENSION_URI, SCHEMA_BASE_URL
from aap.agent import DealerAgent
from aap.cardsign import SigningKey, signed
from aap.config.model import Settings
from aap.protocols import A2A_PROTOCOL_VERSION, MCP_PROTOCOL_VERSIONS, MCP_TRANSPORT
from aap.skills.catalog import SkillInfo
from aap.web.accesslog import annotate
from aap.web.documents import StaticDocument

MEDIA_TYPE = "application/json"
MAX_AGE = 300


def mcp_endpoint(settings: Settings) -> dict[str, Any]:
    """The ``McpEndpoint`` object of ``params.mcp`` (seed 004): where and how ``/mcp`` is served."""
    return {
        "url": settings.urls.mcp,
        "transport": MCP_TRANSPORT,
        "protocol_versions": list(MCP_PROTOCOL_VERSIONS),
        "public_read": True,  # no tool needs a token (docs/mcp.md, "Authentication")
    }


def extension_params(settings: Settings, skills: Iterable[SkillInfo]) -> dict[str, Any]:
    """``AapExtensionParams``: deployment id, binding links and the per-skill schema map."""
    urls = settings.urls
    skill_map: dict[str, Any] = {}
    for skill in skills:
        entry: dict[str, Any] = {
            "request_schema": skill.request_schema_url,
            "response_schema": skill.response_schema_url,
        }
        if skill.id == "inventory.search":
            entry["capabilities"] = settings.search.to_json()
        skill_map[skill.id] = entry
    return {
        "id": settings.deployment_id,
        "version": AAP_VERSION,
        "schema_base_url": SCHEMA_BASE_URL,
        "mcp": mcp_endpoint(settings),
        "poppy": urls.poppy,
        "llms_txt": urls.llms_txt,
        "skills": skill_map,
    }


def build_agent_card(settings: Settings, skills: Iterable[SkillInfo]) -> dict[str, Any]:
    """The card as a JSON object (camelCase ProtoJSON field names)."""
    skills = list(skills)
    urls = settings.urls
    agent = settings.agent
    interface: dict[str, Any] = {
        "url": urls.a2a,
        "protocolBinding": "JSONRPC",
        "protocolVersion": A2A_PROTOCOL_VERSION,
    }
    if settings.a2a_tenant:
        interface["tenant"] = settings.a2a_tenant
    card: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "supportedInterfaces": [interface],
        "version": agent.version,
    }
    if agent.provider_organization and agent.provider_url:
        card["provider"] = {"organization": agent.provider_organization, "url": agent.provider_url}
    if agent.documentation_url:
        card["documentationUrl"] = agent.documentation_url
    if agent.icon_url:
        card["iconUrl"] = agent.icon_url
    card["capabilities"] = {
        # Never claim a surface that is not served: the A2A SDK client switches
        # to SendStreamingMessage when streaming is true (docs/a2a.md, "Agent card").
        "streaming": False,
        "pushNotifications": False,
        "extensions": [
            {
                "uri": EXTENSION_URI,
                "description": "Auto Agent Protocol 3.1: typed automotive-retail skills carried as DataParts.",
                "required": True,
                "params": extension_params(settings, skills),
            }
        ],
    }
    card["defaultInputModes"] = [s.request_media_type for s in skills]
    card["defaultOutputModes"] = [s.response_media_type for s in skills]
    card["skills"] = [
        {
            "id": s.id,
            "name": s.name,
            "description": s.description,
            "tags": list(s.tags),
            "inputModes": [s.request_media_type],
            "outputModes": [s.response_media_type],
        }
        for s in skills
    ]
    return card


def card_document(settings: Settings, skills: Iterable[SkillInfo], signing: SigningKey | None = None) -> StaticDocument:
    """The rendered card with its validators (ETag over the exact bytes); with ``signing``, the
    card carries its signature (A2A §8.4, :mod:`aap.cardsign`)."""
    card = build_agent_card(settings, skills)
    body = orjson.dumps(signed(card, signing) if signing is not None else card)
    return StaticDocument(body, MEDIA_TYPE, MAX_AGE)


class AgentCard:
    """The card of one agent, re-rendered only if the implemented skills change."""

    def __init__(self, agent: DealerAgent, signing: SigningKey | None = None) -> None:
        self.agent = agent
        self.signing = signing
        self._key: tuple[str, ...] | None = None
        self._doc: StaticDocument | None = None

    def document(self) -> StaticDocument:
        skills = self.agent.skills
        key = tuple(s.id for s in skills)
        if self._doc is None or key != self._key:
            self._doc, self._key = card_document(self.agent.settings, skills, self.signing), key
        return self._doc

    async def endpoint(self, request: Request) -> Response:
        """``GET /.well-known/agent-card.json``."""
        annotate(request.scope, binding="discovery")
        return self.document().respond(request)
