"""The transport-free dealer agent: typed request in, typed response out.

Every binding (A2A, MCP, Poppy) resolves the skill of a request once — A2A
from ``data.type`` with :meth:`DealerAgent.skill_for`, MCP from the tool name,
Poppy from the operation path — and calls :meth:`DealerAgent.run` with it, the
AAP request object and a :class:`CallContext`; it gets back the typed response
object (``{"type": "<skill>.response", "data": ..., "message"?}``) or an
:class:`~aap.errors.AapError`. :meth:`DealerAgent.handle` does both steps for
callers that hold only the payload. Nothing here knows about HTTP or JSON-RPC.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aap.config.model import Settings
from aap.errors import AapError, Problem, problem
from aap.ratelimit import RateLimiter
from aap.skills import dealer_information, inventory_facets, inventory_search, inventory_vehicle, lead_submit
from aap.skills.catalog import BY_REQUEST_TYPE, SKILLS, SkillInfo
from aap.spec import validate
from aap.spec.bounds import bound_problems
from aap.store import Stores


@dataclass
class CallContext:
    """Who is calling, over what. ``caller_id`` is a *verified* identity or None."""

    binding: str
    caller_id: str | None = None
    client_id: str | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    #: The binding writes the answer with ``orjson.dumps`` as it is: stored listing documents
    #: may stay encoded in it (``orjson.Fragment``) instead of being decoded and encoded again.
    raw_documents: bool = False


_NAME, _NAMES = 40, 40  # a shape keeps at most this many names of at most this length

SkillHandler = Callable[["DealerAgent", dict[str, Any], CallContext], dict[str, Any]]
Classifier = Callable[[Any, list[Problem]], AapError]


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


def _require_object(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise schema_error([problem("", "type", "The AAP request must be a JSON object.")])


class DealerAgent:
    """The core: settings + stores + the skill handlers (the five AAP skills by default)."""

    def __init__(self, settings: Settings, stores: Stores) -> None:
        self.settings = settings
        self.stores = stores
        #: The one rate limiter of this process: every binding spends from its leases.
        self.limiter = RateLimiter(stores.state, settings.rate_limit)
        self._handlers: dict[str, SkillHandler] = {}
        self._classifiers: dict[str, Classifier] = {}
        self.register("dealer.information", dealer_information.run)
        self.register("inventory.facets", inventory_facets.run, inventory_search.make_classifier(self, sort=False))
        self.register("inventory.search", inventory_search.run, inventory_search.make_classifier(self))
        self.register("inventory.vehicle", inventory_vehicle.run)
        lead_submit.install(self)  # brings its own error classifier

    # -- registration -------------------------------------------------------
    def register(
        self,
        skill_id: str,
        handler: SkillHandler,
        classify: Classifier | None = None,
    ) -> None:
        """Declare a skill as implemented. ``classify`` maps schema problems to an AapError."""
        self._handlers[skill_id] = handler
        if classify is not None:
            self._classifiers[skill_id] = classify

    @property
    def skills(self) -> list[SkillInfo]:
        """Implemented skills, in catalog order (what the agent card declares)."""
        return [s for s in SKILLS.values() if s.id in self._handlers]

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

    def work_shape(self, skill: SkillInfo, payload: Any) -> tuple[str, ...] | None:
        """What the cost of running ``payload`` depends on, as a key; None for a write.

        Two reads of one shape (skill, filters named, sort field, paging) cost about
        the same, whatever the values, which lets a binding learn which shapes are
        short enough to run on its event loop (:mod:`aap.web.work`). A write (a lead)
        is never short: it commits. Only names are kept, bounded in length and number.
        """
        if not skill.read_only:
            return None
        if not isinstance(payload, dict):
            return (skill.id,)
        filters = payload.get("filters")
        if isinstance(filters, dict) and len(filters) > _NAMES:
            names = ["(many)"]  # more names than the schema has: refused, without sorting them all
        else:
            names = (
                sorted(k for k in filters if isinstance(k, str) and len(k) <= _NAME)
                if isinstance(filters, dict)
                else []
            )
        sort = payload.get("sort")
        field = sort.get("field") if isinstance(sort, dict) else None
        pagination = payload.get("pagination")
        paging = sorted(k for k in ("cursor", "skip") if k in pagination) if isinstance(pagination, dict) else []
        return (skill.id, field if isinstance(field, str) and len(field) <= _NAME else "", *paging, "|", *names)

    def handle(self, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """Resolve the skill from ``payload.type``, then :meth:`run` it."""
        return self.run(self.skill_for(payload), payload, ctx)

    def run(self, skill: SkillInfo, payload: Any, ctx: CallContext) -> dict[str, Any]:
        """Validate ``payload`` against ``skill``'s request schema and run the skill.

        The caller has resolved ``skill`` already (and checked that ``payload``
        claims it: a ``type`` naming another skill fails the schema's ``const``).
        """
        if skill.id not in self._handlers:
            raise self._unsupported()
        return self._handlers[skill.id](self, self.checked(skill, payload), ctx)

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
            raise classify(request, problems) if classify else schema_error(problems)
        return request

    def refusal(self, skill: SkillInfo, payload: Any) -> AapError | None:
        """The error :meth:`checked` raises for ``payload``, or None when it would pass."""
        try:
            self.checked(skill, payload)
        except AapError as error:
            return error
        return None
