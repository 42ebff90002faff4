"""The ADF/XML 1.0 document a dealer CRM receives for one accepted lead (docs/leads.md, §8).

Built with ElementTree, so every text and attribute value is escaped; the
characters XML 1.0 cannot carry at all (most C0 controls, lone surrogates) are
dropped first, so no customer input can break the document. Element order
follows the ADF DTD: prospect ``id*, requestdate, vehicle+, customer, vendor,
provider?``; vehicle ``id*, year, make, model, vin?, stock?, trim?, doors?,
bodystyle?, transmission?, odometer?, condition?, colorcombination*, imagetag?,
price*, pricecomments?, option*, finance?, comments?``.

Contact data is limited to the channels the customer consented to; the
consented channels themselves go into the customer comments so staff know how
they may follow up. What each kind of lead produces (the vehicle ``interest``,
the placeholder vehicle, name parts, URLs) is tabled in docs/leads.md, "The ADF
document"; no element is sent empty unless the DTD requires it (a vehicle's
year, make and model; an address's first street line; a contact's name).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aap.leads.appointments import TYPE_LABEL, human_time

MEDIA_TYPE = "application/x-adf+xml"
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_VEHICLE_FIELDS = (
    "year",
    "make",
    "model",
    "vin",
    "stock",
    "trim",
    "body",
    "transmission",
    "exterior_color",
    "interior_color",
    "condition",
    "displacement_cc",
    "other_attributes",
    "vehicle_type",
)


#: The vehicle ``interest`` (ADF 1.0: buy | lease | sell | trade-in | test-drive) of the vehicle of
#: interest, by ``Appointment.appointment_type`` (seed 004). A vehicle brought in for service is
#: none of these: it goes out without the attribute (docs/leads.md, "The ADF document").
INTEREST = {None: "buy", "sales": "buy", "trade_in": "buy", "test_drive": "test-drive", "service": None}


def clean(value: Any) -> str:
    """Text safe for XML 1.0 (ElementTree escapes markup; this removes what cannot be escaped)."""
    return _ILLEGAL_XML.sub("", str(value))


def https_url(value: Any) -> str | None:
    """``value`` when it is an absolute ``https`` URL with a host, else None.

    A URL in the ADF is followed by CRM users: a buyer agent's ``source_agent.url`` (any
    ``format: uri`` passes the schema, ``javascript:`` included) or a misconfigured website must
    not reach them as a link.
    """
    if not isinstance(value, str) or value != value.strip() or clean(value) != value or " " in value:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    return value if parts.scheme.lower() == "https" and parts.hostname else None


@dataclass(frozen=True)
class LeadView:
    """What the document is rendered from: the stored lead plus the seller's profile."""

    lead_id: str
    source: str  # id source label, e.g. "AAP demo-auto-group"
    received_at: str
    request: dict[str, Any]
    listing: dict[str, Any] | None  # the linked listing, when there is one
    appointment: dict[str, Any] | None  # the stored appointment outcome
    vendor_name: str
    rooftop: dict[str, Any] | None
    dealer_id: str | None = None
    resend: bool = False


def _sub(parent: ET.Element, tag: str, text: Any = None, **attrs: Any) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: clean(v) for k, v in attrs.items() if v is not None})
    if text is not None:
        element.text = clean(text)
    return element


def _given(value: Any) -> bool:
    """A value worth an element: something is left once XML's impossible characters are gone."""
    return value is not None and not isinstance(value, (dict, list)) and bool(clean(value).strip())


def fold_transmission(value: Any) -> str | None:
    """ADF knows ``A`` and ``M``; anything unrecognised is left to the comments."""
    text = str(value).strip().lower()
    if "manual" in text and "automated" not in text:
        return "M"
    if any(word in text for word in ("auto", "cvt", "dct", "dual-clutch", "semi", "ecvt")):
        return "A"
    return None


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    return str(value)


