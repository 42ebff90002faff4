"""The ``lead.submit`` skill: registration, error classification and the handler.

Transport-free like every skill: it receives the schema-checked request and a
:class:`~aap.skills.context.CallContext` and returns the ``lead.submit.response``
object or raises :class:`~aap.errors.AapError`. The work itself lives in
:mod:`aap.leads.submit`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aap.config.model import Settings
from aap.errors import AapError, Problem
from aap.leads import consent
from aap.leads.submit import submit
from aap.skills.context import CallContext, SkillDeps

SKILL_ID = "lead.submit"


def run(deps: SkillDeps, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    """Handle one schema-valid lead (semantic checks, booking, storage, outbox)."""
    return submit(deps.settings, deps.stores, request, ctx)


def make_classifier(settings: Settings) -> Callable[[Any, list[Problem]], AapError]:
    """``classify(payload, problems)`` using the deployment's consent clock skew."""

    def classify(payload: Any, problems: list[Problem]) -> AapError:
        skew = settings.leads.consent_clock_skew_seconds
        error = consent.classify(payload, problems, datetime.now(UTC), skew)
        # Only reached with schema problems, so there is always an error to return.
        return error or AapError("SCHEMA_VALIDATION_FAILED", errors=problems)

    return classify
