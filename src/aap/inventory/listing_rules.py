"""The AAP rules for one listing: the one validator every feed format's rows go through.

A listing is checked against the 3.1 ``InventoryListing`` schema, then against
the rules its prose states, the deployment (known rooftops, dealers,
currencies and feature codes) and the other rows of its feed (no duplicate
``vehicle_id``, or VIN / stock number within one dealer). Each problem is a
:class:`FeedProblem` with its line; a rejected feed is a :class:`FeedError`
listing every problem, so the previous inventory stays untouched.

:data:`COLUMNS` names the listing's fields with their kinds (the ``aap``
format's CSV mapping, :mod:`aap.inventory.formats.aap`, reads cells by them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aap.config.model import Settings
from aap.inventory.vin import expected_check_digit
from aap.spec import validate

MAX_REPORTED = 100  # problems kept in a FeedError (all are counted)

# Column kinds of the CSV mapping, from the Vehicle schema's property types.
STRING, INTEGER, NUMBER, BOOLEAN, JSON = "string", "integer", "number", "boolean", "json"

COLUMNS: dict[str, str] = {
    "vehicle_id": STRING,
    "dealer_id": STRING,
    "vin": STRING,
    "stock": STRING,
    "vehicle_type": STRING,
    "year": INTEGER,
    "make": STRING,
    "model": STRING,
    "trim": STRING,
    "condition": STRING,
    "status": STRING,
    "rooftop": STRING,
    "currency": STRING,
    "msrp": INTEGER,
    "list_price": INTEGER,
    "price": INTEGER,
    "fees": JSON,
    "mileage": INTEGER,
    "mileage_unit": STRING,
    "body": STRING,
    "transmission": STRING,
    "driveline": STRING,
    "engine": STRING,
    "displacement_cc": INTEGER,
    "fuel": STRING,
    "city_mpg": INTEGER,
    "highway_mpg": INTEGER,
    "electric_range_mi": NUMBER,
    "battery_kwh": NUMBER,
    "motor_power_hp": NUMBER,
    "dc_fast_charge": BOOLEAN,
    "charge_port": STRING,
    "exterior_color": STRING,
    "interior_color": STRING,
    "features": JSON,
    "feature_evidence": JSON,
    "photos": JSON,
    "vdp_url": STRING,
    "description": STRING,
    "notes": STRING,
    "other_attributes": JSON,
    "inventory_date": STRING,
    "updated_at": STRING,
}
#: Fields a feed must not carry: the search computes them.
COMPUTED_FIELDS = frozenset({"distance_mi"})


@dataclass(frozen=True)
class FeedProblem:
    """One problem of a feed: its line, where in the listing (JSON pointer), and what.

    A feed read through a format table also names the source ``column`` and the
    cell's ``value`` as written (inventory values are not personal data), so the
    operator can find it in the file: ``line 7, column "VIN": "1HG…X" has a wrong
    check digit (expected 7)``.
    """

    line: int
    location: str
    message: str
    column: str | None = None
    value: str | None = None

    def __str__(self) -> str:
        if self.column is not None:
            shown = f" {_quoted(self.value)}" if self.value is not None else ""
            return f'line {self.line}, column "{self.column}":{shown} {self.message}'
        if not self.location:
            return f"line {self.line}: {self.message}"
        return f"line {self.line}: {self.location}: {self.message}"


def _quoted(value: str, limit: int = 80) -> str:
    text = value if len(value) <= limit else value[: limit - 1] + "\u2026"
    return '"' + text.replace('"', '\\"') + '"'


class FeedError(Exception):
    """A rejected feed. ``problems`` holds the first :data:`MAX_REPORTED`; ``total`` counts all."""

    def __init__(self, problems: list[FeedProblem], total: int, source: str | None = None) -> None:
        self.problems = problems[:MAX_REPORTED]
        self.total = total
        self.source = source
        more = f"\n  ... and {total - len(self.problems)} more" if total > len(self.problems) else ""
        lines = "\n".join(f"  {p}" for p in self.problems)
        where = f" {source}" if source else ""
        super().__init__(f"feed{where} rejected: {total} problem(s)\n{lines}{more}")


Warning = tuple[str, str]  # (JSON pointer, message): the row is published, the operator is told


class ListingChecker:
    """The AAP rules for one listing at a time, in feed order: the one validator of every format.

    :meth:`check` gives ``dealer_id`` to a listing without one (when the import
    names a dealer) and returns every problem as ``(JSON pointer, message)``:
    the ``InventoryListing`` schema, the rules its prose states, the
    deployment's rules and duplicates of earlier rows (unless ``duplicates`` is
    off: a reader that rejects every row of a duplicated identity at the end).
    With ``remember_rejected=False`` (a partial import) the identities of rejected
    rows are not remembered, so a later valid row is not called their duplicate.
    With ``strict``, a wrong VIN check digit is a problem instead of a warning.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        dealer_id: str | None = None,
        *,
        remember_rejected: bool = True,
        duplicates: bool = True,
        strict: bool = False,
    ) -> None:
        self.dealer_id = dealer_id
        self.rules = _DeploymentRules(settings, dealer_id)
        self.seen = _Duplicates() if duplicates else None
        self.remember_rejected = remember_rejected
        self.strict = strict

    def check(
        self, row: dict[str, Any], line: int, *, rejected: bool = False, warnings: list[Warning] | None = None
    ) -> list[tuple[str, str]]:
        """Every problem of ``row``; ``rejected``: the caller already refuses it for another reason.

        What is published with a warning instead (an ``http://`` link upgraded, a
        photo that is no https URL left out, a wrong VIN check digit) goes to ``warnings``.
        """
        if self.dealer_id is not None and "dealer_id" not in row:
            row["dealer_id"] = self.dealer_id
        told: list[Warning] = [] if warnings is None else warnings
        problems = _link_rules(row, told)
        problems += [(e["instanceLocation"], e["error"]) for e in validate(row, "inventory-listing")]
        problems += _listing_rules(row)
        problems += _vin_rules(row, self.strict, told)
        problems += self.rules.check(row)
        if self.seen is not None and (self.remember_rejected or not (problems or rejected)):
            problems += self.seen.check(row, line)
        return problems


