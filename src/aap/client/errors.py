"""Exceptions raised by :mod:`aap.client`.

Every failure is an :class:`AapClientError`. A dealer's typed ``aap.error``
becomes an :class:`AapRemoteError` subclass chosen by its ``code`` (so callers
can ``except VehicleNotFoundError``) and keeps ``details.errors[]``; anything
that is not an AAP skill error — an HTTP failure, a JSON-RPC protocol error,
a malformed answer, a refused token — is a :class:`ProtocolError`.
"""

from __future__ import annotations

from typing import Any


class AapClientError(Exception):
    """Base class of every error the client raises."""

    retryable: bool = False
    retry_after_ms: int | None = None


class AapRemoteError(AapClientError):
    """A dealer answered with an ``aap.error`` object."""

    code: str = ""

    def __init__(
        self,
        payload: dict[str, Any],
        *,
        binding: str | None = None,
        http_status: int | None = None,
        header_retry_after_ms: int | None = None,
    ) -> None:
        self.payload = payload
        self.code = str(payload.get("code", self.code))
        self.message = str(payload.get("message", ""))
        self.error_id = payload.get("error_id")
        self.created_at = payload.get("created_at")
        self.retryable = bool(payload.get("retryable", False))
        details = payload.get("details")
        self.details: dict[str, Any] = details if isinstance(details, dict) else {}
        self.binding = binding
        self.http_status = http_status
        body_delay = self.details.get("retry_after_ms")
        delays = [d for d in (body_delay, header_retry_after_ms) if isinstance(d, int) and d >= 0]
        # The Error schema: "When HTTP Retry-After is also present, honor the longer delay."
        self.retry_after_ms = max(delays) if delays else None
        super().__init__(f"{self.code}: {self.message}")

    @property
    def errors(self) -> list[dict[str, Any]]:
        """``details.errors[]``: every problem the dealer found (instanceLocation, keyword, error)."""
        errors = self.details.get("errors")
        return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []

    @property
    def hint(self) -> str | None:
        hint = self.details.get("hint")
        return hint if isinstance(hint, str) else None


class UnsupportedSkillError(AapRemoteError):
    code = "UNSUPPORTED_SKILL"


class UnsupportedFilterError(AapRemoteError):
    code = "UNSUPPORTED_FILTER"


class UnsupportedSortError(AapRemoteError):
    code = "UNSUPPORTED_SORT"


class InvalidCursorError(AapRemoteError):
    code = "INVALID_CURSOR"


class SchemaValidationFailedError(AapRemoteError):
    code = "SCHEMA_VALIDATION_FAILED"


class MissingRequiredFieldError(AapRemoteError):
    code = "MISSING_REQUIRED_FIELD"


class InvalidConditionError(AapRemoteError):
    code = "INVALID_CONDITION"


class DealerNotFoundError(AapRemoteError):
    code = "DEALER_NOT_FOUND"


class VehicleNotFoundError(AapRemoteError):
    code = "VEHICLE_NOT_FOUND"


class VehicleUnavailableError(AapRemoteError):
    code = "VEHICLE_UNAVAILABLE"


class ContactConsentRequiredError(AapRemoteError):
    code = "CONTACT_CONSENT_REQUIRED"


class InvalidConsentError(AapRemoteError):
    code = "INVALID_CONSENT"


class AppointmentTimeUnavailableError(AapRemoteError):
    code = "APPOINTMENT_TIME_UNAVAILABLE"


class IdempotencyConflictError(AapRemoteError):
    code = "IDEMPOTENCY_CONFLICT"


class RateLimitedError(AapRemoteError):
    code = "RATE_LIMITED"


class InternalServerError(AapRemoteError):
    code = "INTERNAL_ERROR"


ERRORS_BY_CODE: dict[str, type[AapRemoteError]] = {
    cls.code: cls
    for cls in (
        UnsupportedSkillError,
        UnsupportedFilterError,
        UnsupportedSortError,
        InvalidCursorError,
        SchemaValidationFailedError,
        MissingRequiredFieldError,
        InvalidConditionError,
        DealerNotFoundError,
        VehicleNotFoundError,
        VehicleUnavailableError,
        ContactConsentRequiredError,
        InvalidConsentError,
        AppointmentTimeUnavailableError,
        IdempotencyConflictError,
        RateLimitedError,
        InternalServerError,
    )
}


def remote_error(
    payload: dict[str, Any],
    *,
    binding: str | None = None,
    http_status: int | None = None,
    header_retry_after_ms: int | None = None,
) -> AapRemoteError:
    """The typed exception for an ``aap.error`` object (an unknown code gets the base class)."""
    cls = ERRORS_BY_CODE.get(str(payload.get("code")), AapRemoteError)
    return cls(payload, binding=binding, http_status=http_status, header_retry_after_ms=header_retry_after_ms)


class ProtocolError(AapClientError):
    """A failure outside the AAP error model: transport, envelope, protocol or auth."""

    def __init__(
        self,
        message: str,
        *,
        binding: str | None = None,
        http_status: int | None = None,
        rpc_code: int | None = None,
        data: Any = None,
        retryable: bool = False,
        retry_after_ms: int | None = None,
    ) -> None:
        self.message = message
        self.binding = binding
        self.http_status = http_status
        self.rpc_code = rpc_code
        self.data = data
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        super().__init__(message)


class DiscoveryError(ProtocolError):
    """The dealer's discovery documents could not be read or do not describe an AAP 3.1 agent."""


class UnreachableError(DiscoveryError):
    """Nothing answered at any agent-card URL of the target (connection refused, DNS, timeout)."""


class AuthError(ProtocolError):
    """An OAuth / DPoP failure on the Poppy binding (``error`` is the OAuth error code)."""

    def __init__(self, message: str, *, error: str | None = None, **kwargs: Any) -> None:
        self.error = error
        super().__init__(message, **kwargs)
