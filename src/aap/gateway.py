"""The one call pipeline of every door: caller admission, the price of the call, where its
work runs, validation, the skill, and what an unexpected failure becomes.

A binding parses its envelope (JSON-RPC, an MCP tool call, a Poppy API request, a page's
query string), decides who the caller is, and hands the skill and the AAP request object
to :meth:`Gateway.call`; it gets back the typed response object or an
:class:`~aap.errors.AapError`, and writes either in its own wire shape. "Envelope in, wire
out": everything between is here, the same for A2A, MCP (plain tool calls and the SDK's
path), Poppy and the public page.

1. **Admission.** Every request pays one rate-limit token of its caller's bucket
   (:mod:`aap.ratelimit`) when it arrives. A door whose protocol orders the rate limit
   before checks of its own (A2A: before the method and its params; MCP: before the tool's
   arguments) calls :meth:`Gateway.admit` at that point and then :meth:`Gateway.call` with
   ``paid=1``; the others let :meth:`Gateway.call` take it. A request its tenant's share
   refused on arrival (below) is refused here, in the door's own protocol, before a token is
   spent.
2. **Price.** Once the skill and the request are known, the call's price is
   :meth:`Gateway.price`: the skill's base (:data:`SKILL_TOKENS`: a lead is a write, a
   booking and a delivery) plus one token per :data:`TOKEN_CPU` of CPU its work shape was
   seen to cost, at most :data:`MAX_TOKENS`; what it costs beyond what the door paid is
   taken before the work runs.
3. **Fair share.** On a platform, a request that sends a body holds one of its tenant's slots
   in this worker (:class:`~aap.fairshare.TenantShares`) from its arrival, before its body is
   read, until it is answered (:meth:`Gateway.arrival`, entered by the tenant routing); it
   waits briefly in the tenant's queue when all are taken, else it is refused
   (``RATE_LIMITED``) at its admission, before any of its work is placed. A request its
   caller's rate limit refused keeps its slot a moment after its answer.
4. **Placement.** The work runs where :class:`~aap.work.Work` places its shape: on the event
   loop when such calls were seen to be short, else on the worker's executor
   (docs/architecture.md, "Where the work runs").
5. **The core.** :meth:`aap.agent.DealerAgent.answer` checks the request bounds and the
   schema (every problem at once) and runs the skill.
6. **Classification.** An :class:`~aap.errors.AapError` passes through as it is; any other
   exception is logged once, without its text (:func:`aap.errors.unexpected`), and becomes
   ``INTERNAL_ERROR``.

The gateway is also the one place that spends rate-limit tokens for other requests
(the token endpoint, :meth:`admit`) and runs the core's blocking calls for the surfaces
(:meth:`blocking`, :meth:`placed`, :meth:`single_flight`): no other module calls the
limiter's admission or the executor (tests/test_gateway.py checks the source).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass
from typing import Any, TypeVar

from aap.agent import DealerAgent
from aap.config.model import Settings
from aap.errors import AapError, unexpected
from aap.fairshare import TenantShares
from aap.ratelimit import RateLimiter
from aap.skills.catalog import SkillInfo
from aap.skills.context import CallContext
from aap.store import Stores
from aap.work import OFF_LOOP, Work

T = TypeVar("T")

#: Rate-limit tokens a request of a skill costs at least (one for the rest): a lead is a
#: write transaction, an appointment booking and a delivery to the CRM.
SKILL_TOKENS = {"lead.submit": 4}
#: Thread CPU a token pays for: a shape seen to cost more takes one more token per slice.
TOKEN_CPU = 0.010
#: The most tokens one request costs (never more than the bucket's burst).
MAX_TOKENS = 16

#: Requests that read nothing: never counted against a share (an MCP stream may stay open).
UNCOUNTED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class _Arrival:
    """What :meth:`Gateway.admit` and :meth:`Gateway.arrival` tell each other of one request."""

    #: Its tenant's share refused it on arrival: the door's admission answers with this.
    refusal: AapError | None = None
    #: Its caller's rate limit refused it (its slot is then held a moment longer).
    rate_limited: bool = False


#: The request this task serves, as its tenant's share saw it (None: not counted by a share).
_ARRIVAL: ContextVar[_Arrival | None] = ContextVar("aap_arrival", default=None)

#: A shape keeps at most this many names, each of at most this length.
_NAME, _NAMES = 40, 40


@dataclass(frozen=True)
class Caller:
    """Who a request is from, as its door decided.

    ``door`` names the binding (``a2a``, ``mcp``, ``poppy``, ``web``); ``key`` is the
    rate-limit bucket (the client address of an anonymous caller, the verified caller
    otherwise); ``caller_id`` and ``client_id`` are *verified* identities or None.
    """

    door: str
    key: str
    caller_id: str | None = None
    client_id: str | None = None


def work_shape(skill: SkillInfo, payload: Any) -> tuple[str, ...] | None:
    """What the cost of running ``payload`` depends on, as a key; None for a write.

    Two reads of one shape (skill, filters named, sort field, paging) cost about the
    same, whatever the values, which lets :class:`~aap.work.Work` learn which shapes
    are short enough to run on the event loop. A write (a lead) is never short: it
    commits. Only names are kept, bounded in length and number.
    """
    if not skill.read_only:
        return None
    if not isinstance(payload, dict):
        return (skill.id,)
    filters = payload.get("filters")
    if isinstance(filters, dict) and len(filters) > _NAMES:
        names = ["(many)"]  # more names than the schema has: refused, without sorting them all
    else:
        names = (
            sorted(k for k in filters if isinstance(k, str) and len(k) <= _NAME) if isinstance(filters, dict) else []
        )
    sort = payload.get("sort")
    field = sort.get("field") if isinstance(sort, dict) else None
    pagination = payload.get("pagination")
    paging = sorted(k for k in ("cursor", "skip") if k in pagination) if isinstance(pagination, dict) else []
    return (skill.id, field if isinstance(field, str) and len(field) <= _NAME else "", *paging, "|", *names)


@dataclass(eq=False)
class Gateway:
    """One agent's call pipeline: its core, its rate limiter and the worker's :class:`Work`."""

    agent: DealerAgent
    limiter: RateLimiter
    work: Work
    _: KW_ONLY
    #: On a platform: the worker's slots per tenant, and this agent's tenant (None: one agent,
    #: whose requests are bounded by the worker alone).
    shares: TenantShares | None = None
    tenant: str = ""

    @classmethod
    def of(
        cls,
        agent: DealerAgent,
        work: Work | None = None,
        *,
        shares: TenantShares | None = None,
        tenant: str = "",
    ) -> Gateway:
        """``agent``'s gateway with its own rate limiter (its settings' rule, buckets in its
        stores) and ``work`` (a new :class:`~aap.work.Work` for its database by default): how
        every agent's gateway is made, a deployment's one and each tenant's of a platform (with
        the worker's ``shares`` and its ``tenant`` id)."""
        limiter = RateLimiter(agent.stores.state, agent.settings.rate_limit)
        work = work or Work(inline=agent.stores.db.in_process)
        return cls(agent, limiter, work, shares=shares, tenant=tenant)

    @property
    def settings(self) -> Settings:
        return self.agent.settings

    @property
    def stores(self) -> Stores:
        return self.agent.stores

    # -- admission and price ----------------------------------------------------------------
    async def admit(self, caller: Caller | str, cost: int = 1) -> None:
        """Spend ``cost`` rate-limit tokens of the caller (``RATE_LIMITED`` when refused).

        From this process's lease when it covers the request (no I/O); else one lease from
        the shared bucket on the executor. Requests of one caller that find the lease empty
        together wait for a single lease rather than each taking one (with 16 in flight,
        every lease would otherwise cost 16 hops). A busy caller's lease is topped up in the
        background when it runs low, so its requests in flight never wait for that write
        together (docs/architecture.md, "Rate limiting").
        """
        arrived = _ARRIVAL.get()
        if arrived is not None and arrived.refusal is not None:
            raise arrived.refusal  # its tenant's share refused it on arrival: before a token is spent
        key = caller if isinstance(caller, str) else caller.key
        limiter, work = self.limiter, self.work
        cost = max(1, min(cost, limiter.rule.burst))
        try:
            while not limiter.check_local(key, cost):
                if await work.single_flight(("lease", key), limiter.check, key, cost):
                    return  # this request's own lease admitted it
        except AapError:
            if arrived is not None:
                arrived.rate_limited = True
            raise
        if limiter.running_low(key):
            work.in_background(("lease", key), limiter.top_up, key)

    def price(self, skill: SkillInfo, shape: Hashable | None) -> int:
        """The tokens a call of ``skill`` with work ``shape`` costs in all (:data:`SKILL_TOKENS`
        plus one per :data:`TOKEN_CPU` the shape was seen to cost here, at most :data:`MAX_TOKENS`)."""
        seen = self.work.seen(shape)
        return min(MAX_TOKENS, SKILL_TOKENS.get(skill.id, 1) + (int(seen / TOKEN_CPU) if seen else 0))

    @asynccontextmanager
    async def arrival(self, method: str) -> AsyncIterator[None]:
        """A request for this agent, for as long as it is served (entered before its body is read).

        On a platform a request sending a body holds one of its tenant's slots in this worker
        meanwhile, after waiting for one in the tenant's queue if need be. When the share refuses
        it, it is still handed to its door, which reads its envelope and answers the refusal in
        its own protocol at :meth:`admit` (a request no door admits, such as a discovery
        document, is served without a slot). A request its caller's rate limit refused keeps
        its slot for the share's ``hold`` after it was answered, so that a client sending
        again and again at its limit gets its refusals no faster than the tenant's slots allow;
        a request that arrived while its tenant's slots were all taken runs its work off the
        event loop (:data:`aap.work.OFF_LOOP`) (docs/platform.md, "Fair sharing"). One agent
        without shares: nothing is counted.
        """
        shares = self.shares
        if shares is None or method in UNCOUNTED_METHODS:
            yield
            return
        arrived = _Arrival()
        crowded = shares.running(self.tenant) >= shares.limit or shares.waiting(self.tenant) > 0
        try:
            await shares.enter(self.tenant)
        except AapError as refusal:
            arrived.refusal = refusal
            token = _ARRIVAL.set(arrived)
            try:
                yield
            finally:
                _ARRIVAL.reset(token)
            return
        token = _ARRIVAL.set(arrived)
        off_loop = OFF_LOOP.set(crowded)
        try:
            yield
        finally:
            OFF_LOOP.reset(off_loop)
            _ARRIVAL.reset(token)
            shares.leave(self.tenant, after=shares.hold if arrived.rate_limited else 0.0)

    # -- the call ----------------------------------------------------------------------------
    def skill_for(self, payload: Any) -> SkillInfo:
        """The skill ``payload.type`` names (``UNSUPPORTED_SKILL`` or a schema error otherwise)."""
        return self.agent.skill_for(payload)

    async def call(self, caller: Caller, skill: SkillInfo, payload: Any, *, paid: int = 0) -> dict[str, Any]:
        """The response object of ``skill`` for ``payload`` from ``caller``, or an ``AapError``.

        ``paid``: the tokens the door already admitted this request with (:meth:`admit`);
        the call takes its first token itself when the door took none. The response may hold
        stored documents as they are (:class:`aap.jsontext.StoredJson`): the door writes it
        with :func:`aap.jsontext.encode`, or reads it with :func:`aap.jsontext.decoded`.
        """
        if paid < 1:
            await self.admit(caller)
            paid = 1
        try:
            shape = work_shape(skill, payload)
            extra = self.price(skill, shape) - paid
            if extra > 0:
                await self.admit(caller, extra)
            context = CallContext(
                binding=caller.door, caller_id=caller.caller_id, client_id=caller.client_id, now=self.agent.deps.clock()
            )
            return await self.work.run(shape, self.agent.answer, skill, payload, context)
        except AapError:
            raise
        except Exception as exc:  # never a stack trace or customer data on the wire or in the log
            raise unexpected(exc, binding=caller.door, skill=skill.id) from None

    # -- the surfaces' other blocking calls ----------------------------------------------------
    async def placed(self, shape: Hashable, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` where its ``shape`` runs (a read a door makes before a call: a token check)."""
        return await self.work.run(shape, fn, *args)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the executor, always (a write, a wait)."""
        return await self.work.blocking(fn, *args, **kwargs)

    async def single_flight(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> bool:
        """``fn(*args)`` on the executor unless a call with ``key`` runs already (then wait for it)."""
        return await self.work.single_flight(key, fn, *args)

    def release(self) -> None:
        """Give the tokens this process leased and did not spend back to the shared buckets."""
        self.limiter.release()
