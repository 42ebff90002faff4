"""The console's feed pages (docs/console.md, "Feeds")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import Route

if TYPE_CHECKING:
    from aap.console import Console


def routes(console: Console) -> list[Route]:
    return []
