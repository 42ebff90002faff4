"""ADF/XML 1.0 output: well-formed, DTD element order, escaping, consented channels only."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aap.leads import adf
from lead_support import CONSENT_TEXT, EMAIL, FIRST, LAST, MESSAGE, PHONE, SF_ROOFTOP

PROSPECT_ORDER = ["id", "requestdate", "vehicle", "customer", "vendor", "provider"]
VEHICLE_ORDER = [
    "id",
    "year",
    "make",
    "model",
    "vin",
    "stock",
    "trim",
    "doors",
    "bodystyle",
    "transmission",
    "odometer",
    "condition",
    "colorcombination",
    "imagetag",
    "price",
    "pricecomments",
    "option",
    "finance",
    "comments",
]


def follows(children: list[str], order: list[str]) -> bool:
    """Every child is known and they appear in DTD order (repeats allowed)."""
    positions = [order.index(tag) for tag in children]
    return positions == sorted(positions)


def request(**changes):
    body = {
        "type": "lead.submit.request",
        "customer": {
            "first_name": FIRST,
            "last_name": LAST,
            "email": EMAIL,
            "phone": PHONE,
            "preferred_contact": "sms",
            "address": {"address_line_1": "1 Main St", "city": "Oakland", "state": "CA", "zip": "94607"},
        },
        "consent": {
            "granted_at": "2026-03-02T16:55:00Z",
            "allowed_channels": ["email", "sms"],
            "consent_text": CONSENT_TEXT,
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "example-buyer", "url": "https://buyer.example"},
        "idempotency_key": "k-1",
        "message": MESSAGE,
        "submitted_at": "2026-03-02T16:56:00Z",
        "vehicle_of_interest": {
            "year": 2023,
            "make": "Toyota",
            "model": "RAV4",
            "condition": "cpo",
            "transmission": "8-speed automatic",
            "mileage": 20500,
            "mileage_unit": "km",
            "price": 31000,
            "currency": "CAD",
            "vin": "2T3P1RFV8PW123456",
            "displacement_cc": 2487,
            "other_attributes": {"awd": True, "seats": 5},
        },
        "trade_in": {"year": 2015, "make": "Honda", "model": "Civic", "condition": "fair", "mileage": 98000},
        "appointment": {
            "appointment_type": "test_drive",
            "appointment_at": "2026-03-03T19:00:00Z",
            "duration_minutes": 45,
            "notes": "Bring the <dog> & the kids",
        },
    }
    body.update(changes)
    return body


APPOINTMENT = {
    "appointment_id": "appt_1",
    "status": "confirmed",
    "confirmed_at": "2026-03-03T11:00:00-08:00",
    "appointment_type": "test_drive",
    "rooftop": "Bay Motors San Francisco",
    "timezone": "America/Los_Angeles",
    "requested_at": "2026-03-03T19:00:00Z",
    "reason": "",
}


def render(req=None, **view):
    values = dict(
        lead_id="lead_abc",
        source="AAP lead-test",
        received_at="2026-03-02T17:00:00Z",
        request=req or request(),
        listing=None,
        appointment=APPOINTMENT,
        vendor_name="Bay Motors San Francisco",
        rooftop=SF_ROOFTOP,
        dealer_id="bay-motors",
    )
    values.update(view)
    text = adf.render(adf.LeadView(**values))
    return text, ET.fromstring(text.encode("utf-8"))


def test_document_has_the_declarations_and_the_prospect_in_dtd_order():
    text, root = render()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<?adf version="1.0"?>\n<adf>')
    assert root.tag == "adf"
    (prospect,) = root
    assert prospect.tag == "prospect" and prospect.get("status") == "new"
    tags = [child.tag for child in prospect]
    assert follows(tags, PROSPECT_ORDER)
    assert tags.count("vehicle") == 2
    lead_id = prospect.find("id")
    assert lead_id.text == "lead_abc" and lead_id.get("source") == "AAP lead-test"
    assert prospect.findtext("requestdate") == "2026-03-02T16:56:00Z"


def test_vehicle_of_interest_mapping():
    _, root = render()
    vehicle = root.find("prospect/vehicle[@interest='test-drive']")
    assert vehicle is not None and vehicle.get("status") == "used"  # cpo -> used + note
    assert follows([c.tag for c in vehicle], VEHICLE_ORDER)
    assert [vehicle.findtext(t) for t in ("year", "make", "model", "vin")] == [
        "2023",
        "Toyota",
        "RAV4",
        "2T3P1RFV8PW123456",
    ]
    assert vehicle.findtext("transmission") == "A"
    odometer = vehicle.find("odometer")
    assert odometer.text == "20500" and odometer.get("units") == "km"
    price = vehicle.find("price")
    assert price.text == "31000" and price.get("type") == "quote" and price.get("currency") == "CAD"
    comments = vehicle.findtext("comments")
    assert "certified pre-owned" in comments and "Displacement: 2487cc" in comments
    assert "awd: yes" in comments and "seats: 5" in comments
    assert len(vehicle.findall("comments")) == 1


def test_trade_in_is_a_second_vehicle_with_its_condition():
    _, root = render()
    trade = root.find("prospect/vehicle[@interest='trade-in']")
    assert follows([c.tag for c in trade], VEHICLE_ORDER)
    assert trade.findtext("condition") == "fair"
    assert trade.find("odometer").get("units") == "mi"
    assert trade.find("price") is None  # no valuation, ever


def test_customer_contact_is_limited_to_consented_channels():
    _, root = render()
    contact = root.find("prospect/customer/contact")
    assert contact.find("name").text == f"{FIRST} {LAST}" and contact.find("name").get("part") == "full"
    assert contact.findtext("email") == EMAIL
    phone = contact.find("phone")
    assert phone.text == PHONE and phone.get("type") == "cellphone" and phone.get("preferredcontact") == "1"
    assert contact.find("address/street").get("line") == "1"
    assert contact.findtext("address/regioncode") == "CA" and contact.findtext("address/country") == "US"
    comments = root.findtext("prospect/customer/comments")
    assert "Contact consent: email, sms" in comments and "text messages" in comments

    only_email = request()
    only_email["consent"] = dict(only_email["consent"], allowed_channels=["email"])
    only_email["customer"] = dict(only_email["customer"], preferred_contact="email")
    _, root = render(only_email)
    contact = root.find("prospect/customer/contact")
    assert contact.find("phone") is None  # given, but not consented: never delivered
    assert contact.find("email").get("preferredcontact") == "1"


def test_message_and_appointment_go_to_customer_comments_in_rooftop_local_time():
    _, root = render()
    comments = root.findtext("prospect/customer/comments")
    assert f"Message: {MESSAGE}" in comments  # exact text back: escaped, not mangled
    assert "CONFIRMED for Tue 3 Mar 2026, 11:00 (America/Los_Angeles) [2026-03-03T11:00:00-08:00]" in comments
    assert "duration 45 minutes" in comments
    assert "Appointment notes: Bring the <dog> & the kids" in comments


def test_vendor_is_the_rooftop_and_provider_the_buyer_agent():
    _, root = render()
    vendor = root.find("prospect/vendor")
    assert [c.tag for c in vendor] == ["id", "vendorname", "url", "contact"]
    assert vendor.findtext("vendorname") == "Bay Motors San Francisco"
    assert vendor.findtext("contact/phone") == "+14155550199"
    provider = root.find("prospect/provider")
    assert provider.findtext("name") == "example-buyer"
    assert provider.findtext("url") == "https://buyer.example"


@pytest.mark.parametrize(
    "nasty",
    [
        'Ana & <Bob> "O\'Neil"',
        "]]> <![CDATA[ x ]]>",
        "tab\tnew\nline",
        "bell\x07null\x00esc\x1b",
        "emoji 🚗 and \ufffe bad",
        "</comments></customer><vendor>evil</vendor>",
    ],
)
def test_special_characters_are_escaped_and_never_break_the_document(nasty):
    req = request(message=nasty)
    req["customer"] = dict(req["customer"], first_name=nasty, last_name=nasty)
    req["source_agent"] = {"name": nasty}
    text, root = render(req, vendor_name=nasty)
    prospect = root.find("prospect")
    assert [c.tag for c in prospect].count("vendor") == 1
    expected = adf.clean(nasty)
    assert root.findtext("prospect/customer/contact/name") == adf.clean(f"{nasty.strip()} {nasty.strip()}")
    assert f"Message: {expected}" in root.findtext("prospect/customer/comments")
    assert root.findtext("prospect/provider/name") == expected
    assert "\x00" not in text and "\x07" not in text


def test_partial_vehicle_fills_gaps_from_the_linked_listing():
    req = request(vehicle_of_interest={"vin": "1HGCV1F30NA123456"}, appointment=None, trade_in=None)
    listing = {
        "vehicle_id": "veh_1",
        "vin": "1HGCV1F30NA123456",
        "year": 2024,
        "make": "Honda",
        "model": "CR-V",
        "stock": "H12345",
        "price": 35500,
        "condition": "new",
        "mileage": 12,
    }
    _, root = render(req, listing=listing, appointment=None)
    vehicle = root.find("prospect/vehicle")
    assert vehicle.get("interest") == "buy" and vehicle.get("status") == "new"
    assert vehicle.find("id").text == "veh_1"
    assert [vehicle.findtext(t) for t in ("year", "make", "model", "stock")] == ["2024", "Honda", "CR-V", "H12345"]
    assert vehicle.find("price").get("type") == "asking"


def test_partial_vehicle_without_listing_keeps_what_was_given():
    req = request(vehicle_of_interest={"model": "Bronco"}, appointment=None, trade_in=None)
    _, root = render(req, appointment=None)
    vehicle = root.find("prospect/vehicle")
    assert vehicle.findtext("model") == "Bronco" and vehicle.findtext("year") == ""
    assert "year, make not given" in vehicle.findtext("comments")


def test_customer_only_lead_still_has_one_placeholder_vehicle():
    req = request(vehicle_of_interest=None, trade_in=None, appointment=None)
    del req["vehicle_of_interest"], req["trade_in"], req["appointment"]
    _, root = render(req, appointment=None)
    (vehicle,) = root.findall("prospect/vehicle")
    assert [c.tag for c in vehicle] == ["year", "make", "model", "comments"]
    assert root.findtext("prospect/requestdate") == "2026-03-02T16:56:00Z"


def test_resend_is_flagged():
    _, root = render(resend=True)
    assert root.find("prospect").get("status") == "resend"


@pytest.mark.parametrize(
    ("given", "folded"),
    [
        ("automatic", "A"),
        ("CVT", "A"),
        ("dct", "A"),
        ("8-speed automatic", "A"),
        ("manual", "M"),
        ("6-speed Manual", "M"),
        ("automated manual", "A"),
        ("sequential", None),
    ],
)
def test_transmission_folds_to_a_or_m(given, folded):
    assert adf.fold_transmission(given) == folded


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=1, max_size=60))
def test_any_text_round_trips_through_the_document(text):
    req = request(message=text)
    req["customer"] = dict(req["customer"], first_name=text)
    req["vehicle_of_interest"] = dict(req["vehicle_of_interest"], model=text)
    rendered = adf.render(
        adf.LeadView(
            lead_id="lead_h",
            source="AAP t",
            received_at="2026-03-02T17:00:00Z",
            request=req,
            listing=None,
            appointment=None,
            vendor_name=text,
            rooftop=None,
        )
    )
    root = ET.fromstring(rendered.encode("utf-8"))
    cleaned = adf.clean(text)
    # XML parsers normalise line ends in text content; nothing else may change.
    normal = cleaned.replace("\r\n", "\n").replace("\r", "\n")
    assert root.findtext("prospect/vehicle/model") == normal
    assert root.findtext("prospect/vendor/vendorname") == normal
    assert f"Message: {normal}" in root.findtext("prospect/customer/comments")
