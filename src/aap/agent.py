"""The transport-free dealer agent: typed request in, typed response out.

The agent holds the skill table (the five AAP skills by default, each with its error
classifier) and the one request check every door shares: the structural bounds, then the
skill's request schema, with every problem listed. Its skills receive a
:class:`~aap.skills.context.SkillDeps` (settings, stores, clock), never the agent itself.

Doors call it through :class:`aap.gateway.Gateway`, which admits the caller, prices the
call and places the work; :meth:`DealerAgent.answer` is what the gateway runs. In-process
callers (tools, tests) use :meth:`DealerAgent.run` and :meth:`DealerAgent.handle`, which
answer plain JSON values. Nothing here knows about HTTP, JSON-RPC or rate limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from aap.config.model import Settings
from aap.errors import AapError, Problem, problem
from aap.jsontext import decoded
from aap.skills import dealer_information, inventory_facets, inventory_search, inventory_vehicle, lead_submit
from aap.skills.catalog import BY_REQUEST_TYPE, SKILLS, SkillInfo
from aap.skills.context import CallContext, SkillDeps
from aap.spec import validate
from aap.spec.bounds import bound_problems
from aap.store import Stores

__all__ = ["CallContext", "DealerAgent", "SkillDeps", "normalize_numbers", "schema_error"]

SkillHandler = Callable[[SkillDeps, dict[str, Any], CallContext], dict[str, Any]]
Classifier = Callable[[Any, list[Problem]], AapError]
#: A skill's classifier made for one agent's deps, when a request fails its schema (rarely:
#: an agent holds no classifier until then).
ClassifierOf = Callable[[SkillDeps], Classifier]


INT64_MIN, INT64_END = -(2**63), 2**63

#: Thread CPU seconds that explaining a failed validation may take (the list ends with a
#: ``budget`` entry past it). Inside the request bounds our schemas never come near it.
VALIDATION_BUDGET = 0.015


def normalize_numbers(value: Any) -> Any:
    """One number model for every binding's JSON reader, recursively.

    Integral floats (``25.0`` from protobuf-Value clients) within 64 bits become
    ints. Integers beyond 64 bits become the nearest double, which is what the
    A2A and Poppy readers (orjson) already hand over, while the MCP SDK's reader
    keeps them as Python ints: a ``price_max`` of ``1e30`` written as an integer
    then means the same on every binding (docs/architecture.md, "The request
    path"). One beyond the double range becomes an infinity, which no schema
    accepts as a number.
    """
    if isinstance(value, str):  # most values of a request: nothing to look at
        return value
    if isinstance(value, float) and value.is_integer() and INT64_MIN <= value < INT64_END:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value < INT64_END:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, dict):
        return {k: normalize_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_numbers(v) for v in value]
    return value


def schema_error(problems: list[Problem]) -> AapError:
    """``SCHEMA_VALIDATION_FAILED`` carrying every problem found."""
    return AapError("SCHEMA_VALIDATION_FAILED", errors=problems)


def _given(classify: Classifier) -> ClassifierOf:
    """A classifier registered as it is, whatever the deps."""

    def of(_: SkillDeps) -> Classifier:
        return classify

    return of


def _require_object(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise schema_error([problem("", "type", "The AAP request must be a JSON object.")])


def _classify_search(deps: SkillDeps) -> Classifier:
    return inventory_search.make_classifier(deps)


def _classify_facets(deps: SkillDeps) -> Classifier:
    return inventory_search.make_classifier(deps, sort=False)


def _classify_lead(deps: SkillDeps) -> Classifier:
    return lead_submit.make_classifier(deps.settings)


#: The five AAP skills: every agent's table until one registers another (then its own copy).
#: Immutable, so the agents of a platform's tenants share it.
DEFAULT_HANDLERS: Mapping[str, SkillHandler] = MappingProxyType(
    {
        "dealer.information": dealer_information.run,
        "inventory.facets": inventory_facets.run,
        "inventory.search": inventory_search.run,
        "inventory.vehicle": inventory_vehicle.run,
        lead_submit.SKILL_ID: lead_submit.run,
    }
)
DEFAULT_CLASSIFIERS: Mapping[str, ClassifierOf] = MappingProxyType(
    {
        "inventory.facets": _classify_facets,
        "inventory.search": _classify_search,
        lead_submit.SKILL_ID: _classify_lead,
    }
)
#: The request media types of :data:`DEFAULT_HANDLERS`' skills: an agent that registers none of
#: its own answers with these, made once per process rather than once per agent built.
DEFAULT_REQUEST_MEDIA_TYPES = frozenset(s.request_media_type for s in SKILLS.values() if s.id in DEFAULT_HANDLERS)


class DealerAgent:
    """The core: the skill handlers (the five AAP skills by default) over one :class:`SkillDeps`.

    A platform worker holds thousands of agents, so an agent holds its deps and nothing per
    skill: the skill table is the shared :data:`DEFAULT_HANDLERS` until :meth:`register`
    changes it, and a skill's classifier is made when a request fails its schema."""

    def __init__(self, settings: Settings, stores: Stores, deps: SkillDeps | None = None) -> None:
        self.deps = deps or SkillDeps(settings, stores)
        self._handlers: Mapping[str, SkillHandler] = DEFAULT_HANDLERS
        self._classifiers: Mapping[str, ClassifierOf] = DEFAULT_CLASSIFIERS
        self._request_media_types: frozenset[str] | None = DEFAULT_REQUEST_MEDIA_TYPES

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    @property
    def stores(self) -> Stores:
        return self.deps.stores

    # -- registration -------------------------------------------------------
    def register(
        self,
        skill_id: str,
        handler: SkillHandler,
        classify: Classifier | None = None,
    ) -> None:
        """Declare a skill as implemented. ``classify`` maps schema problems to an AapError."""
        self._handlers = {**self._handlers, skill_id: handler}
        classifiers = {k: v for k, v in self._classifiers.items() if k != skill_id}
        self._request_media_types = None
        if classify is not None:
            classifiers[skill_id] = _given(classify)
        self._classifiers = classifiers

    @property
    def skills(self) -> list[SkillInfo]:
        """Implemented skills, in catalog order (what the agent card declares)."""
        return [s for s in SKILLS.values() if s.id in self._handlers]

    @property
    def request_media_types(self) -> frozenset[str]:
        """The request media types of the implemented skills (what a door checks a part's
        ``mediaType`` against on every call: made once per registration, not per call)."""
        if self._request_media_types is None:
            self._request_media_types = frozenset(s.request_media_type for s in self.skills)
        return self._request_media_types

    def implements(self, skill_id: str) -> bool:
        return skill_id in self._handlers

    def _unsupported(self) -> AapError:
        return AapError("UNSUPPORTED_SKILL", hint="Use one of: " + ", ".join(s.request_type for s in self.skills))

    # -- dispatch -----------------------------------------------------------
    def skill_for(self, payload: Any) -> SkillInfo:
        """Resolve the skill from ``payload.type``; ``UNSUPPORTED_SKILL`` otherwise."""
        _require_object(payload)
        if "type" not in payload:
            raise schema_error([problem("/type", "required", "is required")])
        kind = payload["type"]
        if not isinstance(kind, str):  # where the validator puts it: the member, its keyword
            raise schema_error([problem("/type", "type", "must be string")])
        skill = BY_REQUEST_TYPE.get(kind)
        if skill is None or skill.id not in self._handlers:
            raise self._unsupported()
        return skill

    def handle(self, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """Resolve the skill from ``payload.type``, then :meth:`run` it."""
        return self.run(self.skill_for(payload), payload, ctx)

    def run(self, skill: SkillInfo, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """:meth:`answer` in plain JSON values (stored documents decoded): for in-process callers."""
        response: dict[str, Any] = decoded(self.answer(skill, payload, ctx))
        return response

    def answer(self, skill: SkillInfo, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """Validate ``payload`` against ``skill``'s request schema and run the skill.

        The caller has resolved ``skill`` already (and checked that ``payload``
        claims it: a ``type`` naming another skill fails the schema's ``const``).
        The response may hold stored documents as they are (:class:`aap.jsontext.StoredJson`).
        """
        if skill.id not in self._handlers:
            raise self._unsupported()
        return self._handlers[skill.id](self.deps, self.checked(skill, payload), ctx)

    def checked(self, skill: SkillInfo, payload: Any) -> dict[str, Any]:
        """``payload`` as the skill receives it, or the ``AapError`` listing every problem.

        The structural bounds come first (:mod:`aap.spec.bounds`): a request over them
        is refused with those problems alone, before anything walks it whole. Then the
        request schema, collecting every problem within :data:`VALIDATION_BUDGET`; a
        skill's classifier picks the code and adds what only it can see.
        """
        _require_object(payload)
        over = bound_problems(payload)
        if over:
            raise AapError(
                "SCHEMA_VALIDATION_FAILED",
                "The request is larger than this endpoint accepts.",
                errors=over,
                hint='Send fewer or shorter values (docs/search.md, "Request bounds").',
            )
        request: dict[str, Any] = normalize_numbers(payload)
        problems = validate(request, skill.request_schema, budget=VALIDATION_BUDGET)
        if problems:
            classify = self._classifiers.get(skill.id)
            raise classify(self.deps)(request, problems) if classify else schema_error(problems)
        return request

    def refusal(self, skill: SkillInfo, payload: Any) -> AapError | None:
        """The error :meth:`checked` raises for ``payload``, or None when it would pass."""
        try:
            self.checked(skill, payload)
        except AapError as error:
            return error
        return None
