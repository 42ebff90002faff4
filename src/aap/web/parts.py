"""What a binding contributes to the ASGI app: routes and lifespan hooks.

Each binding module exposes ``build(agent) -> BindingParts``; ``create_app``
collects them, so adding a binding never means editing another one.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Callable

from starlette.routing import BaseRoute

Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


@dataclass
class BindingParts:
    """Routes to mount and lifespan context managers (entered at startup, in order)."""

    routes: list[BaseRoute] = field(default_factory=list)
    lifespans: list[Lifespan] = field(default_factory=list)
