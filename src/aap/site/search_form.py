"""The public page's search form: the agent's advertised filters and sorts, as HTML fields.

One row of :data:`FIELDS` per AAP filter (``InventorySearchRequest.filters``,
seed 004); the form shows, and the query string may carry, only the filters the
deployment advertises (``InventoryCapabilities.filters``), so the page offers
exactly what an assistant can ask for. :func:`read_form` turns the query
string into an ``inventory.search.request`` plus the form's state; values that
cannot even be put in the request (a year that is not a number) are reported
here, everything else by the core's validator, like for any other caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import QueryParams

from aap.config.model import Feature, SearchCapabilities

RADII_MI = (10, 25, 50, 100, 250)
SORT_LABELS = {
    "price": ("Price: low to high", "Price: high to low"),
    "list_price": ("List price: low to high", "List price: high to low"),
    "msrp": ("MSRP: low to high", "MSRP: high to low"),
    "mileage": ("Mileage: lowest first", "Mileage: highest first"),
    "year": ("Year: oldest first", "Year: newest first"),
    "make": ("Make: A to Z", "Make: Z to A"),
    "model": ("Model: A to Z", "Model: Z to A"),
    "stock": ("Stock number: A to Z", "Stock number: Z to A"),
    "updated_at": ("Least recently updated", "Recently updated"),
    "distance_mi": ("Nearest first", "Farthest first"),
}


@dataclass(frozen=True)
class FilterField:
    """How one AAP filter appears in the form.

    ``kind``: ``text``; ``choice`` (a select, options from the facet named
    ``facet``); ``checks`` (checkboxes of ``options``); ``int``; ``bool``;
    ``features`` (checkboxes of the advertised feature codes); ``near`` (a
    rooftop and a radius).
    """

    name: str
    label: str
    kind: str
    facet: str | None = None
    options: tuple[str, ...] = ()
    advanced: bool = False


FIELDS: tuple[FilterField, ...] = (
    FilterField("query", "Keywords", "text"),
    FilterField("make", "Make", "choice", facet="makes"),
    FilterField("model", "Model", "choice", facet="models"),
    FilterField("condition", "Condition", "checks", options=("new", "used", "cpo")),
    FilterField("vehicle_type", "Vehicle type", "checks", options=("car", "motorcycle", "trailer", "rv", "other")),
    FilterField("body", "Body style", "choice", facet="bodies"),
    FilterField("year_min", "Year from", "int"),
    FilterField("year_max", "Year to", "int"),
    FilterField("price_min", "Price from", "int"),
    FilterField("price_max", "Price to", "int"),
    FilterField("mileage_max", "Mileage up to", "int"),
    FilterField("rooftops", "Location", "choice", facet="rooftops"),
    FilterField("near", "Near", "near"),
    FilterField("fuel", "Fuel", "choice", facet="fuels", advanced=True),
    FilterField("transmission", "Transmission", "choice", facet="transmissions", advanced=True),
    FilterField("driveline", "Drivetrain", "choice", facet="drivelines", advanced=True),
    FilterField("trim", "Trim", "choice", facet="trims", advanced=True),
    FilterField("exterior_color", "Exterior color", "choice", facet="exterior_colors", advanced=True),
    FilterField("interior_color", "Interior color", "choice", facet="interior_colors", advanced=True),
    FilterField("status", "Availability", "checks", options=("available", "intransit", "pending"), advanced=True),
    FilterField("features_all", "Must have", "features", advanced=True),
    FilterField("features_any", "Any of", "features", advanced=True),
    FilterField("electric_range_mi_min", "Electric range from (mi)", "int", advanced=True),
    FilterField("electric_range_mi_max", "Electric range up to (mi)", "int", advanced=True),
    FilterField("dc_fast_charge", "DC fast charging", "bool", advanced=True),
    FilterField("charge_port", "Charge port", "choice", facet="charge_ports", advanced=True),
    FilterField("displacement_cc_min", "Engine from (cc)", "int", advanced=True),
    FilterField("displacement_cc_max", "Engine up to (cc)", "int", advanced=True),
    FilterField("vin", "VIN", "text", advanced=True),
    FilterField("stock", "Stock number", "text", advanced=True),
)
LABELS = {f.name: f.label for f in FIELDS}
OPTION_LABELS = {"cpo": "Certified pre-owned", "rv": "RV", "intransit": "In transit"}


@dataclass
class SearchForm:
    """What the form shows: the values asked for and the problems found with them."""

    values: dict[str, list[str]] = field(default_factory=dict)
    sort: str = ""
    currency: str = ""
    unit: str = ""
    page: int = 1
    cursor: str | None = None
    problems: list[str] = field(default_factory=list)

    def value(self, name: str) -> str:
        return (self.values.get(name) or [""])[0]

    def chosen(self, name: str, option: str) -> bool:
        return option in self.values.get(name, [])

    @property
    def advanced_open(self) -> bool:
        return any(self.values.get(f.name) for f in FIELDS if f.advanced)


def offered(caps: SearchCapabilities) -> list[FilterField]:
    """The form's fields: those the deployment advertises, in the form's order."""
    return [f for f in FIELDS if f.name in caps.filters]


def sort_options(caps: SearchCapabilities) -> list[tuple[str, str]]:
    """``(value, label)`` for each advertised sort field and order (distance needs ``near``)."""
    out = []
    for name in caps.sort_fields:
        ascending, descending = SORT_LABELS.get(name, (f"{name} ascending", f"{name} descending"))
        out += [(f"{name}:asc", ascending), (f"{name}:desc", descending)]
    return out


def _int(text: str, label: str, problems: list[str]) -> int | None:
    try:
        return int(text.replace(",", "").strip())
    except ValueError:
        problems.append(f"{label}: enter a whole number.")
        return None


def read_form(
    params: QueryParams,
    caps: SearchCapabilities,
    features: Sequence[Feature],
    places: Mapping[str, Mapping[str, float]],
) -> tuple[SearchForm, dict[str, Any]]:
    """The form's state and the ``filters`` block it asks for.

    ``places`` maps rooftop names to their ``geo`` (for the ``near`` field).
    """
    form = SearchForm()
    filters: dict[str, Any] = {}
    codes = {f.code for f in features}
    for spec in offered(caps):
        raw = [v.strip() for v in params.getlist(spec.name) if v.strip()]
        raw = list(dict.fromkeys(raw))
        if not raw:
            continue
        form.values[spec.name] = raw
        if spec.kind == "text":
            filters[spec.name] = raw[0].upper() if spec.name == "vin" else raw[0]
        elif spec.kind in ("choice", "checks"):
            filters[spec.name] = raw
        elif spec.kind == "features":
            unknown = [v for v in raw if v not in codes]
            if unknown:
                form.problems.append(f"{spec.label}: unknown feature {unknown[0]!r}.")
            filters[spec.name] = raw
        elif spec.kind == "int":
            number = _int(raw[0], spec.label, form.problems)
            if number is not None:
                filters[spec.name] = number
        elif spec.kind == "bool":
            filters[spec.name] = raw[0] in ("1", "true", "on", "yes")
        elif spec.kind == "near":
            geo = places.get(raw[0])
            radius_text = params.get("radius", "25")
            radius = _int(radius_text, "Radius", form.problems)
            if geo is None:
                form.problems.append("Near: choose one of the listed locations.")
            elif radius is not None:
                filters["near"] = {"latitude": geo["latitude"], "longitude": geo["longitude"], "radius_mi": radius}
                form.values["radius"] = [str(radius)]
    form.sort = params.get("sort", "")
    form.currency = params.get("currency", "")
    form.unit = params.get("unit", "")
    form.cursor = params.get("cursor") or None
    page = params.get("page", "1")
    form.page = page_number = _int(page, "Page", form.problems) or 1
    if page_number < 1:
        form.page = 1
    return form, filters


def search_request(form: SearchForm, filters: dict[str, Any], caps: SearchCapabilities) -> dict[str, Any]:
    """The ``inventory.search.request`` of the form: the cursor of a followed "next" link, else the
    page number as a skip where offset paging is advertised."""
    request: dict[str, Any] = {"type": "inventory.search.request", "pagination": {"limit": caps.default_limit}}
    if filters:
        request["filters"] = filters
    if form.sort:
        name, _, order = form.sort.partition(":")
        request["sort"] = {"field": name, "order": order or "asc"}
    if form.currency:
        request["currency"] = form.currency
    if form.unit:
        request["mileage_unit"] = form.unit
    if form.cursor:
        request["pagination"]["cursor"] = form.cursor
    elif caps.offset and form.page > 1:
        request["pagination"]["skip"] = (form.page - 1) * caps.default_limit
    return request
