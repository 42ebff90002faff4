"""What a surface contributes to the ASGI app: routes, lifespan hooks, its error shapes and its hot paths.

Each surface module (``aap.bindings.a2a``, ``aap.bindings.mcp``,
``aap.discovery``, ``aap.poppy``, ``aap.site``, ``aap.console``) exposes
``build(gateway) -> BindingParts`` next to the paths it declares
(:mod:`aap.web.surface`); the composition root (:mod:`aap.server.app`) collects them,
so adding a surface never means editing another one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

#: Entered when the app starts (in order), left when it stops (in reverse order).
Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


@dataclass
class BindingParts:
    """Routes to mount, lifespans to enter and hot paths of one surface built for one agent
    (the paths it answers and their error shapes are declared, :mod:`aap.web.surface`)."""

    #: The routes, or what makes them when first asked (:class:`aap.server.runtime.BuiltSurface`):
    #: a surface whose requests are answered by its :attr:`direct` paths, built again for each
    #: tenant a platform worker serves, needs its routes only for a request off those paths.
    routes: Sequence[BaseRoute] | Callable[[], Sequence[BaseRoute]] = field(default_factory=list)
    lifespans: list[Lifespan] = field(default_factory=list)
    #: (path, method or None for every method) -> the ASGI callable answering it ahead of the
    #: routes (:mod:`aap.web.direct`); the path keeps a route for the other methods.
    direct: dict[tuple[str, str | None], ASGIApp] = field(default_factory=dict)
