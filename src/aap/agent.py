"""The transport-free dealer agent: typed request in, typed response out.

Every binding (A2A, MCP, Poppy) calls :meth:`DealerAgent.handle` with the AAP
request object and a :class:`CallContext`; it gets back the typed response
object (``{"type": "<skill>.response", "data": ..., "message"?}``) or an
:class:`~aap.errors.AapError`. Nothing here knows about HTTP or JSON-RPC.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from aap.config.model import Settings
from aap.errors import AapError, problem
from aap.skills.registry import BY_REQUEST_TYPE, SKILLS, SkillInfo
from aap.spec import validate

log = logging.getLogger("aap.agent")


@dataclass
class CallContext:
    """Who is calling, over what. ``caller_id`` is a *verified* identity or None."""

    binding: str
    caller_id: str | None = None
    client_id: str | None = None
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


SkillHandler = Callable[["DealerAgent", dict[str, Any], CallContext], dict[str, Any]]


def normalize_numbers(value: Any) -> Any:
    """Turn integral floats (``25.0`` from protobuf-Value clients) into ints, recursively."""
    if isinstance(value, float) and value.is_integer() and -(2**63) <= value < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: normalize_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_numbers(v) for v in value]
    return value


def schema_error(problems: list[dict[str, str]]) -> AapError:
    """``SCHEMA_VALIDATION_FAILED`` carrying every problem found."""
    return AapError("SCHEMA_VALIDATION_FAILED", errors=problems)


class DealerAgent:
    """The core: settings + stores + the skill handlers."""

    def __init__(self, settings: Settings, stores: Any) -> None:
        self.settings = settings
        self.stores = stores  # aap.store.Stores: .inventory, .state, .leads, .poppy
        self._handlers: dict[str, SkillHandler] = {}
        self._classifiers: dict[str, Callable[[Any, list[dict[str, str]]], AapError]] = {}
        from aap.skills import install_default_skills

        install_default_skills(self)

    # -- registration -------------------------------------------------------
    def register(
        self,
        skill_id: str,
        handler: SkillHandler,
        classify: Callable[[Any, list[dict[str, str]]], AapError] | None = None,
    ) -> None:
        """Declare a skill as implemented. ``classify`` maps schema problems to an AapError."""
        self._handlers[skill_id] = handler
        if classify is not None:
            self._classifiers[skill_id] = classify

    @property
    def skills(self) -> list[SkillInfo]:
        """Implemented skills, in registry order (what the agent card declares)."""
        return [s for s in SKILLS.values() if s.id in self._handlers]

    def implements(self, skill_id: str) -> bool:
        return skill_id in self._handlers

    # -- dispatch -----------------------------------------------------------
    def skill_for(self, payload: Any) -> SkillInfo:
        """Resolve the skill from ``payload.type``; ``UNSUPPORTED_SKILL`` otherwise."""
        if not isinstance(payload, dict):
            raise schema_error([problem("", "type", "The AAP request must be a JSON object.")])
        kind = payload.get("type")
        if not isinstance(kind, str):
            raise schema_error([problem("", "required", "The AAP request needs a string 'type'.")])
        skill = BY_REQUEST_TYPE.get(kind)
        if skill is None or skill.id not in self._handlers:
            raise AapError(
                "UNSUPPORTED_SKILL",
                hint="Use one of: " + ", ".join(s.request_type for s in self.skills),
            )
        return skill

    def handle(self, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """Validate ``payload`` against its request schema and run the skill."""
        skill = self.skill_for(payload)
        problems = validate(payload, skill.request_schema)
        if problems:
            classify = self._classifiers.get(skill.id)
            raise classify(payload, problems) if classify else schema_error(problems)
        request = normalize_numbers(payload)
        return self._handlers[skill.id](self, request, ctx)
