"""Named value transforms: one feed cell (text) in, one AAP value out.

A format table or a mapping file names a transform per column (docs/feeds.md,
"Value transforms"); each is a plain function ``(text, options, row) -> value``
that returns ``None`` for "no value" (the field stays absent), raises
:class:`TransformError` with a message that reads after the cell's value
(``"$3x" is not an amount``), and may write a second field through ``row``
(the currency of ``33995 USD``, the unit of ``28,411 mi``) or a warning.

Transforms are pure and know nothing of files or the store; the AAP rules
(the ``InventoryListing`` schema and the deployment rules of
:mod:`aap.inventory.listing_rules`) run afterwards on what they produce.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Protocol

import orjson

from aap.inventory.listing_rules import web_url
from aap.util.rfc3339 import to_rfc3339


class TransformError(ValueError):
    """A cell that cannot become the field's value; the message follows the quoted value."""


class Row(Protocol):
    """What a transform may do besides returning its value."""

    strict: bool
    rooftops: Mapping[str, str]  # casefolded rooftop name -> configured name

    def warn(self, message: str) -> None: ...
    def side(self, name: str, value: Any) -> None: ...


@dataclass(frozen=True)
class Options:
    """Per-column settings from a format table or mapping file (all optional)."""

    unit: str | None = None  # mileage: unit when the cell names none
    decimal: str = "."  # money: "." (33,995.00) or "," (33.995,00)
    separator: str | None = None  # photos, list: the one separator (default: any of | , ; space)
    order: str = "mdy"  # dates written with slashes: month/day/year or "dmy"
    insecure: str = "upgrade"  # photos over http://: "upgrade" to https or "drop"
    values: Mapping[str, str] = field(default_factory=dict)  # casefolded cell -> replacement
    otherwise: str | None = None  # with ``values``: what a cell not among them becomes

    def replace(self, value: str) -> str:
        """The cell after the ``values`` table (the transform then reads the result)."""
        if not self.values:
            return value
        found = self.values.get(value.strip().casefold())
        if found is not None:
            return found
        return value if self.otherwise is None else self.otherwise


Transform = Callable[[str, Options, Row], Any]

