"""A deterministic, realistic inventory feed for the demo dealer, tests and benchmarks.

``generate_listings(count, seed)`` yields valid AAP ``InventoryListing`` objects:
cars (new, used, certified), motorcycles including electric ones, trailers, RVs
and side-by-sides, priced in USD or CAD (with km odometers in Canada), with
verified feature evidence, in-transit and pending units, listings that only
know a list price and the three fee shapes (omitted, ``[]``, itemized). The
same ``(count, seed, settings)`` always gives the same feed, and a shorter feed
is a prefix of a longer one, so benchmarks and tests can rely on exact figures.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aap.config.loader import load_settings
from aap.config.model import Settings
from aap.inventory.demo_catalogue import (
    BODY_ONLY,
    CAR_COLORS,
    CARS,
    EXTRA_FEATURES,
    FEATURE_TYPES,
    INTERIORS,
    MOTO_COLORS,
    MOTORCYCLES,
    NOTES,
    OTHERS,
    RVS,
    TRAILER_COLORS,
    TRAILERS,
)
from aap.inventory.vin import CHARACTER_VALUES, POSITION_WEIGHTS

# Feed time anchor: listings were updated in the 60 days before it.
ANCHOR = datetime(2026, 5, 1, tzinfo=UTC)
CURRENT_MODEL_YEAR = 2026
CAD_PER_USD = 1.37

T = TypeVar("T")

# -- small, fast helpers (the generator must make 100k listings in seconds) ----------


def _electric(powertrain: tuple[Any, ...]) -> dict[str, Any]:
    """The fields of a battery-electric powertrain row (``("bev", range, kWh, hp, port, DC fast)``)."""
    _, range_mi, kwh, hp, port, dcfc = powertrain
    return {
        "fuel": "bev",
        "transmission": "automatic",
        "electric_range_mi": range_mi,
        "battery_kwh": kwh,
        "motor_power_hp": hp,
        "dc_fast_charge": dcfc,
        "charge_port": port,
    }


def pick(rnd: Callable[[], float], seq: Sequence[T]) -> T:
    """One element of ``seq``; much cheaper than ``Random.choice``."""
    return seq[int(rnd() * len(seq))]


def sample(rnd: Callable[[], float], seq: Iterable[T], k: int) -> list[T]:
    """``k`` distinct elements of ``seq`` (partial Fisher-Yates)."""
    pool = list(seq)
    n = len(pool)
    for i in range(k):
        j = i + int(rnd() * (n - i))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


_ANCHOR_EPOCH = int(ANCHOR.timestamp())
_UPDATE_WINDOW = 60 * 86400  # listings were updated in the last 60 days
_FIRST_DAY = _ANCHOR_EPOCH // 86400 - 200
_DAYS = [(date(1970, 1, 1) + timedelta(days=_FIRST_DAY + i)).isoformat() for i in range(202)]


def rfc3339(epoch: int) -> str:
    """UTC RFC 3339 timestamp of ``epoch`` seconds within the feed window."""
    seconds = epoch % 86400
    return f"{_DAYS[epoch // 86400 - _FIRST_DAY]}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


# -- VINs ------------------------------------------------------------------------------

VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"  # the 33 characters a VIN may use
_YEAR_CODES = "ABCDEFGHJKLMNPRSTVWXY123456789"  # 2010 = A ... cycles every 30 years


def make_vin(wmi: str, vds: str, year: int, index: int, salt: int) -> str:
    """A valid VIN, unique per ``index`` (below 33 million) for a given ``salt``."""
    serial = (index * 7919 + salt) % 1_000_000  # a bijection of 0..999999 (7919 is coprime)
    plant = VIN_CHARS[(index // 1_000_000 + salt) % 33]
    tail = f"{_YEAR_CODES[(year - 2010) % 30]}{plant}{serial:06d}"
    head = wmi + vds
    total = _head_sum(head) + sum(CHARACTER_VALUES[c] * w for c, w in zip(tail, POSITION_WEIGHTS[9:]))
    remainder = total % 11
    return f"{head}{'X' if remainder == 10 else remainder}{tail}"


@cache
def _head_sum(head: str) -> int:
    return sum(CHARACTER_VALUES[c] * w for c, w in zip(head, POSITION_WEIGHTS))


@cache
def _vds(model: str) -> str:
    """Five VIN characters derived from the model name (stable, VIN-legal)."""
    h = 0
    for ch in model:
        h = (h * 131 + ord(ch)) & 0xFFFFFFFF
    out = []
    for _ in range(5):
        out.append(VIN_CHARS[h % 33])
        h //= 33
    return "".join(out)


# -- rooftops ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rooftop:
    """What the generator needs to know about one rooftop to stock it plausibly."""

    name: str
    dealer_id: str | None
    prefix: str
    currency: str  # USD or CAD
    km: bool
    mix: tuple[tuple[str, float], ...]  # (vehicle_type, cumulative weight)
    used_only: bool
    fees: tuple[tuple[str, int], ...]
    site: str  # https origin for vdp_url and photos


def _mix(capabilities: set[str]) -> tuple[tuple[str, float], ...]:
    if "powersports" in capabilities:
        weights = [("motorcycle", 0.62), ("trailer", 0.13), ("rv", 0.13), ("other", 0.12)]
    elif capabilities & {"motorcycle_sales", "rv_sales", "trailer_sales"}:
        weights = [("car", 0.78)]
        if "motorcycle_sales" in capabilities:
            weights.append(("motorcycle", 0.14))
        if "rv_sales" in capabilities:
            weights.append(("rv", 0.04))
        if "trailer_sales" in capabilities:
            weights.append(("trailer", 0.04))
    else:
        weights = [("car", 1.0)]
    total = sum(w for _, w in weights)
    cumulative, acc = [], 0.0
    for kind, weight in weights:
        acc += weight / total
        cumulative.append((kind, acc))
    cumulative[-1] = (cumulative[-1][0], 1.0)
    return tuple(cumulative)


def _site(rooftop: dict[str, Any]) -> str:
    website = rooftop.get("website")
    if isinstance(website, str) and website.startswith("https://"):
        parts = urlsplit(website)
        return f"https://{parts.netloc}"
    return "https://inventory.dealer.example"


def rooftops_for(settings: Settings) -> list[Rooftop]:
    """Every rooftop that can hold listings (the sellers' rooftops in aggregate scope)."""
    out: list[Rooftop] = []
    prefixes: set[str] = set()
    for profile in settings.all_profiles():
        for rooftop in profile.rooftops:
            name = rooftop["name"]
            words = [w for w in name.replace("-", " ").split() if w[:1].isalnum()]
            prefix = "".join(w[0] for w in words[1:4] or words[:1]).upper() or "R"
            base, n = prefix, 2
            while prefix in prefixes:
                prefix, n = f"{base}{n}", n + 1
            prefixes.add(prefix)
            country = str((rooftop.get("address") or {}).get("country", "US")).upper()
            canadian = country in ("CA", "CAN", "CANADA")
            currency = rooftop.get("currency") or ("CAD" if canadian else "USD")
            lowered = name.lower()
            out.append(
                Rooftop(
                    name=name,
                    dealer_id=profile.dealer_id if settings.scope == "aggregate" else None,
                    prefix=prefix,
                    currency=currency,
                    km=canadian or currency == "CAD",
                    mix=_mix(set(rooftop.get("capabilities") or ())),
                    used_only="pre-owned" in lowered or "used" in lowered.split(),
                    fees=tuple((f["name"], f["amount"]) for f in rooftop.get("fees") or ()),
                    site=_site(rooftop),
                )
            )
    return out


def _default_settings() -> Settings:
    return load_settings(None, environ={})


# -- the generator ------------------------------------------------------------------------


def generate_listings(count: int, seed: int = 0, *, settings: Settings | None = None) -> Iterator[dict[str, Any]]:
    """Yield ``count`` InventoryListing dicts for ``settings`` (default: the demo dealer group)."""
    settings = settings or _default_settings()
    rooftops = rooftops_for(settings)
    if not rooftops:
        return
    vocabulary = [(f.code, f.label) for f in settings.features]
    rnd = random.Random(seed).random
    salt = random.Random(seed ^ 0x5EED).randrange(1_000_000)
    builder = _Builder(rnd, vocabulary, salt)
    n_rooftops = len(rooftops)
    for index in range(count):
        yield builder.listing(index, rooftops[int(rnd() * n_rooftops)])


class _Builder:
    """Holds the random stream and the per-type vocabularies; one ``listing`` per call."""

    def __init__(self, rnd: Callable[[], float], vocabulary: list[tuple[str, str]], salt: int) -> None:
        self.rnd = rnd
        self.salt = salt
        self.vocab_by_type: dict[str, list[tuple[str, str]]] = {
            kind: [(c, label) for c, label in vocabulary if kind in FEATURE_TYPES.get(c, {kind})]
            for kind in ("car", "motorcycle", "trailer", "rv", "other")
        }

    def listing(self, index: int, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        r = rnd()
        kind = next(k for k, edge in rooftop.mix if r < edge)
        if kind == "car":
            item = self._car(rooftop)
        elif kind == "motorcycle":
            item = self._motorcycle(rooftop)
        elif kind == "trailer":
            item = self._trailer()
        elif kind == "rv":
            item = self._rv()
        else:
            item = self._other()
        return self._finish(item, kind, index, rooftop)

    # -- per type -------------------------------------------------------------------
    def _condition_year(self, rooftop: Rooftop, new_share: float) -> tuple[str, int]:
        rnd = self.rnd
        r = rnd()
        if not rooftop.used_only and r < new_share:
            return "new", CURRENT_MODEL_YEAR - (rnd() < 0.35)
        if r < new_share + (1 - new_share) * 0.3:
            return "cpo", CURRENT_MODEL_YEAR - (1 + int(rnd() * 6))
        return "used", CURRENT_MODEL_YEAR - (1 + int(rnd() * 12))

    def _car(self, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, trims, powertrains, drivelines, wmi = pick(rnd, CARS)
        condition, year = self._condition_year(rooftop, 0.5)
        t = int(rnd() * len(trims))
        pt = pick(rnd, powertrains)
        item: dict[str, Any] = {
            "_wmi": wmi,
            "_model": model,
            "_base": round(msrp * (1 + 0.09 * t) / 5) * 5,
            "year": year,
            "make": make,
            "model": model,
            "trim": trims[t],
            "condition": condition,
            "body": body,
            "driveline": pick(rnd, drivelines),
            "exterior_color": pick(rnd, CAR_COLORS),
            "interior_color": pick(rnd, INTERIORS),
        }
        if rnd() < 0.7:
            item["vehicle_type"] = "car"
        if pt[0] == "bev":
            item.update(_electric(pt))
        else:
            fuel, engine, cc, city, hwy, transmission = pt
            item.update(fuel=fuel, engine=engine, displacement_cc=cc, transmission=transmission)
            if fuel != "phev" or rnd() < 0.5:
                item["city_mpg"], item["highway_mpg"] = city, hwy
            if fuel == "phev":
                item.update(
                    electric_range_mi=pick(rnd, (21, 22, 25, 32, 37, 40)),
                    battery_kwh=pick(rnd, (14.4, 17.3, 25.7)),
                    dc_fast_charge=False,
                    charge_port="j1772",
                )
        item["_miles_per_year"] = 11_500
        return item

    def _motorcycle(self, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, pt, wmi, drive, wheels = pick(rnd, MOTORCYCLES)
        condition, year = self._condition_year(rooftop, 0.6)
        item: dict[str, Any] = {
            "_wmi": wmi,
            "_model": model,
            "_base": msrp,
            "vehicle_type": "motorcycle",
            "year": year,
            "make": make,
            "model": model,
            "condition": condition,
            "body": body,
            "exterior_color": pick(rnd, MOTO_COLORS),
            "other_attributes": {"final_drive": drive, "wheel_count": wheels, "abs": True},
        }
        if pt[0] == "bev":
            item.update(_electric(pt))
        else:
            _, engine, cc, transmission = pt
            item.update(fuel="gas", engine=engine, displacement_cc=cc, transmission=transmission)
            item["other_attributes"]["engine_stroke"] = 4
        item["_miles_per_year"] = 3_200
        return item

    def _trailer(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, length, weight, sleeps, axles, hitch, wmi = pick(rnd, TRAILERS)
        condition, year = self._condition_year(_ANY, 0.65)
        attrs: dict[str, Any] = {"length_ft": length, "dry_weight_lbs": weight, "axles": axles, "hitch": hitch}
        if sleeps:
            attrs["sleeps"] = sleeps
        return {
            "_wmi": wmi,
            "_model": model,
            "_base": msrp,
            "_miles_per_year": 0,
            "vehicle_type": "trailer",
            "year": year,
            "make": make,
            "model": model,
            "condition": "used" if condition == "cpo" else condition,
            "body": body,
            "exterior_color": pick(rnd, TRAILER_COLORS),
            "other_attributes": attrs,
        }

    def _rv(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, engine, cc, fuel, transmission, length, sleeps, chassis, wmi = pick(rnd, RVS)
        condition, year = self._condition_year(_ANY, 0.55)
        return {
            "_wmi": wmi,
            "_model": model,
            "_base": msrp,
            "_miles_per_year": 5_000,
            "vehicle_type": "rv",
            "year": year,
            "make": make,
            "model": model,
            "condition": "used" if condition == "cpo" else condition,
            "body": body,
            "engine": engine,
            "displacement_cc": cc,
            "fuel": fuel,
            "transmission": transmission,
            "exterior_color": pick(rnd, TRAILER_COLORS),
            "other_attributes": {"length_ft": length, "sleeps": sleeps, "chassis": chassis, "generator": rnd() < 0.8},
        }

    def _other(self) -> dict[str, Any]:
        rnd = self.rnd
        make, model, body, msrp, engine, cc, wmi = pick(rnd, OTHERS)
        condition, year = self._condition_year(_ANY, 0.6)
        return {
            "_wmi": wmi,
            "_model": model,
            "_base": msrp,
            "_miles_per_year": 900,
            "vehicle_type": "other",
            "year": year,
            "make": make,
            "model": model,
            "condition": "used" if condition == "cpo" else condition,
            "body": body,
            "engine": engine,
            "displacement_cc": cc,
            "fuel": "gas",
            "transmission": "cvt",
            "exterior_color": pick(rnd, MOTO_COLORS),
            "other_attributes": {"seats": 2, "wheel_count": 4},
        }

    # -- shared fields ----------------------------------------------------------------
    def _finish(self, item: dict[str, Any], kind: str, index: int, rooftop: Rooftop) -> dict[str, Any]:
        rnd = self.rnd
        wmi, model, base = item.pop("_wmi"), item.pop("_model"), item.pop("_base")
        per_year = item.pop("_miles_per_year")
        year, condition = item["year"], item["condition"]
        vehicle_id = f"veh_{(index * 0x9E3779B1 + self.salt) & 0xFFFFFFFFFF:010x}"
        stock = f"{rooftop.prefix}{'N' if condition == 'new' else 'U'}{10000 + index}"
        out: dict[str, Any] = {
            "vehicle_id": vehicle_id,
            "vin": make_vin(wmi, _vds(model), year, index, self.salt),
            "stock": stock,
        }
        if rooftop.dealer_id is not None:
            out["dealer_id"] = rooftop.dealer_id
        out.update(item)
        out["rooftop"] = rooftop.name

        # Status: only new units are in transit; any unit may have a deal pending.
        r = rnd()
        if condition == "new" and r < 0.12:
            out["status"] = "intransit"
        elif r > 0.92:
            out["status"] = "pending"
        else:
            out["status"] = "available"

        # Odometer (native unit; km in Canada).
        if per_year:
            age = max(CURRENT_MODEL_YEAR - year, 0)
            miles = (
                (2 + int(rnd() * 39))
                if condition == "new"
                else int(per_year * (age + rnd()) * (0.6 + 0.8 * rnd())) + 150
            )
            if condition == "cpo":
                miles = min(miles, 60_000)
            if rooftop.km:
                out["mileage"] = int(miles * 1.609344)
                out["mileage_unit"] = "km"
            else:
                out["mileage"] = miles
                if rnd() < 0.3:
                    out["mileage_unit"] = "mi"

        updated = _ANCHOR_EPOCH - int(rnd() * _UPDATE_WINDOW)
        slug = stock.lower()
        out["vdp_url"] = f"{rooftop.site}/inventory/{slug}"
        photos = int(rnd() * 9)
        if photos:
            out["photos"] = [f"{rooftop.site}/photos/{slug}/{k}.jpg" for k in range(1, photos + 1)]
        self._price(out, base, condition, year, rooftop)
        updated_at = rfc3339(updated)
        self._evidence(out, kind, updated_at)
        out["updated_at"] = updated_at
        out["inventory_date"] = _DAYS[(updated // 86400) - _FIRST_DAY - int(rnd() * 90)]
        trim = f" {out['trim']}" if "trim" in out else ""
        out["description"] = f"{year} {out['make']} {out['model']}{trim} in {out['exterior_color']}" + (
            ", certified pre-owned with a multi-point inspection."
            if condition == "cpo"
            else ", brand new."
            if condition == "new"
            else ", pre-owned."
        )
        if rnd() < 0.25:
            out["notes"] = pick(rnd, NOTES)
        return out

    def _price(self, out: dict[str, Any], base: int, condition: str, year: int, rooftop: Rooftop) -> None:
        rnd = self.rnd
        factor = CAD_PER_USD if rooftop.currency == "CAD" else 1.0
        if rooftop.currency == "CAD" or rnd() < 0.5:
            out["currency"] = rooftop.currency
        if condition == "new":
            msrp = int(round(base * factor / 5) * 5)
            list_price = msrp - pick(rnd, (0, 0, 250, 500, 1000, 1500))
            out["msrp"] = msrp
        else:
            age = max(CURRENT_MODEL_YEAR - year, 0)
            value = base * factor * (0.86**age) * (0.9 + 0.15 * rnd())
            list_price = max(int(value / 100) * 100 - 5, 995)
        # Fees: omitted (not disclosed), [] (none) or the rooftop's itemization.
        r = rnd()
        fees: list[dict[str, Any]] | None
        if r < 0.25:
            fees = None
        elif r < 0.45:
            fees = []
        else:
            fees = [{"name": name, "amount": amount} for name, amount in rooftop.fees] or None
        out["list_price"] = list_price
        if rnd() < 0.06:
            # A provider that only knows a list amount publishes list_price and omits price.
            if fees is not None:
                out["fees"] = fees
            return
        out["price"] = list_price + sum(f["amount"] for f in fees or ())
        if fees is not None:
            out["fees"] = fees

    def _evidence(self, out: dict[str, Any], kind: str, observed_at: str) -> None:
        rnd = self.rnd
        body = out.get("body")
        vocab = [(c, label) for c, label in self.vocab_by_type[kind] if c not in BODY_ONLY or body in BODY_ONLY[c]]
        if not vocab:
            return
        chosen = sample(rnd, vocab, int(rnd() * (min(7, len(vocab)) + 1)))
        if not chosen:
            return
        evidence = []
        labels = []
        for code, label in chosen:
            r = rnd()
            entry: dict[str, Any] = {"code": code, "label": label}
            if r < 0.64:
                entry["status"] = "present"
                labels.append(label)
                s = rnd()
                if s < 0.45:
                    entry["source"], entry["text"] = "inventory", f"Equipment sheet for this unit lists: {label}."
                elif s < 0.8:
                    entry["source"], entry["text"] = (
                        "manufacturer",
                        f"Manufacturer build data for this VIN includes: {label}.",
                    )
                else:
                    entry["source"], entry["text"] = "dealer", f"Verified on the unit by our staff: {label}."
                if rnd() < 0.3:
                    entry["url"] = f"{out['vdp_url']}#equipment"
                if rnd() < 0.5:
                    entry["observed_at"] = observed_at
            elif r < 0.86:
                entry["status"] = "absent"
                entry["source"] = "dealer" if rnd() < 0.6 else "inventory"
                entry["text"] = f"Checked on the unit: not fitted ({label})."
            else:
                entry["status"] = "unknown"
            evidence.append(entry)
        out["feature_evidence"] = evidence
        if labels or rnd() < 0.5:
            extras = sample(rnd, EXTRA_FEATURES, int(rnd() * 4)) if kind == "car" else []
            features = labels + extras
            if features:
                out["features"] = features


# Rooftop stand-in for unit types whose new/used share does not depend on the store.
_ANY = Rooftop("", None, "", "USD", False, (("car", 1.0),), False, (), "")
