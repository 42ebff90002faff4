"""Human labels for the inventory's codes: one table for the public page, the console and the e-mails.

A listing carries codes — closed vocabularies of the seed (``Vehicle.condition``,
``status``, ``vehicle_type``, seed 004) and the usual values of its free-text
fields (``fuel`` "e.g. 'gas', 'diesel', 'hybrid', 'phev', 'bev'", ``driveline``
"e.g. 'fwd', 'rwd', 'awd', '4wd'", ``transmission``, ``body``,
``charge_port``) — which people should never have to decode. Every surface
that shows one asks :func:`label`; a value the table does not know (free text
a feed wrote) is shown as written, tidied (``sport_touring`` → ``Sport touring``).

Feature codes have their labels in the configuration (``[[features]]``) or in
the listing's ``feature_evidence``; they are not repeated here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: field -> code -> label. Codes are compared casefolded (feeds write ``AWD`` as well as ``awd``).
LABELS: Mapping[str, Mapping[str, str]] = {
    "condition": {"new": "New", "used": "Used", "cpo": "Certified pre-owned"},
    "status": {"available": "Available", "intransit": "In transit", "pending": "Sale pending"},
    "vehicle_type": {"car": "Car, truck or SUV", "motorcycle": "Motorcycle", "trailer": "Trailer", "rv": "RV"},
    "fuel": {
        "gas": "Gasoline",
        "gasoline": "Gasoline",
        "diesel": "Diesel",
        "hybrid": "Hybrid",
        "hev": "Hybrid",
        "phev": "Plug-in hybrid",
        "bev": "Electric",
        "ev": "Electric",
        "electric": "Electric",
        "flex": "Flex fuel",
        "e85": "Flex fuel (E85)",
        "cng": "Natural gas (CNG)",
        "lpg": "Propane (LPG)",
        "hydrogen": "Hydrogen",
        "fcev": "Hydrogen fuel cell",
    },
    "driveline": {
        "fwd": "Front-wheel drive",
        "rwd": "Rear-wheel drive",
        "awd": "All-wheel drive",
        "4wd": "Four-wheel drive",
        "4x4": "Four-wheel drive",
        "2wd": "Two-wheel drive",
        "4x2": "Two-wheel drive",
        "chain": "Chain drive",
        "belt": "Belt drive",
        "shaft": "Shaft drive",
    },
    "transmission": {
        "automatic": "Automatic",
        "manual": "Manual",
        "cvt": "CVT (continuously variable)",
        "e-cvt": "eCVT (hybrid)",
        "ecvt": "eCVT (hybrid)",
        "dct": "Dual-clutch",
        "semi-automatic": "Semi-automatic",
        "single-speed": "Single-speed",
    },
    "body": {
        "suv": "SUV",
        "cuv": "Crossover",
        "sedan": "Sedan",
        "coupe": "Coupe",
        "hatchback": "Hatchback",
        "wagon": "Wagon",
        "minivan": "Minivan",
        "van": "Van",
        "truck": "Pickup truck",
        "pickup": "Pickup truck",
        "convertible": "Convertible",
        "sport_touring": "Sport touring",
        "adventure": "Adventure",
        "cruiser": "Cruiser",
        "touring": "Touring",
        "standard": "Standard",
        "sport": "Sport",
        "scooter": "Scooter",
        "travel_trailer": "Travel trailer",
        "fifth_wheel": "Fifth wheel",
        "class_a": "Class A motorhome",
        "class_b": "Class B camper van",
        "class_c": "Class C motorhome",
    },
    "charge_port": {
        "nacs": "NACS (Tesla-style)",
        "tesla": "Tesla",
        "ccs": "CCS",
        "ccs1": "CCS1",
        "ccs2": "CCS2",
        "j1772": "J1772",
        "chademo": "CHAdeMO",
        "type2": "Type 2",
    },
    "mileage_unit": {"mi": "miles", "km": "kilometres"},
}

#: Fields whose unknown values are kept exactly as written (proper names, not codes).
_AS_WRITTEN = frozenset({"make", "model", "trim", "exterior_color", "interior_color", "rooftop"})


def tidy(value: str) -> str:
    """Free text as a label: underscores as spaces, first letter capital (``sport_touring`` → ``Sport touring``)."""
    text = " ".join(value.replace("_", " ").split())
    return text[:1].upper() + text[1:] if text else text


def label(value: object, field: str) -> str:
    """The label of ``field``'s ``value`` (``label("bev", "fuel")`` → ``Electric``)."""
    if value is None:
        return ""
    text = str(value)
    known = LABELS.get(field)
    if known is not None:
        found = known.get(text.casefold())
        if found is not None:
            return found
    if field in _AS_WRITTEN:
        return text
    # A short all-capitals-or-lowercase code nobody listed (``xdrive``): keep its letters, tidy it.
    return tidy(text)


def options(field: str, present: Iterable[str]) -> list[tuple[str, str]]:
    """``(code, label)`` for the codes the inventory actually has, in the table's order, then the others
    by label: a form never offers what no listing carries."""
    have = list(dict.fromkeys(present))
    order = {code: i for i, code in enumerate(LABELS.get(field, {}))}
    known = sorted((c for c in have if c.casefold() in order), key=lambda c: order[c.casefold()])
    other = sorted((c for c in have if c.casefold() not in order), key=lambda c: label(c, field).casefold())
    return [(code, label(code, field)) for code in known + other]
