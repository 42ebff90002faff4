"""Per-caller rate limiting: a token bucket kept in the database.

The bucket lives in ``stores.state`` (not in process memory) so that every
worker process of a deployment draws from the same bucket. Bindings call
:meth:`RateLimiter.check` with a caller key before doing any work; an empty
bucket raises ``RATE_LIMITED`` carrying ``details.retry_after_ms``, which each
binding turns into its own wire shape plus an HTTP ``Retry-After`` header.
"""

from __future__ import annotations

import hashlib
import math

from aap.config.model import RateLimit
from aap.errors import AapError
from aap.store.state import StateStore


def anonymous_caller_key(client_ip: str | None) -> str:
    """Bucket key of an unauthenticated caller: a hash of its IP (no raw address stored)."""
    digest = hashlib.sha256((client_ip or "unknown").encode()).hexdigest()[:32]
    return "ip:" + digest


def retry_after_seconds(err: AapError) -> int | None:
    """The HTTP ``Retry-After`` value (whole seconds, rounded up) for a RATE_LIMITED error."""
    ms = err.details.get("retry_after_ms")
    if err.code != "RATE_LIMITED" or ms is None:
        return None
    return max(1, math.ceil(int(ms) / 1000))


class RateLimiter:
    """Token bucket per caller key: ``burst`` tokens, refilled at ``per_minute``."""

    def __init__(self, state: StateStore, rule: RateLimit) -> None:
        self.state = state
        self.rule = rule

    @property
    def enabled(self) -> bool:
        return self.rule.enabled and self.rule.per_minute > 0 and self.rule.burst > 0

    def check(self, caller_key: str) -> None:
        """Take one token for ``caller_key``; raise ``RATE_LIMITED`` when none is left.

        Blocking (a database write): call it from a worker thread.
        """
        if not self.enabled:
            return
        wait = self.state.take_token(
            "rate:" + caller_key,
            capacity=self.rule.burst,
            refill_per_second=self.rule.per_minute / 60.0,
        )
        if wait <= 0:
            return
        retry_after_ms = max(1, math.ceil(wait * 1000))
        raise AapError(
            "RATE_LIMITED",
            retry_after_ms=retry_after_ms,
            hint=f"Wait at least {retry_after_ms} ms before retrying; this endpoint allows "
            f"{self.rule.per_minute} requests per minute per caller (bursts of {self.rule.burst}).",
        )
