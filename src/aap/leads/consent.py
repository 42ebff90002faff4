"""Lead validation beyond the schema, and which error code a set of problems gets.

The schema catches shapes; this module adds the rules it cannot express
(consent time against the dealer's clock, offsets on every timestamp, integers a
CRM can read exactly: :mod:`aap.leads.integers`) and picks
the code by class of problem (docs/leads.md §2, pinned in tests/test_lead_submit.py):

1. ``consent`` absent (or null) → ``CONTACT_CONSENT_REQUIRED``
2. anything wrong with the grant, including channels that do not cover the
   contact data or ``preferred_contact`` (an inapplicable grant, ``ConsentGrant``
   seed 004) → ``INVALID_CONSENT``
3. a condition from the wrong vocabulary → ``INVALID_CONDITION``
4. exactly one problem and it is a missing required field → ``MISSING_REQUIRED_FIELD``
5. anything else → ``SCHEMA_VALIDATION_FAILED``

Every problem found is listed in ``details.errors[]`` whatever the code. No
problem text ever quotes a customer value.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from aap.errors import AapError, Problem, problem
from aap.leads.integers import integer_problems
from aap.util.rfc3339 import parse_rfc3339

SALE_CONDITIONS = ("new", "used", "cpo")
TRADE_CONDITIONS = ("excellent", "good", "fair", "poor")
#: Which customer field a consented channel needs (``sms`` texts the phone).
CHANNEL_FIELD = {"email": "email", "phone": "phone", "sms": "phone"}

_CONDITION_LOCATIONS = ("/vehicle_of_interest/condition", "/trade_in/condition")

_MESSAGES = {
    "CONTACT_CONSENT_REQUIRED": "A lead needs the customer's consent grant (consent) for this submission.",
    "INVALID_CONSENT": "The consent grant is malformed, expired, not yet valid or does not cover "
    "the contact data; see details.errors.",
    "INVALID_CONDITION": "A vehicle condition uses the wrong vocabulary: vehicle_of_interest takes "
    "new, used or cpo; trade_in takes excellent, good, fair or poor.",
    "MISSING_REQUIRED_FIELD": "A required field is missing; see details.errors.",
    "SCHEMA_VALIDATION_FAILED": "The lead does not match the lead.submit.request schema or this endpoint's "
    "bounds; see details.errors.",
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def coupling_problems(payload: dict[str, Any]) -> list[Problem]:
    """Channels the grant names without the contact data, and an unconsented preferred channel."""
    customer = payload.get("customer")
    consent = _dict(payload.get("consent"))
    channels = consent.get("allowed_channels")
    channels = [c for c in channels if isinstance(c, str)] if isinstance(channels, list) else []
    found = []
    if isinstance(customer, dict):
        for channel in channels:
            needed = CHANNEL_FIELD.get(channel)
            if needed and needed not in customer:
                found.append(
                    problem(
                        f"/customer/{needed}",
                        "required",
                        f"is required because consent.allowed_channels contains {channel}",
                    )
                )
        preferred = customer.get("preferred_contact")
        if (
            isinstance(preferred, str)
            and preferred in CHANNEL_FIELD
            and isinstance(consent.get("allowed_channels"), list)
            and preferred not in channels
        ):
            found.append(
                problem(
                    "/consent/allowed_channels",
                    "contains",
                    f"must contain {preferred}, the customer's preferred_contact",
                )
            )
    return found


def timestamp_problems(payload: dict[str, Any]) -> list[Problem]:
    """Every lead timestamp must be RFC 3339 with an offset."""
    found = []
    consent = _dict(payload.get("consent"))
    appointment = _dict(payload.get("appointment"))
    for location, value in (
        ("/consent/granted_at", consent.get("granted_at")),
        ("/consent/expires_at", consent.get("expires_at")),
        ("/submitted_at", payload.get("submitted_at")),
        ("/appointment/appointment_at", appointment.get("appointment_at")),
    ):
        if isinstance(value, str) and parse_rfc3339(value) is None:
            found.append(
                problem(location, "format", "must be an RFC 3339 date-time with a timezone offset (Z or ±HH:MM)")
            )
    return found


def consent_time_problems(payload: dict[str, Any], now: datetime, skew_seconds: int) -> list[Problem]:
    """Not granted in the future (beyond the skew), not expired, expiry after the grant."""
    consent = _dict(payload.get("consent"))
    granted = parse_rfc3339(consent.get("granted_at"))
    expires = parse_rfc3339(consent.get("expires_at"))
    found = []
    if granted is not None and granted > now + timedelta(seconds=skew_seconds):
        found.append(
            problem(
                "/consent/granted_at",
                "notInFuture",
                "granted_at is in the future; consent must be given before the lead is sent",
            )
        )
    if expires is not None:
        if granted is not None and expires <= granted:
            found.append(problem("/consent/expires_at", "afterGrantedAt", "expires_at must be later than granted_at"))
        if expires <= now:
            found.append(
                problem("/consent/expires_at", "notExpired", "the consent grant has expired; ask the customer again")
            )
    return found


def _already(problems: list[Problem], candidate: Problem) -> bool:
    """Is ``candidate`` already reported (same place, same keyword)?"""
    return any(
        (p.get("instanceLocation"), p.get("keyword")) == (candidate["instanceLocation"], candidate["keyword"])
        for p in problems
    )


def semantic_problems(
    payload: dict[str, Any], schema_problems: list[Problem], now: datetime, skew_seconds: int
) -> list[Problem]:
    """The problems only this module sees, minus those the schema already reported."""
    found: list[Problem] = []
    for candidate in (
        timestamp_problems(payload)
        + consent_time_problems(payload, now, skew_seconds)
        + coupling_problems(payload)
        + integer_problems(payload)
    ):
        if not _already(schema_problems + found, candidate):
            found.append(candidate)
    return found


def _condition_problem(payload: dict[str, Any]) -> bool:
    voi = payload.get("vehicle_of_interest")
    if isinstance(voi, dict) and "condition" in voi and voi["condition"] not in SALE_CONDITIONS:
        return True
    trade = payload.get("trade_in")
    return isinstance(trade, dict) and "condition" in trade and trade["condition"] not in TRADE_CONDITIONS


def classify(payload: Any, schema_problems: list[Problem], now: datetime, skew_seconds: int) -> AapError | None:
    """The AapError for everything wrong with ``payload``, or None when nothing is."""
    if not isinstance(payload, dict):
        problems = list(schema_problems) or [problem("", "type", "The lead must be a JSON object.")]
        return AapError("SCHEMA_VALIDATION_FAILED", _MESSAGES["SCHEMA_VALIDATION_FAILED"], errors=problems)
    problems = list(schema_problems) + semantic_problems(payload, list(schema_problems), now, skew_seconds)
    if not problems:
        return None
    consent = payload.get("consent")
    if consent is None:
        code = "CONTACT_CONSENT_REQUIRED"
        if not any(p.get("instanceLocation") == "/consent" for p in problems):
            problems.insert(0, problem("/consent", "required", "is required"))
    elif coupling_problems(payload) or any(p.get("instanceLocation", "").startswith("/consent") for p in problems):
        code = "INVALID_CONSENT"
    elif _condition_problem(payload) or any(p.get("instanceLocation") in _CONDITION_LOCATIONS for p in problems):
        code = "INVALID_CONDITION"
    elif len(problems) == 1 and problems[0].get("keyword") == "required":
        code = "MISSING_REQUIRED_FIELD"
    else:
        code = "SCHEMA_VALIDATION_FAILED"
    return AapError(code, _MESSAGES[code], errors=problems)
