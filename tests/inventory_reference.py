"""A plain-Python reading of the AAP 3.1 search/facets rules, for property tests.

Written from docs/search.md and the seed's descriptions, independently of ``aap.store``: a list of
listings in, the ordered matching list (or the facet counts) out. Also the
hypothesis strategies that generate small, collision-prone inventories and
valid requests against the settings built by ``conftest.make_settings``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from aap.config.model import Settings
from aap.store.inventory import synthesized_id
from factories import listing as listing  # re-exported: the tests import it from here

ELIGIBLE = ("available", "intransit", "pending")
KM_PER_MI = Fraction(1609344, 1_000_000)
TERMS = (
    "make",
    "model",
    "trim",
    "transmission",
    "fuel",
    "driveline",
    "body",
    "exterior_color",
    "interior_color",
    "charge_port",
)


# -- a small hand-written inventory (unit tests) ----------------------------------


INVENTORY = [
    listing(
        "h1",
        make="Honda",
        model="CR-V",
        trim="EX-L",
        price=35500,
        mileage=12,
        rooftop="Bay Motors San Francisco",
        exterior_color="Crystal Black Pearl",
        features=["Apple CarPlay"],
        condition="new",
    ),
    listing(
        "h2",
        make="honda ",
        model="Civic",
        price=24000,
        mileage=30000,
        rooftop="Bay Motors Oakland",
        condition="used",
        vehicle_type="car",
    ),
    listing(
        "t1",
        make="Toyota",
        model="RAV4",
        price=30000,
        mileage=20000,
        mileage_unit="km",
        rooftop="Bay Motors Oakland",
        condition="used",
    ),
    listing(
        "m1",
        make="Acme Moto",
        model="Electric Standard",
        vehicle_type="motorcycle",
        price=11999,
        fuel="bev",
        dc_fast_charge=False,
        charge_port="nacs",
        electric_range_mi=113,
        rooftop="Bay Motors San Francisco",
    ),
    listing(
        "e1",
        make="Tesla",
        model="Model 3",
        fuel="bev",
        dc_fast_charge=True,
        charge_port="NACS",
        rooftop="Bay Motors San Francisco",
        status="intransit",
    ),
    listing(
        "c1",
        make="Honda",
        model="CR-V",
        price=45000,
        currency="CAD",
        mileage=5000,
        mileage_unit="km",
        rooftop="Bay Motors Vancouver",
    ),
    listing("c2", make="Ford", model="F-150", currency="CAD", rooftop="Bay Motors Vancouver"),
    listing("n1", make="Ford", model="Maverick"),  # unpriced, no rooftop
]

EVIDENCE = {
    "present": {
        "code": "sunroof",
        "label": "Sunroof",
        "status": "present",
        "source": "dealer",
        "text": "Verified on the unit.",
    },
    "absent": {"code": "sunroof", "label": "Sunroof", "status": "absent", "source": "dealer", "text": "Not fitted."},
    "unknown": {"code": "sunroof", "label": "Sunroof", "status": "unknown"},
}


# -- reference semantics -------------------------------------------------------


def listing_id(item: dict[str, Any], dealer_id: str | None = None) -> str:
    if item.get("vehicle_id"):
        return item["vehicle_id"]
    return synthesized_id(item.get("dealer_id", dealer_id), item.get("vin"), item.get("stock"))


def fold(value: Any) -> str | None:
    """Comparison form of a free-text field; blank means missing."""
    if isinstance(value, str) and value.strip():
        return value.strip().casefold()
    return None


def reading(listing: dict[str, Any], unit: str) -> Fraction | None:
    """The odometer in ``unit``, exactly."""
    if "mileage" not in listing:
        return None
    miles_or_km = Fraction(listing["mileage"])
    native = listing.get("mileage_unit", "mi")
    if native == unit:
        return miles_or_km
    return miles_or_km * KM_PER_MI if native == "mi" else miles_or_km / KM_PER_MI


def haversine(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    r = 3958.7613
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin((math.radians(lon2) - math.radians(lon1)) / 2) ** 2
    )
    return 2 * r * math.asin(math.sqrt(min(1.0, a)))


def rooftop_geo(listing: dict[str, Any], settings: Settings) -> dict[str, float] | None:
    profile = settings.dealer
    if settings.scope == "aggregate":
        profile = next((p for p in settings.dealers if p.dealer_id == listing.get("dealer_id")), None)
        if profile is None:
            return None
    roofs = profile.rooftops
    name = listing.get("rooftop")
    if name is None:
        return roofs[0].get("geo") if len(roofs) == 1 else None
    return next((r.get("geo") for r in roofs if r["name"] == name), None)


def distance(listing: dict[str, Any], settings: Settings, near: dict[str, float]) -> float | None:
    geo = rooftop_geo(listing, settings)
    if geo is None:
        return None
    return haversine(near["latitude"], near["longitude"], geo["latitude"], geo["longitude"])


def present_codes(listing: dict[str, Any]) -> set[str]:
    return {e["code"] for e in listing.get("feature_evidence", []) if e["status"] == "present"}


def effective(request: dict[str, Any], settings: Settings) -> tuple[str, str]:
    caps = settings.search
    return (
        request.get("currency") or caps.default_currency or "USD",
        request.get("mileage_unit") or caps.default_mileage_unit or "mi",
    )


def matches(listing: dict[str, Any], request: dict[str, Any], settings: Settings) -> bool:
    currency, unit = effective(request, settings)
    if listing["status"] not in ELIGIBLE or listing.get("currency", "USD") != currency:
        return False
    if settings.scope == "aggregate" and listing.get("dealer_id") not in {d.dealer_id for d in settings.dealers}:
        return False
    f = request.get("filters", {})
    for key in TERMS:
        if key in f and fold(listing.get(key)) not in {v.strip().casefold() for v in f[key]}:
            return False
    if "condition" in f and listing.get("condition") not in f["condition"]:
        return False
    if "vehicle_type" in f and listing.get("vehicle_type", "car") not in f["vehicle_type"]:
        return False
    if "status" in f and listing["status"] not in f["status"]:
        return False
    if "rooftops" in f and listing.get("rooftop") not in f["rooftops"]:
        return False
    for low, high, field in (
        ("year_min", "year_max", "year"),
        ("price_min", "price_max", "price"),
        ("displacement_cc_min", "displacement_cc_max", "displacement_cc"),
        ("electric_range_mi_min", "electric_range_mi_max", "electric_range_mi"),
    ):
        if (low in f or high in f) and field not in listing:
            return False
        if low in f and listing[field] < f[low]:
            return False
        if high in f and listing[field] > f[high]:
            return False
    if "mileage_max" in f:
        value = reading(listing, unit)
        if value is None or value > f["mileage_max"]:
            return False
    if "dc_fast_charge" in f and listing.get("dc_fast_charge") is not f["dc_fast_charge"]:
        return False
    if "vin" in f and listing.get("vin") != f["vin"]:
        return False
    if "stock" in f and listing.get("stock") != f["stock"]:
        return False
    codes = present_codes(listing)
    if "features_all" in f and not set(f["features_all"]) <= codes:
        return False
    if "features_any" in f and not set(f["features_any"]) & codes:
        return False
    if "query" in f:
        fields = [listing.get(k) for k in ("make", "model", "trim", "vin", "stock")]
        fields += listing.get("features", [])
        texts = [x.casefold() for x in fields if isinstance(x, str)]
        for token in f["query"].split():
            if not any(token.casefold() in text for text in texts):
                return False
    if "near" in f:
        d = distance(listing, settings, f["near"])
        if d is None or d > f["near"]["radius_mi"]:
            return False
    return True


def sort_value(listing: dict[str, Any], field: str, request: dict[str, Any], settings: Settings) -> Any:
    _currency, unit = effective(request, settings)
    if field in ("price", "list_price", "msrp", "year"):
        return listing.get(field)
    if field == "mileage":
        return reading(listing, unit)
    if field == "updated_at":
        return datetime.fromisoformat(listing["updated_at"].replace("Z", "+00:00"))
    if field in ("make", "model", "stock"):
        key = fold(listing.get(field))
        return None if key is None else (key, listing[field])
    if field == "distance_mi":
        return distance(listing, settings, request["filters"]["near"])
    raise AssertionError(field)


def reference_search(listings: list[dict[str, Any]], request: dict[str, Any], settings: Settings) -> list[str]:
    """vehicle_ids of the full matching set, in the effective order."""
    sort = request.get("sort") or {"field": settings.search.default_sort[0], "order": settings.search.default_sort[1]}
    hits = [item for item in listings if matches(item, request, settings)]
    with_value = [(sort_value(h, sort["field"], request, settings), listing_id(h)) for h in hits]
    known = sorted([(v, i) for v, i in with_value if v is not None], key=lambda p: p[1])
    known.sort(key=lambda p: p[0], reverse=sort["order"] == "desc")  # stable: ids stay ascending
    missing = sorted(i for v, i in with_value if v is None)
    return [i for _v, i in known] + missing


def reference_facets(listings: list[dict[str, Any]], request: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Facet counts with term values casefolded (display spelling is the store's choice)."""
    _currency, unit = effective(request, settings)
    hits = [item for item in listings if matches(item, request, settings)]
    out: dict[str, Any] = {}

    def count(name: str, values: list[Any]) -> None:
        counts: dict[Any, int] = {}
        for v in values:
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
        out[name] = counts

    for facet, field in (
        ("makes", "make"),
        ("models", "model"),
        ("trims", "trim"),
        ("transmissions", "transmission"),
        ("fuels", "fuel"),
        ("charge_ports", "charge_port"),
        ("drivelines", "driveline"),
        ("bodies", "body"),
        ("exterior_colors", "exterior_color"),
        ("interior_colors", "interior_color"),
    ):
        count(facet, [fold(h.get(field)) for h in hits])
    count("years", [h.get("year") for h in hits])
    count("conditions", [h.get("condition") for h in hits])
    count("dc_fast_charge", [h.get("dc_fast_charge") for h in hits])
    count("vehicle_types", [h.get("vehicle_type", "car") for h in hits])
    if settings.scope != "aggregate":
        count("rooftops", [h.get("rooftop") for h in hits])
    count("statuses", [h["status"] for h in hits])
    for facet, values in (
        ("price_range", [h["price"] for h in hits if "price" in h]),
        ("mileage_range", [reading(h, unit) for h in hits if "mileage" in h]),
        ("year_range", [h["year"] for h in hits if "year" in h]),
        ("displacement_cc_range", [h["displacement_cc"] for h in hits if "displacement_cc" in h]),
        ("electric_range_mi_range", [h["electric_range_mi"] for h in hits if "electric_range_mi" in h]),
    ):
        if values:
            out[facet] = {"min": _number(min(values)), "max": _number(max(values))}
    vocabulary = [f.code for f in settings.features]
    out["features"] = {code: sum(code in present_codes(h) for h in hits) for code in vocabulary}
    return out


