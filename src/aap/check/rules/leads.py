"""lead.submit: idempotent replay and conflict. Writes, so only with ``--allow-writes``.

The lead is unmistakably a test: the customer is "AAP Conformance-Test" at
example.com (a reserved domain), and the consent text and message say it was
written by ``aap check`` and must not be contacted.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aap.check.context import CheckContext, describe, problems_text
from aap.check.registry import Fail, Skip, rule
from aap.client.errors import AapRemoteError
from aap.util.rfc3339 import to_rfc3339

TEST_MARK = "AAP CONFORMANCE TEST LEAD written by `aap check`: no real customer, do not contact."


def test_lead(key: str, message: str = TEST_MARK) -> dict[str, Any]:
    granted = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "AAP",
            "last_name": "Conformance-Test",
            "email": "aap-conformance-test@example.com",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": to_rfc3339(granted),
            "allowed_channels": ["email"],
            "consent_text": TEST_MARK,
            "scope": ["lead_submission"],
        },
        "message": message,
        "source_agent": {"name": "aap-check"},
        "idempotency_key": key,
    }


async def writable(ctx: CheckContext) -> None:
    await ctx.implements("lead.submit")
    if not ctx.options.allow_writes:
        raise Skip("writes a test lead: run with --allow-writes")


async def submitted(ctx: CheckContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """One test lead over A2A (request, response), shared by the lead rules."""

    async def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        request = test_lead("aap-check-" + uuid.uuid4().hex)
        response = await ctx.ok("a2a", request)
        return request, response

    return await ctx.memo("test-lead", compute)


@rule(
    "lead.replay",
    "Resending a lead with the same idempotency_key replays the original result",
    "LeadSubmitRequest.idempotency_key, LeadSubmitResponse.replayed (seed 004)",
)
async def lead_replay(ctx: CheckContext) -> str | None:
    await writable(ctx)
    request, original = await submitted(ctx)
    problems = []
    # Anonymous callers share one idempotency scope (dealer + key) across A2A and MCP. A Poppy
    # caller is a verified identity with its own scope, so resending there would be a new lead.
    bindings = ["a2a"] + (["mcp"] if "mcp" in await ctx.bindings() else [])
    for binding in bindings:
        outcome = await ctx.call(binding, request)
        if outcome.error is not None:
            problems.append(f"replay over {binding}: {describe(outcome.error)}")
            continue
        replay = outcome.response or {}
        problems += [f"replay over {binding}: {p}" for p in problems_text(ctx.validate(replay, "lead-submit-response"))]
        data, first = replay.get("data") or {}, original.get("data") or {}
        if data.get("replayed") is not True:
            problems.append(f"replay over {binding}: data.replayed is not true")
        for key in set(first) | set(data):
            if key != "replayed" and data.get(key) != first.get(key):
                problems.append(f"replay over {binding}: data.{key} differs from the original")
    if problems:
        raise Fail("idempotent replay is wrong", problems)
    lead_id = (original.get("data") or {}).get("lead_id")
    return f"test lead {lead_id} replayed over " + ", ".join(bindings)


@rule(
    "lead.conflict",
    "Reusing an idempotency_key with a changed payload gives IDEMPOTENCY_CONFLICT",
    "LeadSubmitRequest.idempotency_key (seed 004)",
)
async def lead_conflict(ctx: CheckContext) -> str | None:
    await writable(ctx)
    request, _ = await submitted(ctx)
    changed = dict(request, message=TEST_MARK + " (changed payload)")
    error = await ctx.expect_error("a2a", changed, {"IDEMPOTENCY_CONFLICT"}, "changed payload, same key")
    if error.retryable:
        raise Fail("IDEMPOTENCY_CONFLICT must not be retryable")
    return None


@rule(
    "lead.consent",
    "A lead without consent is refused with CONTACT_CONSENT_REQUIRED",
    "ConsentGrant, Error.code (seed 004)",
)
async def lead_consent(ctx: CheckContext) -> str | None:
    await writable(ctx)
    request = test_lead("aap-check-" + uuid.uuid4().hex)
    del request["consent"]
    outcome = await ctx.call("a2a", request)
    if outcome.error is None:
        raise Fail("a lead without consent was accepted")
    if not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "CONTACT_CONSENT_REQUIRED":
        raise Fail(f"expected CONTACT_CONSENT_REQUIRED, got {describe(outcome.error)}")
    return None