_INTEGER_FIELDS = tuple(name for name, kind in COLUMNS.items() if kind == INTEGER)


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Integral floats in integer fields (``25000.0``) become ints, as stored and served."""
    for name in _INTEGER_FIELDS:
        value = row.get(name)
        if value.__class__ is float:
            row[name] = int(value)
    fees = row.get("fees")
    if isinstance(fees, list):
        for fee in fees:
            if isinstance(fee.get("amount"), float):
                fee["amount"] = int(fee["amount"])
    return row


# -- rules beyond the schema ---------------------------------------------------------

# scheme, "//", a host of letters, digits, dots, dashes, underscores (or a bracketed IPv6
# literal), an optional port, then anything without whitespace or control characters.
_WEB_URL = re.compile(
    r"(?i:https?)://(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?(?:[/?#][^\s\x00-\x1f\x7f]*)?\Z"
)
#: The model year from which every VIN carries the check digit (49 CFR 565, 17 characters since 1981).
VIN_CHECK_FROM_YEAR = 1981


def web_url(text: str) -> bool:
    """Whether ``text`` is an absolute ``https://`` or ``http://`` URL with a host: nothing else may
    be published as a link or an image (no ``javascript:``, ``data:`` or relative paths)."""
    return _WEB_URL.match(text) is not None


def _https(url: str) -> str:
    return "https://" + url[7:] if url[:5].lower() == "http:" else url


def _link_rules(row: dict[str, Any], warnings: list[Warning]) -> list[tuple[str, str]]:
    """Links and photos are https URLs: buyer agents show them in https pages (docs/feeds.md).

    ``vdp_url`` (``Vehicle.vdp_url``, a public URL, seed 004) over ``http://`` is
    published as ``https://`` with a warning; any other scheme is a problem. A
    photo over ``http://`` is upgraded the same way; a photo that is no web URL
    is left out with a warning.
    """
    problems: list[tuple[str, str]] = []
    link = row.get("vdp_url")
    if isinstance(link, str):
        if not web_url(link):
            problems.append(("/vdp_url", "is not an absolute https URL"))
        elif link[:5].lower() == "http:":
            row["vdp_url"] = _https(link)
            warnings.append(("/vdp_url", "is over http://; published as https://"))
    photos = row.get("photos")
    if isinstance(photos, list) and any(not (isinstance(p, str) and p[:6].lower() == "https:") for p in photos):
        kept: list[Any] = []
        upgraded = 0
        for index, photo in enumerate(photos):
            if not isinstance(photo, str):
                kept.append(photo)  # the schema says what is wrong with it
            elif not web_url(photo):
                warnings.append((f"/photos/{index}", "is no https URL; left out"))
            else:
                upgraded += photo[:5].lower() == "http:"
                if _https(photo) not in kept:
                    kept.append(_https(photo))
        if upgraded:
            warnings.append(("/photos", f"has {upgraded} photo URL(s) over http://; published as https://"))
        row["photos"] = kept
    return problems


def _vin_rules(row: dict[str, Any], strict: bool, warnings: list[Warning]) -> list[tuple[str, str]]:
    """The check digit of every 17-character VIN (49 CFR 565.15, ISO 3779), for model years from 1981.

    Every vehicle made for North America since model year 1981 carries one,
    wherever it was made; an older vehicle's identifier is left alone.
    """
    vin = row.get("vin")
    year = row.get("year")
    if not isinstance(vin, str) or len(vin) != 17:
        return []
    if isinstance(year, int) and not isinstance(year, bool) and year < VIN_CHECK_FROM_YEAR:
        return []
    expected = expected_check_digit(vin)
    if expected is None or vin[8] == expected:
        return []
    message = f"has a wrong check digit (expected {expected})"
    if strict:
        return [("/vin", message)]
    warnings.append(("/vin", message))
    return []


def _duplicates(row: dict[str, Any], array: str, key: str, rule: str) -> list[tuple[str, str]]:
    """Each entry of ``row[array]`` whose ``key`` an earlier entry has already, at its pointer."""
    entries = row.get(array)
    if not isinstance(entries, list):
        return []
    problems = []
    first: dict[str, int] = {}
    for i, entry in enumerate(entries):
        value = entry.get(key) if isinstance(entry, dict) else None
        if isinstance(value, str):
            if value in first:
                problems.append((f"/{array}/{i}/{key}", f"duplicates {array}/{first[value]} ({rule})"))
            else:
                first[value] = i
    return problems


def _listing_rules(row: dict[str, Any]) -> list[tuple[str, str]]:
    """What the InventoryListing description requires but its JSON Schema cannot say."""
    problems = []
    for name in COMPUTED_FIELDS & row.keys():
        problems.append((f"/{name}", "is computed by the search and cannot be imported"))
    problems += _duplicates(row, "feature_evidence", "code", "at most one entry per code")
    problems += _duplicates(row, "fees", "name", "fee names are unique within a listing")
    return problems


class _DeploymentRules:
    """Checks that need the configuration: rooftops, dealers, currencies, vocabulary."""

    def __init__(self, settings: Settings | None, dealer_id: str | None) -> None:
        self.settings = settings
        self.dealer_id = dealer_id
        if settings is None:
            return
        self.aggregate = settings.scope == "aggregate"
        self.rooftops = {
            profile.dealer_id: {r["name"] for r in profile.rooftops} for profile in settings.all_profiles()
        }
        self.currencies = set(settings.search.currencies)
        # Without [[features]] the vocabulary is the codes the inventory carries (docs/search.md,
        # "Features"): every code is accepted; with it, only its codes.
        self.codes: set[str] | None = {f.code for f in settings.features} if settings.features else None

    def check(self, row: dict[str, Any]) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.dealer_id is not None and row.get("dealer_id") != self.dealer_id:
            problems.append(("/dealer_id", "differs from the dealer id given for this import"))
        settings = self.settings
        if settings is None:
            return problems
        dealer_id = row.get("dealer_id")
        if self.aggregate:
            if dealer_id is None:
                problems.append(("", "needs a dealer_id in aggregate scope (a dealer_id field/column or --dealer-id)"))
            elif dealer_id not in self.rooftops:
                problems.append(("/dealer_id", "is not a dealer_id of any [[dealers]] table"))
            if "vehicle_id" not in row:
                problems.append(("", "needs a vehicle_id in aggregate scope"))
            rooftops = self.rooftops.get(dealer_id, set())
        else:
            if dealer_id is not None and dealer_id != settings.dealer.dealer_id:
                problems.append(("/dealer_id", "does not match dealer.dealer_id of the configuration"))
            rooftops = self.rooftops[settings.dealer.dealer_id]
        rooftop = row.get("rooftop")
        if isinstance(rooftop, str) and rooftop not in rooftops and (not self.aggregate or dealer_id in self.rooftops):
            problems.append(("/rooftop", "is not the name of a rooftop of this dealer"))
        currency = row.get("currency", "USD")
        if isinstance(currency, str) and currency not in self.currencies:
            problems.append(
                (
                    "/currency" if "currency" in row else "",
                    f"{currency} listings cannot be searched: search.currencies is {sorted(self.currencies)}",
                )
            )
        for i, entry in enumerate(row.get("feature_evidence") or ()):
            code = entry.get("code") if isinstance(entry, dict) else None
            if isinstance(code, str) and self.codes is not None and code not in self.codes:
                problems.append((f"/feature_evidence/{i}/code", "is not in the configured [[features]] vocabulary"))
        return problems


class _Duplicates:
    """Listing identities seen so far: vehicle_id per feed, VIN and stock per dealer."""

    def __init__(self) -> None:
        self.vehicle_ids: dict[str, int] = {}
        self.vins: dict[tuple[Any, str], int] = {}
        self.stocks: dict[tuple[Any, str], int] = {}

    def check(self, row: dict[str, Any], line: int) -> list[tuple[str, str]]:
        dealer = row.get("dealer_id")
        vehicle_id, vin, stock = row.get("vehicle_id"), row.get("vin"), row.get("stock")
        first: list[tuple[str, int]] = []  # (field, line that first had the value)
        if isinstance(vehicle_id, str):
            first.append(("vehicle_id", self.vehicle_ids.setdefault(vehicle_id, line)))
        if isinstance(vin, str):
            first.append(("vin", self.vins.setdefault((dealer, vin), line)))
        if isinstance(stock, str):
            first.append(("stock", self.stocks.setdefault((dealer, stock), line)))
        return [
            (f"/{field}", f"duplicates the {field} of line {earlier}") for field, earlier in first if earlier != line
        ]
