"""``lead.submit``: one transaction from an idempotency claim to the outbox rows.

Order of work, and why:

1. Link the vehicle (a read, outside the write transaction): the listing names
   the selling dealer, and the dealer is part of the idempotency scope.
2. In one write transaction: claim (dealer, caller, key). A live record with the
   same payload hash is replayed verbatim with ``replayed: true`` (consent is not
   re-checked at replay, ``LeadSubmitRequest.idempotency_key``, seed 004); a
   different hash is ``IDEMPOTENCY_CONFLICT``.
3. Only a new claim is validated further (consent time rules), books or proposes
   the appointment, and stores the lead, its consent record, one outbox row per
   delivery target and the result for replays, then commits.

Any error raised in 2–3 rolls the whole transaction back: a failed submission
stores nothing (not even the key), so the caller may fix it and resend under
the same key (a project decision, docs/leads.md §1). The answer is sent only
after the commit.
"""

from __future__ import annotations

import copy
import logging
import re
import uuid
from datetime import datetime
from typing import Any, Protocol

from aap.config.leads import LeadSettings
from aap.config.model import DealerProfile, Settings
from aap.config.notifications import NOTIFY_KIND, NOTIFY_TARGET
from aap.errors import AapError
from aap.leads import appointments
from aap.leads.consent import classify
from aap.leads.idempotency import caller_scope, payload_hash
from aap.leads.vehicles import VehicleLink, link_vehicle
from aap.store import Stores
from aap.store.db import Tx
from aap.store.leads import LeadStore, NewLead
from aap.util.rfc3339 import epoch_ms, parse_rfc3339, to_utc_z

log = logging.getLogger("aap.leads")

_E164 = re.compile(r"^\+[1-9]\d{1,14}$")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def dealer_contact(
    profile: DealerProfile, rooftop: dict[str, Any] | None, department: str, *, aggregate: bool = False
) -> dict[str, str]:
    """``data.dealer``: the rooftop (or seller) name and an E.164 phone, the department's first.

    On an aggregate endpoint the name is the seller's (or the operator's) own, never a
    rooftop's: rooftop names are only unambiguous within one dealer (docs/leads.md,
    "Aggregate endpoints").
    """
    contact = {"name": profile.name if aggregate else (rooftop or {}).get("name") or profile.name}
    phones = [
        p
        for p in (rooftop or {}).get("phones") or []
        if isinstance(p, dict) and isinstance(p.get("value"), str) and _E164.match(p["value"])
    ]
    preferred = [p for p in phones if department in str(p.get("name", "")).lower()]
    if preferred or phones:
        contact["phone"] = (preferred or phones)[0]["value"]
    return contact


def _message(status: str, dealer_name: str, link: VehicleLink, sentence: str | None, unmatched: bool = False) -> str:
    if unmatched:  # aggregate endpoint, no seller identified: the operator says it has it
        parts = [
            f"Thank you. {dealer_name} received your inquiry; it could not be matched to one seller "
            f"on {dealer_name}, so {dealer_name} will follow up using the contact channels you allowed."
        ]
        if sentence:
            parts.append(sentence)
        return " ".join(parts)[:2000]
    if status == "rejected":
        parts = [f"The vehicle you asked about is no longer available, so {dealer_name} did not accept this inquiry."]
    else:
        parts = [
            f"Thank you. {dealer_name} received your inquiry and will follow up using the contact channels you allowed."
        ]
        if link.state == "unavailable":
            parts.append(
                "The vehicle you asked about is no longer available; the dealership may suggest similar vehicles."
            )
        elif link.state == "unknown":
            parts.append(
                "The vehicle identifiers did not match a current listing; your description was passed on as given."
            )
    if sentence:
        parts.append(sentence)
    return " ".join(parts)[:2000]


class Call(Protocol):
    """What a lead records of its call (the skill's :class:`~aap.skills.context.CallContext`)."""

    @property
    def binding(self) -> str: ...
    @property
    def caller_id(self) -> str | None: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def now(self) -> datetime: ...


