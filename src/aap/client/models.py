"""Typed views of AAP responses.

Each result keeps the complete ``raw`` response (nothing the dealer sent is
lost, including fields newer than this client) and exposes the fields a buyer
uses most as attributes. Listings are open objects in AAP, so :class:`Listing`
reads from its dict instead of declaring a closed shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Listing:
    """One ``InventoryListing``."""

    raw: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    vin = property(lambda self: self.raw.get("vin"))
    stock = property(lambda self: self.raw.get("stock"))
    vehicle_id = property(lambda self: self.raw.get("vehicle_id"))
    dealer_id = property(lambda self: self.raw.get("dealer_id"))
    year = property(lambda self: self.raw.get("year"))
    make = property(lambda self: self.raw.get("make"))
    model = property(lambda self: self.raw.get("model"))
    trim = property(lambda self: self.raw.get("trim"))
    condition = property(lambda self: self.raw.get("condition"))
    status = property(lambda self: self.raw.get("status"))
    price = property(lambda self: self.raw.get("price"))
    mileage = property(lambda self: self.raw.get("mileage"))
    rooftop = property(lambda self: self.raw.get("rooftop"))
    updated_at = property(lambda self: self.raw.get("updated_at"))
    distance_mi = property(lambda self: self.raw.get("distance_mi"))

    @property
    def vehicle_type(self) -> str:
        return self.raw.get("vehicle_type") or "car"

    @property
    def currency(self) -> str:
        """Absent means USD (AAP 3.1)."""
        return self.raw.get("currency") or "USD"

    @property
    def mileage_unit(self) -> str:
        return self.raw.get("mileage_unit") or "mi"

    @property
    def key(self) -> str:
        """A stable identity for de-duplication: vehicle_id, else VIN, else stock number."""
        for name in ("vehicle_id", "vin", "stock"):
            if self.raw.get(name):
                return f"{name}:{self.raw[name]}"
        return ""

    @property
    def title(self) -> str:
        return " ".join(str(v) for v in (self.year, self.make, self.model, self.trim) if v)


@dataclass(frozen=True)
class SearchPage:
    """One ``inventory.search.response``."""

    raw: dict[str, Any]
    vehicles: list[Listing] = field(default_factory=list)

    @classmethod
    def from_response(cls, response: dict[str, Any]) -> SearchPage:
        data = response.get("data") or {}
        return cls(response, [Listing(v) for v in data.get("vehicles") or []])

    @property
    def data(self) -> dict[str, Any]:
        return self.raw.get("data") or {}

    total = property(lambda self: self.data.get("total"))
    limit = property(lambda self: self.data.get("limit"))
    skip = property(lambda self: self.data.get("skip"))
    next_cursor = property(lambda self: self.data.get("next_cursor"))
    applied_filters = property(lambda self: self.data.get("applied_filters") or {})
    sort = property(lambda self: self.data.get("sort"))
    query_terms = property(lambda self: self.data.get("query_terms"))
    message = property(lambda self: self.raw.get("message"))

    @property
    def currency(self) -> str:
        return self.data.get("currency") or "USD"

    @property
    def mileage_unit(self) -> str:
        return self.data.get("mileage_unit") or "mi"

    @property
    def facets(self) -> Facets | None:
        facets = self.data.get("facets")
        return Facets(facets) if isinstance(facets, dict) else None


@dataclass(frozen=True)
class FacetValue:
    value: str | int | bool
    count: int


@dataclass(frozen=True)
class Facets:
    """A ``Facets`` object: term facets, range facets and the feature vocabulary."""

    data: dict[str, Any]

    @classmethod
    def from_response(cls, response: dict[str, Any]) -> Facets:
        return cls(response.get("data") or {})

    def terms(self, name: str) -> list[FacetValue] | None:
        """A term facet (``makes``, ``bodies``...); ``None`` when the dealer does not provide it."""
        values = self.data.get(name)
        if not isinstance(values, list):
            return None
        return [FacetValue(v["value"], v["count"]) for v in values if isinstance(v, dict)]

    def range(self, name: str) -> tuple[float, float] | None:
        """A range facet (``price_range``...) as ``(min, max)``; ``None`` when absent."""
        r = self.data.get(name)
        return (r["min"], r["max"]) if isinstance(r, dict) and "min" in r and "max" in r else None

    @property
    def features(self) -> list[dict[str, Any]]:
        return list(self.data.get("features") or [])

    @property
    def currency(self) -> str:
        return self.data.get("currency") or "USD"


@dataclass(frozen=True)
class VehicleDetail:
    """One ``inventory.vehicle.response``."""

    raw: dict[str, Any]

    @property
    def vehicle(self) -> Listing:
        return Listing(self.raw.get("data") or {})

    message = property(lambda self: self.raw.get("message"))


@dataclass(frozen=True)
class DealerInfo:
    """One ``dealer.information.response``."""

    raw: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        return self.raw.get("data") or {}

    name = property(lambda self: self.data.get("name"))
    dealer_id = property(lambda self: self.data.get("dealer_id"))
    welcome_message = property(lambda self: self.data.get("welcome_message"))

    @property
    def rooftops(self) -> list[dict[str, Any]]:
        return list(self.data.get("rooftops") or [])


@dataclass(frozen=True)
class LeadResult:
    """One ``lead.submit.response``."""

    raw: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        return self.raw.get("data") or {}

    lead_id = property(lambda self: self.data.get("lead_id"))
    status = property(lambda self: self.data.get("status"))
    appointment = property(lambda self: self.data.get("appointment"))
    dealer = property(lambda self: self.data.get("dealer"))
    message = property(lambda self: self.raw.get("message"))

    @property
    def replayed(self) -> bool:
        return bool(self.data.get("replayed", False))
