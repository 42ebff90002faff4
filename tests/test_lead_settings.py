"""The ``[leads]`` table: defaults, every target type, every problem reported at once."""

from __future__ import annotations

import tomllib

import pytest

from aap.config.leads import (
    AdfHttpTarget,
    HttpAuth,
    LeadSettings,
    Route,
    SmtpTarget,
    WebhookTarget,
    parse_leads_section,
)
from aap.config.loader import ConfigError, parse_settings
from aap.config.table import Problems, Table
from aap.server.runner import SettingsSource


def parse_leads_table(data):
    """The ``[leads]`` parser on a Table: (settings, rendered problems)."""
    problems = Problems()
    table = Table.absent("leads", problems) if data is None else Table(data, "leads", problems)
    settings = parse_leads_section(table, problems)
    return settings, problems.render()


FULL = """
consent_clock_skew_seconds = 60
idempotency_retention_hours = 72
unavailable_vehicle = "reject"

[appointments]
slot_minutes = 15
capacity_per_slot = 3
min_lead_minutes = 30
proposal_count = 5
horizon_days = 21
on_unavailable = "error"

[delivery]
max_attempts = 5
base_backoff_seconds = 10
max_backoff_seconds = 600
timeout_seconds = 5
poll_seconds = 1
lease_seconds = 60
batch_size = 4
in_process = false

[[routes]]
rooftop = "*"
[[routes.targets]]
type = "adf_http"
name = "crm"
url = "https://crm.example.com/adf"
headers = { "X-Dealer" = "bay" }
auth = { type = "basic", username_env = "CRM_USER", password_env = "CRM_PASSWORD" }
[[routes.targets]]
type = "smtp"
host = "smtp.example.com"
from = "aap@dealer.example"
to = ["leads@dealer.example", "bdc@dealer.example"]
username_env = "SMTP_USER"
password_env = "SMTP_PASSWORD"

[[routes]]
rooftop = "Bay Motors Oakland"
[[routes.targets]]
type = "webhook"
url = "https://hooks.example.com/aap"
secret_env = "HOOK_SECRET"
"""


def test_defaults_when_the_table_is_absent():
    settings, problems = parse_leads_table(None)
    assert problems == []
    assert settings == LeadSettings()
    assert settings.consent_clock_skew_seconds == 120
    assert settings.idempotency_retention_hours == 48
    assert settings.routes == ()


def test_full_table_parses_into_typed_settings():
    settings, problems = parse_leads_table(tomllib.loads(FULL))
    assert problems == []
    assert settings.consent_clock_skew_seconds == 60
    assert settings.idempotency_retention_hours == 72
    assert settings.unavailable_vehicle == "reject"
    assert settings.appointments.capacity_per_slot == 3
    assert settings.appointments.on_unavailable == "error"
    assert settings.delivery.max_attempts == 5 and settings.delivery.in_process is False
    default, oakland = settings.routes
    crm, mail = default.targets
    assert crm == AdfHttpTarget(
        "crm",
        "https://crm.example.com/adf",
        (("X-Dealer", "bay"),),
        HttpAuth("basic", username_env="CRM_USER", password_env="CRM_PASSWORD"),
    )
    assert isinstance(mail, SmtpTarget) and mail.port == 587 and mail.starttls and not mail.ssl
    assert mail.to == ("leads@dealer.example", "bdc@dealer.example")
    assert mail.name == "smtp@*"  # default name: type@rooftop
    (hook,) = oakland.targets
    assert isinstance(hook, WebhookTarget) and hook.secret_env == "HOOK_SECRET"
    # The most specific route wins; the default catches the rest.
    assert settings.route_for("bay", "Bay Motors Oakland") is oakland
    assert settings.route_for("bay", "Bay Motors San Francisco") is default
    assert settings.route_for(None, None) is default
    assert settings.target("crm") is crm


