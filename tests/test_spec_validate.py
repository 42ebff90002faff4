"""aap.spec.validate: every problem at once, precise pointers, no customer values."""

from __future__ import annotations

import copy
import json

import pytest

import aap.spec as spec

SEARCH = {
    "type": "inventory.search.request",
    "filters": {"make": ["Honda"], "condition": ["new"], "body": ["suv"], "price_max": 40000, "year_min": 2023},
    "pagination": {"limit": 25},
    "sort": {"field": "price", "order": "asc"},
    "privacy": {"anonymous": True},
}

LEAD = {
    "type": "lead.submit.request",
    "customer": {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "email": "ada@example.com",
        "phone": "+14155550123",
        "preferred_contact": "email",
    },
    "consent": {
        "granted_at": "2026-04-30T11:05:00Z",
        "allowed_channels": ["email", "phone"],
        "consent_text": "I agree to be contacted.",
        "scope": ["lead_submission"],
    },
    "source_agent": {"name": "example-buyer"},
    "idempotency_key": "01HZ9PIOTRNOWAK8425LEAD0042",
}


def locations(problems):
    return [(p["instanceLocation"], p["keyword"]) for p in problems]


def test_valid_requests_have_no_problems():
    assert spec.validate(SEARCH, "inventory-search-request") == []
    assert spec.is_valid(SEARCH, "inventory-search-request")
    assert spec.validate(LEAD, "lead-submit-request") == []
    assert spec.validate({"type": "dealer.information.request"}, "dealer-information-request") == []


def test_three_problems_three_entries():
    bad = copy.deepcopy(SEARCH)
    bad["filters"]["year_min"] = "2023"  # type
    bad["filters"]["colour"] = ["red"]  # unknown filter
    bad["pagination"]["limit"] = 500  # above maximum
    problems = spec.validate(bad, "inventory-search-request")
    assert locations(problems) == [
        ("/filters/colour", "additionalProperties"),
        ("/filters/year_min", "type"),
        ("/pagination/limit", "maximum"),
    ]
    assert not spec.is_valid(bad, "inventory-search-request")


def test_each_unexpected_key_is_its_own_entry():
    bad = copy.deepcopy(SEARCH)
    bad["filters"]["colour"] = ["red"]
    bad["filters"]["seats"] = 5
    bad["extra"] = True
    problems = spec.validate(bad, "inventory-search-request")
    assert locations(problems) == [
        ("/extra", "additionalProperties"),
        ("/filters/colour", "additionalProperties"),
        ("/filters/seats", "additionalProperties"),
    ]
    assert "make" in problems[1]["error"]  # lists what is allowed


def test_missing_fields_point_at_the_field():
    problems = spec.validate({"type": "lead.submit.request"}, "lead-submit-request")
    assert locations(problems) == [
        ("/consent", "required"),
        ("/customer", "required"),
        ("/idempotency_key", "required"),
        ("/source_agent", "required"),
    ]
    assert {p["error"] for p in problems} == {"is required"}


def test_anyof_of_identifiers_is_one_clear_entry():
    problems = spec.validate({"type": "inventory.vehicle.request"}, "vehicle-detail-request")
    assert problems == [
        {"instanceLocation": "", "keyword": "required", "error": "one of vin, stock or vehicle_id is required"}
    ]


def test_anyof_branch_problems_are_leaves():
    customer = {"first_name": "A", "last_name": "B"}
    assert spec.validate(customer, "customer") == [
        {"instanceLocation": "", "keyword": "required", "error": "one of email or phone is required"}
    ]
    # a bad value inside an anyOf branch is reported at the value, not as "anyOf"
    bad = {"vehicle_type": "car", "other_attributes": {"final_drive": {"x": 1}}}
    problems = spec.validate(bad, "vehicle")
    assert locations(problems) == [("/other_attributes/final_drive", "type")]
    assert problems[0]["error"] == "must be string, number, boolean or array"


def test_conditional_and_not_are_explained():
    bad = copy.deepcopy(SEARCH)
    bad["sort"] = {"field": "distance_mi", "order": "asc"}
    bad["pagination"] = {"cursor": "abc", "skip": 10}
    problems = spec.validate(bad, "inventory-search-request")
    assert problems == [
        {"instanceLocation": "/filters/near", "keyword": "required", "error": "is required"},
        {"instanceLocation": "/pagination", "keyword": "not", "error": "cursor and skip must not be used together"},
    ]


