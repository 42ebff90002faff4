"""The ``lead.submit`` skill: registration, error classification and the handler.

Transport-free like every skill: it receives the schema-checked request and a
:class:`~aap.agent.CallContext` and returns the ``lead.submit.response``
object or raises :class:`~aap.errors.AapError`. The work itself lives in
:mod:`aap.leads.submit`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from aap.errors import AapError
from aap.leads import consent
from aap.leads.submit import submit

SKILL_ID = "lead.submit"


def run(agent: Any, request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Handle one schema-valid lead (semantic checks, booking, storage, outbox)."""
    return submit(agent, request, ctx)


def make_classifier(settings: Any) -> Callable[[Any, list[dict[str, str]]], AapError]:
    """``classify(payload, problems)`` using the deployment's consent clock skew."""

    def classify(payload: Any, problems: list[dict[str, str]]) -> AapError:
        skew = settings.leads.consent_clock_skew_seconds
        error = consent.classify(payload, problems, datetime.now(timezone.utc), skew)
        # Only reached with schema problems, so there is always an error to return.
        return error or AapError("SCHEMA_VALIDATION_FAILED", errors=problems)

    return classify


#: The classifier with default lead settings (120 s clock skew).
classify = make_classifier(None)


def install(agent: Any) -> None:
    """Declare ``lead.submit`` on ``agent`` (and so on its agent card and every binding)."""
    agent.register(SKILL_ID, run, classify=make_classifier(agent.settings))