def _vehicle(
    parent: ET.Element,
    given: dict[str, Any],
    listing: dict[str, Any] | None,
    interest: str | None,
    notes: list[str],
    *,
    trade_in: bool = False,
    service: bool = False,
    vehicle_id: str | None = None,
    source: str = "",
) -> None:
    """One ``<vehicle>``: the buyer's description, gaps filled from the linked listing.

    ``service``: the customer's own vehicle for a service visit: no ``interest`` (the caller
    passes None), no price (nothing is for sale), and the comments say what it is.
    """
    merged = dict(given)
    if listing:
        for name in _VEHICLE_FIELDS:
            if not _given(merged.get(name)) and name in listing:
                merged[name] = listing[name]
    status = None
    condition = merged.get("condition")
    if trade_in:
        status = "used"
    elif condition == "new":
        status = "new"
    elif condition in ("used", "cpo"):
        status = "used"
    vehicle = _sub(parent, "vehicle", interest=interest, status=status)
    if vehicle_id:
        _sub(vehicle, "id", vehicle_id, sequence="1", source=f"{source} vehicle_id".strip())
    missing = [name for name in ("year", "make", "model") if not _given(merged.get(name))]
    for name in ("year", "make", "model"):  # required by ADF: empty when not known
        _sub(vehicle, name, merged[name] if _given(merged.get(name)) else "")
    for name in ("vin", "stock", "trim"):
        if _given(merged.get(name)):
            _sub(vehicle, name, merged[name])
    if _given(merged.get("body")):
        _sub(vehicle, "bodystyle", merged["body"])
    comments = (["Vehicle to be serviced (service appointment)"] if service else []) + list(notes)
    if _given(merged.get("transmission")):
        folded = fold_transmission(merged["transmission"])
        if folded:
            _sub(vehicle, "transmission", folded)
        else:
            comments.append(f"Transmission: {merged['transmission']}")
    # Odometer and price each come from one source, with that source's unit/currency.
    mileage_source = given if "mileage" in given else (listing or {})
    if "mileage" in mileage_source:
        _sub(
            vehicle,
            "odometer",
            mileage_source["mileage"],
            status="unknown",
            units=mileage_source.get("mileage_unit", "mi"),
        )
    if trade_in and condition in ("excellent", "good", "fair", "poor"):
        _sub(vehicle, "condition", condition)
    if _given(merged.get("exterior_color")) or _given(merged.get("interior_color")):
        colors = _sub(vehicle, "colorcombination")
        if _given(merged.get("interior_color")):
            _sub(colors, "interiorcolor", merged["interior_color"])
        if _given(merged.get("exterior_color")):
            _sub(colors, "exteriorcolor", merged["exterior_color"])
        _sub(colors, "preference", "1")
    if not trade_in and not service:
        if "price" in given:
            _sub(vehicle, "price", given["price"], type="quote", currency=given.get("currency", "USD"))
        elif listing and "price" in listing:
            _sub(vehicle, "price", listing["price"], type="asking", currency=listing.get("currency", "USD"))
    if condition == "cpo" and not trade_in:
        comments.append("certified pre-owned")
    if merged.get("vehicle_type") not in (None, "car"):
        comments.append(f"Vehicle type: {merged['vehicle_type']}")
    if merged.get("displacement_cc") is not None:
        comments.append(f"Displacement: {merged['displacement_cc']}cc")
    attributes = merged.get("other_attributes")
    if isinstance(attributes, dict):
        comments.extend(f"{key}: {_scalar(value)}" for key, value in attributes.items())
    if missing and given:
        comments.append("Partial description as given by the buyer (" + ", ".join(missing) + " not given)")
    if comments:
        _sub(vehicle, "comments", "; ".join(comments))


def _placeholder(parent: ET.Element, appointment_type: str | None) -> None:
    """A lead without a vehicle still needs one (``vehicle+``), with the year, make and model
    ADF requires in every vehicle left empty; its comments say why. A service visit's says
    nothing of a purchase (no ``interest``)."""
    service = appointment_type == "service"
    vehicle = _sub(parent, "vehicle", interest=None if service else "buy")
    for name in ("year", "make", "model"):
        _sub(vehicle, name, "")
    _sub(vehicle, "comments", "No vehicle given: service visit" if service else "No specific vehicle: general inquiry")


def appointment_text(appointment: dict[str, Any], request_appointment: dict[str, Any]) -> str:
    """The appointment in words, rooftop local time first with the ISO value kept."""
    tz = None
    if appointment.get("timezone"):
        try:
            tz = ZoneInfo(appointment["timezone"])
        except (ZoneInfoNotFoundError, ValueError):
            tz = None

    def when(value: str) -> str:
        return f"{human_time(value, tz)} [{value}]"

    label = TYPE_LABEL.get(appointment.get("appointment_type", ""), "appointment")
    where = f" at {appointment['rooftop']}" if appointment.get("rooftop") else ""
    requested = appointment.get("requested_at")
    asked = f" requested for {when(requested)}" if requested else " requested without a time"
    status = appointment.get("status")
    if status == "confirmed":
        text = f"Appointment ({label}{where}): CONFIRMED for {when(appointment['confirmed_at'])}"
    elif status == "proposed":
        offered = ", ".join(when(t) for t in appointment.get("proposed_times", []))
        text = f"Appointment ({label}{where}):{asked}; not available, alternatives offered: {offered}"
    elif status == "requested":
        text = f"Appointment ({label}{where}):{asked}; please contact the customer to schedule it"
    else:
        reason = {
            "not_offered": "not offered at this location",
            "vehicle_unavailable": "vehicle no longer available",
            "no_availability": "no free time in the booking horizon",
        }.get(appointment.get("reason", ""), "")
        text = f"Appointment ({label}{where}):{asked}; could not be booked" + (f" ({reason})" if reason else "")
    if request_appointment.get("duration_minutes"):
        text += f"; duration {request_appointment['duration_minutes']} minutes"
    text += f"; appointment id {appointment.get('appointment_id')}"
    if request_appointment.get("notes"):
        text += f"\nAppointment notes: {request_appointment['notes']}"
    return text


