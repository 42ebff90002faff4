"""lead.submit through DealerAgent.handle: codes, storage, idempotency, vehicles, appointments."""

from __future__ import annotations

import copy
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from aap.agent import CallContext, DealerAgent
from aap.config.leads import AppointmentSettings
from aap.errors import AapError
from aap.spec import validate
from aap.store import open_stores
from aap.util.rfc3339 import to_utc_z
from lead_support import (
    CONSENT_TEXT,
    EMAIL,
    FIRST,
    LAST,
    MESSAGE,
    NOW,
    PHONE,
    http_route,
    lead_request,
    lead_settings,
    listing,
    race,
)

PII = (FIRST, LAST, EMAIL, PHONE, PHONE[2:], "blue one", CONSENT_TEXT[:30])


@pytest.fixture
def make_agent(database_url_factory):
    opened = []

    def build(settings=None, listings=None, name="leads.db"):
        stores = open_stores(database_url_factory(name.removesuffix(".db")))
        opened.append(stores)
        agent = DealerAgent(settings or lead_settings(routes=[http_route("http://127.0.0.1:9/adf")]), stores)
        if listings is not None:
            stores.inventory.import_listings(listings)
        return agent

    yield build
    for stores in opened:
        stores.close()


def ctx(now=NOW, caller_id=None):
    return CallContext(binding="test", caller_id=caller_id, now=now)


def submit(agent, body, **kw):
    return agent.handle(copy.deepcopy(body), ctx(**kw))


def assert_refused(agent, body, **kw) -> AapError:
    with pytest.raises(AapError) as caught:
        submit(agent, body, **kw)
    error = caught.value
    assert validate(error.to_dict(), "error") == []
    text = repr(error.to_dict())
    for value in PII:
        assert value not in text, f"customer value leaked into the error: {value!r}"
    return error


def test_lead_submit_is_declared(make_agent):
    agent = make_agent()
    assert "lead.submit" in [s.id for s in agent.skills]


def test_received_lead_is_stored_with_consent_caller_request_and_outbox_before_answering(make_agent):
    agent = make_agent()
    body = lead_request()
    response = submit(agent, body)
    assert validate(response, "lead-submit-response") == []
    data = response["data"]
    assert data["status"] == "received" and data["lead_id"].startswith("lead_")
    assert "replayed" not in data and "appointment" not in data
    assert data["dealer"] == {"name": "Bay Motors Group"}  # no rooftop chosen: the group itself
    lead = agent.stores.leads.get_lead(data["lead_id"])
    assert lead["status"] == "received" and lead["caller_id"] == "anonymous" and lead["binding"] == "test"
    assert lead["request"] == body
    assert lead["response"] == response
    assert lead["consent"]["consent_text"] == CONSENT_TEXT
    assert lead["consent"]["allowed_channels"] == ["email", "sms"]
    assert lead["consent"]["granted_at"] == "2026-03-02T16:55:00Z"
    assert lead["consent"]["grant"] == body["consent"]
    assert [(d["target"], d["status"], d["attempts"]) for d in lead["deliveries"]] == [("crm", "pending", 0)]
    # Durable: a second, independent connection sees it.
    other = open_stores(agent.stores.db.url)
    try:
        assert other.leads.get_lead(data["lead_id"])["status"] == "received"
    finally:
        other.close()


# -- error codes ----------------------------------------------------------------------------


def _without(body, *path):
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return body


def _set(body, value, *path):
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


