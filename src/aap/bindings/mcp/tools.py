"""The MCP tool definitions: one tool per implemented AAP skill.

A tool's arguments are the skill's AAP request object; ``type`` may be left out
(the tool names it) and ``null`` means absent (:mod:`.calls`). Its structured
result is the typed AAP response, or ``aap.error`` with ``isError``. What
``tools/list`` publishes is sized for the models that read it on every turn
(docs/mcp.md, "For LLM agents"): the ``inputSchema`` a provider accepts
(:mod:`.llm_schema`), an ``outputSchema`` that names the response by reference,
and a description that says when to use the tool. ``[mcp] tool_schemas =
"full"`` publishes the bundled AAP schemas instead (:mod:`.schemas`). Names and
annotations are the project's choices, written down in docs/mcp.md ("Tools"):
reads are read-only and closed-world; ``lead.submit`` is additive, idempotent
by ``idempotency_key`` and reaches the dealership (open world). AAP metadata
that MCP annotations have no hint for goes into the tool's ``_meta`` under the
vendor prefix ``org.autoagentprotocol/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types

from aap.bindings.mcp.llm_schema import llm_input_schema
from aap.bindings.mcp.schemas import ERROR_SCHEMA, bundled, output_schema, schema_url
from aap.skills.catalog import SkillInfo

META_PREFIX = "org.autoagentprotocol/"
CAPABILITIES_META_KEY = META_PREFIX + "capabilities"

#: When a model should use each tool, in one or two sentences (docs/mcp.md, "For LLM agents").
DESCRIPTIONS = {
    "dealer.information": "The dealership's public profile: locations (rooftops), addresses, opening hours, "
    "contacts, fees and services. Use it for questions about the dealer, or with a listing's dealer_id to "
    "learn who sells that vehicle.",
    "inventory.facets": "What is in stock, counted: makes, models, body styles, conditions, price, year and "
    "mileage ranges, and the feature codes that features_all/features_any take. Use it to learn which "
    "values exist before searching.",
    "inventory.search": "Search the vehicles in stock with filters, sorting and pages (next_cursor). Each "
    "listing is a summary; aap_inventory_vehicle with its vehicle_id gives the full record (photos, "
    "equipment, description, fees, VIN).",
    "inventory.vehicle": "One vehicle's full record by vehicle_id, vin or stock: availability, price and "
    "fees, equipment with evidence, photos and the dealer's page. Use it when the shopper is interested "
    "in a listing.",
    "lead.submit": "Send the shopper's inquiry (a vehicle, a trade-in, a test drive or visit) to the "
    "dealership, who will contact them. First ask the shopper for their name, their email or phone, and "
    "their consent to be contacted; never invent contact details or consent, and put the words they "
    "agreed to in consent.consent_text. Reuse the same idempotency_key when retrying.",
}


@dataclass(frozen=True)
class ToolSpec:
    """A tool and the skill it runs."""

    skill: SkillInfo
    tool: types.Tool

    @property
    def name(self) -> str:
        return self.tool.name


def _annotations(skill: SkillInfo) -> types.ToolAnnotations:
    if skill.read_only:
        return types.ToolAnnotations(title=skill.name, read_only_hint=True, open_world_hint=False)
    return types.ToolAnnotations(
        title=skill.name,
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=True,
    )


def reference_output_schema(skill: SkillInfo) -> dict[str, Any]:
    """The ``outputSchema`` by reference: the response's ``type`` or ``aap.error``, the rest by URL.

    Structured content is the AAP response (or, with ``isError``, the ``aap.error``) and
    always matches it; clients that validate results (the TypeScript SDK 1.x validates
    errors too) accept both. The full schema is at the URL, and in ``_meta``.
    """
    return {
        "type": "object",
        "description": f"The AAP {skill.response_type} ({skill.response_schema_url}); with isError, an "
        f"aap.error ({schema_url(ERROR_SCHEMA)}).",
        "properties": {"type": {"type": "string", "enum": [skill.response_type, "aap.error"]}},
        "required": ["type"],
    }


def tool_for(skill: SkillInfo, search_capabilities: dict[str, Any], *, full_schemas: bool = False) -> ToolSpec:
    """The MCP tool of one skill; the search tool also carries the search capabilities."""
    meta: dict[str, Any] = {
        META_PREFIX + "skill": skill.id,
        META_PREFIX + "request_schema": skill.request_schema_url,
        META_PREFIX + "response_schema": skill.response_schema_url,
    }
    if skill.id == "inventory.search":
        meta[CAPABILITIES_META_KEY] = search_capabilities
    if full_schemas:
        input_schema, result_schema = bundled(skill.request_schema), output_schema(skill.response_schema)
    else:
        input_schema, result_schema = llm_input_schema(skill.request_schema), reference_output_schema(skill)
    tool = types.Tool(
        name=skill.tool_name,
        title=skill.name,
        description=DESCRIPTIONS[skill.id],
        input_schema=input_schema,
        output_schema=result_schema,
        annotations=_annotations(skill),
        _meta=meta,
    )
    return ToolSpec(skill=skill, tool=tool)


def build_tools(
    skills: list[SkillInfo], search_capabilities: dict[str, Any], *, full_schemas: bool = False
) -> dict[str, ToolSpec]:
    """Tools by name, in skill-catalog order (``tools/list`` order is deterministic)."""
    specs = (tool_for(s, search_capabilities, full_schemas=full_schemas) for s in skills)
    return {spec.name: spec for spec in specs}