def test_nested_problems_everywhere_at_once():
    bad = copy.deepcopy(LEAD)
    bad["customer"]["phone"] = "555-1234"
    bad["consent"]["scope"] = ["marketing"]
    bad["consent"]["granted_at"] = "2026-04-30 11:05"
    bad["appointment"] = {"appointment_at": "2026-05-03T18:00:00Z"}
    problems = spec.validate(bad, "lead-submit-request")
    assert locations(problems) == [
        ("/appointment/appointment_type", "required"),
        ("/consent/granted_at", "format"),
        ("/consent/scope/0", "enum"),
        ("/customer/phone", "pattern"),
    ]


DISTINCTIVE = ["zebra.quartz@example.org", "Zebediah Quartzwhistle", "ZQ-99-SECRET"]


@pytest.mark.parametrize(
    "name,instance",
    [
        (
            "customer",
            {
                "first_name": DISTINCTIVE[1],
                "last_name": 7,
                "email": DISTINCTIVE[0],
                "phone": DISTINCTIVE[2],
                "preferred_contact": DISTINCTIVE[1],
                DISTINCTIVE[2]: DISTINCTIVE[0],
            },
        ),
        (
            "lead-submit-request",
            {
                "type": DISTINCTIVE[0],
                "customer": DISTINCTIVE[1],
                "consent": {
                    "consent_text": DISTINCTIVE[1],
                    "scope": [DISTINCTIVE[0]],
                    "granted_at": DISTINCTIVE[2],
                    "allowed_channels": [DISTINCTIVE[0]] * 2,
                },
                "message": DISTINCTIVE[1] * 400,
                "idempotency_key": DISTINCTIVE[2],
                "source_agent": {"name": "", "url": DISTINCTIVE[1]},
            },
        ),
        (
            "inventory-search-request",
            {
                "type": "inventory.search.request",
                "filters": {
                    "query": DISTINCTIVE[1] * 20,
                    "vin": DISTINCTIVE[2],
                    "make": [DISTINCTIVE[0], DISTINCTIVE[0]],
                },
                "pagination": {"cursor": ""},
                "sort": {"field": DISTINCTIVE[1], "order": DISTINCTIVE[0]},
            },
        ),
        ("vehicle-detail-request", {"type": "inventory.vehicle.request", "vin": DISTINCTIVE[0], "stock": ""}),
    ],
)
def test_messages_never_echo_instance_values(name, instance):
    problems = spec.validate(instance, name)
    assert problems
    text = json.dumps([p["error"] for p in problems])
    for value in DISTINCTIVE:
        assert value not in text
        assert value[:8] not in text


def test_format_assertions():
    def fmt(instance):
        return [
            p["keyword"] for p in spec.validate(instance, "consent-grant") if p["instanceLocation"] == "/granted_at"
        ]

    base = {"allowed_channels": ["email"], "consent_text": "ok", "scope": ["lead_submission"]}
    assert fmt({**base, "granted_at": "2026-04-30T11:05:00Z"}) == []
    assert fmt({**base, "granted_at": "2026-04-30T11:05:00+02:00"}) == []
    assert fmt({**base, "granted_at": "2026-04-30T11:05:00"}) == ["format"]  # no offset
    assert fmt({**base, "granted_at": "2026-02-30T11:05:00Z"}) == ["format"]
    assert fmt({**base, "granted_at": "yesterday"}) == ["format"]

    assert spec.is_valid({"inventory_date": "2026-04-21"}, "vehicle")
    assert not spec.is_valid({"inventory_date": "2026-4-21"}, "vehicle")
    assert not spec.is_valid({"inventory_date": "2026-13-01"}, "vehicle")
    assert spec.is_valid({"vdp_url": "https://www.example.com/x"}, "vehicle")
    assert not spec.is_valid({"vdp_url": "not a url"}, "vehicle")
    assert not spec.is_valid({"vdp_url": "/relative/path"}, "vehicle")
    customer = {"first_name": "A", "last_name": "B"}
    assert spec.is_valid({**customer, "email": "a.b+c@mail.example.com"}, "customer")
    for email in ("a@b", "no-at-sign", "a@@b.com", "a b@c.com"):
        assert not spec.is_valid({**customer, "email": email}, "customer"), email


