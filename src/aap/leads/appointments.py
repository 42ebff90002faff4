"""Appointment requests against a rooftop's department schedule.

A rooftop publishes named weekly schedules (``DealerInformation`` rooftop
``schedules``) in local wall-clock time and one IANA ``timezone``. Sales hours
serve ``sales``, ``test_drive`` and ``trade_in`` requests; service hours serve
``service``. Bookable starts form a grid: every ``slot_minutes`` from the day's
opening time, as long as the whole appointment ends by closing time. Each grid
slot holds ``capacity_per_slot`` appointments per department; an appointment
longer than one slot takes a seat in each slot it covers. Seats are rows with
a unique key, so two leads can never take the same last seat (see
:meth:`aap.store.leads.LeadStore.take_seats`).

Outcomes (``LeadSubmitResponse.data.appointment.status``, seed 004; docs/leads.md
§6): no requested time, or no schedule/timezone to judge it
→ ``requested`` (staff schedule by hand); a free grid slot inside the bookable
window → ``confirmed``; otherwise the next free slots → ``proposed``; the
department is not offered, the test-drive vehicle is gone, or nothing is free
within the horizon → ``rejected`` (or ``APPOINTMENT_TIME_UNAVAILABLE`` when
``on_unavailable = "error"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aap.config.leads import AppointmentSettings
from aap.util.rfc3339 import parse_rfc3339, to_local, to_utc_z

#: Which department's schedule an appointment type uses.
DEPARTMENT = {"sales": "sales", "test_drive": "sales", "trade_in": "sales", "service": "service"}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
TYPE_LABEL = {
    "sales": "sales visit",
    "service": "service visit",
    "test_drive": "test drive",
    "trade_in": "trade-in appraisal",
}


def schedule_for(rooftop: dict[str, Any], department: str) -> dict[str, Any] | None:
    """The rooftop's weekly hours named ``department`` (case-insensitive), if any."""
    for schedule in rooftop.get("schedules") or []:
        name = schedule.get("name") if isinstance(schedule, dict) else None
        if isinstance(name, str) and name.strip().lower() == department:
            value = schedule.get("value")
            return value if isinstance(value, dict) else None
    return None


def offers(rooftop: dict[str, Any], department: str) -> bool | None:
    """True (schedule or capability tag), False (capabilities listed without it), None (unknown)."""
    if schedule_for(rooftop, department) is not None:
        return True
    capabilities = rooftop.get("capabilities")
    if isinstance(capabilities, list) and capabilities:
        return department in {str(c).strip().lower() for c in capabilities}
    return None


def choose_rooftop(
    rooftops: list[dict[str, Any]], listing_rooftop: dict[str, Any] | None, department: str
) -> dict[str, Any] | None:
    """The linked listing's rooftop, else the only rooftop, else the first offering the department."""
    if listing_rooftop is not None:
        return listing_rooftop
    if not rooftops:
        return None
    if len(rooftops) == 1:
        return rooftops[0]
    for wanted in (True, None):
        for rooftop in rooftops:
            if offers(rooftop, department) is wanted:
                return rooftop
    return rooftops[0]


def zone(rooftop: dict[str, Any] | None) -> ZoneInfo | None:
    name = rooftop.get("timezone") if rooftop else None
    if not isinstance(name, str):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


@dataclass
class Plan:
    """Everything decided before the transaction: where, which hours, what was asked."""

    appointment_type: str
    department: str
    rooftop: dict[str, Any] | None
    tz: ZoneInfo | None
    week: dict[str, Any] | None
    requested_at: datetime | None
    duration_minutes: int
    blocked: str | None = None  # why it cannot be booked at all: "not_offered", "vehicle_unavailable"

    @property
    def rooftop_name(self) -> str | None:
        return self.rooftop.get("name") if self.rooftop else None


