"""``inventory.facets``: counts and ranges over the full matching set (docs/search.md, "Facets").

The vocabulary the request's feature codes are checked against and the counts
come from one inventory snapshot (a read replica's, where there are fit ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aap.inventory.query import build_criteria, feature_vocabulary
from aap.skills.inventory_search import within_budget

if TYPE_CHECKING:
    from aap.agent import CallContext, DealerAgent
    from aap.store.inventory import InventorySnapshot


def run(agent: DealerAgent, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    def answer(inventory: InventorySnapshot) -> dict[str, Any]:
        with within_budget(inventory, agent.settings.search_timeout_ms):
            vocabulary = feature_vocabulary(agent.settings, inventory)
            criteria = build_criteria(request, agent.settings, lambda: [code for code, _ in vocabulary])
            return inventory.facets(criteria, vocabulary)

    return {"type": "inventory.facets.response", "data": agent.stores.inventory.read(answer)}
