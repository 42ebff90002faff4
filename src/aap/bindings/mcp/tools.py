"""The MCP tool definitions: one tool per implemented AAP skill.

A tool's arguments are exactly the skill's AAP request object, ``type``
included, so a payload is byte-for-byte the same on MCP, A2A and Poppy; its
structured result is the typed AAP response, or ``aap.error`` with ``isError``.
The schemas are the AAP ones, bundled (see :mod:`aap.bindings.mcp.schemas`);
the output schema admits both outcomes. Names and annotations are the
project's choices, written down in docs/mcp.md ("Tools"): reads are read-only
and closed-world; ``lead.submit`` is additive, idempotent by
``idempotency_key`` and reaches the dealership (open world). AAP metadata that
MCP annotations have no hint for goes into the tool's ``_meta`` under the
vendor prefix ``org.autoagentprotocol/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types

from aap.bindings.mcp.schemas import bundled, output_schema
from aap.skills.catalog import SkillInfo

META_PREFIX = "org.autoagentprotocol/"
CAPABILITIES_META_KEY = META_PREFIX + "capabilities"


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


def _description(skill: SkillInfo) -> str:
    text = (
        f"{skill.description} Arguments: the AAP {skill.request_type} object, including "
        f'"type": "{skill.request_type}". Result: the {skill.response_type} object; a failure is an '
        "aap.error object with isError true."
    )
    if not skill.read_only:
        text += (
            " Requires the customer's contact consent in the payload; retrying with the same "
            "idempotency_key replays the original result."
        )
    return text


def tool_for(skill: SkillInfo, search_capabilities: dict[str, Any]) -> ToolSpec:
    """The MCP tool of one skill; the search tool also carries the search capabilities."""
    meta: dict[str, Any] = {
        META_PREFIX + "skill": skill.id,
        META_PREFIX + "request_schema": skill.request_schema_url,
        META_PREFIX + "response_schema": skill.response_schema_url,
    }
    if skill.id == "inventory.search":
        meta[CAPABILITIES_META_KEY] = search_capabilities
    tool = types.Tool(
        name=skill.tool_name,
        title=skill.name,
        description=_description(skill),
        input_schema=bundled(skill.request_schema),
        output_schema=output_schema(skill.response_schema),
        annotations=_annotations(skill),
        _meta=meta,
    )
    return ToolSpec(skill=skill, tool=tool)


def build_tools(skills: list[SkillInfo], search_capabilities: dict[str, Any]) -> dict[str, ToolSpec]:
    """Tools by name, in skill-catalog order (``tools/list`` order is deterministic)."""
    return {spec.name: spec for spec in (tool_for(s, search_capabilities) for s in skills)}
