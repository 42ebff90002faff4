"""``inventory.facets``: counts and ranges over the full matching set (notes §3)."""

from __future__ import annotations

from typing import Any

from aap.inventory.query import build_criteria, feature_vocabulary


def run(agent: Any, request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    store = agent.stores.inventory
    vocabulary = feature_vocabulary(agent.settings, store)
    criteria = build_criteria(request, agent.settings, lambda: [code for code, _ in vocabulary])
    return {"type": "inventory.facets.response", "data": store.facets(criteria, vocabulary)}
