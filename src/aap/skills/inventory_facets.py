"""``inventory.facets``: counts and ranges over the full matching set (docs/search.md, "Facets").

The vocabulary the request's feature codes are checked against and the counts
come from one inventory snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aap.inventory.query import build_criteria, feature_vocabulary
from aap.skills.inventory_search import within_budget

if TYPE_CHECKING:
    from aap.agent import CallContext, DealerAgent


def run(agent: DealerAgent, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    with agent.stores.inventory.snapshot() as inventory, within_budget(inventory, agent.settings.search_timeout_ms):
        vocabulary = feature_vocabulary(agent.settings, inventory)
        criteria = build_criteria(request, agent.settings, lambda: [code for code, _ in vocabulary])
        return {"type": "inventory.facets.response", "data": inventory.facets(criteria, vocabulary)}
