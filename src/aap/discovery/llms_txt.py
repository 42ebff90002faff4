"""``GET /llms.txt``: the dealer and its AAP skills, for people and language models.

Layout follows the llmstxt.org proposal (the file ``AapExtensionParams.llms_txt``
points at, seed 004): an H1 with the agent name, a ``>`` summary, then ``##``
sections of ``- [title](url): note`` links, the secondary ones under
``## Optional``. It carries only public dealer facts (name, rooftops, welcome
message), never inventory or customer data, and every URL comes from
:class:`~aap.paths.DeploymentUrls` so it agrees with the agent card and
poppy.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aap import AAP_VERSION, EXTENSION_URI
from aap.config.model import Settings
from aap.paths import DeploymentUrls
from aap.protocols import A2A_PROTOCOL_VERSION, MCP_PROTOCOL_VERSIONS, POPPY_PROTOCOL_VERSION, STRUCT_TYPE
from aap.skills.catalog import SkillInfo

MEDIA_TYPE = "text/markdown; charset=utf-8"

# One small, valid request per skill: what a model should send first.
EXAMPLE_REQUESTS: dict[str, dict[str, Any]] = {
    "dealer.information": {"type": "dealer.information.request"},
    "inventory.facets": {"type": "inventory.facets.request"},
    "inventory.search": {
        "type": "inventory.search.request",
        "filters": {"condition": ["used"]},
        "pagination": {"limit": 10},
    },
    "inventory.vehicle": {"type": "inventory.vehicle.request", "vin": "<17-character VIN from a search result>"},
    "lead.submit": {
        "type": "lead.submit.request",
        "customer": {"first_name": "<first>", "last_name": "<last>", "email": "<email>"},
        "consent": {
            "granted_at": "<RFC 3339 time the shopper agreed>",
            "allowed_channels": ["email"],
            "consent_text": "<the exact text the shopper agreed to>",
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "<your agent>"},
        "idempotency_key": "<UUID, reused on retries>",
    },
}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _one_line(text: str) -> str:
    """Collapse whitespace so configured text cannot break the Markdown structure."""
    return " ".join(str(text).split())


def _rooftop_line(rooftop: dict[str, Any]) -> str:
    parts = [f"**{_one_line(rooftop['name'])}**"]
    address = rooftop.get("address") or {}
    place = ", ".join(
        _one_line(address[k]) for k in ("address_line_1", "city", "state", "zip", "country") if address.get(k)
    )
    if place:
        parts.append(place)
    if rooftop.get("timezone"):
        parts.append(f"time zone {rooftop['timezone']}")
    phones = [p["value"] for p in rooftop.get("phones") or [] if p.get("value")]
    if phones:
        parts.append("phone " + phones[0])
    line = " — ".join(parts)
    if rooftop.get("website"):
        line += f" ([website]({rooftop['website']}))"
    return "- " + line


def _summary(settings: Settings, skills: list[SkillInfo], urls: DeploymentUrls) -> str:
    dealer = settings.dealer
    count = len(dealer.rooftops)
    rooftops = f"{count} rooftop" + ("" if count == 1 else "s")
    skill_ids = ", ".join(s.id for s in skills)
    scope = "a marketplace of independent dealers" if settings.scope == "aggregate" else _one_line(dealer.name)
    bindings = f"as A2A SendMessage over JSON-RPC 2.0 at {urls.a2a}, as MCP tools at {urls.mcp}"
    bindings += f", or through the Poppy (PAP {POPPY_PROTOCOL_VERSION}) OpenAPI API" if settings.poppy.enabled else ""
    return (
        f"> {_one_line(settings.agent.description)} {scope} ({rooftops}) on the Auto Agent Protocol "
        f"(AAP) {AAP_VERSION}. Skills: {skill_ids}. Call them {bindings}. "
        f"Agent card: {urls.agent_card}; AAP extension {EXTENSION_URI}."
    )


def _skills_section(skills: list[SkillInfo], urls: DeploymentUrls, poppy: bool) -> list[str]:
    lines = ["## Skills", ""]
    for s in skills:
        lines.append(
            f"- [{s.id}]({urls.schema(s.request_schema + '.schema.json')}): {_one_line(s.description)} "
            f'Request `{{"type":"{s.request_type}",...}}` ({s.request_media_type}); '
            f"response `{s.response_type}` ([schema]({urls.schema(s.response_schema + '.schema.json')})). "
            f"MCP tool `{s.tool_name}`"
            + (f"; Poppy `POST {urls.poppy_operation(s.id)}`." if poppy else ".")
            + ("" if s.read_only else " Needs the shopper's recorded consent and an idempotency_key.")
        )
    return lines


def _a2a_section(skills: list[SkillInfo], urls: DeploymentUrls, a2a_tenant: str | None) -> list[str]:
    search = next((s for s in skills if s.id == "inventory.search"), skills[0])
    params: dict[str, Any] = {
        "message": {
            "messageId": "<new UUID>",
            "role": "ROLE_USER",
            "parts": [
                {
                    "data": EXAMPLE_REQUESTS.get(search.id, {"type": search.request_type}),
                    "mediaType": search.request_media_type,
                }
            ],
        },
        "configuration": {"acceptedOutputModes": [search.response_media_type]},
    }
    if a2a_tenant:
        params["tenant"] = a2a_tenant
    body = {"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": params}
    return [
        "## Calling over A2A (JSON-RPC 2.0)",
        "",
        f"`POST {urls.a2a}` with `Content-Type: application/json`, `A2A-Version: {A2A_PROTOCOL_VERSION}` and "
        f"`A2A-Extensions: {EXTENSION_URI}`. Put the AAP request object in the `data` of one part, with "
        "the skill's request media type, and list the response media type in `acceptedOutputModes`:",
        "",
        "```json",
        _compact(body),
        "```",
        "",
        'The answer is `result.message.parts[0].data` = `{"type":"<skill>.response","data":{...}}`. '
        "A skill failure is a JSON-RPC error whose `data[]` holds a "
        f'`{STRUCT_TYPE}` detail with `value.type == "aap.error"` '
        "(`code`, `message`, `retryable`, `details.errors[]`).",
    ]


def _mcp_section(urls: DeploymentUrls) -> list[str]:
    return [
        "## Calling over MCP",
        "",
        f"Streamable HTTP endpoint `{urls.mcp}`, revisions {', '.join(MCP_PROTOCOL_VERSIONS)}; reads need no token. "
        "`tools/call` arguments are exactly the AAP request object (with its `type`); results come back as "
        "`structuredContent` holding the AAP response, and skill failures as `isError: true` with the "
        "`aap.error` object.",
    ]


def _poppy_section(urls: DeploymentUrls) -> list[str]:
    return [
        f"## Calling over Poppy (Personal Agent Protocol {POPPY_PROTOCOL_VERSION})",
        "",
        f"Discovery document `{urls.poppy}`; native OpenAPI API described at `{urls.poppy_openapi}`. "
        "A personal agent obtains a guest (signed-out) DPoP-bound session token from the issuer named in "
        "poppy.json with a private_key_jwt client assertion and a session assertion, then calls "
        "`POST <server>/<skill id>` with `Authorization: DPoP <token>` and a DPoP proof carrying `ath`. "
        "Bodies are the AAP request and response objects; failures are `aap.error` bodies.",
    ]


def _capabilities_section(settings: Settings) -> list[str]:
    caps = settings.search
    return [
        "## Search capabilities",
        "",
        f"- Scope: {caps.scope}. Filters: {', '.join(caps.filters)}.",
        f"- Sort fields: {', '.join(caps.sort_fields)}; default {caps.default_sort[0]} {caps.default_sort[1]}.",
        f"- Page size: default {caps.default_limit}, at most {caps.max_limit} (larger limits are rejected). "
        "Continue with `pagination.cursor` = the previous `next_cursor` and the same query"
        + ("; `pagination.skip` is accepted as an entry point." if caps.offset else "; `skip` is not accepted."),
        f"- Currencies: {', '.join(caps.currencies)} (default {caps.default_currency}, no conversion); "
        f"mileage unit default {caps.default_mileage_unit} (mi and km accepted).",
        "- Text filters (make, model, body, ...) match whole values, case-insensitively; `query` is keyword "
        "tokens matched as substrings of make, model, trim, VIN, stock and features, not natural language. "
        "Feature filters use the codes listed by inventory.facets.",
    ]


def _artifacts_section(settings: Settings, urls: DeploymentUrls) -> list[str]:
    lines = [
        "## Machine-readable documents",
        "",
        f"- [Agent card]({urls.agent_card}): A2A agent card with the AAP {AAP_VERSION} extension parameters",
        f"- [A2A OpenAPI]({urls.a2a_openapi}): the AAP JSON-RPC binding with this deployment's server URL",
        f"- [MCP endpoint]({urls.mcp}): streamable HTTP, tools aap_<skill>",
    ]
    if settings.poppy.enabled:
        lines += [
            f"- [poppy.json]({urls.poppy}): Personal Agent Protocol discovery (guest issuer, native API)",
            f"- [Poppy OpenAPI]({urls.poppy_openapi}): the native API",
        ]
    return lines + [
        f"- [API catalog]({urls.api_catalog}): RFC 9727 linkset of these documents",
        f"- [AI Catalog]({urls.ai_catalog}): the agent card and the MCP endpoint as AI Catalog entries",
        f"- [AAP JSON Schemas]({urls.schemas}): local copies of every {AAP_VERSION} schema",
    ]


def _optional_section(settings: Settings) -> list[str]:
    links: list[str] = []
    agent = settings.agent
    if agent.documentation_url:
        links.append(f"- [Documentation]({agent.documentation_url}): operator documentation for this agent")
    if agent.provider_url:
        name = _one_line(agent.provider_organization or "Provider")
        links.append(f"- [{name}]({agent.provider_url}): who operates this agent")
    links.append("- [Auto Agent Protocol](https://autoagentprotocol.org): the protocol specification")
    return ["## Optional", "", *links]


def render(settings: Settings, skills: Iterable[SkillInfo]) -> str:
    """The llms.txt document of this deployment."""
    skills = list(skills)
    if not skills:
        raise ValueError("llms.txt needs at least one implemented skill")
    urls = settings.urls
    dealer = settings.dealer
    lines = [f"# {_one_line(settings.agent.name)}", "", _summary(settings, skills, urls), ""]
    welcome = dealer.info.get("welcome_message")
    if welcome:
        lines += [_one_line(welcome), ""]
    lines += [f"## Dealer: {_one_line(dealer.name)}", ""]
    lines += [_rooftop_line(r) for r in dealer.rooftops]
    lines.append("")
    poppy = settings.poppy.enabled
    for section in (
        _skills_section(skills, urls, poppy),
        _a2a_section(skills, urls, settings.a2a_tenant),
        _mcp_section(urls),
        _poppy_section(urls) if poppy else [],
        _capabilities_section(settings) if any(s.id == "inventory.search" for s in skills) else [],
        _artifacts_section(settings, urls),
        _optional_section(settings),
    ):
        if section:
            lines += section + [""]
    return "\n".join(lines).rstrip() + "\n"
