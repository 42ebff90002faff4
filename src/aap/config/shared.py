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
the fields every request reads ready to use, its own parts (identity, sellers, features, feeds)
serialised until a request reads them (docs/platform.md, "Sizing").
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


#: The fields of :class:`Settings` that are a tenant's own parts and that most requests never
#: read (a search reads none of them; the agent card, ``dealer.information`` and a lead do): a
#: tenant's packed settings hold them serialised, and its agent built again unpacks them on its
#: first read of one (:class:`LazySettings`).
PACKED_FIELDS = ("agent", "dealer", "dealers", "features", "feeds")
#: The other fields: kept ready, so that building a tenant again for a search unpacks nothing.
READY_FIELDS = tuple(name for name in Settings.__slots__ if name not in PACKED_FIELDS)
#: Ready fields whose values are a tenant's own (its names, its URLs, its secrets); the others
#: are mostly the same objects from one tenant to the next, and held once for all of them.
OWN_FIELDS = ("deployment_id", "public_url", "tenant_id", "source_path", "a2a_tenant", "a2a_url", "secrets")
COMMON_FIELDS = tuple(name for name in READY_FIELDS if name not in OWN_FIELDS)

_SLOTS = {name: Settings.__dict__[name] for name in Settings.__slots__}
_OWN_GETTERS = tuple(_SLOTS[name].__get__ for name in OWN_FIELDS)
_OWN_SETTERS = tuple(_SLOTS[name].__set__ for name in OWN_FIELDS)
_COMMON_GETTERS = tuple(_SLOTS[name].__get__ for name in COMMON_FIELDS)
_COMMON_SETTERS = tuple(_SLOTS[name].__set__ for name in COMMON_FIELDS)
_PACKED_SETTERS = tuple(_SLOTS[name].__set__ for name in PACKED_FIELDS)
_COMPARED = tuple(f.name for f in dataclasses.fields(Settings) if f.compare)


class PackedSettings:
    """A tenant's Settings while no agent of it is built (:class:`SettingsPacker`): the fields
    every request reads, ready (its own values, and a holder of the others that tenants with
    the same ones share), and the tenant's own parts (:data:`PACKED_FIELDS`) serialised."""

    __slots__ = ("common", "data", "own", "packer", "revision")

    def __init__(
        self, revision: int, own: tuple[Any, ...], common: _Common, data: bytes, packer: SettingsPacker
    ) -> None:
        self.revision, self.own, self.common, self.data, self.packer = revision, own, common, data, packer

    @property
    def ready(self) -> dict[str, Any]:
        """The ready fields by name."""
        return dict(zip(OWN_FIELDS + COMMON_FIELDS, self.own + self.common.values))


class _Common:
    """The values of :data:`COMMON_FIELDS` one or more packed Settings hold, held once for all of them."""

    __slots__ = ("__weakref__", "values")

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values


def _unpacked_on_read(name: str) -> property:
    """Field ``name`` of a :class:`LazySettings`: its slot once set, else the packed parts
    unpacked into their slots first."""
    slot = _SLOTS[name]
    get = slot.__get__

    def read(self: LazySettings) -> Any:
        try:
            return get(self)
        except AttributeError:  # not read yet: every packed field is set at once
            self.unpack_rest()
            return get(self)

    return property(read, slot.__set__, doc=f"The tenant's ``{name}``, unpacked on first read.")


def _settings_from_state(state: tuple[Any, ...]) -> Settings:
    settings: Settings = object.__new__(Settings)
    settings.__setstate__(state)
    return settings


