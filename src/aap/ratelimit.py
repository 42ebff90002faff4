"""Per-caller rate limiting: a token bucket in the database, spent from local leases.

The bucket lives in ``stores.state`` (not in process memory) so that every
worker process of a deployment, and every server on the same database, draws
from the same bucket. Taking one token per request would make every request a
database write (on SQLite, every search a write transaction), so each process
*leases* tokens from the shared bucket in chunks and spends them locally
(docs/architecture.md, "Rate limiting"):

- A lease is taken in one write, together with the return of what is left of
  the caller's previous lease. Its size starts at one token and grows (×4, up to
  :data:`MAX_LEASE`, and never more than a quarter of the burst) while the
  caller uses its leases up; a caller making one request gets one token, exactly
  as without leases, and a busy caller costs one write per :data:`MAX_LEASE`
  requests.
- A lease lives :data:`LEASE_SECONDS`; what is left of an expired one goes back
  to the shared bucket (on the caller's next lease, or in a sweep of this
  process's expired leases), so a caller that moves to another worker finds its
  tokens again. Leased tokens are never spent twice: the limit is never exceeded.
- A busy caller (its lease at the largest size) gets its next tokens before it
  runs out: when a quarter of the lease is left, the binding tops it up in the
  background (:meth:`RateLimiter.top_up`, one write, the same tokens a lease
  would take), so that its requests in flight do not all wait for that write.
- A refusal takes nothing and is answered exactly as before: ``RATE_LIMITED``
  with ``details.retry_after_ms``, the time until the shared bucket holds the
  tokens asked for, so a client that waits that long gets through. This process
  then refuses the same caller without asking the database again until then.

Every check takes a ``cost`` in tokens (1 by default) for requests that weigh more.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aap.config.model import RateLimit
from aap.errors import AapError
from aap.store.state import StateStore

#: The most tokens one lease takes: at most one database write per this many requests.
MAX_LEASE = 128
#: How long a process may keep leased tokens before they go back to the shared bucket.
LEASE_SECONDS = 2.0
GROWTH = 4
#: A busy caller's lease (at the largest size) is topped up once no more than this share of it
#: is left, off the request path (:meth:`RateLimiter.top_up`).
LOW_WATER = 0.25


@functools.lru_cache(maxsize=1024)
def anonymous_caller_key(client_ip: str | None) -> str:
    """Bucket key of an unauthenticated caller: a hash of its IP (no raw address stored).

    Asked twice per request (the door's rate limit, the access log) for the few addresses a
    worker mostly sees: the last thousand are remembered rather than hashed again."""
    digest = hashlib.sha256((client_ip or "unknown").encode()).hexdigest()[:32]
    return "ip:" + digest


def retry_after_seconds(err: AapError) -> int | None:
    """The HTTP ``Retry-After`` value (whole seconds, rounded up) for a RATE_LIMITED error."""
    ms = err.details.get("retry_after_ms")
    if err.code != "RATE_LIMITED" or ms is None:
        return None
    return max(1, math.ceil(int(ms) / 1000))


@dataclass
class _Lease:
    """This process's tokens of one bucket, and what it knows of the bucket."""

    tokens: int = 0
    expires: float = 0.0
    size: int = 1  # tokens to ask for at the next lease
    refused_until: float = 0.0  # the shared bucket was short of ``refused_cost`` tokens until then
    refused_cost: int = 0


class RateLimiter:
    """Token bucket per caller key: ``burst`` tokens, refilled at ``per_minute``. Thread-safe.

    One limiter per agent and process (:attr:`aap.gateway.Gateway.limiter`),
    shared by every binding, so that a caller's lease serves all of them.
    """

    def __init__(self, state: StateStore, rule: RateLimit, *, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.rule = rule
        self.clock = clock
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    @property
    def enabled(self) -> bool:
        return self.rule.enabled and self.rule.per_minute > 0 and self.rule.burst > 0

    @property
    def holds_leases(self) -> bool:
        """True when this process holds tokens leased from the shared buckets (see :meth:`release`)."""
        return bool(self._leases)

    @property
    def max_lease(self) -> int:
        return max(1, min(MAX_LEASE, self.rule.burst // 4))

    def _bucket_key(self, caller_key: str) -> str:
        return "rate:" + caller_key

    def check_local(self, caller_key: str, cost: int = 1) -> bool:
        """Spend ``cost`` tokens from this process's lease, without I/O.

        True: admitted. False: the lease cannot cover it (call :meth:`check`).
        Raises ``RATE_LIMITED`` while an earlier refusal of this caller (at this
        cost or less) holds.
        """
        if not self.enabled:
            return True
        now = self.clock()
        with self._lock:
            lease = self._leases.get(self._bucket_key(caller_key))
            if lease is None:
                return False
            if lease.refused_until > now and cost >= lease.refused_cost:
                raise self._refusal(lease.refused_until - now)
            if lease.expires > now and lease.tokens >= cost:
                lease.tokens -= cost
                return True
        return False

    def check(self, caller_key: str, cost: int = 1) -> None:
        """Spend ``cost`` tokens for ``caller_key``; raise ``RATE_LIMITED`` when the bucket is short.

        Blocking when the local lease cannot cover it (a database write): call it
        from a worker thread, after :meth:`check_local` said False.
        """
        if not self.enabled:
            return
        if not 1 <= cost <= self.rule.burst:
            raise ValueError(f"a request may cost 1 to {self.rule.burst} tokens (the burst), not {cost}")
        if self.check_local(caller_key, cost):
            return
        key = self._bucket_key(caller_key)
        now = self.clock()
        with self._lock:
            lease = self._leases.setdefault(key, _Lease())
            if lease.expires > now:  # used up before it expired: a busy caller, lease more
                lease.size = min(self.max_lease, lease.size * GROWTH)
            elif lease.tokens:  # expired with tokens left: lease less
                lease.size = max(1, lease.size // GROWTH)
            give_back, lease.tokens = lease.tokens, 0
            want = max(cost, lease.size)
        rate = self.rule.per_minute / 60.0
        granted, wait = self.state.lease_tokens(
            key,
            need=cost,
            want=want,
            capacity=self.rule.burst,
            refill_per_second=rate,
            give_back=float(give_back),
            now=now,
        )
        with self._lock:
            lease = self._leases.setdefault(key, lease)  # a sweep may have dropped it meanwhile
            if granted:
                lease.tokens += granted - cost
                lease.expires = now + LEASE_SECONDS
                lease.refused_until = 0.0
            else:
                lease.refused_until, lease.refused_cost = now + wait, cost
                lease.size = 1
        self._sweep(now)
        if not granted:
            raise self._refusal(wait)

    def running_low(self, caller_key: str) -> bool:
        """Whether ``caller_key``'s lease is at the largest size, live, and down to
        :data:`LOW_WATER` of it (time for :meth:`top_up`). No I/O."""
        if not self.enabled:
            return False
        now = self.clock()
        with self._lock:
            lease = self._leases.get(self._bucket_key(caller_key))
            return (
                lease is not None
                and lease.size > 1
                and lease.size >= self.max_lease
                and lease.expires > now
                and lease.refused_until <= now
                and lease.tokens <= lease.size * LOW_WATER
            )

    def top_up(self, caller_key: str) -> None:
        """Add a lease's worth of tokens to ``caller_key``'s live lease (blocking: one write).

        The same tokens :meth:`check` would lease when the lease ran out, taken before
        it does. A bucket short of them changes nothing: the next :meth:`check` finds
        out and refuses as always.
        """
        if not self.enabled:
            return
        key = self._bucket_key(caller_key)
        now = self.clock()
        with self._lock:
            lease = self._leases.get(key)
            if lease is None or lease.expires <= now:
                return
            want = lease.size
        granted, _wait = self.state.lease_tokens(
            key,
            need=1,
            want=want,
            capacity=self.rule.burst,
            refill_per_second=self.rule.per_minute / 60.0,
            now=now,
        )
        if granted:
            with self._lock:
                lease = self._leases.setdefault(key, _Lease(size=want))
                lease.tokens += granted
                lease.expires = now + LEASE_SECONDS

    def _sweep(self, now: float) -> None:
        """Return what is left of this process's expired leases; forget idle callers."""
        if now < self._next_sweep:
            return
        returns: list[tuple[str, float]] = []
        with self._lock:
            self._next_sweep = now + LEASE_SECONDS
            for key, lease in list(self._leases.items()):
                if lease.expires > now or lease.refused_until > now:
                    continue
                if lease.tokens:
                    returns.append((key, float(lease.tokens)))
                del self._leases[key]
        if returns:
            self.state.return_tokens(
                returns, capacity=self.rule.burst, refill_per_second=self.rule.per_minute / 60.0, now=now
            )

    def release(self) -> None:
        """Give every unused leased token back to the shared bucket (when the process stops)."""
        with self._lock:
            returns = [(key, float(lease.tokens)) for key, lease in self._leases.items() if lease.tokens]
            self._leases.clear()
        if returns:
            self.state.return_tokens(
                returns, capacity=self.rule.burst, refill_per_second=self.rule.per_minute / 60.0, now=self.clock()
            )

    def _refusal(self, wait: float) -> AapError:
        retry_after_ms = max(1, math.ceil(wait * 1000))
        return AapError(
            "RATE_LIMITED",
            retry_after_ms=retry_after_ms,
            hint=f"Wait at least {retry_after_ms} ms before retrying; this endpoint allows "
            f"{self.rule.per_minute} requests per minute per caller (bursts of {self.rule.burst}).",
        )
