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

:class:`SettingsPacker` holds a tenant's Settings smaller still while no agent of it is built:
its own parts serialised, the shared sections by reference (docs/platform.md, "Sizing").
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
    """A tenant's Settings while no agent of it is built (:class:`SettingsPacker`)."""

    __slots__ = ("data", "revision", "shared")

    def __init__(self, revision: int, data: bytes, shared: _Sections) -> None:
        self.revision, self.data, self.shared = revision, data, shared


class _Sections:
    """The shared sections one or more packed Settings refer to, held once for all of them."""

    __slots__ = ("__weakref__", "values")

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values


class _Packer(pickle.Pickler):
    """Refers to the shared sections by their place in the holder, and to classes by their
    place in the packer's table of them (past the sections)."""

    def __init__(self, file: io.BytesIO, shared: dict[int, int], packer: SettingsPacker) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared
        self.packer = packer

    def persistent_id(self, obj: Any) -> int | None:
        pid = self.shared.get(id(obj))
        if pid is None and isinstance(obj, type):
            pid = len(SHARED_FIELDS) + self.packer.class_index(obj)
        return pid


class SettingsPacker:
    """What a worker keeps of a tenant's Settings so that building its agent again neither reads
    the registry nor parses TOML, in about a tenth of their memory.

    A tenant's own parts (identity, dealer profile, secret values) are pickled and compressed
    against a dictionary: the first Settings this packer packs, whose field names, defaults and
    phrasing every other tenant's repeat. The sections it shares with other tenants are referred
    to, not copied, through one holder per distinct set of them, and its classes by their place
    in the packer's table. The bytes are made by this process from its own Settings and only
    ever read back by it: never stored, sent or taken from outside, which is what makes
    :mod:`pickle` the right tool here.
    """

    def __init__(self) -> None:
        self._dictionary: bytes | None = None
        self._holders: weakref.WeakValueDictionary[tuple[int, ...], _Sections] = weakref.WeakValueDictionary()
        #: The classes packed Settings are made of, referred to by their place here rather than
        #: by name: a name is looked up in its module by each unpacking, a place is an index.
        #: Only grows, bounded by the classes a Settings tree can hold.
        self._classes: tuple[type, ...] = ()
        self._class_places: dict[type, int] = {}

    def class_index(self, cls: type) -> int:
        """The place of ``cls`` in this packer's table (added the first time)."""
        place = self._class_places.get(cls)
        if place is None:
            place = self._class_places[cls] = len(self._classes)
            self._classes += (cls,)
        return place

    def pack(self, settings: Settings, revision: int) -> PackedSettings | None:
        """``settings`` (of a tenant at ``revision``) packed; None when they cannot be (a value
        that does not pickle): the tenant is then loaded from the registry each time."""
        values = tuple(getattr(settings, name) for name in SHARED_FIELDS)
        key = tuple(id(value) for value in values)
        holder = self._holders.get(key)
        if holder is None or any(a is not b for a, b in zip(holder.values, values)):
            holder = _Sections(values)
            self._holders[key] = holder
        buffer = io.BytesIO()
        try:
            _Packer(buffer, {id(value): i for i, value in enumerate(values)}, self).dump(settings)
        except (pickle.PicklingError, TypeError, AttributeError):
            return None
        raw = buffer.getvalue()
        if self._dictionary is None:
            self._dictionary = raw
        compressor = zlib.compressobj(1, wbits=-zlib.MAX_WBITS, zdict=self._dictionary)
        return PackedSettings(revision, compressor.compress(raw) + compressor.flush(), holder)

    def unpack(self, packed: PackedSettings) -> Settings:
        """The Settings :meth:`pack` packed (equal to them; the shared sections the same objects)."""
        assert self._dictionary is not None
        # A raw deflate stream (no header, no checksum: these bytes never leave the process)
        # takes its dictionary when the decompressor is made, not on a second pass.
        raw = zlib.decompressobj(wbits=-zlib.MAX_WBITS, zdict=self._dictionary).decompress(packed.data)
        unpickler = pickle.Unpickler(io.BytesIO(raw))
        # The C unpickler calls an instance's persistent_load without a Python subclass in between.
        unpickler.persistent_load = (packed.shared.values + self._classes).__getitem__  # type: ignore[method-assign]
        settings: Settings = unpickler.load()
        return settings