CASES = [
    # (id, mutate, expected code, a location that must be listed)
    ("consent absent", lambda b: _without(b, "consent"), "CONTACT_CONSENT_REQUIRED", "/consent"),
    ("consent null", lambda b: _set(b, None, "consent"), "CONTACT_CONSENT_REQUIRED", "/consent"),
    ("wrong scope", lambda b: _set(b, ["marketing"], "consent", "scope"), "INVALID_CONSENT", "/consent/scope/0"),
    (
        "extra scope",
        lambda b: _set(b, ["lead_submission", "marketing"], "consent", "scope"),
        "INVALID_CONSENT",
        "/consent/scope",
    ),
    (
        "blank consent text",
        lambda b: _set(b, "   ", "consent", "consent_text"),
        "INVALID_CONSENT",
        "/consent/consent_text",
    ),
    (
        "granted_at without offset",
        lambda b: _set(b, "2026-03-02T16:55:00", "consent", "granted_at"),
        "INVALID_CONSENT",
        "/consent/granted_at",
    ),
    (
        "granted in the future",
        lambda b: _set(b, "2026-03-02T17:10:00Z", "consent", "granted_at"),
        "INVALID_CONSENT",
        "/consent/granted_at",
    ),
    (
        "expired",
        lambda b: _set(b, "2026-03-02T16:59:59Z", "consent", "expires_at"),
        "INVALID_CONSENT",
        "/consent/expires_at",
    ),
    (
        "expires before granted",
        lambda b: _set(
            _set(b, "2026-03-02T16:50:00Z", "consent", "expires_at"), "2026-03-02T16:55:00Z", "consent", "granted_at"
        ),
        "INVALID_CONSENT",
        "/consent/expires_at",
    ),
    (
        "no channels",
        lambda b: _set(b, [], "consent", "allowed_channels"),
        "INVALID_CONSENT",
        "/consent/allowed_channels",
    ),
    ("email channel without email", lambda b: _without(b, "customer", "email"), "INVALID_CONSENT", "/customer/email"),
    ("sms channel without phone", lambda b: _without(b, "customer", "phone"), "INVALID_CONSENT", "/customer/phone"),
    (
        "phone channel without phone",
        lambda b: _without(_set(b, ["email", "phone"], "consent", "allowed_channels"), "customer", "phone"),
        "INVALID_CONSENT",
        "/customer/phone",
    ),
    (
        "preferred channel not consented",
        lambda b: _set(b, "phone", "customer", "preferred_contact"),
        "INVALID_CONSENT",
        "/consent/allowed_channels",
    ),
    (
        "neither email nor phone",
        lambda b: _without(_without(b, "customer", "email"), "customer", "phone"),
        "INVALID_CONSENT",
        "/customer/email",
    ),
    (
        "vehicle condition from trade-in vocabulary",
        lambda b: _set(b, {"make": "Honda", "condition": "excellent"}, "vehicle_of_interest"),
        "INVALID_CONDITION",
        "/vehicle_of_interest/condition",
    ),
    (
        "trade-in condition from sale vocabulary",
        lambda b: _set(b, {"make": "Honda", "condition": "new"}, "trade_in"),
        "INVALID_CONDITION",
        "/trade_in/condition",
    ),
    (
        "unknown condition",
        lambda b: _set(b, {"condition": "mint"}, "trade_in"),
        "INVALID_CONDITION",
        "/trade_in/condition",
    ),
    (
        "missing last name",
        lambda b: _without(b, "customer", "last_name"),
        "MISSING_REQUIRED_FIELD",
        "/customer/last_name",
    ),
    ("missing idempotency key", lambda b: _without(b, "idempotency_key"), "MISSING_REQUIRED_FIELD", "/idempotency_key"),
    (
        "bad phone and unknown key",
        lambda b: _set(_set(b, "415-555", "customer", "phone"), 1, "colour"),
        "SCHEMA_VALIDATION_FAILED",
        "/customer/phone",
    ),
    ("message too long", lambda b: _set(b, "x" * 4001, "message"), "SCHEMA_VALIDATION_FAILED", "/message"),
    (
        "appointment time without offset",
        lambda b: _set(b, {"appointment_type": "sales", "appointment_at": "2026-03-03T10:00:00"}, "appointment"),
        "SCHEMA_VALIDATION_FAILED",
        "/appointment/appointment_at",
    ),
    (
        "short appointment",
        lambda b: _set(b, {"appointment_type": "sales", "duration_minutes": 5}, "appointment"),
        "SCHEMA_VALIDATION_FAILED",
        "/appointment/duration_minutes",
    ),
]


