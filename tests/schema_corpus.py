"""Instances to compare schema verdicts on: real AAP responses and errors, and broken variants of them.

Used by tests/test_mcp_output_schemas.py (draft-07 and 2020-12 readings in Python) and
tests/test_mcp_node.py (Ajv, as the TypeScript SDK runs it). The valid instances are what the
dealer agent really answers (the response schemas carry no examples); the invalid ones are
derived deterministically: a required member dropped, an unknown member added, a value of
the wrong JSON type, a ``type`` naming another message, a currency context broken. Variants
never replace a string with another string, so format checkers cannot change a verdict.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aap.agent import CallContext, DealerAgent
from aap.errors import AapError
from aap.inventory.demo import generate_listings
from aap.skills.catalog import SKILLS
from aap.spec import schema
from aap.store import open_stores
from http_helpers import make_settings
from mcp_helpers import lead_request

MAX_LEAF_VARIANTS = 60
JUNK: list[Any] = [
    {},
    [],
    "aap",
    None,
    7,
    True,
    {"type": "aap.error"},
    {"type": "nothing.response", "data": {}},
    {"data": {}},
]


def real_messages(directory: Path) -> dict[str, list[Any]]:
    """Real answers by skill id, plus ``"error"``: what the dealer agent produces."""
    settings = make_settings("http://127.0.0.1:9", f"sqlite:///{directory / 'corpus.db'}")
    stores = open_stores(settings.database_url)
    try:
        listings = list(generate_listings(40, seed=11, settings=settings))
        stores.inventory.import_listings(listings, replace=True)
        agent = DealerAgent(settings, stores)
        skills = {s.id: s for s in agent.skills}
        ctx = CallContext(binding="mcp")
        vehicle = next(v for v in listings if v.get("vin") and v.get("status", "available") == "available")

        def run(skill_id: str, payload: dict[str, Any]) -> dict[str, Any]:
            try:
                return agent.run(skills[skill_id], payload, ctx)
            except AapError as exc:
                return exc.to_dict()

        search = {"type": "inventory.search.request", "pagination": {"limit": 4}}
        lead = lead_request(vehicle, uuid.uuid4().hex)
        out: dict[str, list[Any]] = {
            "dealer.information": [run("dealer.information", {"type": "dealer.information.request"})],
            "inventory.facets": [
                run("inventory.facets", {"type": "inventory.facets.request"}),
                run("inventory.facets", {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}),
            ],
            "inventory.search": [
                run("inventory.search", search),
                run("inventory.search", {**search, "currency": "CAD"}),
                run("inventory.search", {**search, "filters": {"query": "leather"}}),
            ],
            "inventory.vehicle": [
                run("inventory.vehicle", {"type": "inventory.vehicle.request", "vin": vehicle["vin"]})
            ],
            "lead.submit": [run("lead.submit", lead), run("lead.submit", lead)],  # received, then replayed
        }
        no_consent = {k: v for k, v in lead_request(vehicle, uuid.uuid4().hex).items() if k != "consent"}
        out["error"] = [
            run("inventory.vehicle", {"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}),
            run("inventory.search", {"type": "inventory.search.request", "filters": {"make": "x", "price_max": -1}}),
            run("lead.submit", no_consent),
            AapError("RATE_LIMITED", retry_after_ms=1500).to_dict(),
            AapError("INTERNAL_ERROR").to_dict(),
        ]
        return out
    finally:
        stores.close()


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:2]):
            yield from _leaves(item, (*path, index))
    yield path, value


def _replace(instance: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(instance)
    if not path:
        return value
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


def _other_type(value: Any) -> Any:
    """A value of another JSON type (never another string: formats stay out of the verdicts)."""
    if isinstance(value, bool):
        return "true"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return {"items": value}
    if isinstance(value, dict):
        return [value]
    return 0


def variants(instance: dict[str, Any], response_types: list[str]) -> Iterator[tuple[str, Any]]:
    """Broken copies of ``instance`` (each differs from it in one place)."""
    name = "error" if instance.get("type") == "aap.error" else instance.get("type", "?")
    for key in instance:
        yield f"{name}: without {key}", {k: v for k, v in instance.items() if k != key}
    yield f"{name}: unknown member", {**instance, "aap_unknown": 1}
    for other in [*response_types, "aap.error"]:
        if other != instance.get("type"):
            yield f"{name}: type {other}", {**instance, "type": other}
    data = instance.get("data")
    if isinstance(data, dict):
        required = schema_required(instance)
        for key in required:
            yield f"{name}: data without {key}", {**instance, "data": {k: v for k, v in data.items() if k != key}}
        if data.get("currency") == "CAD" and data.get("vehicles"):
            usd = copy.deepcopy(instance)
            usd["data"]["vehicles"][0]["currency"] = "USD"
            yield f"{name}: a USD vehicle in a CAD answer", usd
    for count, (path, value) in enumerate(p for p in _leaves(instance) if p[0]):
        if count >= MAX_LEAF_VARIANTS:
            break
        yield f"{name}: {'/'.join(map(str, path))} of another type", _replace(instance, path, _other_type(value))


def schema_required(instance: dict[str, Any]) -> list[str]:
    """``data``'s required members in the response schema of ``instance``'s type."""
    skill = next((s for s in SKILLS.values() if s.response_type == instance.get("type")), None)
    if skill is None:
        return []
    data_schema = schema(skill.response_schema).get("properties", {}).get("data", {})
    return list(data_schema.get("required", []))


def corpus(messages: dict[str, list[Any]]) -> dict[str, list[tuple[str, Any]]]:
    """Instances to judge for each skill's tool: its answers, every error, variants of both, junk."""
    response_types = [s.response_type for s in SKILLS.values()]
    out: dict[str, list[tuple[str, Any]]] = {}
    for skill_id, answers in messages.items():
        if skill_id == "error":
            continue
        instances: list[tuple[str, Any]] = []
        for index, answer in enumerate([*answers, *messages["error"]]):
            instances.append((f"real answer {index}", answer))
            instances.extend(variants(answer, response_types))
        instances.extend((f"junk {index}", junk) for index, junk in enumerate(JUNK))
        for other_id, other in messages.items():  # another skill's real answer
            if other_id not in (skill_id, "error"):
                instances.append((f"{other_id} answer", other[0]))
        out[skill_id] = instances
    return out
