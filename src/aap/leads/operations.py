"""What staff do to a stored lead: re-send its deliveries, mark it handled.

Shared by ``aap leads retry`` and the staff console (docs/console.md), so both
refuse the same leads for the same reasons: a lead that does not exist, one
whose customer's consent has expired (it must never be sent again,
``ConsentGrant.expires_at``, seed 004), or one with nothing to re-send.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aap.store.leads import LeadStore
from aap.util.rfc3339 import epoch_ms, parse_rfc3339


@dataclass(frozen=True)
class RetryRefused(Exception):
    """Why a retry was refused: ``reason`` is ``not_found``, ``consent_expired`` or ``nothing_to_retry``.

    ``expired_at`` is the consent's ``expires_at`` (for ``consent_expired``).
    Never carries a customer value.
    """

    reason: str
    expired_at: str | None = None

    def __str__(self) -> str:
        return {
            "not_found": "No such lead.",
            "consent_expired": f"The customer's consent expired at {self.expired_at}: the lead cannot be re-sent.",
            "nothing_to_retry": "The lead has no failed or waiting delivery to re-send.",
        }.get(self.reason, self.reason)


def retry_deliveries(store: LeadStore, lead_id: str, now: datetime, *, include_delivered: bool = False) -> int:
    """Make a lead's dead (and waiting) deliveries due now; ``include_delivered`` re-sends the rest too.

    Returns how many deliveries were queued (at least one), or raises
    :class:`RetryRefused`. The delivery worker sends them on its next pass.
    """
    lead = store.get_lead(lead_id)
    if lead is None:
        raise RetryRefused("not_found")
    consent = lead["consent"] or {}
    expires = parse_rfc3339(consent.get("expires_at"))
    if expires is not None and expires <= now:
        raise RetryRefused("consent_expired", consent.get("expires_at"))
    count = store.retry(lead_id, epoch_ms(now), include_delivered=include_delivered)
    if count == 0:
        raise RetryRefused("nothing_to_retry")
    return count
