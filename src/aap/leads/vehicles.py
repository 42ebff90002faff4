"""Linking a lead's ``vehicle_of_interest`` to a listing of this endpoint.

A vehicle of interest is a partial description and is always accepted as
given; linking only adds what the dealer already knows. Identifiers are tried
in the project's precedence (``vehicle_id`` > ``vin`` > ``stock``, docs/search.md,
"inventory.vehicle"):

``none``         no identifier given: nothing to link
``linked``       exactly one live listing matches and no other identifier
                 contradicts it; its rooftop and seller route the lead and its
                 year/make/model fill gaps in the ADF document
``unavailable``  only a tombstone (sold or removed listing) matches; the lead is
                 accepted (or rejected when ``unavailable_vehicle = "reject"``)
                 and a test drive on it is rejected
``unknown``      identifiers match nothing this endpoint ever listed, or several
                 listings, or contradict each other: accepted as given, unlinked
                 (never a guess, never VEHICLE_NOT_FOUND: the lead is what matters)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aap.store.inventory import InventoryStore


@dataclass(frozen=True)
class VehicleLink:
    state: str
    vehicle_id: str | None = None
    dealer_id: str | None = None
    listing: dict[str, Any] | None = None

    @property
    def rooftop_name(self) -> str | None:
        return self.listing.get("rooftop") if self.listing else None


NONE = VehicleLink("none")


def _ident(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def link_vehicle(inventory: InventoryStore, vehicle: Any) -> VehicleLink:
    """Resolve ``vehicle_of_interest`` against ``inventory.find`` (listings and tombstones),
    read on the primary (docs/leads.md §4)."""
    if not isinstance(vehicle, dict):
        return NONE
    ids = {k: _ident(vehicle.get(k)) for k in ("vehicle_id", "vin", "stock")}
    if not any(ids.values()):
        return NONE
    # On the primary: the link decides the lead's seller, rooftop and idempotency scope, and a
    # replica within its allowed lag may not have the listing imported a moment ago yet.
    records = inventory.find(vehicle_id=ids["vehicle_id"], vin=ids["vin"], stock=ids["stock"], primary=True)
    wanted_dealer = _ident(vehicle.get("dealer_id"))
    if wanted_dealer is not None:
        records = [r for r in records if r.dealer_id == wanted_dealer]
    field = next(k for k in ("vehicle_id", "vin", "stock") if ids[k])
    column = {"vehicle_id": "id", "vin": "vin", "stock": "stock"}[field]
    matches = [r for r in records if getattr(r, column) == ids[field]]
    live = [r for r in matches if r.available]
    if len(live) == 1:
        record = live[0]
        for other in ("vin", "stock"):
            given, known = ids[other], getattr(record, other)
            if other != field and given is not None and known is not None and given != known:
                return VehicleLink("unknown")  # the identifiers name different vehicles
        return VehicleLink("linked", record.id, record.dealer_id, record.listing)
    if not live and matches:
        dealers = {r.dealer_id for r in matches}
        if len(matches) == 1 or len(dealers) == 1:
            return VehicleLink("unavailable", matches[0].id if len(matches) == 1 else None, next(iter(dealers)))
    return VehicleLink("unknown")
