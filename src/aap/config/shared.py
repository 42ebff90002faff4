"""Sections of Settings that many agents hold alike, held once (docs/platform.md, "Sizing").

A platform worker holds thousands of tenants' Settings, and most of their sections — the
search capabilities, the rate limit, the connection limits, ``[mcp]``, ``[leads]``,
``[poppy]``, ``[web]``, the outbound reach — are the defaults or the platform's, equal from
one tenant to the next. :class:`SharedSections` gives a tenant's Settings the one instance of
each such section with equal content that an agent of this process already holds, so that a
tenant costs its own parts (its identity, its dealer) and not a copy of every default.

Only immutable values are shared: frozen dataclasses that hash by content (a section holding
a list or a dict does not hash, and stays the tenant's own). Equal content is the key, never a
tenant's id, so two tenants with different settings get different sections. The table holds
its values weakly: a section no agent holds any more leaves it.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from aap.config.model import Settings

#: The sections of :class:`Settings` shared between agents with equal ones. Not ``secrets``:
#: a tenant's secret values are read for it, and compare by value alone.
SHARED_FIELDS = ("search", "rate_limit", "limits", "mcp", "leads", "poppy", "web", "outbound")


class SharedSections:
    """One worker's table of Settings sections, keyed by their content (type and value)."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[tuple[type, Any], Any] = weakref.WeakValueDictionary()

    def __len__(self) -> int:
        return len(self._held)

    def section(self, value: Any) -> Any:
        """The instance equal to ``value`` that is held already (``value`` itself the first
        time); ``value`` as it is when it cannot be shared (it does not hash by content, or
        cannot be referred to weakly)."""
        try:
            key = (type(value), value)
            held = self._held.get(key)
            if held is not None:
                return held
            self._held[key] = value
        except TypeError:  # unhashable (a list or a dict inside), or no weak reference to it
            return value
        return value

    def settings(self, settings: Settings) -> Settings:
        """``settings`` with each of its :data:`SHARED_FIELDS` the held equal instance."""
        changes = {}
        for name in SHARED_FIELDS:
            value = getattr(settings, name)
            shared = self.section(value)
            if shared is not value:
                changes[name] = shared
        return dataclasses.replace(settings, **changes) if changes else settings