_SPACES = re.compile(r"[\s\u00a0\u202f\u2009]+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_CURRENCY_CODE = re.compile(r"(?:^([A-Za-z]{3})(?![A-Za-z])\s*|\s*(?<![A-Za-z])([A-Za-z]{3})$)")
_SYMBOLS = str.maketrans("", "", "$€£¥")
_DOT_THOUSANDS = re.compile(r"\d{1,3}(?:\.\d{3})+(?:,\d+)?")
_COMMA_DECIMAL = re.compile(r"\d{1,3}(?:\.\d{3})*,\d{1,2}")
_NO_PRICE = frozenset(
    {"call", "callforprice", "callforpricing", "na", "tbd", "none", "contactus", "pleasecall", "priceonrequest"}
)
_MILEAGE = re.compile(
    r"([0-9][0-9.,\s\u00a0\u202f\u2009]*)\s*(mi|mile|miles|km|kms|kilometers?|kilometres?)?\.?", re.IGNORECASE
)
_UNITS = {
    "mi": "mi",
    "mile": "mi",
    "miles": "mi",
    "km": "km",
    "kms": "km",
    "kilometer": "km",
    "kilometers": "km",
    "kilometre": "km",
    "kilometres": "km",
}
_TRUE = frozenset({"yes", "y", "1", "true", "t", "x", "on", "certified", "cpo"})
_FALSE = frozenset({"no", "n", "0", "false", "f", "off", "none", "notcertified"})
_CONDITIONS = {
    "new": "new",
    "n": "new",
    "brandnew": "new",
    "used": "used",
    "u": "used",
    "preowned": "used",
    "usedvehicle": "used",
    "secondhand": "used",
    "cpo": "cpo",
    "certified": "cpo",
    "certifiedpreowned": "cpo",
    "certifiedused": "cpo",
    "certifiedpreownedvehicle": "cpo",
    "c": "cpo",
}
_STATUSES = {
    "available": "available",
    "instock": "available",
    "active": "available",
    "forsale": "available",
    "onlot": "available",
    "intransit": "intransit",
    "transit": "intransit",
    "onorder": "intransit",
    "arriving": "intransit",
    "comingsoon": "intransit",
    "pending": "pending",
    "salepending": "pending",
    "dealpending": "pending",
    "onhold": "pending",
}
_ISO_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_SLASH_DATE = re.compile(r"(\d{1,2})[/.-](\d{1,2})[/.-](\d{4}|\d{2})(?!\d)")
_LIST_SEPARATORS = ("|", ";", ",")
_ANY_SEPARATOR = re.compile(r"[|,;\s]+")
_VIN_NOISE = str.maketrans("", "", " -")
_VIN_CHARS = re.compile(r"[A-HJ-NPR-Z0-9]{17}")


def _squash(text: str) -> str:
    """Lower case without spaces or punctuation: ``Certified Pre-Owned`` -> ``certifiedpreowned``."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def show(text: str, limit: int = 80) -> str:
    """A cell value as quoted in a problem message (shortened when long)."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return '"' + text.replace('"', '\\"') + '"'


# -- text ---------------------------------------------------------------------------


def text(value: str, o: Options, row: Row) -> str | None:
    """Surrounding whitespace removed; an empty cell is no value."""
    stripped = value.strip()
    return stripped or None


def lower(value: str, o: Options, row: Row) -> str | None:
    stripped = value.strip()
    return stripped.lower() or None


def upper(value: str, o: Options, row: Row) -> str | None:
    stripped = value.strip()
    return stripped.upper() or None


def json_value(value: str, o: Options, row: Row) -> Any:
    """A JSON cell (``fees``, ``feature_evidence``, ``other_attributes``)."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise TransformError(f"is not JSON ({exc.msg})") from None


# -- numbers ------------------------------------------------------------------------


def _plain_number(value: str) -> float:
    digits = _SPACES.sub("", value).replace(",", "")
    if not _NUMBER.fullmatch(digits):
        raise TransformError("is not a number")
    return float(digits)


def integer(value: str, o: Options, row: Row) -> int | None:
    """A whole number; thousands separators (``28,411``) and ``2024.0`` are accepted."""
    stripped = value.strip()
    if not stripped:
        return None
    if stripped.isascii() and stripped.isdigit():
        return int(stripped)
    number = _plain_number(stripped)
    if not number.is_integer():
        raise TransformError("is not a whole number")
    return int(number)


def number(value: str, o: Options, row: Row) -> float | int | None:
    stripped = value.strip()
    if not stripped:
        return None
    number = _plain_number(stripped)
    if not math.isfinite(number):
        raise TransformError("is not a finite number")
    return int(number) if number.is_integer() else number


def money(value: str, o: Options, row: Row) -> int | None:
    """An amount in whole currency units: ``$33,995``, ``24988.00``, ``10,499.00 USD``.

    An ISO 4217 code in the cell sets the listing's currency; ``0`` and "call for
    price" mean no price. Cents are rounded half up, with a warning. A decimal
    comma (``33.995,00 €``) is read only with ``decimal = ","``.
    """
    stripped = value.strip()
    if not stripped:
        return None
    if stripped[0].isalpha() and _squash(stripped) in _NO_PRICE:
        return None
    code = _CURRENCY_CODE.search(stripped)
    if code:
        stripped = (stripped[: code.start()] + stripped[code.end() :]).strip()
        row.side("currency", (code.group(1) or code.group(2)).upper())
    digits = _SPACES.sub("", stripped.translate(_SYMBOLS))
    if o.decimal == ",":
        digits = digits.replace(".", "").replace("'", "").replace(",", ".")
    else:
        if _COMMA_DECIMAL.fullmatch(digits):
            raise TransformError(
                'looks like an amount with a decimal comma; say decimal = "," for this column in a mapping file'
            )
        digits = digits.replace(",", "").replace("'", "")
    if not _NUMBER.fullmatch(digits):
        raise TransformError("is not an amount")
    amount = float(digits)
    if amount == 0:
        return None
    whole = math.floor(amount + 0.5)
    if whole != amount:
        row.warn(f"has cents; published as {whole}")
    return whole


def mileage(value: str, o: Options, row: Row) -> int | None:
    """An odometer reading with an optional unit: ``28,411 mi``, ``45 000 km``, ``52777``."""
    stripped = value.strip()
    if not stripped:
        return None
    match = _MILEAGE.fullmatch(stripped)
    if not match:
        raise TransformError("is not a mileage (a number, optionally followed by mi or km)")
    digits, unit = match.group(1).strip(), match.group(2)
    if _DOT_THOUSANDS.fullmatch(_SPACES.sub("", digits)) and "," not in digits:
        digits = digits.replace(".", "")
    reading = _plain_number(digits)
    if unit:
        row.side("mileage_unit", _UNITS[unit.lower()])
    elif o.unit:
        row.side("mileage_unit", o.unit)
    return math.floor(reading + 0.5)


def unit(value: str, o: Options, row: Row) -> str | None:
    """A mileage unit: ``MI``, ``miles``, ``KM``, ``kilometres`` -> ``mi`` / ``km``."""
    stripped = value.strip()
    if not stripped:
        return None
    found = _UNITS.get(stripped.lower().rstrip("."))
    if found is None:
        raise TransformError("is not a mileage unit (mi or km)")
    return found


# -- vocabularies ---------------------------------------------------------------------


def boolean(value: str, o: Options, row: Row) -> bool | None:
    """``Yes/No``, ``Y/N``, ``1/0``, ``true/false``, ``Certified``; an empty cell is no value."""
    squashed = value.strip().casefold()
    if squashed not in _TRUE and squashed not in _FALSE:
        squashed = _squash(value)
    if not squashed:
        return None
    if squashed in _TRUE:
        return True
    if squashed in _FALSE:
        return False
    raise TransformError("is not yes or no")


def condition(value: str, o: Options, row: Row) -> str | None:
    """The sale condition: ``New``, ``Used``, ``CPO``, ``Certified Pre-Owned``, ``n``, ``u``."""
    found = _CONDITIONS.get(value.strip().casefold())
    if found is not None:
        return found
    squashed = _squash(value)
    if not squashed:
        return None
    found = _CONDITIONS.get(squashed)
    if found is None:
        raise TransformError("is not a sale condition (new, used or certified pre-owned)")
    return found


def status(value: str, o: Options, row: Row) -> str | None:
    """Availability: ``In Stock``, ``Available``, ``In Transit``, ``Pending`` (others as written)."""
    squashed = _squash(value)
    if not squashed:
        return None
    return _STATUSES.get(squashed, value.strip().lower())


def rooftop(value: str, o: Options, row: Row) -> str | None:
    """A rooftop name as configured (any case), or a store code a mapping's ``[rooftops]`` names.

    A value that is neither leaves the listing without a rooftop, with a
    warning (a store code the mapping does not know yet must not reject the feed).
    """
    stripped = value.strip()
    if not stripped:
        return None
    found = row.rooftops.get(stripped.casefold())
    if found is not None:
        return found
    if row.rooftops:
        row.warn(
            "is not a configured rooftop or store code; the listing has no rooftop "
            "(name store codes in a mapping file's [rooftops])"
        )
        return None
    return stripped


def fulfillment(value: str, o: Options, row: Row) -> str | None:
    """Google's ``vehicle_fulfillment`` text form ``in_store:1111[:2222]``: the first store code."""
    stripped = value.strip()
    if not stripped:
        return None
    option, _, codes = stripped.partition(":")
    if not codes:
        return None if option.strip().lower() == "online" else rooftop(option, o, row)
    return rooftop(codes.split(":")[0], o, row)


# -- dates ------------------------------------------------------------------------------


def _calendar_day(year: int, month: int, day: int) -> date:
    try:
        return date(year, month, day)
    except ValueError:
        raise TransformError("is not a real calendar day") from None


def _day(value: str, o: Options) -> tuple[date, str] | None:
    """The calendar day a date cell starts with, and what follows it."""
    match = _ISO_DATE.match(value)
    if match:
        year, month, day = (int(g) for g in match.groups())
        return _calendar_day(year, month, day), value[match.end() :]
    match = _SLASH_DATE.match(value)
    if match:
        first, second, year_text = match.groups()
        year = int(year_text)
        if len(year_text) == 2:
            year += 2000 if year < 70 else 1900
        month, day = (int(second), int(first)) if o.order == "dmy" else (int(first), int(second))
        return _calendar_day(year, month, day), value[match.end() :]
    return None


def date_value(value: str, o: Options, row: Row) -> str | None:
    """A calendar day as ``YYYY-MM-DD``: ISO (``2025-01-15``, or a timestamp) or US (``01/15/2025``)."""
    stripped = value.strip()
    if not stripped:
        return None
    found = _day(stripped, o)
    if found is None:
        raise TransformError("is not a date (YYYY-MM-DD or MM/DD/YYYY)")
    return found[0].isoformat()


_CLOCK = re.compile(r"(?:[T ]\s*)?(\d{1,2}):(\d{2})(?::(\d{2})(\.\d+)?)?\s*([AaPp][Mm])?\s*(.*)")


def datetime_value(value: str, o: Options, row: Row) -> str | None:
    """A moment as RFC 3339 with offset. No offset means UTC; a date alone means its midnight UTC."""
    stripped = value.strip()
    if not stripped:
        return None
    try:
        parsed = datetime.fromisoformat(stripped.replace("z", "Z"))
    except ValueError:
        parsed = None
    if parsed is None:
        found = _day(stripped, o)
        if found is None:
            raise TransformError("is not a date and time (ISO 8601 or MM/DD/YYYY HH:MM)")
        day, rest = found
        hour = minute = second = 0
        zone: Any = UTC
        rest = rest.strip()
        if rest:
            clock = _CLOCK.fullmatch(rest)
            if clock is None:
                raise TransformError("is not a date and time (ISO 8601 or MM/DD/YYYY HH:MM)")
            hour, minute = int(clock.group(1)), int(clock.group(2))
            second = int(clock.group(3) or 0)
            meridiem = (clock.group(5) or "").lower()
            if meridiem == "pm" and hour < 12:
                hour += 12
            elif meridiem == "am" and hour == 12:
                hour = 0
            offset = clock.group(6).strip()
            if offset and offset.upper() not in ("Z", "UTC", "GMT"):
                raise TransformError("has a time zone other than UTC; write it as an ISO 8601 offset")
            if hour > 23 or minute > 59 or second > 59:
                raise TransformError("is not a time of day")
        parsed = datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=zone)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return to_rfc3339(parsed)


