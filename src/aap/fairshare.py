"""Fair sharing of one worker between the tenants of a platform: a tenant's requests in flight
are bounded, so one tenant's flood cannot take every executor thread and database connection,
nor the event loop and the processor.

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

Bounding how many requests run at once does not bound how much of the worker they take when
each is short: a flood of requests that its rate limit refuses, each answered in a fraction of
a millisecond, keeps the loop and the processor busy however few slots it has, because every
answer brings the flooding client's next request. Two rules therefore go with the slots:

- **A refused request keeps its slot a moment** (``hold`` seconds, :data:`REFUSAL_HOLD`, after
  it was answered: :meth:`leave` with ``after``): the answer goes out at once, but the tenant's
  next request starts only then, so a tenant whose caller is at its rate limit has its
  refusals answered at most ``limit / hold`` times a second in a worker, the rest waiting in
  its queue (holding nothing) or refused by it.
- **A tenant at its bound yields to the others.** A slot that a tenant with requests waiting
  gives back is not handed on while another tenant has a request in flight: the tenant's
  next request starts when one of the others' ends (or after ``yield_for`` seconds, so that
  one slow request elsewhere cannot stall it). Tenants at their bound thus take turns with
  the rest, round robin, instead of each filling the loop between another's steps; a tenant
  below its bound is never made to wait.

And a request that arrived while its tenant's slots were all taken runs its work on the
executor even when its shape is short enough for the event loop (:data:`aap.work.OFF_LOOP`,
set by :meth:`aap.gateway.Gateway.arrival`): a flood's searches never hold the loop that the
other tenants' requests are read, routed and answered on.

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

#: Seconds a request refused for its caller's rate limit keeps its tenant's slot after its answer.
REFUSAL_HOLD = 0.010
#: The longest a tenant at its bound yields its next slot to the other tenants' requests.
YIELD_FOR = 0.100


@dataclass
class _Tenant:
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    #: Yielding: a slot it gave back waits for another tenant's request to end (the timer bounds it).
    yielding: asyncio.TimerHandle | None = None


class TenantShares:
    """Per-tenant slots of one worker: ``limit`` in flight, ``queue`` waiting up to ``wait`` s;
    a refused request's slot held ``hold`` s; a tenant at its bound yields up to ``yield_for`` s."""

    def __init__(
        self, *, limit: int, queue: int, wait: float, hold: float = REFUSAL_HOLD, yield_for: float = YIELD_FOR
    ) -> None:
        if limit < 1 or queue < 0 or wait < 0 or hold < 0 or yield_for < 0:
            raise ValueError("a tenant's share needs limit >= 1, queue >= 0, and waits >= 0")
        self.limit = limit
        self.queue = queue
        self.wait = wait
        self.hold = hold
        self.yield_for = yield_for
        self._tenants: dict[str, _Tenant] = {}  # only tenants with requests in flight or waiting
        self._yielding: dict[str, _Tenant] = {}  # those of them yielding their next slot
        self._busy = 0  # requests holding a slot, every tenant's

    def running(self, tenant: str) -> int:
        """``tenant``'s requests holding a slot now."""
        state = self._tenants.get(tenant)
        return state.running if state else 0

    def waiting(self, tenant: str) -> int:
        """``tenant``'s requests waiting for a slot now."""
        state = self._tenants.get(tenant)
        return len(state.waiting) if state else 0

    def yielding(self, tenant: str) -> bool:
        """Whether ``tenant``'s next waiting request waits for another tenant's to end."""
        state = self._tenants.get(tenant)
        return state is not None and state.yielding is not None

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
            self._busy += 1
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
        # handed a slot by _hand_on(): ``running`` already counts it

    def _give_up(self, tenant: str, state: _Tenant, turn: asyncio.Future[None]) -> None:
        if turn.done():  # the slot was ours already: pass it on
            self.leave(tenant)
            return
        turn.cancel()
        state.waiting.remove(turn)
        self._forget_if_idle(tenant, state)

    def leave(self, tenant: str, after: float = 0.0) -> None:
        """Give back one of ``tenant``'s slots (``after`` seconds from now, when given): to its
        first waiting request, unless it yields to another tenant's request in flight."""
        if after > 0:
            asyncio.get_running_loop().call_later(after, self.leave, tenant)
            return
        state = self._tenants[tenant]
        state.running -= 1
        self._busy -= 1
        for other, its in list(self._yielding.items()):  # another's request ended: those yielding go on
            if other != tenant:
                self._resume(other, its)
        if not state.waiting or state.yielding is not None:
            self._forget_if_idle(tenant, state)
            return
        if self._busy > state.running and self.yield_for > 0:  # others are at work: their turn first
            state.yielding = asyncio.get_running_loop().call_later(self.yield_for, self._resume, tenant, state)
            self._yielding[tenant] = state
            return
        self._hand_on(state)

    def _resume(self, tenant: str, state: _Tenant) -> None:
        """End ``tenant``'s yielding: its free slots go to its waiting requests."""
        self._stop_yielding(tenant, state)
        self._hand_on(state)
        self._forget_if_idle(tenant, state)

    def _hand_on(self, state: _Tenant) -> None:
        """Each free slot of the tenant to its first waiting request (still waiting)."""
        while state.running < self.limit and state.waiting:
            turn = state.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands
                state.running += 1
                self._busy += 1

    def _stop_yielding(self, tenant: str, state: _Tenant) -> None:
        if state.yielding is not None:
            state.yielding.cancel()
            state.yielding = None
            del self._yielding[tenant]

    def _forget_if_idle(self, tenant: str, state: _Tenant) -> None:
        if not state.waiting:
            self._stop_yielding(tenant, state)  # nobody left to hand a slot to
        if not state.running and not state.waiting and self._tenants.get(tenant) is state:
            del self._tenants[tenant]