def _number(value: Any) -> Any:
    """A JSON number: exact integers stay integers, other fractions become the nearest float."""
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    return value


def normalise_facets(facets: dict[str, Any]) -> dict[str, Any]:
    """A Facets object in the reference's shape (term values casefolded)."""
    out: dict[str, Any] = {}
    for key, value in facets.items():
        if key in ("currency", "mileage_unit"):
            continue
        if key == "features":
            out[key] = {f["code"]: f["count"] for f in value}
        elif key.endswith("_range"):
            out[key] = value
        else:
            out[key] = {
                (
                    e["value"].casefold()
                    if isinstance(e["value"], str)
                    and key not in ("rooftops", "conditions", "statuses", "vehicle_types")
                    else e["value"]
                ): e["count"]
                for e in value
            }
    return out


# -- strategies ----------------------------------------------------------------

MAKES = ["Honda", "honda", " Toyota", "Ford", "ÉCLAIR", "Straße"]
MODELS = ["CR-V", "Civic", "RAV4", "F-150", "cr-v"]
TRIMS = ["EX-L", "LX", "Limited", "ex-l "]
COLORS = ["Black", "black", "Crystal Black Pearl", "White"]
FUELS = ["gas", "hybrid", "bev", "Gas"]
PORTS = ["nacs", "ccs", "NACS"]
CODES = ["adaptive_cruise_control", "apple_carplay", "heated_front_seats", "sunroof"]
VINS = ["1HGCV1F30NA123456", "2T3P1RFV8MW123457", "1FTFW1E50NFA12345"]
STOCKS = ["H1", "h1", "T-22", "A9", "B 7"]
ROOFTOPS = ["Bay Motors San Francisco", "Bay Motors Oakland", "Bay Motors Vancouver", "Elsewhere", None]
BASE = datetime(2026, 4, 1, tzinfo=UTC)


