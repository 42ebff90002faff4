"""Rooftop phone numbers, normalised to E.164 when the configuration is read.

``DealerInformation`` phone values are free strings (seed 004,
``DealerInformation.rooftops[].phones[].value``), but the agent publishes them
and a lead's ``data.dealer.phone`` must be E.164 (seed 004,
``LeadSubmitResponse.data.dealer.phone``, pattern ``^\\+[1-9]\\d{1,14}$``). So a
number written for people (``(916) 555-0200``) is rewritten once, at load time,
in the rooftop's country (its ``address.country`` when that is a two-letter
code, else the United States), and a value that is not a valid number is a
configuration problem. Parsing and validity come from ``phonenumbers``, the
Python port of Google's libphonenumber (docs/configuration.md).
"""

from __future__ import annotations

import re
from typing import Any

import phonenumbers

from aap.config.table import Problems, join

DEFAULT_REGION = "US"
_REGION = re.compile(r"^[A-Za-z]{2}$")


def region_of(rooftop: dict[str, Any]) -> str:
    """The region a national-format number of this rooftop is read in."""
    address = rooftop.get("address")
    country = address.get("country") if isinstance(address, dict) else None
    return country.upper() if isinstance(country, str) and _REGION.match(country) else DEFAULT_REGION


def _valid(value: str, region: str) -> phonenumbers.PhoneNumber | None:
    """``value`` read as a phone number (``region`` for one without a country code), if valid."""
    try:
        number = phonenumbers.parse(value, region)
    except phonenumbers.NumberParseException:
        return None
    return number if phonenumbers.is_valid_number(number) else None


def to_e164(value: str, region: str) -> str | None:
    """``value`` as an E.164 string, or None when it is not a valid phone number."""
    number = _valid(value, region)
    return None if number is None else phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def normalise_phones(rooftop: dict[str, Any], path: str, problems: Problems) -> None:
    """Rewrite ``rooftop["phones"][i]["value"]`` to E.164 in place; report what cannot be."""
    phones = rooftop.get("phones")
    if not isinstance(phones, list):
        return
    region = region_of(rooftop)
    for i, phone in enumerate(phones):
        value = phone.get("value") if isinstance(phone, dict) else None
        if not isinstance(value, str):
            continue  # the schema check reports it
        e164 = to_e164(value, region)
        if e164 is None:
            problems.add(
                join(join(join(path, "phones"), i), "value"),
                f"{value!r} is not a valid phone number in region {region}; write it in E.164 form, e.g. +14155550100",
            )
        else:
            phone["value"] = e164


def display(value: str, region: str = DEFAULT_REGION) -> str:
    """A phone number as people of ``region`` write it: national format for a number of that
    country (``(916) 555-0200``), international otherwise (``+44 20 7946 0018``); a value
    that is not a valid number is given back as it is."""
    number = _valid(value, region)
    if number is None:
        return value
    local = phonenumbers.region_code_for_number(number) == region.upper()
    style = phonenumbers.PhoneNumberFormat.NATIONAL if local else phonenumbers.PhoneNumberFormat.INTERNATIONAL
    return str(phonenumbers.format_number(number, style))
