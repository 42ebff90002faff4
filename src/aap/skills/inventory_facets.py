"""``inventory.facets``: counts and ranges over the full matching set (docs/search.md, "Facets").

The vocabulary the request's feature codes are checked against and the counts
come from one inventory snapshot (a read replica's, where there are fit ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aap.inventory.query import build_criteria, feature_vocabulary
from aap.skills.context import CallContext, SkillDeps
from aap.skills.inventory_search import within_budget

if TYPE_CHECKING:
    from aap.store.inventory import InventorySnapshot


def run(deps: SkillDeps, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    def answer(inventory: InventorySnapshot) -> dict[str, Any]:
        with within_budget(inventory, deps.settings.search_timeout_ms):
            vocabulary = feature_vocabulary(deps.settings, inventory)
            criteria = build_criteria(
                request, deps.settings, lambda: [code for code, _ in vocabulary], lambda: deps.rooftops
            )
            return inventory.facets(criteria, vocabulary)

    return {"type": "inventory.facets.response", "data": deps.stores.inventory.read(answer)}