def _stamp(minutes: int, offset_hours: int) -> str:
    tz = timezone(timedelta(hours=offset_hours))
    moment = (BASE + timedelta(minutes=minutes)).astimezone(tz)
    text = moment.isoformat()
    return text.replace("+00:00", "Z")


@st.composite
def listings(draw: Any, *, max_size: int = 14) -> list[dict[str, Any]]:
    """Small inventories of valid InventoryListing objects with many collisions."""
    count = draw(st.integers(0, max_size))
    used: set[str] = set()
    out = []
    for n in range(count):
        item: dict[str, Any] = {
            "status": draw(st.sampled_from(ELIGIBLE)),
            "updated_at": _stamp(draw(st.integers(0, 5)) * 90, draw(st.sampled_from([0, -5, 2]))),
        }
        ident = draw(st.sampled_from(["id", "vin", "stock"]))
        if ident == "id":
            item["vehicle_id"] = f"v{n:02d}"
        if ident == "vin" or draw(st.booleans()):
            item["vin"] = draw(st.sampled_from(VINS))
        if ident == "stock" or draw(st.booleans()):
            item["stock"] = draw(st.sampled_from(STOCKS))
        key = listing_id(item)
        if key in used:
            continue
        used.add(key)
        optional = {
            "make": st.sampled_from(MAKES),
            "model": st.sampled_from(MODELS),
            "trim": st.sampled_from(TRIMS),
            "exterior_color": st.sampled_from(COLORS),
            "interior_color": st.sampled_from(COLORS),
            "fuel": st.sampled_from(FUELS),
            "charge_port": st.sampled_from(PORTS),
            "body": st.sampled_from(["suv", "SUV", "sedan"]),
            "transmission": st.sampled_from(["cvt", "manual"]),
            "driveline": st.sampled_from(["awd", "fwd"]),
            "condition": st.sampled_from(["new", "used", "cpo"]),
            "vehicle_type": st.sampled_from(["car", "motorcycle", "rv"]),
            "year": st.integers(2019, 2026),
            "price": st.integers(0, 50).map(lambda p: p * 1000),
            "list_price": st.integers(10, 50).map(lambda p: p * 1000),
            "msrp": st.integers(10, 50).map(lambda p: p * 1000),
            "mileage": st.integers(0, 200_000),
            "mileage_unit": st.sampled_from(["mi", "km"]),
            "currency": st.sampled_from(["USD", "CAD"]),
            "displacement_cc": st.integers(600, 3000),
            "electric_range_mi": st.sampled_from([113, 250.5, 300]),
            "dc_fast_charge": st.booleans(),
            "rooftop": st.sampled_from(ROOFTOPS),
            "features": st.lists(
                st.sampled_from(["Apple CarPlay", "Heated Seats", "Sunroof"]), max_size=2, unique=True
            ),
        }
        for field, strategy in optional.items():
            if draw(st.booleans()):
                item[field] = draw(strategy)
        if draw(st.booleans()):
            codes = draw(st.lists(st.sampled_from(CODES), max_size=3, unique=True))
            item["feature_evidence"] = [
                _evidence(code, draw(st.sampled_from(["present", "absent", "unknown"]))) for code in codes
            ]
        out.append(item)
    return out


