"""Realistic dealer feeds, generated: the same vehicles written as each format writes them.

:func:`vehicles` gives deterministic vehicles (valid VINs with correct check
digits, prices, odometers, photos); the ``*_feed`` functions render them as a
Google vehicle listings TSV/CSV/XML, a Meta catalog CSV/XML, or a provider
CSV with the messy values real exports carry ("$33,995", "28,411 mi",
"Used", "01/15/2025", pipe-separated http photos, lowercase VINs,
Windows-1252 text, semicolons, a quoted newline).
"""

from __future__ import annotations

import csv
import gzip
import io
import random
import zipfile
from dataclasses import dataclass
from xml.sax.saxutils import escape

from aap.inventory.vin import with_check_digit

SF = "Demo Motors San Francisco"
OAKLAND = "Demo Motors Oakland Pre-Owned"
ROOFTOPS = {"DM-SF": SF, "DM-OAK": OAKLAND}

_MODELS = [
    ("Honda", "CR-V", "EX-L", "suv", "1HG"),
    ("Toyota", "Camry", "SE", "sedan", "4T1"),
    ("Ford", "F-150", "XLT", "truck", "1FT"),
    ("Subaru", "Outback", "Touring", "wagon", "4S4"),
    ("Chevrolet", "Bolt EV", "LT", "hatchback", "1G1"),
    ("Mazda", "CX-5", "Grand Touring", "suv", "JM3"),
]
_COLORS = ["Crystal Black Pearl", "Platinum White", "Café au Lait", "Rapid Red", "Crème Brûlée"]
_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"


@dataclass(frozen=True)
class Vehicle:
    vin: str
    stock: str
    year: int
    make: str
    model: str
    trim: str
    body: str
    color: str
    mileage: int
    price: int
    msrp: int
    condition: str  # new, used, cpo
    store: str  # DM-SF or DM-OAK
    photos: tuple[str, ...]
    in_stock: str  # YYYY-MM-DD

    @property
    def rooftop(self) -> str:
        return ROOFTOPS[self.store]


def vehicles(count: int, seed: int = 12) -> list[Vehicle]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        make, model, trim, body, wmi = _MODELS[i % len(_MODELS)]
        raw = (
            wmi
            + "".join(rnd.choice(_CHARS) for _ in range(5))
            + "0"
            + "".join(rnd.choice(_CHARS) for _ in range(2))
            + f"{100000 + i:06d}"
        )
        vin = with_check_digit(raw[:17])
        condition = ("new", "used", "cpo")[i % 3]
        mileage = 0 if condition == "new" else rnd.randint(5_000, 90_000)
        msrp = rnd.randint(24, 60) * 1000 + 995
        price = msrp - rnd.randint(0, 30) * 100 if condition == "new" else msrp - rnd.randint(50, 150) * 100
        photos = tuple(f"https://cdn.dealer.example/{vin.lower()}/{n}.jpg" for n in range(1, 1 + i % 3 + 1))
        out.append(
            Vehicle(
                vin,
                f"S{1000 + i}",
                2018 + i % 8,
                make,
                model,
                trim,
                body,
                _COLORS[i % 5],
                mileage,
                price,
                msrp,
                condition,
                "DM-SF" if i % 2 == 0 else "DM-OAK",
                photos,
                f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}",
            )
        )
    return out


def _delimited(rows: list[list[str]], delimiter: str) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n")
    writer.writerows(rows)
    return buffer.getvalue()


# -- Google --------------------------------------------------------------------------------


def google_rows(items: list[Vehicle], *, ads: bool = False) -> list[list[str]]:
    """Google vehicle listings attributes (``ads``: the vehicle ads spellings brand / color)."""
    header = [
        "id",
        "vin",
        "store_code",
        "dealership_name",
        "dealership_address",
        "price",
        "vehicle_msrp",
        "condition",
        "certified_pre-owned" if ads else "certified_pre_owned",
        "brand" if ads else "make",
        "model",
        "trim",
        "year",
        "mileage",
        "color" if ads else "exterior_color",
        "body_style",
        "engine",
        "image_link",
        "additional_image_link",
        "link",
        "date_in_stock",
    ]
    rows = [header]
    for v in items:
        rows.append(
            [
                v.stock,
                v.vin,
                v.store,
                "Demo Motors",
                "1 Market St, San Francisco, CA 94105, US",
                f"{v.price:,}.00 USD" if v.condition == "new" else f"{v.price} USD",
                f"{v.msrp} USD",
                "new" if v.condition == "new" else "used",
                "yes" if v.condition == "cpo" else "no",
                v.make,
                v.model,
                v.trim,
                str(v.year),
                f"{v.mileage:,} miles",
                v.color,
                v.body,
                "gasoline",
                v.photos[0],
                ",".join(v.photos[1:]),
                f"https://www.dealer.example/vdp/{v.stock}?utm_source=google",
                v.in_stock,
            ]
        )
    return rows


def google_tsv(items: list[Vehicle]) -> bytes:
    return _delimited(google_rows(items), "\t").encode("utf-8")


def google_csv(items: list[Vehicle]) -> bytes:
    return _delimited(google_rows(items, ads=True), ",").encode("utf-8")


