"""Appointment outcomes against department schedules, in the rooftop's timezone."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from aap.config.leads import AppointmentSettings
from aap.leads import appointments as ap
from lead_support import NOW, OAKLAND_ROOFTOP, ROOFTOPS, SF_ROOFTOP, VANCOUVER_ROOFTOP

LA = ZoneInfo("America/Los_Angeles")
SETTINGS = AppointmentSettings(
    slot_minutes=30, capacity_per_slot=1, min_lead_minutes=120, proposal_count=3, horizon_days=14
)


class Book:
    """An in-memory seat table standing in for the database."""

    def __init__(self, taken: dict[str, int] | None = None) -> None:
        self.taken = dict(taken or {})
        self.booked: list[list[str]] = []

    def usage(self, first: str, last: str) -> dict[str, int]:
        return {k: v for k, v in self.taken.items() if first <= k <= last}

    def take(self, seats: list[str]) -> bool:
        self.booked.append(seats)
        for seat in seats:
            self.taken[seat] = self.taken.get(seat, 0) + 1
        return True


def decide(
    kind: str, at: str | None, *, rooftop=None, now=NOW, settings=SETTINGS, book=None, duration=None, unavailable=False
):
    appointment = {"appointment_type": kind}
    if at is not None:
        appointment["appointment_at"] = at
    if duration:
        appointment["duration_minutes"] = duration
    plan = ap.plan(appointment, list(ROOFTOPS), rooftop, settings, vehicle_unavailable=unavailable)
    book = book or Book()
    return ap.decide(plan, now, settings, book.usage, book.take), plan, book


def test_no_time_given_is_requested():
    outcome, _, book = decide("sales", None, rooftop=SF_ROOFTOP)
    assert outcome.status == "requested" and book.booked == []
    assert outcome.to_json("appt_1") == {"appointment_id": "appt_1", "status": "requested"}


@pytest.mark.parametrize("duration", [24 * 60 + 1, 32749434861357420])
def test_a_duration_longer_than_a_day_is_left_for_staff(duration):
    outcome, _, book = decide("sales", "2026-03-03T10:00:00-08:00", rooftop=SF_ROOFTOP, duration=duration)
    assert outcome.status == "requested" and outcome.reason == "duration_needs_review"
    assert book.booked == []


def test_a_rooftop_without_that_schedule_leaves_it_requested():
    outcome, plan, _ = decide("sales", "2026-03-03T10:00:00-08:00", rooftop=VANCOUVER_ROOFTOP)
    assert plan.rooftop_name == "Bay Motors Vancouver"
    assert outcome.status == "requested" and outcome.reason == "no_schedule"


def test_free_slot_in_open_hours_is_confirmed_in_rooftop_local_time():
    # Requested in UTC; confirmed in the rooftop's own offset (PST in early March).
    outcome, _, book = decide("test_drive", "2026-03-03T19:00:00Z", rooftop=SF_ROOFTOP)
    assert outcome.status == "confirmed"
    assert outcome.confirmed_at == "2026-03-03T11:00:00-08:00"
    assert book.booked == [["2026-03-03T19:00:00Z"]]
    body = outcome.to_json("appt_1")
    assert set(body) == {"appointment_id", "status", "confirmed_at"}


def test_service_uses_service_hours_and_sales_uses_sales_hours():
    # 08:00 Tuesday: service is open (07:30), sales is not (09:00).
    assert decide("service", "2026-03-03T08:00:00-08:00", rooftop=SF_ROOFTOP)[0].status == "confirmed"
    sales = decide("sales", "2026-03-03T08:00:00-08:00", rooftop=SF_ROOFTOP)[0]
    assert sales.status == "proposed"
    assert sales.proposed_times[0] == "2026-03-03T09:00:00-08:00"


def test_closed_day_proposes_the_next_open_slots():
    # Sunday: the San Francisco sales department is closed.
    outcome, _, book = decide("sales", "2026-03-08T11:00:00-07:00", rooftop=SF_ROOFTOP)
    assert outcome.status == "proposed" and book.booked == []
    assert outcome.proposed_times == [
        "2026-03-09T09:00:00-07:00",
        "2026-03-09T09:30:00-07:00",
        "2026-03-09T10:00:00-07:00",
    ]
    assert "confirmed_at" not in outcome.to_json("a")


def test_off_grid_time_proposes_the_following_grid_slots():
    outcome, _, _ = decide("sales", "2026-03-04T10:10:00-08:00", rooftop=SF_ROOFTOP)
    assert outcome.status == "proposed"
    assert outcome.proposed_times == [
        "2026-03-04T10:30:00-08:00",
        "2026-03-04T11:00:00-08:00",
        "2026-03-04T11:30:00-08:00",
    ]


def test_too_soon_and_past_times_propose_from_the_earliest_bookable_slot():
    # NOW is Monday 09:00 PST; with a 120-minute lead the first bookable start is 11:00.
    for asked in ("2026-03-02T09:30:00-08:00", "2025-12-24T10:00:00-08:00"):
        outcome, _, _ = decide("sales", asked, rooftop=SF_ROOFTOP)
        assert outcome.status == "proposed"
        assert outcome.proposed_times[0] == "2026-03-02T11:00:00-08:00"


def test_beyond_the_horizon_proposes_the_earliest_slots():
    outcome, _, _ = decide("sales", "2026-06-01T10:00:00-07:00", rooftop=SF_ROOFTOP)
    assert outcome.status == "proposed"
    assert outcome.proposed_times[0] == "2026-03-02T11:00:00-08:00"


def test_a_full_slot_is_not_confirmed_and_is_not_proposed():
    book = Book({"2026-03-03T19:00:00Z": 1})
    outcome, _, _ = decide("sales", "2026-03-03T11:00:00-08:00", rooftop=SF_ROOFTOP, book=book)
    assert outcome.status == "proposed"
    assert "2026-03-03T11:00:00-08:00" not in outcome.proposed_times
    assert outcome.proposed_times[0] == "2026-03-03T11:30:00-08:00"


def test_capacity_allows_that_many_appointments_per_slot():
    settings = AppointmentSettings(capacity_per_slot=2)
    book = Book({"2026-03-03T19:00:00Z": 1})
    assert (
        decide("sales", "2026-03-03T11:00:00-08:00", rooftop=SF_ROOFTOP, book=book, settings=settings)[0].status
        == "confirmed"
    )
    assert (
        decide("sales", "2026-03-03T11:00:00-08:00", rooftop=SF_ROOFTOP, book=book, settings=settings)[0].status
        == "proposed"
    )


def test_long_appointments_take_every_slot_they_cover_and_must_end_by_closing():
    outcome, _, book = decide("sales", "2026-03-03T10:00:00-08:00", rooftop=SF_ROOFTOP, duration=60)
    assert outcome.status == "confirmed"
    assert book.booked == [["2026-03-03T18:00:00Z", "2026-03-03T18:30:00Z"]]
    # 17:30 + 60 min runs past the 18:00 close.
    late = decide("sales", "2026-03-03T17:30:00-08:00", rooftop=SF_ROOFTOP, duration=60)[0]
    assert late.status == "proposed"
    assert late.proposed_times[0] == "2026-03-04T09:00:00-08:00"


def test_department_not_offered_is_rejected():
    outcome, plan, _ = decide("service", "2026-03-03T10:00:00-08:00", rooftop=OAKLAND_ROOFTOP)
    assert plan.rooftop_name == "Bay Motors Oakland"
    assert outcome.status == "rejected" and outcome.reason == "not_offered"
    assert outcome.to_json("a") == {"appointment_id": "a", "status": "rejected"}


def test_test_drive_of_an_unavailable_vehicle_is_rejected():
    outcome, _, _ = decide("test_drive", "2026-03-03T10:00:00-08:00", rooftop=SF_ROOFTOP, unavailable=True)
    assert outcome.status == "rejected" and outcome.reason == "vehicle_unavailable"


def test_nothing_free_in_the_horizon_is_rejected():
    settings = AppointmentSettings(horizon_days=1)
    full = {}
    for day in (date(2026, 3, 2), date(2026, 3, 3)):
        for start in ap.day_slots(day, SF_ROOFTOP["schedules"][0]["value"], LA, 30, 30):
            full[start.strftime("%Y-%m-%dT%H:%M:%SZ")] = 1
    outcome, _, _ = decide("sales", "2026-03-02T15:00:00-08:00", rooftop=SF_ROOFTOP, book=Book(full), settings=settings)
    assert outcome.status == "rejected" and outcome.reason == "no_availability"


# -- daylight saving time ---------------------------------------------------------------


def test_dst_spring_forward_day_uses_the_new_offset():
    # Oakland sales is open every day, Sunday 8 March 2026 included (clocks go 02:00 -> 03:00).
    now = datetime(2026, 3, 5, 17, 0, tzinfo=UTC)
    saturday = decide("sales", "2026-03-07T18:00:00Z", rooftop=OAKLAND_ROOFTOP, now=now)[0]
    sunday = decide("sales", "2026-03-08T17:00:00Z", rooftop=OAKLAND_ROOFTOP, now=now)[0]
    assert saturday.confirmed_at == "2026-03-07T10:00:00-08:00"
    assert sunday.confirmed_at == "2026-03-08T10:00:00-07:00"
    # 10:00 local on Sunday is 17:00Z, not 18:00Z: a request at 18:00Z is 11:00 local.
    assert (
        decide("sales", "2026-03-08T18:00:00Z", rooftop=OAKLAND_ROOFTOP, now=now)[0].confirmed_at
        == "2026-03-08T11:00:00-07:00"
    )


def test_dst_proposals_cross_the_change_with_the_right_offsets():
    now = datetime(2026, 3, 5, 17, 0, tzinfo=UTC)
    # 16:45 Saturday is off the grid and the last slot (16:30) starts before it, so the
    # alternatives are Sunday's, after the change to daylight time.
    outcome = decide("sales", "2026-03-07T16:45:00-08:00", rooftop=OAKLAND_ROOFTOP, now=now)[0]
    assert outcome.proposed_times == [
        "2026-03-08T10:00:00-07:00",
        "2026-03-08T10:30:00-07:00",
        "2026-03-08T11:00:00-07:00",
    ]


def test_dst_fall_back_day_uses_the_standard_offset():
    now = datetime(2026, 10, 29, 17, 0, tzinfo=UTC)
    before = decide("sales", "2026-10-31T10:00:00-07:00", rooftop=OAKLAND_ROOFTOP, now=now)[0]
    after = decide("sales", "2026-11-01T18:00:00Z", rooftop=OAKLAND_ROOFTOP, now=now)[0]
    assert before.confirmed_at == "2026-10-31T10:00:00-07:00"
    assert after.confirmed_at == "2026-11-01T10:00:00-08:00"


def test_wall_clock_times_skipped_by_dst_are_never_offered():
    night = {"sunday": {"open": "01:00", "close": "04:00"}}
    starts = ap.day_slots(date(2026, 3, 8), night, LA, 30, 30)
    local = [s.astimezone(LA).strftime("%H:%M%z") for s in starts]
    assert local == ["01:00-0800", "01:30-0800", "03:00-0700", "03:30-0700"]
    # 01:30 PST and 03:00 PDT are only half an hour apart in real time.
    assert starts[2] - starts[1] == timedelta(minutes=30)


def test_a_long_appointment_across_the_dst_gap_ends_on_real_time():
    night = {"sunday": {"open": "01:00", "close": "04:00"}}
    # 60 minutes from 01:30 PST ends at 03:30 PDT (real time), inside closing at 04:00.
    starts = ap.day_slots(date(2026, 3, 8), night, LA, 30, 60)
    assert [s.astimezone(LA).strftime("%H:%M") for s in starts] == ["01:00", "01:30", "03:00"]


# -- rooftop choice -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "listing_rooftop", "expected"),
    [
        ("sales", None, "Bay Motors San Francisco"),  # first rooftop offering sales
        ("service", None, "Bay Motors San Francisco"),  # the only one with a service schedule
        ("test_drive", OAKLAND_ROOFTOP, "Bay Motors Oakland"),  # where the linked listing is
    ],
)
def test_rooftop_choice(kind, listing_rooftop, expected):
    chosen = ap.choose_rooftop(list(ROOFTOPS), listing_rooftop, ap.DEPARTMENT[kind])
    assert chosen["name"] == expected


def test_single_rooftop_dealers_always_use_it():
    assert ap.choose_rooftop([VANCOUVER_ROOFTOP], None, "service") is VANCOUVER_ROOFTOP


def test_service_prefers_a_rooftop_that_offers_it():
    rooftops = [OAKLAND_ROOFTOP, VANCOUVER_ROOFTOP, SF_ROOFTOP]
    assert ap.choose_rooftop(rooftops, None, "service")["name"] == "Bay Motors San Francisco"