def _evidence(code: str, status: str) -> dict[str, Any]:
    entry = {"code": code, "label": code.replace("_", " ").capitalize(), "status": status}
    if status != "unknown":
        entry.update(source="dealer", text="Checked on the unit.")
    return entry


SF_POINT = {"latitude": 37.7749, "longitude": -122.4194}


@st.composite
def filters(draw: Any, *, features: bool = True) -> dict[str, Any]:
    """Valid filter blocks (no inverted ranges, no blank term values)."""
    choices: dict[str, Any] = {
        "make": st.lists(st.sampled_from(MAKES + ["Honda "]), min_size=1, max_size=2, unique=True),
        "model": st.lists(st.sampled_from(MODELS), min_size=1, max_size=2, unique=True),
        "trim": st.lists(st.sampled_from(TRIMS), min_size=1, max_size=2, unique=True),
        "exterior_color": st.lists(st.sampled_from(COLORS), min_size=1, max_size=2, unique=True),
        "fuel": st.lists(st.sampled_from(FUELS), min_size=1, max_size=2, unique=True),
        "charge_port": st.lists(st.sampled_from(PORTS), min_size=1, max_size=1),
        "condition": st.lists(st.sampled_from(["new", "used", "cpo"]), min_size=1, max_size=2, unique=True),
        "vehicle_type": st.lists(st.sampled_from(["car", "motorcycle", "rv"]), min_size=1, max_size=2, unique=True),
        "status": st.lists(st.sampled_from(ELIGIBLE), min_size=1, max_size=2, unique=True),
        "rooftops": st.lists(st.sampled_from([r for r in ROOFTOPS if r]), min_size=1, max_size=2, unique=True),
        "year_min": st.integers(2018, 2027),
        "price_max": st.integers(0, 50_000),
        "price_min": st.integers(0, 30_000),
        "mileage_max": st.integers(0, 250_000),
        "displacement_cc_max": st.integers(500, 3000),
        "electric_range_mi_min": st.integers(100, 300),
        "dc_fast_charge": st.booleans(),
        "vin": st.sampled_from(VINS),
        "stock": st.sampled_from(STOCKS),
        "query": st.lists(
            st.sampled_from(["hon", "CR-", "v", "1HG", "carplay", "ZZZ", "a"]), min_size=1, max_size=2
        ).map(lambda ts: "  " + " ".join(ts) + " "),
    }
    if features:
        choices["features_all"] = st.lists(st.sampled_from(CODES), min_size=1, max_size=2, unique=True)
        choices["features_any"] = st.lists(st.sampled_from(CODES), min_size=1, max_size=2, unique=True)
    keys = draw(st.lists(st.sampled_from(sorted(choices)), max_size=3, unique=True))
    out = {key: draw(choices[key]) for key in keys}
    if draw(st.integers(0, 3)) == 0:  # near is special enough to deserve a larger share
        out["near"] = dict(SF_POINT, radius_mi=draw(st.sampled_from([0.5, 10, 900, 5000])))
    if out.get("price_min", 0) > out.get("price_max", math.inf):
        out["price_min"], out["price_max"] = out["price_max"], out["price_min"]
    return out
