"""Buyer-side AAP client: discover a dealer and call its skills over A2A, MCP or Poppy.

See docs/client.md. Nothing here imports the dealer-side implementation; the
client only shares the protocol constants and the skill table.
"""

from aap.client.core import BINDINGS, NO_RETRY, AapClient, RetryPolicy
from aap.client.discovery import Discovery, discover
from aap.client.errors import (
    ERRORS_BY_CODE,
    AapClientError,
    AapRemoteError,
    AppointmentTimeUnavailableError,
    AuthError,
    ContactConsentRequiredError,
    DealerNotFoundError,
    DiscoveryError,
    IdempotencyConflictError,
    InternalServerError,
    InvalidConditionError,
    InvalidConsentError,
    InvalidCursorError,
    MissingRequiredFieldError,
    ProtocolError,
    RateLimitedError,
    SchemaValidationFailedError,
    UnsupportedFilterError,
    UnsupportedSkillError,
    UnsupportedSortError,
    VehicleNotFoundError,
    VehicleUnavailableError,
)
from aap.client.models import DealerInfo, Facets, FacetValue, LeadResult, Listing, SearchPage, VehicleDetail
from aap.client.poppy_auth import PoppyIdentity

__all__ = [
    "AapClient",
    "RetryPolicy",
    "NO_RETRY",
    "BINDINGS",
    "Discovery",
    "discover",
    "PoppyIdentity",
    "DealerInfo",
    "Facets",
    "FacetValue",
    "LeadResult",
    "Listing",
    "SearchPage",
    "VehicleDetail",
    "ERRORS_BY_CODE",
    "AapClientError",
    "AapRemoteError",
    "ProtocolError",
    "DiscoveryError",
    "AuthError",
    "UnsupportedSkillError",
    "UnsupportedFilterError",
    "UnsupportedSortError",
    "InvalidCursorError",
    "SchemaValidationFailedError",
    "MissingRequiredFieldError",
    "InvalidConditionError",
    "DealerNotFoundError",
    "VehicleNotFoundError",
    "VehicleUnavailableError",
    "ContactConsentRequiredError",
    "InvalidConsentError",
    "AppointmentTimeUnavailableError",
    "IdempotencyConflictError",
    "RateLimitedError",
    "InternalServerError",
]