def submit(settings: Settings, stores: Stores, request: dict[str, Any], ctx: Call) -> dict[str, Any]:
    """Run ``lead.submit`` for a schema-valid ``request``; returns the response object."""
    ls: LeadSettings = settings.leads
    store = stores.leads
    now: datetime = ctx.now

    link = link_vehicle(stores.inventory, request.get("vehicle_of_interest"))
    profile = identified_seller(settings, link, request.get("vehicle_of_interest")) or settings.dealer
    dealer_id = profile.dealer_id or settings.deployment_id
    caller = caller_scope(ctx.caller_id)
    key = request["idempotency_key"]
    digest = payload_hash(request)
    now_ms = epoch_ms(now)
    expires_ms = now_ms + ls.idempotency_retention_hours * 3_600_000

    with store.transaction() as tx:
        record = store.claim_key(tx, dealer_id, caller, key, digest, now_ms, expires_ms)
        if record is not None:
            if record.payload_hash != digest or record.response is None:
                raise AapError(
                    "IDEMPOTENCY_CONFLICT",
                    hint="Use a new idempotency_key for a different submission; resend the original payload to replay.",
                )
            replay = copy.deepcopy(record.response)
            replay["data"]["replayed"] = True
            log.info("lead replayed", extra={"fields": {"lead_id": record.lead_id, "dealer_id": dealer_id}})
            return replay

        problem = classify(request, [], now, ls.consent_clock_skew_seconds)
        if problem is not None:
            raise problem
        response, lead, targets = _accept(request, ctx, ls, settings, profile, dealer_id, link, now, store, tx)
        store.insert_lead(tx, lead, request["consent"], targets, now_ms)
        store.complete_key(tx, dealer_id, caller, key, lead.lead_id, response)

    log.info(
        "lead received",
        extra={
            "fields": {
                "lead_id": lead.lead_id,
                "dealer_id": dealer_id,
                "rooftop": lead.rooftop,
                "status": lead.status,
                "appointment": lead.appointment_status,
                "vehicle": link.state,
                "deliveries": len(targets),
            }
        },
    )
    return response


def identified_seller(settings: Settings, link: VehicleLink, vehicle: Any) -> DealerProfile | None:
    """The seller a lead is for: the linked listing's; on an aggregate endpoint, else the
    seller ``vehicle_of_interest.dealer_id`` names (a buyer resolves it with
    dealer.information before it asks for consent, ``DealerInformationRequest``, seed 004).
    None: no seller identified, the endpoint's own profile (the operator) receives it."""
    if link.dealer_id:
        return settings.profile_for(link.dealer_id)
    if settings.scope == "aggregate" and isinstance(vehicle, dict):
        wanted = vehicle.get("dealer_id")
        if isinstance(wanted, str) and wanted:
            return next((p for p in settings.all_profiles() if p.dealer_id == wanted), None)
    return None


