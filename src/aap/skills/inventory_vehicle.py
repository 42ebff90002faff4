"""``inventory.vehicle``: one listing by ``vehicle_id``, ``vin`` or ``stock``.

The rules (docs/search.md, "inventory.vehicle"): every identifier sent must point at the same listing; the most specific one
(``vehicle_id`` > ``vin`` > ``stock``) never overrides a contradicting other.
A VIN or stock number shared by several available listings is ambiguous: we do
not guess, and name the listings it matches (``details.matches``). A listing that is known but gone (sold, removed by a feed) is
VEHICLE_UNAVAILABLE; one never known is VEHICLE_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from aap.config.model import Settings
from aap.errors import AapError
from aap.inventory.query import unpaired_surrogates
from aap.skills.context import CallContext, SkillDeps

_IDENTIFIERS = (("vehicle_id", "id"), ("vin", "vin"), ("stock", "stock"))
#: Listings named in the answer to an ambiguous identifier, at most.
MAX_MATCHES = 20


def run(deps: SkillDeps, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    sent = {name: request[name] for name, _ in _IDENTIFIERS if name in request}
    problems = unpaired_surrogates(sent, "")
    if problems:
        raise AapError("SCHEMA_VALIDATION_FAILED", errors=problems)
    records = deps.stores.inventory.find(
        vehicle_id=sent.get("vehicle_id"), vin=sent.get("vin"), stock=sent.get("stock")
    )
    sellers = _sellers(deps.settings)
    if sellers is not None:
        records = [r for r in records if r.dealer_id in sellers]

    # Listings matching *every* identifier sent.
    matching = [
        r for r in records if all(getattr(r, attr) == sent[name] for name, attr in _IDENTIFIERS if name in sent)
    ]
    if not matching:
        if len(sent) > 1 and records:
            raise AapError(
                "VEHICLE_NOT_FOUND",
                hint="The identifiers sent belong to different listings; retry with the "
                "vehicle_id from a search result alone.",
            )
        raise AapError("VEHICLE_NOT_FOUND", hint="Search the inventory to find a current listing.")
    available = [r for r in matching if r.available]
    if len(available) > 1:
        # The vehicle exists, several times (two sellers list one VIN, two rooftops share a
        # stock number): say so and name each listing, never guess (docs/search.md,
        # "inventory.vehicle"). Listing ids and sellers are what a search shows anyway.
        matches = [
            {"vehicle_id": r.id, **({"dealer_id": r.dealer_id} if r.dealer_id else {})}
            for r in sorted(available, key=lambda r: r.id)[:MAX_MATCHES]
        ]
        raise AapError(
            "VEHICLE_NOT_FOUND",
            "Several listings on this endpoint carry this identifier; ask for one of them by its vehicle_id.",
            hint="Retry with one vehicle_id from details.matches (or from a search result).",
            details={"matches": matches},
        )
    if not available:
        raise AapError(
            "VEHICLE_UNAVAILABLE",
            hint="This vehicle has been sold or removed; search the inventory for alternatives.",
        )
    return {"type": "inventory.vehicle.response", "data": available[0].listing}


def _sellers(settings: Settings) -> set[str] | None:
    """On an aggregate endpoint only configured sellers' listings are reachable."""
    if settings.scope != "aggregate":
        return None
    return {p.dealer_id for p in settings.all_profiles() if p.dealer_id is not None}