# -- lists --------------------------------------------------------------------------------


def _split(value: str, o: Options) -> list[str]:
    if o.separator:
        parts = value.split(o.separator)
    else:
        parts = _ANY_SEPARATOR.split(value)
    return [p.strip() for p in parts if p.strip()]


def photos(value: str, o: Options, row: Row) -> list[str] | None:
    """Photo URLs separated by ``|``, ``,``, ``;`` or spaces, kept in order without repeats.

    Photos are shown by buyer agents over https; an ``http://`` URL is upgraded to
    ``https://`` (or, with ``insecure = "drop"``, left out), and anything that is
    no absolute URL is left out, each with a warning (docs/feeds.md).
    """
    out: list[str] = []
    upgraded = 0
    for item in _split(value, o):
        url = "https:" + item if item.startswith("//") else item
        if not web_url(url):
            row.warn(f"has photo {show(item)}, which is no https URL; left out")
            continue
        if url[:5].lower() == "http:":
            if o.insecure == "drop":
                row.warn(f"has photo {show(item)} over http://; left out")
                continue
            url = "https://" + url[7:]
            upgraded += 1
        if url not in out:
            out.append(url)
    if upgraded:
        row.warn(f"has {upgraded} photo URL(s) over http://; published as https://")
    return out or None


def url(value: str, o: Options, row: Row) -> str | None:
    """An absolute http(s) URL (a vehicle detail page), kept as written (the listing rules upgrade http)."""
    stripped = value.strip()
    if not stripped:
        return None
    if not web_url(stripped):
        raise TransformError("is not an absolute https URL")
    return stripped