def _accept(
    request: dict[str, Any],
    ctx: Call,
    ls: LeadSettings,
    settings: Settings,
    profile: DealerProfile,
    dealer_id: str,
    link: VehicleLink,
    now: datetime,
    store: LeadStore,
    tx: Tx,
) -> tuple[dict[str, Any], NewLead, list[tuple[str, str]]]:
    """Decide the outcome of a new submission inside the transaction (no writes but seats)."""
    lead_id = _new_id("lead")
    listing_rooftop = profile.rooftop(link.rooftop_name) if link.state == "linked" else None
    status = "rejected" if link.state == "unavailable" and ls.unavailable_vehicle == "reject" else "received"

    appointment_json: dict[str, Any] | None = None
    appointment_id = None
    plan = None
    sentence = None
    data_appointment = None
    if isinstance(request.get("appointment"), dict):
        appointment_id = _new_id("appt")
        plan = appointments.plan(
            request["appointment"],
            profile.rooftops,
            listing_rooftop,
            ls.appointments,
            vehicle_unavailable=link.state == "unavailable",
        )
        if status == "rejected":
            outcome = appointments.Outcome("rejected", reason="lead_rejected")
        else:
            outcome = _book(plan, now, ls, store, tx, dealer_id, appointment_id, lead_id)
            sentence = appointments.describe(outcome, plan)
        data_appointment = outcome.to_json(appointment_id)
        appointment_json = {
            **data_appointment,
            "reason": outcome.reason,
            "appointment_type": plan.appointment_type,
            "department": plan.department,
            "rooftop": plan.rooftop_name,
            "timezone": plan.tz.key if plan.tz else None,
            "requested_at": request["appointment"].get("appointment_at"),
            "duration_minutes": plan.duration_minutes,
            "seats": outcome.seats,
        }

    rooftop = listing_rooftop or (plan.rooftop if plan else None) or profile.rooftop(None)
    rooftop_name = rooftop.get("name") if rooftop else None
    department = plan.department if plan else "sales"
    aggregate = settings.scope == "aggregate"
    contact = dealer_contact(profile, rooftop, department, aggregate=aggregate)
    unmatched = aggregate and profile is settings.dealer

    data: dict[str, Any] = {"lead_id": lead_id, "status": status}
    if data_appointment is not None:
        data["appointment"] = data_appointment
    data["dealer"] = contact
    response = {
        "type": "lead.submit.response",
        "data": data,
        "message": _message(status, contact["name"], link, sentence, unmatched),
    }

    targets: list[tuple[str, str]] = []
    if status == "received":
        route = ls.route_for(profile.dealer_id, rooftop_name)
        if route is None:
            log.warning(
                "lead has no delivery route; stored only",
                extra={"fields": {"lead_id": lead_id, "dealer_id": dealer_id, "rooftop": rooftop_name}},
            )
        else:
            targets = [(t.name, t.kind) for t in route.targets]
        notify = ls.notifications
        if notify.enabled and notify.recipients_for(profile, profile.dealer_id, rooftop_name):
            targets.append((NOTIFY_TARGET, NOTIFY_KIND))  # the sales people's e-mail (docs/leads.md)

    consent = request["consent"]
    expires = parse_rfc3339(consent.get("expires_at"))
    lead = NewLead(
        lead_id=lead_id,
        dealer_id=dealer_id,
        rooftop=rooftop_name,
        status=status,
        caller_id=caller_scope(ctx.caller_id),
        binding=ctx.binding,
        client_id=ctx.client_id,
        source_agent=request["source_agent"]["name"],
        idempotency_key=request["idempotency_key"],
        vehicle_id=link.vehicle_id,
        vehicle_link=link.state,
        listing=link.listing,
        appointment_id=appointment_id,
        appointment_status=data_appointment["status"] if data_appointment else None,
        appointment=appointment_json,
        request=request,
        response=response,
        received_at=to_utc_z(now),
        received_ms=epoch_ms(now),
        consent_expires_ms=epoch_ms(expires) if expires else None,
    )
    return response, lead, targets


def _book(
    plan: appointments.Plan,
    now: datetime,
    ls: LeadSettings,
    store: LeadStore,
    tx: Tx,
    dealer_id: str,
    appointment_id: str,
    lead_id: str,
) -> appointments.Outcome:
    rooftop = plan.rooftop_name or ""
    outcome = appointments.decide(
        plan,
        now,
        ls.appointments,
        usage=lambda first, last: store.seat_usage(tx, dealer_id, rooftop, plan.department, first, last),
        take=lambda seats: store.take_seats(
            tx, dealer_id, rooftop, plan.department, seats, ls.appointments.capacity_per_slot, appointment_id, lead_id
        ),
    )
    if (
        outcome.status == "rejected"
        and outcome.reason == "no_availability"
        and ls.appointments.on_unavailable == "error"
    ):
        raise AapError(
            "APPOINTMENT_TIME_UNAVAILABLE",
            "The requested appointment time is not available and there is no alternative in the booking horizon.",
            hint="Resend without an appointment, or without appointment_at so the dealer schedules it.",
        )
    return outcome
