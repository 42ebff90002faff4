"""Each named transform, the VIN check digit, file sniffing, format detection and mapping files."""

from __future__ import annotations

import gzip

import pytest

from aap.inventory.formats import MappingError, ReadOptions, read_feed_bytes
from aap.inventory.formats import transforms as t
from aap.inventory.formats.mapping import Formats, builtin_format, parse_format
from aap.inventory.formats.reader import detect
from aap.inventory.formats.source import SourceError, decode, open_text, sniff_delimiter
from aap.inventory.listing_rules import FeedError, ListingChecker
from aap.inventory.vin import expected_check_digit, with_check_digit


class Row:
    """A transform's row: collects side values and warnings."""

    def __init__(self, strict: bool = False, rooftops: dict[str, str] | None = None) -> None:
        self.strict = strict
        self.rooftops = rooftops or {}
        self.sides: dict[str, object] = {}
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def side(self, name: str, value: object) -> None:
        self.sides[name] = value


def run(transform, value, **options):
    row = Row()
    return transform(value, t.Options(**options), row), row


@pytest.mark.parametrize(
    ("cell", "amount", "currency"),
    [
        ("$33,995", 33995, None),
        ("24988.00", 24988, None),
        ("10,499.00 USD", 10499, "USD"),
        ("10499 USD", 10499, "USD"),
        ("CAD 41,000", 41000, "CAD"),
        ("0", None, None),
        ("Call for price", None, None),
        ("  $ 7,500 ", 7500, None),
    ],
)
def test_money(cell, amount, currency):
    value, row = run(t.money, cell)
    assert value == amount
    assert row.sides.get("currency") == currency


def test_money_decimal_comma_only_when_asked():
    assert run(t.money, "33.995,00 €", decimal=",")[0] == 33995
    with pytest.raises(t.TransformError, match="decimal comma"):
        run(t.money, "33.995,00")
    value, row = run(t.money, "24988.50")
    assert value == 24989 and row.warnings == ["has cents; published as 24989"]
    with pytest.raises(t.TransformError, match="is not an amount"):
        run(t.money, "$3x,995")


@pytest.mark.parametrize(
    ("cell", "reading", "unit"),
    [
        ("28,411 mi", 28411, "mi"),
        ("45 000 km", 45000, "km"),
        ("52,777 miles", 52777, "mi"),
        ("12", 12, None),
        ("12.000 KM", 12000, "km"),
        ("1.5", 2, None),
    ],
)
def test_mileage(cell, reading, unit):
    value, row = run(t.mileage, cell)
    assert value == reading
    assert row.sides.get("mileage_unit") == unit
    assert run(t.mileage, "28,411", unit="km")[1].sides == {"mileage_unit": "km"}


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("Yes", True),
        ("N", False),
        ("1", True),
        ("false", False),
        ("Certified", True),
        ("CPO", True),
        ("", None),
    ],
)
def test_boolean(cell, expected):
    assert run(t.boolean, cell)[0] is expected


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("New", "new"),
        ("USED", "used"),
        ("u", "used"),
        ("Pre-Owned", "used"),
        ("CPO", "cpo"),
        ("Certified Pre-Owned", "cpo"),
        ("n", "new"),
    ],
)
def test_condition_vocabularies(cell, expected):
    assert run(t.condition, cell)[0] == expected


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("01/15/2025", "2025-01-15"),
        ("1/5/25", "2025-01-05"),
        ("2025-01-15", "2025-01-15"),
        ("2025-01-15T08:30:00Z", "2025-01-15"),
    ],
)
def test_dates(cell, expected):
    assert run(t.date_value, cell)[0] == expected
    assert run(t.date_value, "15/01/2025", order="dmy")[0] == "2025-01-15"
    with pytest.raises(t.TransformError):
        run(t.date_value, "2025-02-30")


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("2025-01-15T08:30:00Z", "2025-01-15T08:30:00Z"),
        ("2025-01-15T08:30:00", "2025-01-15T08:30:00Z"),
        ("2025-01-15 08:30:00-05:00", "2025-01-15T08:30:00-05:00"),
        ("01/15/2025 2:05 PM", "2025-01-15T14:05:00Z"),
        ("2025-01-15", "2025-01-15T00:00:00Z"),
    ],
)
def test_datetimes(cell, expected):
    assert run(t.datetime_value, cell)[0] == expected


def test_photo_lists():
    value, row = run(
        t.photos,
        "http://a.example/1.jpg | https://a.example/2.jpg,https://a.example/2.jpg //a.example/3.jpg photo4.jpg",
    )
    assert value == ["https://a.example/1.jpg", "https://a.example/2.jpg", "https://a.example/3.jpg"]
    assert any("photo4.jpg" in w and "left out" in w for w in row.warnings)
    assert any("1 photo URL(s) over http://" in w for w in row.warnings)
    assert run(t.photos, "http://a.example/1.jpg", insecure="drop")[0] is None


def test_vin_check_digit():
    assert expected_check_digit("1M8GDM9AXKP042788") == "X"  # the 49 CFR 565 worked example
    assert expected_check_digit("1HGCM82633A004352") == "3"
    assert run(t.vin, " 1hgcm82633a004352 ")[0] == "1HGCM82633A004352"
    with pytest.raises(t.TransformError, match="is not a VIN"):
        run(t.vin, "1HGCM82633A00435O")
    assert with_check_digit("1HGCM82603A004352") == "1HGCM82633A004352"


def _checked(vin: str, *, strict: bool = False, **fields):
    listing = {"vin": vin, "status": "available", "updated_at": "2025-01-01T00:00:00Z", **fields}
    warnings: list = []
    problems = ListingChecker(strict=strict).check(listing, 1, warnings=warnings)
    return problems, warnings


