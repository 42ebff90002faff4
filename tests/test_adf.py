"""ADF/XML 1.0 output: well-formed, DTD element order, escaping, consented channels only."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aap.leads import adf
from adf_dtd import adf_problems, empty_elements
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
    assert [(n.get("part"), n.text) for n in contact.findall("name")] == [("first", FIRST), ("last", LAST)]
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
    names = [n.text for n in root.findall("prospect/customer/contact/name")]
    assert names == [adf.clean(nasty).strip()] * 2
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
    assert root.findtext("prospect/vehicle/model") == (normal if normal.strip() else "")  # blank: not given
    assert root.findtext("prospect/vendor/vendorname") == normal
    assert f"Message: {normal}" in root.findtext("prospect/customer/comments")


# -- every kind of lead: ADF 1.0 valid, the right interest, names in parts, https links only ---------

#: What the ADF 1.0 DTD requires even when nothing is known: a vehicle's year, make and model, an
#: address's first street line.
REQUIRED_EVEN_EMPTY = ("year", "make", "model", "street")


def service_visit(vehicle=None, **changes):
    body = request(appointment={"appointment_type": "service", "appointment_at": "2026-03-03T16:00:00Z"}, **changes)
    del body["trade_in"]
    if vehicle is None:
        del body["vehicle_of_interest"]
    else:
        body["vehicle_of_interest"] = vehicle
    return body


SERVICE_APPOINTMENT = dict(APPOINTMENT, appointment_type="service", status="requested", confirmed_at=None)


def test_a_service_visit_without_a_vehicle_is_valid_adf_with_first_and_last_names_and_no_purchase():
    text, root = render(service_visit(), appointment=SERVICE_APPOINTMENT)
    assert adf_problems(text) == []
    (vehicle,) = root.findall("prospect/vehicle")
    assert vehicle.get("interest") is None  # ADF 1.0 has no interest for a service visit
    assert vehicle.find("price") is None
    assert vehicle.findtext("comments") == "No vehicle given: service visit"
    assert empty_elements(text, REQUIRED_EVEN_EMPTY) == []
    names = root.findall("prospect/customer/contact/name")
    assert [(n.get("part"), n.text) for n in names] == [("first", FIRST), ("last", LAST)]
    assert "service visit" in root.findtext("prospect/customer/comments")


def test_a_service_visit_for_the_customers_own_car_sends_it_without_a_purchase_interest_or_price():
    own_car = {"year": 2019, "make": "Honda", "model": "Civic", "vin": "2HGFC2F59KH123456", "mileage": 41000}
    text, root = render(service_visit(own_car, vehicle_of_interest=None), appointment=SERVICE_APPOINTMENT)
    assert adf_problems(text) == []
    assert empty_elements(text) == []  # everything known: not one empty element
    (vehicle,) = root.findall("prospect/vehicle")
    assert vehicle.get("interest") is None and vehicle.find("price") is None
    assert [vehicle.findtext(t) for t in ("year", "make", "model", "vin")] == ["2019", "Honda", "Civic", own_car["vin"]]
    assert vehicle.findtext("comments").startswith("Vehicle to be serviced (service appointment)")


@pytest.mark.parametrize(
    ("appointment_type", "interest"),
    [(None, "buy"), ("sales", "buy"), ("trade_in", "buy"), ("test_drive", "test-drive"), ("service", None)],
)
def test_the_vehicle_of_interest_says_what_the_buyer_wants_of_it(appointment_type, interest):
    body = request(appointment=None if appointment_type is None else {"appointment_type": appointment_type})
    if appointment_type is None:
        del body["appointment"]
    text, root = render(body, appointment=None)
    vehicles = root.findall("prospect/vehicle")
    assert [v.get("interest") for v in vehicles] == [interest, "trade-in"]
    assert adf_problems(text) == []


@pytest.mark.parametrize(
    ("first", "last", "names"),
    [
        ("Ada", "Lovelace", [("first", "Ada"), ("last", "Lovelace")]),
        (" Ada ", "Lovelace", [("first", "Ada"), ("last", "Lovelace")]),
        ("Ada", "  ", [("full", "Ada")]),
        ("", "Lovelace", [("full", "Lovelace")]),
    ],
)
def test_names_go_out_in_first_and_last_parts_when_the_lead_has_both(first, last, names):
    body = request()
    body["customer"] = dict(body["customer"], first_name=first, last_name=last)
    text, root = render(body)
    assert [(n.get("part"), n.text) for n in root.findall("prospect/customer/contact/name")] == names
    assert adf_problems(text) == []


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(document.cookie)",
        "JaVaScRiPt:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "http://buyer.example",
        "ftp://buyer.example/x",
        "https://",
        "https:///path-only",
        " https://buyer.example",
        "https://buyer.example/a b",
        "https://buyer.example/\x07",
    ],
)
def test_only_https_urls_reach_the_adf(url):
    body = request(source_agent={"name": "example-buyer", "url": url})
    text, root = render(body, rooftop=dict(SF_ROOFTOP, website=url))
    assert root.find("prospect/provider/url") is None and root.find("prospect/vendor/url") is None
    assert "javascript" not in text.lower() and adf_problems(text) == []


def test_https_urls_are_kept_as_given():
    body = request(source_agent={"name": "example-buyer", "url": "HTTPS://Buyer.example/agents?id=7"})
    _, root = render(body, rooftop=dict(SF_ROOFTOP, website="https://sf.baymotors.example/"))
    assert root.findtext("prospect/provider/url") == "HTTPS://Buyer.example/agents?id=7"
    assert root.findtext("prospect/vendor/url") == "https://sf.baymotors.example/"


def test_an_address_without_a_street_keeps_the_one_street_adf_requires_and_a_second_line_moves_up():
    body = request()
    body["customer"] = dict(body["customer"], address={"city": "Oakland", "zip": "94607"})
    text, root = render(body)
    assert [(s.get("line"), s.text) for s in root.findall("prospect/customer/contact/address/street")] == [("1", None)]
    assert adf_problems(text) == []
    body["customer"]["address"] = {"address_line_2": "Suite 200", "city": "Oakland"}
    text, root = render(body)
    assert [(s.get("line"), s.text) for s in root.findall("prospect/customer/contact/address/street")] == [
        ("1", "Suite 200")
    ]


_text = st.text(st.characters(codec="utf-8"), min_size=0, max_size=12) | st.sampled_from([" ", "\x00", "\t\x07"])
_vehicles = st.fixed_dictionaries(
    {},
    optional={
        "year": st.integers(1900, 2100),
        "make": _text,
        "model": _text,
        "vin": _text,
        "trim": _text,
        "body": _text,
        "transmission": _text,
        "mileage": st.integers(0, 999_999),
        "mileage_unit": st.sampled_from(["mi", "km"]),
        "price": st.integers(0, 10**7),
        "exterior_color": _text,
        "interior_color": _text,
        "condition": st.sampled_from(["new", "used", "cpo"]),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    appointment_type=st.sampled_from([None, "sales", "service", "test_drive", "trade_in"]),
    vehicle=st.none() | _vehicles,
    trade=st.none() | _vehicles.map(lambda v: {k: x for k, x in v.items() if k != "condition"}),
    channels=st.sampled_from([["email"], ["sms"], ["phone"], ["email", "phone"]]),
    address=st.none()
    | st.fixed_dictionaries({}, optional={k: _text for k in ("address_line_1", "address_line_2", "city", "zip")}),
    first=_text,
    last=_text,
)
def test_every_kind_of_lead_is_a_valid_adf_1_0_document(
    appointment_type, vehicle, trade, channels, address, first, last
):
    body = request(consent=dict(request()["consent"], allowed_channels=channels))
    body["customer"] = dict(body["customer"], first_name=first, last_name=last, preferred_contact="any")
    for key, value in (("vehicle_of_interest", vehicle), ("trade_in", trade), ("customer.address", address)):
        if key == "customer.address":
            body["customer"].pop("address")
            if value is not None:
                body["customer"]["address"] = value
        elif value is None:
            del body[key]
        else:
            body[key] = value
    body["appointment"] = {"appointment_type": appointment_type} if appointment_type else None
    if appointment_type is None:
        del body["appointment"]
    text, root = render(body, appointment=None)
    assert adf_problems(text) == []
    allowed = (*REQUIRED_EVEN_EMPTY, "name")
    assert empty_elements(text, allowed) == []
    interests = [v.get("interest") for v in root.findall("prospect/vehicle")]
    assert "buy" not in interests or appointment_type != "service"
