"""A surface of an agent: the paths it answers, declared, and how it is built for one agent.

Each surface module (``aap.bindings.a2a``, ``aap.bindings.mcp``, ``aap.discovery``,
``aap.poppy``, ``aap.site``, ``aap.console``) declares the paths it answers (``PATHS``:
exact paths, or prefixes ending in ``/``) and the error shape of its paths
(``ERROR_SHAPES``), next to its ``build(gateway) -> BindingParts``. The composition root
(:mod:`aap.server.app`) makes one :class:`Surface` of each, so which surface answers a
request is known from the declarations alone (:class:`SurfaceTable`), before any agent is
built: a deployment that is one agent builds its surfaces at start, a platform builds a
tenant's on the first request that needs each (:mod:`aap.server.runtime`), and both route
with the same table. ``tests/test_server_app.py`` checks that every route a surface builds
lies within what it declares, and that no two surfaces declare one path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

from aap.web.errors import ErrorShape, ErrorShapes
from aap.web.parts import BindingParts

if TYPE_CHECKING:
    from aap.gateway import Gateway


@dataclass(frozen=True)
class Surface:
    """One surface: its name, the paths it answers, how it is built for an agent, its error shapes."""

    name: str
    #: Exact paths, or prefixes ending in ``/`` (``/console/`` answers everything under it).
    paths: tuple[str, ...]
    build: Callable[[Gateway], BindingParts]
    #: The error shape of its paths, for what is answered before it is built (a body too large).
    error_shapes: Mapping[str, ErrorShape] = field(default_factory=dict)

    def answers(self, path: str) -> bool:
        """True when ``path`` is one of its paths, or under one of its prefixes."""
        return any(path == rule or (_prefix(rule) and path.startswith(rule)) for rule in self.paths)


def _prefix(rule: str) -> bool:
    """``/console/`` names everything under it; ``/`` names only the root."""
    return rule.endswith("/") and rule != "/"


class SurfaceTable:
    """Which surface (its index) answers a path, from the surfaces' declarations."""

    def __init__(self, surfaces: Sequence[Surface]) -> None:
        self.surfaces = tuple(surfaces)
        self.exact: dict[str, int] = {}
        prefixes: list[tuple[str, int]] = []
        shapes: dict[str, ErrorShape] = {}
        for index, surface in enumerate(self.surfaces):
            shapes.update(surface.error_shapes)
            for rule in surface.paths:
                if _prefix(rule):
                    prefixes.append((rule, index))
                else:
                    self.exact.setdefault(rule, index)
        #: Longest prefix first, so ``/poppy/v1/`` is found before a shorter ``/poppy/``.
        self.prefixes = sorted(prefixes, key=lambda item: len(item[0]), reverse=True)
        self.shapes = ErrorShapes(shapes)
        #: The routes of each surface as first built for some agent (every agent's are alike):
        #: the route templates a trace names (``/vehicles/{vehicle_id}``, :mod:`aap.web.tracing`).
        self.routes: dict[int, Sequence[BaseRoute]] = {}

    def owner(self, path: str) -> int | None:
        """The index of the surface answering ``path``, or None (nobody: 404)."""
        index = self.exact.get(path)
        if index is not None:
            return index
        for prefix, owner in self.prefixes:
            if path.startswith(prefix):
                return owner
        return None