def render(view: LeadView) -> str:
    """The complete ADF document (``<?xml?>``, ``<?adf version="1.0"?>``, ``<adf><prospect>``)."""
    request = view.request
    customer = request.get("customer") or {}
    consent = request.get("consent") or {}
    channels = [c for c in consent.get("allowed_channels") or [] if c in ("email", "phone", "sms")]
    appointment = view.appointment or None
    appointment_type = (request.get("appointment") or {}).get("appointment_type")

    adf = ET.Element("adf")
    prospect = _sub(adf, "prospect", status="resend" if view.resend else "new")
    _sub(prospect, "id", view.lead_id, sequence="1", source=view.source)
    _sub(prospect, "requestdate", request.get("submitted_at") or view.received_at)

    voi = request.get("vehicle_of_interest")
    if isinstance(voi, dict):
        vehicle_id = (view.listing or {}).get("vehicle_id")
        _vehicle(
            prospect,
            voi,
            view.listing,
            INTEREST.get(appointment_type, "buy"),
            [],
            service=appointment_type == "service",
            vehicle_id=vehicle_id,
            source=view.source,
        )
    trade = request.get("trade_in")
    if isinstance(trade, dict):
        notes = ["Trade-in appraisal requested (see appointment)"] if appointment_type == "trade_in" else []
        _vehicle(prospect, trade, None, "trade-in", notes, trade_in=True)
    if not isinstance(voi, dict) and not isinstance(trade, dict):
        _placeholder(prospect, appointment_type)

    customer_el = _sub(prospect, "customer")
    contact = _sub(customer_el, "contact", primarycontact="1")
    first, last = (clean(customer.get(k, "")).strip() for k in ("first_name", "last_name"))
    if first and last:  # what CRMs file: given and family name apart
        _sub(contact, "name", first, part="first")
        _sub(contact, "name", last, part="last")
    else:  # one of them blank: the one there is (ADF requires a name)
        _sub(contact, "name", first or last, part="full")
    preferred = customer.get("preferred_contact")
    if "email" in channels and customer.get("email"):
        _sub(contact, "email", customer["email"], preferredcontact="1" if preferred == "email" else None)
    if ("phone" in channels or "sms" in channels) and customer.get("phone"):
        _sub(
            contact,
            "phone",
            customer["phone"],
            type="cellphone" if "sms" in channels else "voice",
            preferredcontact="1" if preferred in ("phone", "sms") else None,
        )
    address = customer.get("address")
    if isinstance(address, dict) and any(
        _given(address.get(k)) for k in ("address_line_1", "address_line_2", "city", "state", "zip")
    ):
        addr = _sub(contact, "address")
        streets = [line for line in (address.get("address_line_1"), address.get("address_line_2")) if _given(line)]
        for number, street in enumerate(streets or [""], start=1):  # ADF requires one street
            _sub(addr, "street", street, line=str(number))
        for key, tag in (("city", "city"), ("state", "regioncode"), ("zip", "postalcode")):
            if _given(address.get(key)):
                _sub(addr, tag, address[key])
        country = address.get("country")
        _sub(addr, "country", country if _given(country) else "US")
    lines = []
    if request.get("message"):
        lines.append(f"Message: {request['message']}")
    if appointment:
        lines.append(appointment_text(appointment, request.get("appointment") or {}))
    allowed = ", ".join(channels)
    sms_note = " (text messages to the phone number)" if "sms" in channels else ""
    lines.append(
        f"Contact consent: {allowed}{sms_note}; use only these channels"
        + (f"; preferred: {preferred}" if preferred else "")
    )
    if consent.get("expires_at"):
        lines.append(f"Consent expires at {consent['expires_at']}; do not contact the customer after that")
    _sub(customer_el, "comments", "\n".join(lines))

    vendor = _sub(prospect, "vendor")
    if view.dealer_id:
        _sub(vendor, "id", view.dealer_id, source=f"{view.source} dealer_id")
    _sub(vendor, "vendorname", view.vendor_name)
    rooftop = view.rooftop or {}
    website = https_url(rooftop.get("website"))
    if website:
        _sub(vendor, "url", website)
    vendor_contact = _sub(vendor, "contact")
    _sub(vendor_contact, "name", rooftop.get("name") or view.vendor_name, part="full")
    for kind in ("emails", "phones"):
        values = [i.get("value") for i in rooftop.get(kind) or [] if isinstance(i, dict)]
        value = next((v for v in values if isinstance(v, str) and v.strip()), None)
        if value is not None:
            _sub(vendor_contact, kind[:-1], value, type="voice" if kind == "phones" else None)

    agent = request.get("source_agent") or {}
    provider = _sub(prospect, "provider")
    _sub(provider, "name", agent.get("name", ""), part="full")
    _sub(provider, "service", "AAP lead.submit")
    agent_url = https_url(agent.get("url"))
    if agent_url:
        _sub(provider, "url", agent_url)

    ET.indent(adf, space="  ")
    body = ET.tostring(adf, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n<?adf version="1.0"?>\n' + body + "\n"
