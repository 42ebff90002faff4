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

from collections.abc import Callable, Mapping, Sequence
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
    ``facet``); ``checks`` (checkboxes of the facet's values, in the order of
    ``options``); ``int``; ``bool``; ``features`` (checkboxes of the feature
    codes the inventory has); ``near`` (a rooftop and a radius). For ``int`` and
    ``bool`` fields, ``facet`` names the range or counts that say whether any
    listing carries the field at all.
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
    FilterField("condition", "Condition", "checks", facet="conditions", options=("new", "used", "cpo")),
    FilterField(
        "vehicle_type",
        "Vehicle type",
        "checks",
        facet="vehicle_types",
        options=("car", "motorcycle", "trailer", "rv", "other"),
    ),
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
    FilterField(
        "status",
        "Availability",
        "checks",
        facet="statuses",
        options=("available", "intransit", "pending"),
        advanced=True,
    ),
    FilterField("features_all", "Must have", "features", facet="features", advanced=True),
    FilterField("features_any", "Any of", "features", facet="features", advanced=True),
    FilterField(
        "electric_range_mi_min", "Electric range from (mi)", "int", facet="electric_range_mi_range", advanced=True
    ),
    FilterField(
        "electric_range_mi_max", "Electric range up to (mi)", "int", facet="electric_range_mi_range", advanced=True
    ),
    FilterField("dc_fast_charge", "DC fast charging", "bool", facet="dc_fast_charge", advanced=True),
    FilterField("charge_port", "Charge port", "choice", facet="charge_ports", advanced=True),
    FilterField("displacement_cc_min", "Engine from (cc)", "int", facet="displacement_cc_range", advanced=True),
    FilterField("displacement_cc_max", "Engine up to (cc)", "int", facet="displacement_cc_range", advanced=True),
    FilterField("vin", "VIN", "text", advanced=True),
    FilterField("stock", "Stock number", "text", advanced=True),
)
LABELS = {f.name: f.label for f in FIELDS}


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

    @property
    def active(self) -> int:
        """How many filters the search uses (shown on the folded filter panel of a phone)."""
        return sum(1 for f in FIELDS if self.values.get(f.name))


@dataclass(frozen=True)
class Choice:
    """One option of a select or a checkbox group: a value the inventory has, or one asked for."""

    value: str
    label: str
    count: int | None = None


@dataclass(frozen=True)
class ShownField:
    """A filter as the form shows it: its field and, for options, the choices on offer."""

    spec: FilterField
    choices: tuple[Choice, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def advanced(self) -> bool:
        return self.spec.advanced


def _entries(facets: Mapping[str, Any], name: str | None) -> list[tuple[str, str | None, int]]:
    """``(value, label, count)`` of a facet's values that some listing carries."""
    out = []
    for entry in facets.get(name or "") or []:
        if not isinstance(entry, dict):
            continue
        count = entry.get("count")
        value = entry.get("code", entry.get("value"))
        if isinstance(count, int) and count > 0 and value is not None:
            out.append((str(value), entry.get("label"), count))
    return out


def inventory_size(facets: Mapping[str, Any]) -> int:
    """How many listings the facets count (every listing has a condition, a status or a type)."""
    return max(sum(c for _, _, c in _entries(facets, name)) for name in ("conditions", "statuses", "vehicle_types"))


def shown_fields(
    caps: SearchCapabilities,
    facets: Mapping[str, Any],
    form: SearchForm,
    features: Sequence[Feature],
    label: Callable[[Any, str], str],
) -> list[ShownField]:
    """The advertised filters the inventory gives a reason to use, with their choices (**decision**,
    docs/console.md): a filter of values is offered when some listing carries a value for it and
    not every listing carries the same one (a car-only dealer offers no vehicle type); a filter of
    a range or a flag (electric range, engine size, DC fast charging) when some listing carries
    it. A value the query string asks for stays on offer, so the form always shows the search.
    ``label(value, field)`` names a value for people.
    """
    total = inventory_size(facets)
    known = {f.code: f.label for f in features}
    out = []
    for spec in offered(caps):
        chosen = form.values.get(spec.name, [])
        if spec.kind in ("choice", "checks", "features"):
            entries = _entries(facets, spec.facet)
            if spec.kind == "checks":
                order = {o: i for i, o in enumerate(spec.options)}
                entries.sort(key=lambda e: order.get(e[0], len(order)))
            narrows = len(entries) > 1 or (len(entries) == 1 and (entries[0][2] < total or spec.kind == "features"))
            if not narrows and not chosen:
                continue
            choices = [
                Choice(value, (text if spec.kind == "features" and text else label(value, spec.name)), count)
                for value, text, count in entries
            ]
            have = {c.value for c in choices}
            for value in chosen:
                if value not in have:
                    text = known.get(value, value) if spec.kind == "features" else label(value, spec.name)
                    choices.append(Choice(value, text))
            out.append(ShownField(spec, tuple(choices)))
        elif spec.kind == "bool" and spec.facet:
            flagged = any(value in ("True", "true") for value, _, _ in _entries(facets, spec.facet))
            if flagged or chosen:
                out.append(ShownField(spec))
        elif spec.kind == "int" and spec.facet:
            if facets.get(spec.facet) or chosen:
                out.append(ShownField(spec))
        else:
            out.append(ShownField(spec))
    return out


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
