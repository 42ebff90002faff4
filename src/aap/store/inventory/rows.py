"""A feed listing turned into what the store writes: its row, document and keyword text.

Identity: a listing's id is its ``vehicle_id``; a feed row without one gets a
stable synthesized id (hash of dealer_id + VIN, or + stock without a VIN).
Every stored document carries its id as ``vehicle_id``, so every result can be
resolved by ``inventory.vehicle`` and aggregate results always carry one
(``Vehicle.vehicle_id``, seed 004).

Preparation is the hot loop of an import: it reads the listing with plain
``dict.get`` and class checks rather than a validator (the feed reader has
validated listings already), and refuses only what the store cannot hold.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from aap.inventory.query import ELIGIBLE_STATUSES, MM_PER_UNIT, TERM_FILTERS, term_keys
from aap.store.inventory.schema import ListingRow, day_number, photo_count
from aap.util.rfc3339 import epoch_us

_ELIGIBLE = frozenset(ELIGIBLE_STATUSES)
# The fields stored with a term key: the term filters', then stock's (for the stock sort).
_KEYED_FIELDS = TERM_FILTERS + ("stock",)
_new_tuple = tuple.__new__


class InventoryImportError(ValueError):
    """A listing the store cannot accept; ``index`` is its 0-based position in the feed."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"listing {index}: {reason}")


def synthesized_id(dealer_id: str | None, vin: str | None, stock: str | None) -> str:
    """Stable id for a feed row without ``vehicle_id`` (VIN first, else stock)."""
    basis = f"vin\x1f{vin}" if vin else f"stock\x1f{stock}"
    digest = hashlib.sha256(f"{dealer_id or ''}\x1f{basis}".encode()).hexdigest()
    return "veh_" + digest[:24]


def _whole(value: object) -> int | None:
    """An integer, or an integral float as one; anything else is no value."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


class PreparedListing:
    """One feed listing as the store writes it (everything but its feature masks)."""

    __slots__ = ("index", "id", "row", "doc", "keywords", "evidence", "term_values", "term_keys")

    def __init__(self, listing: dict[str, Any], index: int, scope_dealer: str | None) -> None:
        if listing.__class__ is not dict:
            raise InventoryImportError(index, "a listing must be a JSON object")
        get = listing.get
        doc = listing  # copied only when the stored document must differ from the feed's
        dealer_id = get("dealer_id")
        vin = get("vin")
        vin = vin if vin.__class__ is str and vin else None
        stock = get("stock")
        stock = stock if stock.__class__ is str and stock else None
        ident = get("vehicle_id")
        if scope_dealer is not None and dealer_id != scope_dealer:
            if dealer_id is not None:
                raise InventoryImportError(index, "dealer_id differs from the import's dealer")
            doc = dict(doc, dealer_id=scope_dealer)
            dealer_id = scope_dealer
        if ident.__class__ is not str or not ident:
            if not (vin or stock):
                raise InventoryImportError(index, "a listing needs vehicle_id, vin or stock")
            ident = synthesized_id(dealer_id, vin, stock)
            doc = dict(doc, vehicle_id=ident)
        if "distance_mi" in doc:  # per-query, never stored
            doc = {k: v for k, v in doc.items() if k != "distance_mi"}
        status = get("status")
        if status.__class__ is not str:
            raise InventoryImportError(index, "status is required")
        try:
            updated_us = epoch_us(get("updated_at", ""))
        except (TypeError, ValueError):
            raise InventoryImportError(index, "updated_at must be an RFC 3339 date-time with offset") from None
        unit = get("mileage_unit", "mi")
        if unit not in MM_PER_UNIT:
            raise InventoryImportError(index, "mileage_unit must be mi or km")
        mileage = _whole(get("mileage"))
        terms: list[Any] = [get(name) for name in _KEYED_FIELDS]
        keys = term_keys(terms)  # blank: no key
        (
            make_k,
            model_k,
            trim_k,
            transmission_k,
            fuel_k,
            driveline_k,
            body_k,
            exterior_k,
            interior_k,
            port_k,
            stock_k,
        ) = keys
        rooftop = get("rooftop")
        rooftop = rooftop if rooftop.__class__ is str else None
        charge = get("dc_fast_charge")
        charge = (1 if charge else 0) if charge.__class__ is bool else None
        electric_range = get("electric_range_mi")
        electric_range = float(electric_range) if electric_range.__class__ in (int, float) else None
        odometer_mm = mileage * MM_PER_UNIT[unit] if mileage is not None else None

        self.index = index
        self.id = ident
        self.term_values = terms  # the term filters' values, then stock's
        self.term_keys = keys
        # Built from a tuple in field order: a keyword call of the NamedTuple costs a
        # microsecond per listing, its positional __new__ a third of one.
        # tests/test_store_inventory.py checks the row field by field.
        self.row: ListingRow = _new_tuple(
            ListingRow,
            (
                ident,  # id
                dealer_id,  # dealer_id
                status,  # status
                get("condition"),  # condition
                get("vehicle_type") or "car",  # vehicle_type
                get("currency") or "USD",  # currency
                vin,  # vin
                stock,  # stock
                stock_k,  # stock_k
                terms[0] if make_k is not None else None,  # make
                make_k,  # make_k
                terms[1] if model_k is not None else None,  # model
                model_k,  # model_k
                trim_k,  # trim_k
                transmission_k,  # transmission_k
                fuel_k,  # fuel_k
                driveline_k,  # driveline_k
                body_k,  # body_k
                exterior_k,  # exterior_color_k
                interior_k,  # interior_color_k
                port_k,  # charge_port_k
                rooftop,  # rooftop
                _whole(get("year")),  # year
                _whole(get("price")),  # price
                _whole(get("list_price")),  # list_price
                _whole(get("msrp")),  # msrp
                odometer_mm,  # odometer_mm
                updated_us,  # updated_us
                electric_range,  # electric_range_mi
                charge,  # dc_fast_charge
                _whole(get("displacement_cc")),  # displacement_cc
                photo_count(get("photos")),  # photos
                day_number(get("inventory_date")),  # in_stock_day
            ),
        )
        # Keyword text: the fields a query token may match (InventorySearchRequest
        # filters.query, seed 004), casefolded; "\n" keeps fields apart.
        parts = [terms[0], terms[1], terms[2], vin, stock]
        features = get("features")
        if features.__class__ is list:
            parts.extend(features)
        self.keywords = "\n".join([p for p in parts if p.__class__ is str and p]).casefold()
        try:
            self.doc = orjson.dumps(doc).decode()
        except orjson.JSONEncodeError:
            raise InventoryImportError(index, "text must be valid Unicode and integers must fit in 64 bits") from None

        self.evidence: list[tuple[str, str, bool]] = []  # (code, label, present)
        evidence = get("feature_evidence")
        if evidence.__class__ is list and evidence:
            for entry in evidence:
                code = entry.get("code") if entry.__class__ is dict else None
                if code.__class__ is not str:
                    continue
                label = entry.get("label")
                self.evidence.append(
                    (code, label if label.__class__ is str else code, entry.get("status") == "present")
                )
            if len({e[0] for e in self.evidence}) != len(self.evidence):
                raise InventoryImportError(index, "feature_evidence lists a code twice")

    @property
    def eligible(self) -> bool:
        """Only available, in-transit and pending listings are searchable (``InventoryListing.status``)."""
        return self.row.status in _ELIGIBLE
