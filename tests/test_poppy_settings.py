"""The ``[poppy]`` configuration table: every setting, every problem reported at once."""

from __future__ import annotations

from aap.config.poppy import LOOPBACK_ENV, ExcludedTask, PoppySettings, parse_poppy_section
from aap.config.table import Problems, Table


def parse_poppy_table(data):
    """The ``[poppy]`` parser on a Table: (settings, rendered problems)."""
    problems = Problems()
    table = Table.absent("poppy", problems) if data is None else Table(data, "poppy", problems)
    settings = parse_poppy_section(table, problems)
    return settings, problems.render()


def test_defaults_are_production_safe(monkeypatch):
    monkeypatch.delenv(LOOPBACK_ENV, raising=False)
    settings, problems = parse_poppy_table(None)
    assert problems == [] and settings == PoppySettings()
    assert settings.loopback_allowed is False
    assert settings.access_token_ttl == 3600 and settings.dpop_iat_window == 60
    monkeypatch.setenv(LOOPBACK_ENV, "1")
    assert settings.loopback_allowed is True


def test_a_full_table():
    table = {
        "allow_loopback_clients": True,
        "organization": {"name": "Example Motors", "domain": "ExampleMotors.com"},
        "access_token_ttl": 1800,
        "metadata_timeout": 2,
        "blocked_clients": ["https://bad.example/agent.json"],
        "excluded_tasks": [
            {
                "task": "financing pre-approval",
                "alternative": {"references": [{"type": "web", "url": "https://examplemotors.com/finance"}]},
            },
            {"task": "book service"},
        ],
    }
    settings, problems = parse_poppy_table(table)
    assert problems == []
    assert settings.allow_loopback_clients is True
    assert (settings.organization_name, settings.organization_domain) == ("Example Motors", "examplemotors.com")
    assert settings.access_token_ttl == 1800 and settings.metadata_timeout == 2.0
    assert settings.client_allowed("https://bad.example/agent.json") is False
    assert settings.client_allowed("https://good.example/agent.json") is True
    assert settings.excluded_tasks[1] == ExcludedTask("book service")


def test_every_problem_is_reported_at_once():
    table = {
        "access_token_ttl": 10,
        "dpop_iat_window": "60",
        "allow_loopback_clients": "yes",
        "organization": {"domain": "https://examplemotors.com", "color": "red"},
        "allowed_clients": ["http://insecure.example/agent.json"],
        "excluded_tasks": [{"task": ""}, {"task": "x", "alternative": {"references": [{"type": "web"}]}}, 7],
        "typo": 1,
    }
    settings, problems = parse_poppy_table(table)
    assert settings == PoppySettings()  # nothing half-applied from the bad keys
    wheres = [p.split(":")[0] for p in problems]
    assert wheres == [
        "poppy.access_token_ttl",
        "poppy.dpop_iat_window",
        "poppy.allow_loopback_clients",
        "poppy.organization.domain",
        "poppy.organization.color",
        "poppy.allowed_clients",
        "poppy.excluded_tasks[0].task",
        "poppy.excluded_tasks[1].alternative.references[0].url",
        "poppy.excluded_tasks[2]",
        "poppy.typo",
    ]


def test_the_config_loader_section():
    problems = Problems()
    assert parse_poppy_section(Table({"access_token_ttl": 5}, "poppy", problems), problems) == PoppySettings()
    assert problems.items == [("poppy.access_token_ttl", "must be an integer between 60 and 86400")]
