"""Fair sharing of one worker between the tenants of a platform: a tenant's requests in flight
are bounded, so one tenant's flood cannot take every executor thread and database connection.

Every tenant a worker serves shares its event loop, and its :class:`~aap.work.Work`: one small
executor whose queue is first in, first out. A tenant sending hundreds of requests at once (each
admitted by its rate limit, or each waiting for its refusal) would put all of them ahead of
another tenant's one request, on the loop and on the executor. :class:`TenantShares` keeps, per
tenant and per worker:

- at most ``limit`` requests being served at once (the tenant's *slots*), from their arrival,
  before their body is read, until they are answered (:meth:`aap.gateway.Gateway.arrival`);
- at most ``queue`` more waiting for a slot, first come first served, each for at most
  ``wait`` seconds;
- and refuses the rest: ``RATE_LIMITED`` with ``retry_after_ms`` (the AAP error a caller
  already knows how to wait out; every binding writes it as it writes a rate limit's, HTTP
  ``Retry-After`` included), at the door's admission, before any of their work is placed, so
  a refused request never holds an executor thread.

A waiting request holds nothing but its own coroutine (its body is not read yet), so a flood
waits in its tenant's queue instead of in front of the others; a slot it was handed is never
lost (a request cancelled while waiting passes its slot on). The state is this worker's alone:
a platform's connections are spread over workers by the kernel, and each worker is protected
by its own bound (docs/platform.md, "Fair sharing").
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field

from aap.errors import AapError


@dataclass
class _Tenant:
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)


class TenantShares:
    """Per-tenant slots of one worker: ``limit`` in flight, ``queue`` waiting up to ``wait`` s."""

    def __init__(self, *, limit: int, queue: int, wait: float) -> None:
        if limit < 1 or queue < 0 or wait < 0:
            raise ValueError("a tenant's share needs limit >= 1, queue >= 0 and wait >= 0")
        self.limit = limit
        self.queue = queue
        self.wait = wait
        self._tenants: dict[str, _Tenant] = {}  # only tenants with requests in flight or waiting

    def running(self, tenant: str) -> int:
        """``tenant``'s requests holding a slot now."""
        state = self._tenants.get(tenant)
        return state.running if state else 0

    def waiting(self, tenant: str) -> int:
        """``tenant``'s requests waiting for a slot now."""
        state = self._tenants.get(tenant)
        return len(state.waiting) if state else 0

    def refusal(self) -> AapError:
        """The answer to a request refused for its tenant's share."""
        retry_after_ms = max(1, math.ceil(self.wait * 1000))
        return AapError(
            "RATE_LIMITED",
            retry_after_ms=retry_after_ms,
            hint=f"This dealer agent is answering as many requests as it may at once ({self.limit}, "
            f"{self.queue} more waiting); retry after {retry_after_ms} ms.",
        )

    async def enter(self, tenant: str) -> None:
        """Take one of ``tenant``'s slots, waiting in its queue when all are taken; raise the
        :meth:`refusal` when the queue is full or the wait runs out. Pair with :meth:`leave`."""
        state = self._tenants.setdefault(tenant, _Tenant())
        if state.running < self.limit and not state.waiting:
            state.running += 1
            return
        if len(state.waiting) >= self.queue:
            raise self.refusal()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiting.append(turn)
        try:
            await asyncio.wait([turn], timeout=self.wait)
        except BaseException:  # cancelled while waiting: a slot handed over meanwhile goes on
            self._give_up(tenant, state, turn)
            raise
        if not turn.done():
            self._give_up(tenant, state, turn)
            raise self.refusal()
        # handed a slot by leave(): ``running`` already counts it

    def _give_up(self, tenant: str, state: _Tenant, turn: asyncio.Future[None]) -> None:
        if turn.done():  # the slot was ours already: pass it on
            self.leave(tenant)
            return
        turn.cancel()
        state.waiting.remove(turn)
        if not state.running and not state.waiting:
            del self._tenants[tenant]

    def leave(self, tenant: str) -> None:
        """Give back one of ``tenant``'s slots: to its first waiting request, if any."""
        state = self._tenants[tenant]
        while state.waiting:
            turn = state.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands: ``running`` stays
                return
        state.running -= 1
        if not state.running:
            del self._tenants[tenant]