def text_list(value: str, o: Options, row: Row) -> list[str] | None:
    """Free-text items (``features``) separated by ``|`` or ``;`` or ``,`` (the first one present)."""
    separator = o.separator or next((s for s in _LIST_SEPARATORS if s in value), None)
    parts = value.split(separator) if separator else [value]
    out = [p.strip() for p in parts if p.strip()]
    return out or None


# -- identifiers ------------------------------------------------------------------------


def vin(value: str, o: Options, row: Row) -> str | None:
    """A VIN in upper case without spaces or dashes (its check digit is the listing rules' to verify)."""
    cleaned = value.translate(_VIN_NOISE).strip().upper()
    if not cleaned:
        return None
    if not _VIN_CHARS.fullmatch(cleaned):
        raise TransformError("is not a VIN (17 letters and digits, without I, O or Q)")
    return cleaned


#: Every transform a format table or mapping file may name.
TRANSFORMS: dict[str, Transform] = {
    "text": text,
    "lower": lower,
    "upper": upper,
    "json": json_value,
    "integer": integer,
    "number": number,
    "money": money,
    "mileage": mileage,
    "unit": unit,
    "boolean": boolean,
    "condition": condition,
    "status": status,
    "rooftop": rooftop,
    "fulfillment": fulfillment,
    "date": date_value,
    "datetime": datetime_value,
    "photos": photos,
    "url": url,
    "list": text_list,
    "vin": vin,
}
