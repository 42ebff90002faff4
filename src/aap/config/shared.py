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

:func:`pack` holds a tenant's Settings smaller still while no agent of it is built: its own
parts serialised, the shared sections by reference (docs/platform.md, "Sizing").
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import weakref
import zlib
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


class PackedSettings:
    """A tenant's Settings while no agent of it is built: what a worker keeps so that building
    the agent again neither reads the registry nor parses TOML.

    Its own parts (identity, dealer profile, secret values) are pickled and compressed; the
    sections it shares with other tenants are referenced, not copied. The bytes are made by this
    process from its own Settings and only ever read back by it: they are never stored, sent or
    taken from outside, which is what makes :mod:`pickle` the right tool here.
    """

    __slots__ = ("data", "public_url", "revision", "shared")

    def __init__(self, revision: int, public_url: str, data: bytes, shared: tuple[Any, ...]) -> None:
        self.revision, self.public_url, self.data, self.shared = revision, public_url, data, shared


class _Packer(pickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: dict[int, int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def persistent_id(self, obj: Any) -> int | None:
        return self.shared.get(id(obj))


class _Unpacker(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: tuple[Any, ...]) -> None:
        super().__init__(file)
        self.shared = shared

    def persistent_load(self, pid: Any) -> Any:
        return self.shared[pid]


def pack(settings: Settings, revision: int) -> PackedSettings | None:
    """``settings`` (of a tenant at ``revision``) held compactly; None when it cannot be (a
    value that does not pickle): the tenant is then loaded from the registry each time."""
    shared = tuple(getattr(settings, name) for name in SHARED_FIELDS)
    buffer = io.BytesIO()
    try:
        _Packer(buffer, {id(value): i for i, value in enumerate(shared)}).dump(settings)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    return PackedSettings(revision, settings.public_url, zlib.compress(buffer.getvalue(), 1), shared)


def unpack(packed: PackedSettings) -> Settings:
    """The Settings :func:`pack` held (equal to them; the shared sections the same objects)."""
    settings: Settings = _Unpacker(io.BytesIO(zlib.decompress(packed.data)), packed.shared).load()
    return settings