@pytest.mark.parametrize(
    "vin",
    ["1HGCM82603A004352", "KM8JBCAE3SH923119", "WVWZZZ1JZXW000001", "JM3KFBDM1N0512345", "ZFF79ALA4G0211111"],
)
def test_every_17_character_vin_has_its_check_digit_verified(vin):
    """49 CFR 565 binds every vehicle sold in North America, whatever the maker's country."""
    expected = expected_check_digit(vin)
    assert expected != vin[8]
    problems, warnings = _checked(vin)
    assert problems == [] and warnings == [("/vin", f"has a wrong check digit (expected {expected})")]
    problems, warnings = _checked(vin, strict=True)
    assert problems == [("/vin", f"has a wrong check digit (expected {expected})")] and warnings == []
    assert _checked(with_check_digit(vin)) == ([], [])


def test_a_pre_1981_identifier_is_left_alone():
    assert _checked("WVWZZZ1JZXW000001", year=1979, strict=True) == ([], [])
    assert _checked("WVWZZZ1JZXW000001", year=1981)[1] != []


def test_rooftops_by_name_or_store_code():
    row = Row(rooftops={"demo sf": "Demo SF", "sf01": "Demo SF"})
    assert t.rooftop("DEMO SF", t.Options(), row) == "Demo SF"
    assert t.rooftop("SF01", t.Options(), row) == "Demo SF"
    assert t.fulfillment("in_store:SF01:OAK", t.Options(), row) == "Demo SF"
    assert t.rooftop("Elsewhere", t.Options(), row) is None and "not a configured rooftop" in row.warnings[0]


# -- files ------------------------------------------------------------------------------------


def test_encodings_and_archives():
    assert decode("Café".encode("cp1252")) == ("Café", "cp1252")
    assert decode(b"\xef\xbb\xbfCaf\xc3\xa9") == ("Café", "utf-8-sig")
    assert decode("Café".encode("utf-16")) == ("Café", "utf-16")
    assert decode("Café".encode("latin-1"), "latin-1") == ("Café", "latin-1")
    text = open_text(gzip.compress(b"a,b\n"), "x.csv.gz")
    assert (text.read(), text.name, text.archive, text.size) == ("a,b\n", "x.csv", "gzip", 4)
    with pytest.raises(SourceError, match="gzip"):
        open_text(b"\x1f\x8bnot gzip", "x.gz")


@pytest.mark.parametrize(
    ("header", "delimiter"),
    [
        ("VIN,Make", ","),
        ("VIN;Make;Model", ";"),
        ("vin\tmake", "\t"),
        ("VIN|Make", "|"),
        ('"A;B",C', ","),
    ],
)
def test_delimiter_sniffing(header, delimiter):
    assert sniff_delimiter(header + "\n1,2\n") == delimiter


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (["vehicle_id", "vin", "price", "status", "updated_at"], "aap"),
        (["id", "vin", "store_code", "price", "make", "model", "year"], "google-vehicle"),
        (["vehicle_id", "make", "model", "year", "mileage.value", "state_of_vehicle"], "meta-vehicle"),
        (["VIN", "Stock #", "Year", "Make", "Model", "Date In Stock", "Internet Price"], "dealer-csv"),
        (["Serial", "Colour", "Wheels"], None),
    ],
)
def test_detection_from_headers(header, expected):
    assert detect("delimited", header) == expected


def test_xml_with_a_dtd_is_refused():
    doc = (
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa">]><listings><listing><vin>&a;</vin></listing></listings>'
    )
    with pytest.raises(FeedError, match="DOCTYPE"):
        read_feed_bytes(doc, "x.xml", ReadOptions())


def test_unknown_format_says_how_to_fix_it():
    with pytest.raises(FeedError, match="--format"):
        read_feed_bytes(b"Serial,Colour\n1,red\n", "x.csv", ReadOptions())


def test_mapping_files_report_every_problem():
    with pytest.raises(MappingError) as info:
        parse_format(
            {
                "extends": "nope",
                "unknown": "maybe",
                "columns": {"A": "distance_mi", "B": 3},
                "defaults": {"certified": True},
            },
            "m.toml",
        )
    text = "\n".join(info.value.problems)
    for path in ("extends", "unknown", "columns.A.field", "columns.B", "defaults.certified"):
        assert path in text


def test_mapping_extends_a_builtin_format_and_ranks_first():
    fmt = parse_format(
        {
            "extends": "dealer-csv",
            "columns": {"Prix": {"field": "price", "decimal": ","}},
            "rooftops": {"SF01": "Demo SF"},
        },
        "m.toml",
    )
    (target,) = fmt.targets("prix") or ()
    assert target.options.decimal == "," and target.rank == 0
    (stock,) = fmt.targets("Stock #") or ()
    assert stock.field == "stock" and stock.rank > target.rank  # the base format's columns rank after
    assert builtin_format("dealer-csv").targets("STOCK_NUMBER")[0].field == "stock"
    assert fmt.rooftops == {"sf01": "Demo SF"}


def test_the_built_in_formats_belong_to_the_registry_that_parsed_them():
    """No module-level cache: each owner's registry parses once and shares nothing with another."""
    mine, yours = Formats(), Formats()
    assert mine.get("google-vehicle") is mine.get("google-vehicle")
    assert mine.get("google-vehicle") is not yours.get("google-vehicle")
    assert mine.get("google-vehicle") == builtin_format("google-vehicle")
    extended = parse_format({"extends": "meta-vehicle"}, "m.toml", formats=mine)
    assert extended.columns == mine.get("meta-vehicle").columns
    with pytest.raises(KeyError):
        mine.get("no-such-format")