@pytest.mark.parametrize(("mutate", "code", "location"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_gets_its_code_and_lists_the_problem(make_agent, mutate, code, location):
    agent = make_agent()
    error = assert_refused(agent, mutate(lead_request()))
    assert error.code == code
    assert location in [p["instanceLocation"] for p in error.errors], error.errors
    assert agent.stores.leads.count_leads() == 0  # nothing half-written


def test_granted_at_within_the_clock_skew_is_accepted(make_agent):
    agent = make_agent()
    body = lead_request()
    body["consent"]["granted_at"] = "2026-03-02T17:01:30Z"  # 90 s ahead of the dealer's clock (skew 120 s)
    assert submit(agent, body)["data"]["status"] == "received"
    body = lead_request()
    body["consent"]["granted_at"] = "2026-03-02T17:02:30Z"  # 150 s ahead
    assert assert_refused(agent, body).code == "INVALID_CONSENT"


def test_consent_problems_win_over_condition_and_schema_problems_and_all_are_listed(make_agent):
    agent = make_agent()
    body = lead_request(trade_in={"condition": "new"}, colour="red")
    body["consent"]["scope"] = ["marketing"]
    error = assert_refused(agent, body)
    assert error.code == "INVALID_CONSENT"
    locations = {p["instanceLocation"] for p in error.errors}
    assert {"/consent/scope/0", "/trade_in/condition", "/colour"} <= locations


def test_condition_wins_over_schema_problems(make_agent):
    agent = make_agent()
    error = assert_refused(agent, lead_request(trade_in={"condition": "new"}, message="x" * 4001))
    assert error.code == "INVALID_CONDITION"
    assert {"/trade_in/condition", "/message"} <= {p["instanceLocation"] for p in error.errors}


def test_every_consent_time_problem_is_listed_together_with_schema_problems(make_agent):
    # With schema problems the classifier runs before the skill, on the dealer's wall clock.
    agent = make_agent()
    now = datetime.now(UTC)
    body = lead_request(message="x" * 4001)
    body["consent"]["granted_at"] = to_utc_z(now + timedelta(hours=1))
    body["consent"]["expires_at"] = to_utc_z(now + timedelta(minutes=30))
    error = assert_refused(agent, body)
    assert error.code == "INVALID_CONSENT"
    keywords = {(p["instanceLocation"], p["keyword"]) for p in error.errors}
    assert {
        ("/consent/granted_at", "notInFuture"),
        ("/consent/expires_at", "afterGrantedAt"),
        ("/message", "maxLength"),
    } <= keywords


# Every integer-typed field of a lead (LeadSubmitRequest, Vehicle, DealerFee, Appointment; seed 004)
# but the bounded Vehicle.year: the reference list the schema walk of aap.leads.integers must match.
VEHICLE_INTEGERS = ("msrp", "price", "list_price", "mileage", "displacement_cc", "city_mpg", "highway_mpg")
BEYOND_64_BITS = 63369747323023441920  # what the random HTTP tests found: HTTP 500 before the bound


def _integer_places() -> list[tuple[str, ...]]:
    places = [("appointment", "duration_minutes")]
    for vehicle in ("vehicle_of_interest", "trade_in"):
        places += [(vehicle, name) for name in VEHICLE_INTEGERS] + [(vehicle, "fees", "0", "amount")]
    return places


def _with_integer(body, place, value):
    if place[0] == "appointment":
        body["appointment"] = {"appointment_type": "sales", "appointment_at": "2026-03-03T10:00:00-08:00"}
    else:
        body.setdefault(place[0], {"make": "Honda"})
        if place[1] == "fees":
            body[place[0]]["fees"] = [{"name": "Documentation fee", "amount": 0}]
    target = body
    for step in place[:-1]:
        target = target[int(step)] if isinstance(target, list) else target[step]
    target[place[-1]] = value
    return body


@pytest.mark.parametrize("value", [BEYOND_64_BITS, 2**64, 2**53, float(2**70), 1e300])
def test_an_integer_beyond_the_exact_json_range_is_refused_at_its_place_and_nothing_is_stored(make_agent, value):
    """A schema-valid duration of 63369747323023441920 minutes crashed the lead (HTTP 500): the
    skill made it an int the store cannot encode. Every integer field is bounded the same way."""
    agent = make_agent()
    for place in _integer_places():
        error = assert_refused(agent, _with_integer(lead_request(), place, value))
        assert error.code == "SCHEMA_VALIDATION_FAILED", place
        assert error.errors == [
            {
                "instanceLocation": "/" + "/".join(place),
                "keyword": "maximum",
                "error": "must be at most 9007199254740991 (this endpoint's bound: the largest integer every "
                "JSON reader keeps exact, RFC 7493 §2.2)",
            }
        ], place
    assert agent.stores.leads.count_leads() == 0


def test_every_integer_beyond_the_bound_is_listed_at_once_next_to_the_other_problems(make_agent):
    agent = make_agent()
    body = lead_request(message="x" * 4001)
    for place in _integer_places():
        _with_integer(body, place, BEYOND_64_BITS)
    body["consent"]["scope"] = ["marketing"]
    error = assert_refused(agent, body)
    assert error.code == "INVALID_CONSENT"  # the consent class still wins (docs/leads.md §2)
    locations = {p["instanceLocation"] for p in error.errors}
    assert {"/" + "/".join(place) for place in _integer_places()} | {"/message", "/consent/scope/0"} <= locations


def test_integers_up_to_the_bound_are_accepted_and_a_duration_over_a_day_is_left_to_staff(make_agent):
    agent = make_agent()
    for index, place in enumerate(_integer_places()):
        body = _with_integer(lead_request(idempotency_key=f"edge-{index}"), place, 2**53 - 1)
        data = submit(agent, body)["data"]
        assert data["status"] == "received", place
        stored = agent.stores.leads.get_lead(data["lead_id"])
        assert stored["request"] == body  # kept exactly as sent
        if place[0] == "appointment":
            assert data["appointment"]["status"] == "requested"
            assert stored["appointment"]["reason"] == "duration_needs_review"
            assert stored["appointment"]["duration_minutes"] == 2**53 - 1


def test_a_number_field_is_a_double_and_takes_any_finite_value(make_agent):
    agent = make_agent()
    body = lead_request(vehicle_of_interest={"make": "Tesla", "battery_kwh": 1e300, "other_attributes": {"x": 1e300}})
    assert submit(agent, body)["data"]["status"] == "received"


# -- idempotency ----------------------------------------------------------------------------


def test_replay_returns_the_original_data_field_for_field_with_replayed_true(make_agent):
    agent = make_agent()
    body = lead_request(appointment={"appointment_type": "test_drive", "appointment_at": "2026-03-03T11:00:00-08:00"})
    first = submit(agent, body)
    assert first["data"]["appointment"]["status"] == "confirmed"
    second = submit(agent, body, now=NOW + timedelta(hours=3))
    assert validate(second, "lead-submit-response") == []
    assert second["data"].pop("replayed") is True
    assert second == first
    assert agent.stores.leads.count_leads() == 1
    (lead,) = agent.stores.leads.list_leads()
    assert lead["deliveries"] == {"pending": 1}  # no new delivery
    with agent.stores.db.read() as tx:
        assert tx.fetchone("SELECT COUNT(*) FROM appointment_seats")[0] == 1  # no new booking


def test_replay_does_not_recheck_consent(make_agent):
    agent = make_agent()
    body = lead_request()
    body["consent"]["expires_at"] = "2026-03-02T18:00:00Z"
    first = submit(agent, body)
    later = submit(agent, body, now=NOW + timedelta(hours=5))  # the grant has expired by now
    assert later["data"]["replayed"] is True and later["data"]["lead_id"] == first["data"]["lead_id"]


def test_changed_payload_under_the_same_key_is_a_conflict(make_agent):
    agent = make_agent()
    body = lead_request()
    submit(agent, body)
    changed = copy.deepcopy(body)
    changed["message"] = "A different question"
    error = assert_refused(agent, changed)
    assert error.code == "IDEMPOTENCY_CONFLICT" and error.retryable is False
    relabelled = copy.deepcopy(body)
    relabelled["source_agent"] = {"name": "another-label"}
    assert assert_refused(agent, relabelled).code == "IDEMPOTENCY_CONFLICT"
    assert agent.stores.leads.count_leads() == 1


def test_key_order_and_integral_floats_are_the_same_payload(make_agent):
    agent = make_agent()
    body = lead_request(vehicle_of_interest={"year": 2024, "make": "Honda"})
    first = submit(agent, body)
    reordered = dict(reversed(list(copy.deepcopy(body).items())))
    reordered["vehicle_of_interest"] = {"make": "Honda", "year": 2024.0}
    assert submit(agent, reordered)["data"]["lead_id"] == first["data"]["lead_id"]


def test_scope_is_the_verified_caller_never_the_source_agent(make_agent):
    agent = make_agent()
    body = lead_request()
    anonymous = submit(agent, body)
    alice = submit(agent, body, caller_id="poppy:user-alice")
    bob = submit(agent, body, caller_id="poppy:user-bob")
    alice_again = submit(agent, body, caller_id="poppy:user-alice")
    ids = {anonymous["data"]["lead_id"], alice["data"]["lead_id"], bob["data"]["lead_id"]}
    assert len(ids) == 3
    assert alice_again["data"]["lead_id"] == alice["data"]["lead_id"] and alice_again["data"]["replayed"]
    assert agent.stores.leads.get_lead(alice["data"]["lead_id"])["caller_id"] == "id:poppy:user-alice"


def test_a_failed_submission_stores_nothing_so_the_key_can_be_reused(make_agent):
    agent = make_agent()
    body = lead_request()
    broken = copy.deepcopy(body)
    broken["consent"]["scope"] = ["marketing"]
    assert assert_refused(agent, broken).code == "INVALID_CONSENT"
    late = copy.deepcopy(body)
    late["consent"]["granted_at"] = "2026-03-02T18:00:00Z"
    assert assert_refused(agent, late).code == "INVALID_CONSENT"  # semantic failure inside the transaction
    assert submit(agent, body)["data"]["status"] == "received"


def test_keys_survive_restarts_and_expire_after_the_retention(make_agent, tmp_path):
    agent = make_agent()
    body = lead_request()
    first = submit(agent, body)
    agent.stores.close()
    restarted = make_agent()  # same file, new connections and a new agent
    assert submit(restarted, body, now=NOW + timedelta(hours=47))["data"]["replayed"] is True
    # After the 48 h retention the key is free again: a new lead (and the sweep forgets the record).
    fresh = submit(restarted, body, now=NOW + timedelta(hours=49))
    assert fresh["data"]["lead_id"] != first["data"]["lead_id"] and "replayed" not in fresh["data"]
    assert restarted.stores.leads.sweep_idempotency(int((NOW + timedelta(hours=200)).timestamp() * 1000)) == 1


def test_concurrent_identical_submissions_produce_exactly_one_lead(make_agent, tmp_path):
    agent = make_agent()
    body = lead_request(appointment={"appointment_type": "sales", "appointment_at": "2026-03-03T10:00:00-08:00"})
    workers = 8
    agents = [agent] + [DealerAgent(agent.settings, open_stores(agent.stores.db.url)) for _ in range(workers - 1)]
    try:
        results = race(workers, lambda i: submit(agents[i], body))
    finally:
        for a in agents[1:]:
            a.stores.close()
    assert len({r["data"]["lead_id"] for r in results}) == 1
    assert sorted(bool(r["data"].get("replayed")) for r in results) == [False] + [True] * (workers - 1)
    assert agent.stores.leads.count_leads() == 1
    assert agent.stores.leads.delivery_counts() == {"pending": 1}
    with agent.stores.db.read() as tx:
        assert tx.fetchone("SELECT COUNT(*) FROM appointment_seats")[0] == 1


def test_two_leads_cannot_book_the_same_last_slot(make_agent):
    agent = make_agent()
    other = DealerAgent(agent.settings, open_stores(agent.stores.db.url))
    wanted = "2026-03-03T10:00:00-08:00"
    bodies = [lead_request(appointment={"appointment_type": "sales", "appointment_at": wanted}) for _ in range(2)]
    barrier = threading.Barrier(2)
    results = []

    def run(a, b):
        barrier.wait()
        results.append(submit(a, b)["data"]["appointment"])

    threads = [threading.Thread(target=run, args=pair) for pair in ((agent, bodies[0]), (other, bodies[1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.stores.close()
    statuses = sorted(r["status"] for r in results)
    assert statuses == ["confirmed", "proposed"]
    proposed = next(r for r in results if r["status"] == "proposed")
    assert wanted not in proposed["proposed_times"]


# -- appointments end to end ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("appointment", "status"),
    [
        ({"appointment_type": "sales"}, "requested"),
        ({"appointment_type": "test_drive", "appointment_at": "2026-03-03T11:00:00-08:00"}, "confirmed"),
        ({"appointment_type": "sales", "appointment_at": "2026-03-08T11:00:00-07:00"}, "proposed"),  # closed Sunday
        ({"appointment_type": "service", "appointment_at": "2026-03-03T08:00:00-08:00"}, "confirmed"),
    ],
)
def test_appointment_outcomes(make_agent, appointment, status):
    agent = make_agent()
    response = submit(agent, lead_request(appointment=appointment))
    assert validate(response, "lead-submit-response") == []
    got = response["data"]["appointment"]
    assert got["status"] == status and got["appointment_id"].startswith("appt_")
    assert response["data"]["status"] == "received"
    if status == "confirmed":
        assert got["confirmed_at"] == appointment["appointment_at"]
        assert "confirmed for" in response["message"]
    lead = agent.stores.leads.get_lead(response["data"]["lead_id"])
    assert lead["appointment_status"] == status and lead["appointment"]["appointment_id"] == got["appointment_id"]


def test_rejected_appointment_on_a_received_lead(make_agent):
    rooftops = [{"name": "Bay Motors Oakland", "timezone": "America/Los_Angeles", "capabilities": ["sales"]}]
    agent = make_agent(lead_settings(rooftops=rooftops))
    response = submit(
        agent, lead_request(appointment={"appointment_type": "service", "appointment_at": "2026-03-03T10:00:00-08:00"})
    )
    assert validate(response, "lead-submit-response") == []
    assert response["data"]["status"] == "received"
    assert response["data"]["appointment"]["status"] == "rejected"


def _fill_horizon(agent, days=1):
    """Book every sales seat in San Francisco for the next ``days`` days."""
    from zoneinfo import ZoneInfo

    from aap.leads import appointments as ap
    from aap.util.rfc3339 import to_utc_z

    tz = ZoneInfo("America/Los_Angeles")
    week = agent.settings.dealer.rooftops[0]["schedules"][0]["value"]
    with agent.stores.db.transaction() as tx:
        for offset in range(days + 2):
            day = (NOW.astimezone(tz) + timedelta(days=offset)).date()
            for start in ap.day_slots(day, week, tz, 30, 30):
                agent.stores.leads.take_seats(
                    tx,
                    "bay-motors",
                    "Bay Motors San Francisco",
                    "sales",
                    [to_utc_z(start)],
                    1,
                    f"appt_fill_{to_utc_z(start)}",
                    "lead_fill",
                )


def test_no_alternative_in_the_horizon_rejects_the_appointment_by_default(make_agent):
    agent = make_agent(lead_settings(appointments=AppointmentSettings(horizon_days=1)))
    _fill_horizon(agent)
    response = submit(
        agent, lead_request(appointment={"appointment_type": "sales", "appointment_at": "2026-03-02T14:00:00-08:00"})
    )
    assert response["data"]["status"] == "received"
    assert response["data"]["appointment"]["status"] == "rejected"


def test_no_alternative_is_appointment_time_unavailable_when_configured(make_agent):
    agent = make_agent(lead_settings(appointments=AppointmentSettings(horizon_days=1, on_unavailable="error")))
    _fill_horizon(agent)
    body = lead_request(appointment={"appointment_type": "sales", "appointment_at": "2026-03-02T14:00:00-08:00"})
    error = assert_refused(agent, body)
    assert error.code == "APPOINTMENT_TIME_UNAVAILABLE"
    assert agent.stores.leads.count_leads() == 0
    # Nothing was stored under the key: the buyer can resend without the time.
    del body["appointment"]["appointment_at"]
    assert submit(agent, body)["data"]["appointment"]["status"] == "requested"


# -- vehicles ----------------------------------------------------------------------------------

VIN = "1HGCV1F30NA123456"
OTHER_VIN = "2T3P1RFV8PW654321"


def test_identified_listing_links_the_lead_and_routes_by_its_rooftop(make_agent):
    settings = lead_settings(
        routes=[
            http_route("http://127.0.0.1:9/a"),
            http_route("http://127.0.0.1:9/b", rooftop="Bay Motors Oakland", name="oak"),
        ]
    )
    agent = make_agent(settings, listings=[listing(VIN)])
    response = submit(
        agent,
        lead_request(
            vehicle_of_interest={"vin": VIN},
            appointment={"appointment_type": "test_drive", "appointment_at": "2026-03-08T11:00:00-07:00"},
        ),
    )
    data = response["data"]
    assert data["dealer"]["name"] == "Bay Motors Oakland"
    assert data["appointment"]["status"] == "confirmed"  # Oakland is open on Sundays
    lead = agent.stores.leads.get_lead(data["lead_id"])
    assert lead["vehicle_link"] == "linked" and lead["vehicle_id"].startswith("veh_")
    assert lead["listing"]["model"] == "CR-V" and lead["rooftop"] == "Bay Motors Oakland"
    assert [d["target"] for d in lead["deliveries"]] == ["oak"]


def test_unknown_identified_vehicle_is_accepted_as_given(make_agent):
    agent = make_agent(listings=[listing(VIN)])
    response = submit(agent, lead_request(vehicle_of_interest={"vin": OTHER_VIN, "model": "RAV4"}))
    assert response["data"]["status"] == "received"
    assert "did not match a current listing" in response["message"]
    lead = agent.stores.leads.get_lead(response["data"]["lead_id"])
    assert lead["vehicle_link"] == "unknown" and lead["listing"] is None
    assert lead["request"]["vehicle_of_interest"] == {"vin": OTHER_VIN, "model": "RAV4"}


def test_contradicting_identifiers_are_not_guessed(make_agent):
    agent = make_agent(listings=[listing(VIN), listing(OTHER_VIN, stock="T99")])
    response = submit(agent, lead_request(vehicle_of_interest={"vin": VIN, "stock": "T99"}))
    assert agent.stores.leads.get_lead(response["data"]["lead_id"])["vehicle_link"] == "unknown"


def _sold(make_agent, settings=None):
    agent = make_agent(settings, listings=[listing(VIN), listing(OTHER_VIN)])
    agent.stores.inventory.import_listings([listing(OTHER_VIN)], replace=True)  # VIN left the inventory
    return agent


def test_no_longer_available_vehicle_accepts_the_lead_and_rejects_a_test_drive(make_agent):
    agent = _sold(make_agent)
    response = submit(
        agent,
        lead_request(
            vehicle_of_interest={"vin": VIN},
            appointment={"appointment_type": "test_drive", "appointment_at": "2026-03-03T11:00:00-08:00"},
        ),
    )
    assert validate(response, "lead-submit-response") == []
    assert response["data"]["status"] == "received"
    assert response["data"]["appointment"]["status"] == "rejected"
    assert "no longer available" in response["message"]
    lead = agent.stores.leads.get_lead(response["data"]["lead_id"])
    assert lead["vehicle_link"] == "unavailable" and len(lead["deliveries"]) == 1


def test_no_longer_available_vehicle_can_be_rejected_by_policy(make_agent):
    agent = _sold(make_agent, lead_settings(routes=[http_route("http://127.0.0.1:9/a")], unavailable_vehicle="reject"))
    body = lead_request(vehicle_of_interest={"vin": VIN}, appointment={"appointment_type": "sales"})
    response = submit(agent, body)
    assert validate(response, "lead-submit-response") == []
    assert response["data"]["status"] == "rejected"
    assert response["data"]["appointment"]["status"] == "rejected"
    lead = agent.stores.leads.get_lead(response["data"]["lead_id"])
    assert lead["deliveries"] == []  # a rejected lead is never delivered
    replay = submit(agent, body)
    assert replay["data"]["status"] == "rejected" and replay["data"]["replayed"] is True


# -- logs -----------------------------------------------------------------------------------------


def test_no_customer_value_reaches_a_log_line(make_agent, caplog):
    caplog.set_level(logging.DEBUG)
    agent = make_agent()
    body = lead_request(
        appointment={"appointment_type": "sales", "appointment_at": "2026-03-03T10:00:00-08:00", "notes": MESSAGE}
    )
    submit(agent, body)
    submit(agent, body)  # replay
    changed = copy.deepcopy(body)
    changed["message"] = FIRST + " again"
    with pytest.raises(AapError):
        submit(agent, changed)
    broken = copy.deepcopy(body)
    broken["customer"]["email"] = "not an email " + EMAIL
    broken["idempotency_key"] = "other"
    with pytest.raises(AapError) as caught:
        submit(agent, broken)
    assert EMAIL not in repr(caught.value.to_dict())
    text = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    received = [r for r in caplog.records if r.getMessage() == "lead received"]
    assert received and received[0].fields["lead_id"].startswith("lead_")  # logged, by id, as a field
    assert "lead_" not in received[0].getMessage()
    for value in PII:
        assert value not in text