def test_every_problem_is_reported_at_once():
    table = {
        "idempotency_retention_hours": 12,  # below the 24 h the spec requires
        "consent_clock_skew_seconds": -1,
        "colour": "blue",  # unknown key
        "appointments": {"slot_minutes": 0, "on_unavailable": "shrug"},
        "delivery": {"max_backoff_seconds": 1, "base_backoff_seconds": 5},
        "routes": [
            {
                "rooftop": "*",
                "targets": [
                    {"type": "adf_http", "url": "http://crm.example.com/adf"},  # clear text
                    {"type": "smtp", "host": "mail.example.com", "starttls": False, "from": "not-an-address", "to": []},
                    {"type": "webhook", "url": "https://h.example", "secret_env": "has space"},
                    {"type": "fax"},
                ],
            },
            {"rooftop": "Oakland", "targets": []},
        ],
    }
    _, problems = parse_leads_table(table)
    text = "\n".join(problems)
    for expected in (
        "leads.idempotency_retention_hours: must be an integer between 24",
        "leads.consent_clock_skew_seconds: must be an integer between 0",
        "leads.colour: unknown key",
        "leads.appointments.slot_minutes: must be an integer between 5",
        "leads.appointments.on_unavailable: must be one of",
        "leads.delivery.max_backoff_seconds: must not be smaller than base_backoff_seconds",
        "leads.routes[0].targets[0].url: must use https",
        "leads.routes[0].targets[1].starttls: must be true",
        "leads.routes[0].targets[1].from: must be an e-mail address",
        "leads.routes[0].targets[1].to: must be a non-empty array",
        "leads.routes[0].targets[2].secret_env: must be an environment variable name",
        "leads.routes[0].targets[3].type: must be one of",
        "leads.routes[1].targets: must be a non-empty array",
    ):
        assert expected in text, expected


def test_plain_http_and_smtp_are_allowed_to_loopback_only():
    table = {
        "routes": [
            {
                "targets": [
                    {"type": "adf_http", "url": "http://127.0.0.1:8080/adf"},
                    {
                        "type": "smtp",
                        "host": "127.0.0.1",
                        "port": 2525,
                        "starttls": False,
                        "from": "a@b.example",
                        "to": ["c@d.example"],
                    },
                ]
            }
        ]
    }
    settings, problems = parse_leads_table(table)
    assert problems == []
    assert settings.routes[0].targets[1].starttls is False


def test_duplicate_target_names_and_secret_headers_are_rejected():
    table = {
        "routes": [
            {"rooftop": "*", "targets": [{"type": "webhook", "name": "x", "url": "https://a.example"}]},
            {"rooftop": "A", "targets": [{"type": "webhook", "name": "x", "url": "https://b.example"}]},
            {
                "rooftop": "B",
                "targets": [
                    {"type": "webhook", "name": "y", "url": "https://c.example", "headers": {"Idempotency-Key": "nope"}}
                ],
            },
        ]
    }
    _, problems = parse_leads_table(table)
    assert any('target name "x" is already used' in p for p in problems)
    assert any("Idempotency-Key: is set by the delivery worker" in p for p in problems)


def test_backoff_is_exponential_and_capped():
    policy = LeadSettings().delivery
    assert [policy.backoff(n) for n in (1, 2, 3)] == [30, 60, 120]
    assert policy.backoff(50) == policy.max_backoff_seconds == 3600


def test_section_feeds_the_loader_problem_list():
    problems = Problems()
    settings = parse_leads_section(Table({"idempotency_retention_hours": 1}, "leads", problems), problems)
    assert isinstance(settings, LeadSettings)
    assert problems.items == [("leads.idempotency_retention_hours", "must be an integer between 24 and 8760")]


def test_the_leads_table_is_a_registered_section_of_the_config_file():
    doc = {"id": "t", "public_url": "https://dealer.example", "dealer": {"name": "T", "rooftops": [{"name": "T Main"}]}}
    assert parse_settings(doc, environ={}).leads == LeadSettings()
    settings = parse_settings({**doc, "leads": tomllib.loads(FULL)}, environ={})
    assert settings.leads.target("crm").url == "https://crm.example.com/adf"
    with pytest.raises(ConfigError) as info:
        parse_settings({**doc, "leads": {"routes": [{"targets": [{"type": "smtp"}]}, 5]}}, environ={})
    assert info.value.problems == [
        "leads.routes[0].targets[0].host: is required",
        "leads.routes[0].targets[0].from: is required",
        "leads.routes[0].targets[0].to: is required",
        "leads.routes[1]: must be a table, not an integer",
    ]


def test_settings_survive_the_json_round_trip_to_server_workers():
    """Server workers load their settings from a SettingsSource sent as JSON: [leads] included."""
    settings, _ = parse_leads_table(tomllib.loads(FULL))
    source = SettingsSource(None, {"leads": tomllib.loads(FULL), "public_url": "https://dealer.example"}, environ={})
    rebuilt = SettingsSource.from_json(source.to_json()).load().leads
    assert rebuilt == settings
    assert isinstance(rebuilt.routes[0], Route)
    assert isinstance(rebuilt.routes[0].targets[1], SmtpTarget)