def test_integral_floats_are_integers():
    assert spec.validate({"year": 2020.0}, "vehicle") == []
    assert locations(spec.validate({"year": 2020.5}, "vehicle")) == [("/year", "type")]
    assert locations(spec.validate({"year": True}, "vehicle")) == [("/year", "type")]
    search = copy.deepcopy(SEARCH)
    search["pagination"]["limit"] = 25.0
    assert spec.validate(search, "inventory-search-request") == []


def test_order_is_deterministic_and_numeric():
    bad = {"type": "inventory.search.request", "filters": {"make": [""] * 12}}
    problems = spec.validate(bad, "inventory-search-request")
    assert [p["instanceLocation"] for p in problems][:3] == ["/filters/make", "/filters/make/0", "/filters/make/1"]
    assert problems[-1]["instanceLocation"] == "/filters/make/11"
    assert spec.validate(bad, "inventory-search-request") == problems


def test_problems_fit_the_error_schema():
    bad = copy.deepcopy(SEARCH)
    bad["filters"]["near"] = {"latitude": 91}
    bad["currency"] = "EUR"
    problems = spec.validate(bad, "inventory-search-request")
    assert len(problems) == 4
    error = {
        "type": "aap.error",
        "error_id": "err_1",
        "code": "SCHEMA_VALIDATION_FAILED",
        "message": "The request does not match the schema.",
        "retryable": False,
        "created_at": "2026-04-30T10:15:30Z",
        "details": {"errors": problems},
    }
    assert spec.validate(error, "error") == []
    for p in problems:
        assert p["instanceLocation"] == "" or p["instanceLocation"].startswith("/")


def test_pointer_escaping():
    bad = copy.deepcopy(SEARCH)
    bad["filters"]["a/b~c"] = 1
    problems = spec.validate(bad, "inventory-search-request")
    assert problems[0]["instanceLocation"] == "/filters/a~1b~0c"


def test_responses_and_discovery_documents():
    listing = {
        "vin": "1HGCV1F30NA123456",
        "status": "available",
        "updated_at": "2026-04-30T08:42:00Z",
        "condition": "used",
    }
    response = {"type": "inventory.vehicle.response", "data": listing}
    assert spec.validate(response, "vehicle-detail-response") == []
    listing_bad = {**listing, "condition": "fair"}
    del listing_bad["vin"]
    problems = spec.validate({"type": "inventory.vehicle.response", "data": listing_bad}, "vehicle-detail-response")
    assert locations(problems) == [("/data", "required"), ("/data/condition", "enum")]
    assert problems[0]["error"] == "one of vin, vehicle_id or stock is required"
    assert problems[1]["error"] == "must be one of: new, used, cpo"


def test_contains_explains_the_closest_item():
    card = {
        "name": "x",
        "description": "y",
        "version": "1",
        "supportedInterfaces": [
            {"url": "https://d.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "extensions": [
                {
                    "uri": "https://autoagentprotocol.org/extensions/aap/v3.1",
                    "required": True,
                    "params": {
                        "id": "d",
                        "version": "3.1.0",
                        "schema_base_url": "https://autoagentprotocol.org/v3.1/schemas/",
                        "poppy": "https://d.example/.well-known/poppy.json",
                        "llms_txt": "https://d.example/llms.txt",
                        "mcp": {
                            "url": "https://d.example/mcp",
                            "transport": "streamable-http",
                            "protocol_versions": ["2026-07-28", "2025-11-25"],
                            "public_read": True,
                        },
                    },
                }
            ]
        },
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [{"id": "a", "name": "b", "description": "c", "tags": ["t"]}],
    }
    assert locations(spec.validate(card, "agent-card")) == [
        ("/capabilities/extensions", "contains"),
        ("/capabilities/extensions/0/params/skills", "required"),
    ]
    # a plain "must contain X" needs no item-level explanation
    consent = {
        "granted_at": "2026-04-30T11:05:00Z",
        "allowed_channels": ["phone"],
        "consent_text": "ok",
        "scope": ["lead_submission"],
    }
    lead = {**LEAD, "consent": consent}
    assert spec.validate(lead, "lead-submit-request") == [
        {
            "instanceLocation": "/consent/allowed_channels",
            "keyword": "contains",
            "error": "must contain at least 1 item equal to email",
        }
    ]
