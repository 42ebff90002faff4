"""The delay before a retry: doubling from a base, capped.

The lead outbox (``[leads.delivery]``), the feed schedules (``[[feeds]] retry_seconds``) and the
buyer client's :class:`~aap.client.RetryPolicy` wait ``base × 2^(attempt−1)`` after the
``attempt``-th failure, at most ``cap`` (docs/leads.md §8, docs/feeds.md, docs/client.md).
"""

from __future__ import annotations

#: Doublings at most: 2^62 × any sensible base is far beyond every cap, and stays a float.
_MAX_DOUBLINGS = 62


def doubling(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait after the ``attempt``-th failed try (1 or less waits ``base``)."""
    doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
    return float(min(cap, base * (1 << doublings)))
