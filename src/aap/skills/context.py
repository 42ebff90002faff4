"""What a skill is given: its dependencies (:class:`SkillDeps`) and the call (:class:`CallContext`).

A skill is a function ``run(deps, request, ctx)``. ``deps`` is what the composition
root built for one agent — its settings, its stores, a clock, and what is derived from
the settings once (the rooftop index of ``near``) — and ``ctx`` says who is calling,
over which door, at what time. A skill never receives the agent, the gateway or a
binding, so nothing it holds points back up the layers, and two agents built in one
process share nothing a skill could reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

from aap.config.model import Settings
from aap.inventory.geo import RooftopIndex
from aap.inventory.query import RooftopKey, rooftop_index
from aap.store import Stores


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class CallContext:
    """Who is calling, over what, and when. ``caller_id`` is a *verified* identity or None."""

    binding: str
    caller_id: str | None = None
    client_id: str | None = None
    now: datetime = field(default_factory=utc_now)


class SkillDeps:
    """One agent's settings, stores and clock, as its skills see them."""

    def __init__(self, settings: Settings, stores: Stores, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        self.stores = stores
        self.clock = clock

    @cached_property
    def rooftops(self) -> RooftopIndex[RooftopKey]:
        """The rooftops with coordinates, for ``near`` (made once per agent, by its first request
        that filters on ``near``: a platform builds most tenants again for one search, which
        seldom does)."""
        return rooftop_index(self.settings)
