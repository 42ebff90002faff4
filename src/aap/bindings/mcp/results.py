"""What a tool result carries for the model that reads it: listing summaries and a compact text.

A model reads a tool result in its context window, and some frameworks hand it both
blocks of the result (Google ADK passes the text and ``structuredContent``), so a
default 20-vehicle search answer of full records (about 10k tokens a copy) does
not fit a sensible budget (docs/mcp.md, "For LLM agents"). Two rules keep it
small without losing what a shopper chooses by:

- :func:`summarized`: a search answer's listings carry the members of
  :data:`SUMMARY_FIELDS` (data, applied as a projection), plus the evidence of the
  feature codes the search asked for. Each summary is still a valid
  ``InventoryListing`` (status, freshness, an identifier), so the answer is still a
  valid ``InventorySearchResponse``; the full record is one ``inventory.vehicle`` call
  away by the ``vehicle_id`` it carries. ``[mcp] search_listings = "full"`` keeps
  every member.
- :func:`render`: the text block is a compact rendering of the same answer (a
  header and one row per listing; ``key: value`` lines for the other answers) rather
  than the JSON a second time. A client that reads only ``structuredContent`` gets the
  JSON; one that reads only the text gets every value too.
"""

from __future__ import annotations

from typing import Any

import orjson

#: The members of a search listing a shopper compares by (the rest: ``inventory.vehicle``).
SUMMARY_FIELDS = (
    "vehicle_id",
    "dealer_id",
    "vehicle_type",
    "year",
    "make",
    "model",
    "trim",
    "condition",
    "status",
    "currency",
    "price",
    "mileage",
    "mileage_unit",
    "body",
    "fuel",
    "driveline",
    "exterior_color",
    "rooftop",
    "distance_mi",
    "updated_at",
)
#: Summary members the text block leaves out: the listing's freshness is for programs.
TEXT_OMITS = frozenset({"updated_at"})
#: Identifiers kept when a listing has no ``vehicle_id`` (a listing carries at least one).
_FALLBACK_IDS = ("vin", "stock")
SEARCH_RESPONSE = "inventory.search.response"


def summary(listing: dict[str, Any], codes: frozenset[str]) -> dict[str, Any]:
    """``listing`` projected on :data:`SUMMARY_FIELDS`, with the evidence of ``codes``."""
    out = {key: listing[key] for key in SUMMARY_FIELDS if key in listing}
    if "vehicle_id" not in out:
        for key in _FALLBACK_IDS:
            if key in listing:
                out[key] = listing[key]
    evidence = listing.get("feature_evidence")
    if codes and isinstance(evidence, list):
        out["feature_evidence"] = [e for e in evidence if isinstance(e, dict) and e.get("code") in codes]
    return out


def summarized(response: dict[str, Any]) -> dict[str, Any]:
    """A search answer (plain JSON values) with summary listings; any other answer as it is."""
    if response.get("type") != SEARCH_RESPONSE:
        return response
    data = response.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("vehicles"), list):
        return response
    applied = data.get("applied_filters")
    applied = applied if isinstance(applied, dict) else {}
    codes = frozenset(c for key in ("features_all", "features_any") for c in applied.get(key) or ())
    vehicles = [summary(v, codes) if isinstance(v, dict) else v for v in data["vehicles"]]
    return {**response, "data": {**data, "vehicles": vehicles}}


# -- the text block ------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return orjson.dumps(value).decode() if ("|" in value or "\n" in value or not value) else value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return str(value)


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def _table(rows: list[dict[str, Any]], indent: str) -> list[str]:
    """A header and one line per row; a column with one value on every row is said once, above."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns and not _empty(row[k])]
    constant = [c for c in columns if len(rows) > 1 and all(c in r and r[c] == rows[0][c] for r in rows)]
    lines = []
    if constant:
        lines.append(indent + "every row: " + ", ".join(f"{c} {_cell(rows[0][c])}" for c in constant))
    shown = [c for c in columns if c not in constant]
    if shown:
        lines.append(indent + " | ".join(shown))
        lines += [indent + " | ".join("" if _empty(r.get(c)) else _cell(r[c]) for c in shown) for r in rows]
    return lines


def _flat(value: Any) -> bool:
    return isinstance(value, dict) and all(not isinstance(v, (dict, list)) or _flat_list(v) for v in value.values())


def _flat_list(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)


def _outline(value: dict[str, Any], indent: str = "") -> list[str]:
    lines: list[str] = []
    for key, item in value.items():
        if _empty(item):
            continue
        if isinstance(item, dict):
            lines.append(f"{indent}{key}:")
            lines += _outline(item, indent + "  ")
        elif isinstance(item, list) and all(_flat(v) for v in item):
            lines.append(f"{indent}{key} ({len(item)}):")
            lines += _table(item, indent + "  ")
        elif isinstance(item, list) and all(isinstance(v, dict) for v in item):
            lines.append(f"{indent}{key} ({len(item)}):")
            for index, entry in enumerate(item):
                lines.append(f"{indent}  [{index}]")
                lines += _outline(entry, indent + "    ")
        else:
            lines.append(f"{indent}{key}: {_cell(item)}")
    return lines


def _search_text(data: dict[str, Any]) -> list[str]:
    total, vehicles = data.get("total"), data.get("vehicles") or []
    sort = data.get("sort") or {}
    head = f"{len(vehicles)} vehicles shown" + (f" of {total} matching" if total is not None else "")
    if sort:
        head += f", sorted by {sort.get('field')} {sort.get('order')}"
    head += f"; prices in {data.get('currency', 'USD')}, mileage in {data.get('mileage_unit', 'mi')}."
    cursor = data.get("next_cursor")
    lines = [head, f'More: call again with pagination.cursor "{cursor}".' if cursor else "No more pages."]
    rest = {k: v for k, v in data.items() if k not in ("total", "vehicles", "sort", "next_cursor", "limit")}
    rest = {k: v for k, v in rest.items() if k not in ("currency", "mileage_unit")}
    lines += _outline(rest)
    if vehicles:
        lines.append("vehicles:")
        rows = [{k: x for k, x in v.items() if k not in TEXT_OMITS} for v in vehicles if isinstance(v, dict)]
        lines += _table(rows, "")
    return lines


def render(response: dict[str, Any]) -> str:
    """The text block of a success: the answer's values, compactly (never a second JSON copy)."""
    data = response.get("data")
    lines = [str(response.get("type"))]
    if isinstance(response.get("message"), str):
        lines.append("message: " + response["message"])
    if response.get("type") == SEARCH_RESPONSE and isinstance(data, dict):
        lines += _search_text(data)
    elif isinstance(data, dict):
        lines += _outline(data)
    return "\n".join(lines)