@dataclass
class Outcome:
    """The acknowledged appointment (``data.appointment``) and the seats it took."""

    status: str
    confirmed_at: str | None = None
    proposed_times: list[str] = field(default_factory=list)
    reason: str = ""
    seats: list[str] = field(default_factory=list)  # UTC slot starts booked

    def to_json(self, appointment_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {"appointment_id": appointment_id, "status": self.status}
        if self.status == "confirmed":
            body["confirmed_at"] = self.confirmed_at
        if self.status == "proposed":
            body["proposed_times"] = list(self.proposed_times)
        return body


def plan(
    appointment: dict[str, Any],
    rooftops: list[dict[str, Any]],
    listing_rooftop: dict[str, Any] | None,
    settings: AppointmentSettings,
    vehicle_unavailable: bool = False,
) -> Plan:
    kind = appointment["appointment_type"]
    department = DEPARTMENT[kind]
    rooftop = choose_rooftop(rooftops, listing_rooftop, department)
    duration = appointment.get("duration_minutes") or settings.slot_minutes
    result = Plan(
        kind,
        department,
        rooftop,
        zone(rooftop),
        schedule_for(rooftop, department) if rooftop else None,
        parse_rfc3339(appointment.get("appointment_at")),
        int(duration),
    )
    if rooftop is not None and offers(rooftop, department) is False:
        result.blocked = "not_offered"
    elif kind == "test_drive" and vehicle_unavailable:
        result.blocked = "vehicle_unavailable"
    return result


# -- the slot grid ----------------------------------------------------------------


def _hhmm(value: Any) -> time | None:
    if not isinstance(value, str) or len(value) != 5:
        return None
    try:
        return time(int(value[:2]), int(value[3:]))
    except ValueError:
        return None


def _local(day: date, clock: time, tz: ZoneInfo) -> datetime | None:
    """The aware instant of a wall-clock time, or None when DST skips it."""
    moment = datetime.combine(day, clock, tzinfo=tz)
    round_trip = moment.astimezone(UTC).astimezone(tz)
    if (round_trip.hour, round_trip.minute) != (clock.hour, clock.minute):
        return None  # inside a spring-forward gap: that wall time does not exist
    return moment


def day_slots(
    day: date, week: dict[str, Any], tz: ZoneInfo, slot_minutes: int, duration_minutes: int
) -> list[datetime]:
    """Bookable starts on ``day`` (rooftop local), as UTC instants: the grid from opening,
    each ending by closing. Arithmetic is done in UTC (Python adds wall-clock time
    within one zone, which is wrong across a DST change).
    """
    hours = week.get(WEEKDAYS[day.weekday()])
    if not isinstance(hours, dict):
        return []  # closed (null) or not listed
    opens, closes = _hhmm(hours.get("open")), _hhmm(hours.get("close"))
    if opens is None or closes is None or closes <= opens:
        return []
    close_at = _local(day, closes, tz)
    if close_at is None:
        return []
    close_utc = close_at.astimezone(UTC)
    starts = []
    minute = opens.hour * 60 + opens.minute
    end_minute = closes.hour * 60 + closes.minute
    while minute + slot_minutes <= end_minute:
        start = _local(day, time(minute // 60, minute % 60), tz)
        if start is not None:
            start_utc = start.astimezone(UTC)
            if start_utc + timedelta(minutes=duration_minutes) <= close_utc:
                starts.append(start_utc)
        minute += slot_minutes
    return starts


def seats_for(start: datetime, duration_minutes: int, slot_minutes: int) -> list[datetime]:
    """The grid slots (UTC) an appointment starting at ``start`` covers."""
    count = max(1, math.ceil(duration_minutes / slot_minutes))
    base = start.astimezone(UTC)
    return [base + timedelta(minutes=slot_minutes * i) for i in range(count)]


def _days(first: date, last: date) -> Iterator[date]:
    day = first
    while day <= last:
        yield day
        day += timedelta(days=1)


# A visit longer than a whole day never fits the slot grid (and would overflow
# date arithmetic for absurd values); such requests go to staff as "requested".
MAX_BOOKABLE_MINUTES = 24 * 60


def decide(
    p: Plan,
    now: datetime,
    settings: AppointmentSettings,
    usage: Callable[[str, str], dict[str, int]],
    take: Callable[[list[str]], bool],
) -> Outcome:
    """Confirm, propose, leave as requested or reject, booking seats through ``take``.

    ``usage(first_utc, last_utc)`` returns ``{slot_start_utc: seats_taken}`` and
    ``take(slot_starts_utc)`` books one seat in each slot or nothing (False when
    another lead took the last seat first). Both run inside the lead's transaction.
    """
    if p.blocked == "not_offered":
        return Outcome("rejected", reason="not_offered")
    if p.blocked == "vehicle_unavailable":
        return Outcome("rejected", reason="vehicle_unavailable")
    if p.requested_at is None:
        return Outcome("requested", reason="no_time")
    tz, week = p.tz, p.week
    if tz is None or week is None:
        return Outcome("requested", reason="no_schedule")
    if p.duration_minutes > MAX_BOOKABLE_MINUTES:
        # Longer than any opening day: no slot can hold it, so staff decide.
        return Outcome("requested", reason="duration_needs_review")

    slot = settings.slot_minutes
    earliest = now + timedelta(minutes=settings.min_lead_minutes)
    horizon = now + timedelta(days=settings.horizon_days)
    first_day = earliest.astimezone(tz).date()
    last_day = horizon.astimezone(tz).date()
    taken = usage(to_utc_z(earliest), to_utc_z(horizon + timedelta(minutes=p.duration_minutes + slot)))

    def free(start: datetime) -> bool:
        return all(
            taken.get(to_utc_z(s), 0) < settings.capacity_per_slot for s in seats_for(start, p.duration_minutes, slot)
        )

    def bookable(start: datetime) -> bool:
        return earliest <= start <= horizon

    wanted = p.requested_at.astimezone(UTC)
    grid = day_slots(wanted.astimezone(tz).date(), week, tz, slot, p.duration_minutes)
    if wanted in grid and bookable(wanted) and free(wanted):
        seats = [to_utc_z(s) for s in seats_for(wanted, p.duration_minutes, slot)]
        if take(seats):
            return Outcome("confirmed", confirmed_at=to_local(wanted, tz), seats=seats)
        taken.update({s: settings.capacity_per_slot for s in seats})  # lost the race: full now

    def alternatives(after: datetime) -> list[datetime]:
        found: list[datetime] = []
        for day in _days(max(first_day, after.astimezone(tz).date()), last_day):
            for start in day_slots(day, week, tz, slot, p.duration_minutes):
                if start >= after and bookable(start) and free(start) and start != wanted:
                    found.append(start)
                    if len(found) == settings.proposal_count:
                        return found
        return found

    proposals = alternatives(max(wanted, earliest))
    if not proposals:
        proposals = alternatives(earliest)
    if proposals:
        return Outcome("proposed", proposed_times=[to_local(s, tz) for s in proposals], reason="alternatives")
    return Outcome("rejected", reason="no_availability")


def describe(outcome: Outcome, p: Plan) -> str:
    """One sentence for the buyer (response ``message``) about the appointment."""
    label = TYPE_LABEL.get(p.appointment_type, "appointment")
    where = f" at {p.rooftop_name}" if p.rooftop_name else ""
    if outcome.status == "confirmed":
        return f"Your {label}{where} is confirmed for {human_time(outcome.confirmed_at, p.tz)}."
    if outcome.status == "proposed":
        return f"The requested time for your {label}{where} is not available; please choose one of the proposed times."
    if outcome.status == "requested":
        return f"The dealership will contact you to schedule your {label}{where}."
    if outcome.reason == "not_offered":
        return f"This location does not offer a {label}; your inquiry was still received."
    if outcome.reason == "vehicle_unavailable":
        return "A test drive is not possible because the vehicle is no longer available."
    return f"No {label} time is available in the coming weeks; the dealership will contact you."


def human_time(value: str | None, tz: ZoneInfo | None) -> str:
    """``Sun 3 May 2026, 11:00 (America/Los_Angeles)`` in the rooftop's local time."""
    moment = parse_rfc3339(value)
    if moment is None:
        return value or ""
    if tz is not None:
        moment = moment.astimezone(tz)
    label = f" ({tz.key})" if tz is not None else ""
    return f"{moment:%a} {moment.day} {moment:%b %Y, %H:%M}{label}"