def google_xml(items: list[Vehicle]) -> bytes:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<rss version="2.0" xmlns:g="http://base.google.com/ns/1.0">',
        "<channel>",
        "<title>Demo Motors inventory</title>",
        "<link>https://www.dealer.example</link>",
    ]
    for v in items:
        out.append("<item>")
        fields = [
            ("g:id", v.stock),
            ("g:vin", v.vin),
            ("g:price", f"{v.price} USD"),
            ("g:vehicle_msrp", f"{v.msrp} USD"),
            ("g:condition", "new" if v.condition == "new" else "used"),
            ("g:certified_pre-owned", "yes" if v.condition == "cpo" else "no"),
            ("g:brand", v.make),
            ("g:model", v.model),
            ("g:trim", v.trim),
            ("g:year", str(v.year)),
            ("g:mileage", f"{v.mileage} miles"),
            ("g:color", v.color),
            ("g:body_style", v.body),
            ("g:image_link", v.photos[0]),
        ]
        fields += [("g:additional_image_link", p) for p in v.photos[1:]]
        fields += [("g:link", f"https://www.dealer.example/vdp/{v.stock}")]
        for tag, value in fields:
            out.append(f"  <{tag}>{escape(value)}</{tag}>")
        out.append(
            f"  <g:vehicle_fulfillment><g:option>in_store</g:option>"
            f"<g:store_code>{v.store}</g:store_code></g:vehicle_fulfillment>"
        )
        out.append("</item>")
    out += ["</channel>", "</rss>"]
    return "\n".join(out).encode("utf-8")


# -- Meta ----------------------------------------------------------------------------------

_META_STATE = {"new": "NEW", "used": "USED", "cpo": "CPO"}


def meta_csv(items: list[Vehicle]) -> bytes:
    header = [
        "vehicle_id",
        "title",
        "description",
        "url",
        "make",
        "model",
        "year",
        "trim",
        "mileage.value",
        "mileage.unit",
        "image[0].url",
        "image[0].tag[0]",
        "image[1].url",
        "image[2].url",
        "transmission",
        "fuel_type",
        "body_style",
        "drivetrain",
        "vin",
        "condition",
        "price",
        "exterior_color",
        "state_of_vehicle",
        "address",
        "dealer_name",
    ]
    rows = [header]
    for v in items:
        rows.append(
            [
                f"veh-{v.stock}",
                f"{v.year} {v.make} {v.model}",
                f"{v.year} {v.make} {v.model} {v.trim}",
                f"https://www.dealer.example/vdp/{v.stock}",
                v.make,
                v.model,
                str(v.year),
                v.trim,
                str(v.mileage),
                "MI",
                v.photos[0],
                "Exterior",
                v.photos[1] if len(v.photos) > 1 else "",
                v.photos[2] if len(v.photos) > 2 else "",
                "AUTOMATIC",
                "GASOLINE",
                v.body.upper(),
                "AWD",
                v.vin,
                "EXCELLENT",
                f"{v.price} USD",
                v.color,
                _META_STATE[v.condition],
                '{addr1: "1 Market St", city: "San Francisco", region: "CA", postal_code: "94105", country: "US"}',
                "Demo Motors",
            ]
        )
    # A spreadsheet's byte-order mark, as Excel writes "CSV UTF-8".
    return b"\xef\xbb\xbf" + _delimited(rows, ",").encode("utf-8")


def meta_xml(items: list[Vehicle]) -> bytes:
    out = ['<?xml version="1.0" encoding="UTF-8"?>', "<listings>", "<title>Demo Motors</title>"]
    for v in items:
        out.append("<listing>")
        for tag, value in [
            ("vehicle_id", f"veh-{v.stock}"),
            ("vin", v.vin),
            ("make", v.make),
            ("model", v.model),
            ("year", str(v.year)),
            ("trim", v.trim),
            ("url", f"https://www.dealer.example/vdp/{v.stock}"),
            ("price", f"{v.price} USD"),
            ("state_of_vehicle", _META_STATE[v.condition].lower()),
            ("body_style", v.body),
            ("exterior_color", v.color),
            ("fuel_type", "gasoline"),
        ]:
            out.append(f"  <{tag}>{escape(value)}</{tag}>")
        out.append(f"  <mileage><value>{v.mileage}</value><unit>MI</unit></mileage>")
        for photo in v.photos:
            out.append(f"  <image><url>{escape(photo)}</url><tag>Exterior</tag></image>")
        out.append(
            '  <address format="simple"><component name="city">San Francisco</component>'
            '<component name="region">CA</component></address>'
        )
        out.append("</listing>")
    out.append("</listings>")
    return "\n".join(out).encode("utf-8")


# -- provider CSV ----------------------------------------------------------------------------

DEALER_HEADER = [
    "VIN",
    "Stock #",
    "Year",
    "Make",
    "Model",
    "Trim",
    "Body",
    "Exterior Color",
    "Mileage",
    "Internet Price",
    "MSRP",
    "New/Used",
    "Certified",
    "Photos",
    "Date In Stock",
    "Location",
    "Comments",
    "Options",
]


def dealer_rows(items: list[Vehicle]) -> list[list[str]]:
    rows = [DEALER_HEADER]
    for i, v in enumerate(items):
        month, day = v.in_stock[5:7], v.in_stock[8:10]
        rows.append(
            [
                v.vin.lower() if i % 2 else v.vin,
                f" {v.stock} ",
                str(v.year),
                v.make,
                v.model,
                v.trim,
                v.body.title(),
                v.color,
                f"{v.mileage:,}" if i % 2 else f"{v.mileage:,} mi",
                f"${v.price:,}",
                f"${v.msrp:,}.00",
                "New" if v.condition == "new" else "Used",
                "Yes" if v.condition == "cpo" else "No",
                "|".join(p.replace("https://", "http://") if n == 0 else p for n, p in enumerate(v.photos)),
                f"{month}/{day}/{v.in_stock[:4]}",
                v.store,
                f"One owner.\nClean history for {v.stock}.",
                "Sunroof; Heated Seats",
            ]
        )
    return rows


def dealer_csv(items: list[Vehicle], *, encoding: str = "cp1252", delimiter: str = ";") -> bytes:
    return _delimited(dealer_rows(items), delimiter).encode(encoding)


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def zipped(data: bytes, name: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()