class LazySettings(Settings):
    """A tenant's :class:`Settings` as its agent is built from its :class:`PackedSettings`
    (the first time and every time again): the ready fields set, its own parts
    (:data:`PACKED_FIELDS`) unpacked when one is first read.

    It equals the Settings it was packed from, and pickles and copies as a plain
    :class:`Settings`. Two threads reading a packed field at once may both unpack it; each
    sets the same values."""

    __slots__ = ("_packed",)
    _packed: PackedSettings

    agent = _unpacked_on_read("agent")
    dealer = _unpacked_on_read("dealer")
    dealers = _unpacked_on_read("dealers")
    features = _unpacked_on_read("features")
    feeds = _unpacked_on_read("feeds")

    __hash__ = Settings.__hash__

    @classmethod
    def of(cls, packed: PackedSettings) -> LazySettings:
        settings: LazySettings = object.__new__(cls)
        for setter, value in zip(_OWN_SETTERS, packed.own):
            setter(settings, value)
        for setter, value in zip(_COMMON_SETTERS, packed.common.values):
            setter(settings, value)
        _SET_PACKED(settings, packed)  # past the frozen dataclass's __setattr__
        return settings

    def unpack_rest(self) -> None:
        """Set the packed fields from the tenant's packed parts."""
        packed = self._packed
        for setter, value in zip(_PACKED_SETTERS, packed.packer.unpack_own(packed)):
            setter(self, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _COMPARED)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in Settings.__slots__)

    def __reduce__(self) -> tuple[Any, ...]:
        return _settings_from_state, (self.__getstate__(),)


_SET_PACKED = LazySettings.__dict__["_packed"].__set__


class _Packer(pickle.Pickler):
    """Refers to classes by their place in the packer's table of them."""

    def __init__(self, file: io.BytesIO, packer: SettingsPacker) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.packer = packer

    def persistent_id(self, obj: Any) -> int | None:
        return self.packer.class_index(obj) if isinstance(obj, type) else None


class SettingsPacker:
    """What a worker keeps of a tenant's Settings so that building its agent again neither reads
    the registry nor parses TOML, in a fraction of their memory.

    The fields every request reads are kept ready, so that building the tenant again for a
    search unpacks nothing: its own values (names, URLs, secrets) in a tuple of its own, the
    others — the sections it shares with other tenants (:class:`SharedSections`), the
    defaults — through one holder for every tenant whose values are the same objects. Its own parts (:data:`PACKED_FIELDS`: identity,
    sellers, features, feeds) are pickled and compressed against a dictionary — the first
    tenant's, whose field names, defaults and phrasing every other tenant's repeat — with its
    classes referred to by their place in the packer's table, and unpacked when a request first
    reads one (:class:`LazySettings`). The bytes are made by this process from its own Settings
    and only ever read back by it: never stored, sent or taken from outside, which is what makes
    :mod:`pickle` the right tool here.
    """

    def __init__(self) -> None:
        self._dictionary: bytes | None = None
        self._common: weakref.WeakValueDictionary[tuple[int, ...], _Common] = weakref.WeakValueDictionary()
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
        of its own parts that does not pickle): the tenant is then loaded from the registry each time."""
        buffer = io.BytesIO()
        try:
            _Packer(buffer, self).dump(tuple(getattr(settings, name) for name in PACKED_FIELDS))
        except (pickle.PicklingError, TypeError, AttributeError):
            return None
        raw = buffer.getvalue()
        if self._dictionary is None:
            self._dictionary = raw
        compressor = zlib.compressobj(1, wbits=-zlib.MAX_WBITS, zdict=self._dictionary)
        values = tuple(get(settings) for get in _COMMON_GETTERS)
        key = tuple(id(value) for value in values)
        common = self._common.get(key)
        if common is None or any(a is not b for a, b in zip(common.values, values)):
            common = self._common[key] = _Common(values)
        own = tuple(get(settings) for get in _OWN_GETTERS)
        return PackedSettings(revision, own, common, compressor.compress(raw) + compressor.flush(), self)

    def unpack(self, packed: PackedSettings) -> LazySettings:
        """The Settings :meth:`pack` packed (equal to them; the ready fields the same objects),
        their own parts unpacked on first read."""
        return LazySettings.of(packed)

    def unpack_own(self, packed: PackedSettings) -> tuple[Any, ...]:
        """The values of :data:`PACKED_FIELDS` :meth:`pack` packed."""
        assert self._dictionary is not None
        # A raw deflate stream (no header, no checksum: these bytes never leave the process)
        # takes its dictionary when the decompressor is made, not on a second pass.
        raw = zlib.decompressobj(wbits=-zlib.MAX_WBITS, zdict=self._dictionary).decompress(packed.data)
        unpickler = pickle.Unpickler(io.BytesIO(raw))
        # The C unpickler calls an instance's persistent_load without a Python subclass in between.
        unpickler.persistent_load = self._classes.__getitem__  # type: ignore[method-assign]
        values: tuple[Any, ...] = unpickler.load()
        return values
