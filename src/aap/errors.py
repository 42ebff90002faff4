"""The AAP error model: one exception type for the 16 ``aap.error`` codes.

Skills raise :class:`AapError`; every binding turns it into its own wire shape
(a JSON-RPC error on A2A, ``isError`` structured content on MCP, an HTTP error
body on Poppy; seed 004 ``Error``). Messages are written here, once, so that no
binding can leak a customer value or a stack trace into a response. An
unexpected exception becomes ``INTERNAL_ERROR`` in one place, :func:`unexpected`,
which the call pipeline (:mod:`aap.gateway`) and the HTTP error handler
(:mod:`aap.web.errors`) both use.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any, TypedDict

from aap.util.rfc3339 import now_utc_z


@dataclass(frozen=True)
class ErrorCode:
    """Static facts about one AAP error code."""

    name: str
    jsonrpc_code: int
    http_status: int
    retryable: bool
    default_message: str


# One table for every binding. The seed fixes no JSON-RPC numbers; the project's
# choice is written down in docs/a2a.md ("Errors"): the validation family is
# -32602 so that stock A2A SDK clients keep ErrorInfo metadata; business failures
# are -32000.
_CODES = [
    ErrorCode("UNSUPPORTED_SKILL", -32004, 400, False, "This agent does not implement the requested skill."),
    ErrorCode("UNSUPPORTED_FILTER", -32602, 400, False, "The request uses a filter this deployment does not support."),
    ErrorCode(
        "UNSUPPORTED_SORT", -32602, 400, False, "The request uses a sort field this deployment does not support."
    ),
    ErrorCode(
        "INVALID_CURSOR", -32602, 400, False, "The pagination cursor is invalid, expired or does not match this query."
    ),
    ErrorCode("SCHEMA_VALIDATION_FAILED", -32602, 400, False, "The request does not match the AAP schema."),
    ErrorCode("MISSING_REQUIRED_FIELD", -32602, 400, False, "A required field is missing."),
    ErrorCode("INVALID_CONDITION", -32602, 400, False, "A vehicle condition uses the wrong vocabulary."),
    ErrorCode("DEALER_NOT_FOUND", -32000, 404, False, "No dealer with that identifier is available on this endpoint."),
    ErrorCode("VEHICLE_NOT_FOUND", -32000, 404, False, "The requested vehicle could not be found."),
    ErrorCode("VEHICLE_UNAVAILABLE", -32000, 404, False, "The requested vehicle is no longer available."),
    ErrorCode("CONTACT_CONSENT_REQUIRED", -32602, 400, False, "A lead needs the customer's contact consent."),
    ErrorCode(
        "INVALID_CONSENT",
        -32602,
        400,
        False,
        "The consent grant is malformed, expired or does not cover the contact data.",
    ),
    ErrorCode("APPOINTMENT_TIME_UNAVAILABLE", -32000, 409, False, "The requested appointment time is not available."),
    ErrorCode(
        "IDEMPOTENCY_CONFLICT", -32000, 409, False, "This idempotency key was already used with a different request."
    ),
    ErrorCode("RATE_LIMITED", -32000, 429, True, "Too many requests; retry after the indicated delay."),
    ErrorCode("INTERNAL_ERROR", -32603, 500, True, "The dealer agent hit an unexpected error."),
]

CODES: dict[str, ErrorCode] = {c.name: c for c in _CODES}


class Problem(TypedDict):
    """One ``details.errors[]`` entry (seed 004 ``Error.details.errors[]``); ``error`` never quotes
    a customer value."""

    instanceLocation: str  # JSON Pointer to the field, "" for the whole request
    keyword: str
    error: str


def problem(instance_location: str, keyword: str, error: str) -> Problem:
    """One ``details.errors[]`` entry. ``error`` must never quote a customer value."""
    return {"instanceLocation": instance_location, "keyword": keyword, "error": error}


class AapError(Exception):
    """A typed AAP skill failure, carried unchanged to every binding."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        errors: list[Problem] | None = None,
        hint: str | None = None,
        retry_after_ms: int | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if code not in CODES:
            raise ValueError(f"unknown AAP error code {code!r}")
        spec = CODES[code]
        if code == "RATE_LIMITED" and retry_after_ms is None:
            raise ValueError("RATE_LIMITED requires retry_after_ms")
        self.code = code
        self.message = message or spec.default_message
        self.retryable = spec.retryable if retryable is None else retryable
        self.error_id = "err_" + uuid.uuid4().hex
        self.created_at = now_utc_z()
        extra: dict[str, Any] = dict(details or {})
        if errors:
            extra["errors"] = list(errors)
        if hint:
            extra["hint"] = hint[:1000]
        if retry_after_ms is not None:
            extra["retry_after_ms"] = int(retry_after_ms)
        self.details = extra
        super().__init__(f"{code}: {self.message}")

    @property
    def spec(self) -> ErrorCode:
        return CODES[self.code]

    @property
    def errors(self) -> list[Problem]:
        return list(self.details.get("errors", []))

    def to_dict(self) -> dict[str, Any]:
        """The closed ``aap.error`` object."""
        body: dict[str, Any] = {
            "type": "aap.error",
            "error_id": self.error_id,
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "created_at": self.created_at,
        }
        if self.details:
            body["details"] = self.details
        return body


def _where(exc: BaseException) -> str:
    """``module.py:function:line`` of the innermost frame: enough to find the bug, no values."""
    tb = exc.__traceback__
    if tb is None:
        return "unknown"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}:{code.co_name}:{tb.tb_lineno}"


def unexpected(exc: BaseException, *, binding: str, skill: str | None = None, endpoint: str | None = None) -> AapError:
    """Log ``exc`` once (logger ``aap.<binding>``) and return the ``INTERNAL_ERROR`` to send.

    The line names the binding, the skill or endpoint, the error id the caller sees, the
    exception's type and where it was raised — never its text, which may quote a value.
    """
    error = AapError("INTERNAL_ERROR")
    logging.getLogger(f"aap.{binding}").error(
        "internal error",
        extra={
            "fields": {
                "binding": binding,
                "skill": skill,
                "endpoint": endpoint,
                "error_id": error.error_id,
                "error_type": type(exc).__name__,
                "where": _where(exc),
            }
        },
    )
    return error
