"""The new-lead e-mail to a rooftop's sales people (``[leads.notifications]``, docs/leads.md).

One outbox row of kind ``notify`` per lead (:mod:`aap.leads.submit` adds it
next to the CRM targets); the delivery worker sends it through the SMTP
transport with the same claims, retries and dead letters as a CRM delivery.

What it carries is decided here, field by field: the rooftop, the time the
lead came in (in the rooftop's zone) and a link to the lead in the console
— no customer data — unless ``include`` names more. Contact details, when
included, are only those the customer consented to (``allowed_channels``),
as for a CRM.
"""

from __future__ import annotations

import hashlib
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from aap.config.leads import SmtpTarget
from aap.config.localtime import format_local, format_rfc3339, zone_for
from aap.config.model import Settings
from aap.config.notifications import NOTIFY_TARGET, NotificationSettings
from aap.paths import CONSOLE_PREFIX
from aap.store.leads import Delivery
from aap.util.rfc3339 import parse_rfc3339


def recipients(settings: Settings, d: Delivery) -> tuple[str, ...]:
    """Who is told of the lead now (the configuration may have changed since it came in)."""
    profile = settings.profile_for(d.dealer_id) or settings.dealer
    return settings.leads.notifications.recipients_for(profile, profile.dealer_id, d.rooftop)


def smtp_target(notifications: NotificationSettings, to: tuple[str, ...]) -> SmtpTarget:
    """The notifications' SMTP server as the transport's target."""
    n = notifications
    return SmtpTarget(
        NOTIFY_TARGET, n.host, n.sender, to, n.port, n.starttls, n.ssl, n.username_env, n.password_env, n.subject
    )


def _vehicle(d: Delivery) -> str:
    source: dict[str, Any] = d.listing or d.request.get("vehicle_of_interest") or {}
    words = " ".join(str(source[k]) for k in ("year", "make", "model", "trim") if source.get(k))
    ident = ", ".join(f"{k.upper() if k == 'vin' else 'stock'} {source[k]}" for k in ("vin", "stock") if source.get(k))
    return f"{words} ({ident})" if words and ident else words or ident


def body(settings: Settings, d: Delivery) -> tuple[str, str]:
    """(subject, text) of the e-mail about ``d``'s lead."""
    notifications = settings.leads.notifications
    include = set(notifications.include)
    profile = settings.profile_for(d.dealer_id) or settings.dealer
    zone = zone_for(settings, d.dealer_id, d.rooftop)
    place = d.rooftop or profile.name
    received = parse_rfc3339(d.received_at)
    link = settings.url(f"{CONSOLE_PREFIX}leads/{d.lead_id}")
    lines = [
        f"A new lead arrived at {place}" + (f" on {format_local(received, zone)}." if received else "."),
        "",
        "Open it in the staff console:",
        link,
        "",
        f"Lead {d.lead_id}",
    ]
    if "source_agent" in include:
        agent = d.request.get("source_agent") or {}
        lines.append(f"Sent by: {agent.get('name', '')}")
    if "vehicle" in include:
        vehicle = _vehicle(d)
        if vehicle:
            lines.append(f"Vehicle: {vehicle}")
    if "appointment" in include and d.appointment:
        appointment = d.appointment
        when = appointment.get("confirmed_at") or appointment.get("requested_at")
        kind = str(appointment.get("appointment_type") or "appointment").replace("_", " ")
        state = appointment.get("status") or ""
        lines.append(f"Appointment: {kind}, {state}" + (f", {format_rfc3339(when, zone)}" if when else ""))
    customer: dict[str, Any] = d.request.get("customer") or {}
    if "customer_name" in include:
        name = " ".join(str(customer[k]) for k in ("first_name", "last_name") if customer.get(k))
        if name:
            lines.append(f"Customer: {name}")
    if "customer_contact" in include:
        channels = set((d.request.get("consent") or {}).get("allowed_channels") or [])
        if "email" in channels and customer.get("email"):
            lines.append(f"E-mail: {customer['email']}")
        if channels & {"phone", "sms"} and customer.get("phone"):
            lines.append(f"Phone: {customer['phone']}")
    if "message" in include and d.request.get("message"):
        lines += ["", "Message:", str(d.request["message"])]
    lines += [
        "",
        "-- ",
        f"Sent by the AAP dealer agent of {profile.name}. What this e-mail shows is set in"
        " [leads.notifications] include; everything else about the lead is in the console.",
    ]
    subject = f"{notifications.subject} at {place}"
    return subject, "\n".join(lines) + "\n"


def message(settings: Settings, d: Delivery, to: tuple[str, ...]) -> EmailMessage:
    """The e-mail, with a ``Message-ID`` fixed per lead (a resend is recognisable as the same)."""
    target = smtp_target(settings.leads.notifications, to)
    subject, text = body(settings, d)
    email = EmailMessage()
    email["From"] = target.sender
    email["To"] = ", ".join(to)
    email["Subject"] = subject
    email["Date"] = formatdate(localtime=False, usegmt=True)
    domain = target.sender.rsplit("@", 1)[-1]
    digest = hashlib.sha256(f"{d.lead_id}\x1f{NOTIFY_TARGET}".encode()).hexdigest()[:16]
    email["Message-ID"] = f"<{d.lead_id}.notify.{digest}@{domain}>"
    email["X-AAP-Lead-Id"] = d.lead_id
    email["X-AAP-Delivery-Id"] = d.delivery_id
    email.set_content(text, subtype="plain", charset="utf-8")
    return email
