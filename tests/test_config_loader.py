"""The TOML configuration: demo, template, every problem with its path, overrides, extension."""

from __future__ import annotations

import dataclasses
import re
import textwrap
import tomllib

import pytest

from aap.config import loader
from aap.config.loader import (
    ConfigError,
    Section,
    load_settings,
    packaged_toml,
    parse_settings,
)
from aap.config.model import ALL_FILTERS, ALL_SORT_FIELDS, ConnectionLimits
from aap.config.urls import public_url_problem
from aap.spec import validate

NO_ENV: dict[str, str] = {}

MINIMAL = """
id = "t"
public_url = "https://dealer.example"

[dealer]
name = "Test Motors"
[[dealer.rooftops]]
name = "Test Motors Main"
"""


def parse(text: str, **kw) -> object:
    return parse_settings(tomllib.loads(textwrap.dedent(text)), environ=kw.pop("environ", NO_ENV), **kw)


def problems_of(text: str, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(text, **kw)
    return info.value.problems


def paths(problems: list[str]) -> set[str]:
    return {p.split(": ", 1)[0] for p in problems}


# -- the demo dealer group -------------------------------------------------------------


def test_demo_dealer_group_loads_with_four_rooftops_one_in_canada():
    settings = load_settings(environ=NO_ENV)
    assert settings.deployment_id == "demo-motors-group"
    assert settings.public_url == "http://127.0.0.1:8000"
    assert settings.source_path is None
    assert settings.dealer.name == "Demo Motors Group"
    names = [r["name"] for r in settings.dealer.rooftops]
    assert names == [
        "Demo Motors San Francisco",
        "Demo Motors Oakland Pre-Owned",
        "Demo Powersports San Jose",
        "Demo Motors Vancouver",
    ]
    vancouver = settings.dealer.rooftop("Demo Motors Vancouver")
    assert vancouver["currency"] == "CAD"
    assert vancouver["timezone"] == "America/Vancouver"
    assert vancouver["address"]["country"] == "CA"
    assert all(f["amount"] > 0 for f in vancouver["fees"])
    powersports = settings.dealer.rooftop("Demo Powersports San Jose")
    assert {"motorcycle_sales", "powersports"} <= set(powersports["capabilities"])
    assert settings.search.currencies == ("USD", "CAD")
    assert settings.search.filters == ALL_FILTERS
    assert settings.search.sort_fields == ALL_SORT_FIELDS
    assert len(settings.features) >= 12
    assert {"adaptive_cruise_control", "apple_carplay", "android_auto", "heated_front_seats", "blind_spot_monitor"} <= {
        f.code for f in settings.features
    }


def test_demo_closed_days_become_null_and_profile_is_valid_dealer_information():
    settings = load_settings(environ=NO_ENV)
    sf = settings.dealer.rooftop("Demo Motors San Francisco")
    service = next(s for s in sf["schedules"] if s["name"] == "service")
    assert service["value"]["sunday"] is None
    assert service["value"]["monday"] == {"open": "07:00", "close": "18:00"}
    assert validate(settings.dealer.info, "dealer-information") == []
    assert validate(settings.search.to_json(), "inventory-capabilities") == []
    for rooftop in settings.dealer.rooftops:
        for phone in rooftop["phones"]:
            assert phone["value"].startswith("+") and phone["value"][1:].isdigit()


def test_agent_identity_comes_from_agent_table():
    settings = load_settings(environ=NO_ENV)
    assert settings.agent.name == "Demo Motors Group"
    assert settings.agent.provider_organization == "Demo Motors Group"
    assert settings.agent.provider_url == "https://demomotors.example"


# -- the template ---------------------------------------------------------------------


def test_template_loads_as_is_and_documents_every_key():
    text = packaged_toml("template.toml")
    settings = parse_settings(tomllib.loads(text), environ=NO_ENV)
    assert settings.deployment_id == "example-motors"
    assert settings.dealer.rooftops[0]["schedules"][0]["value"]["sunday"] is None
    assert validate(settings.dealer.info, "dealer-information") == []
    # Every option of every section is at least mentioned in the template.
    for key in (
        "id",
        "public_url",
        "database",
        "a2a_tenant",
        "name",
        "description",
        "version",
        "documentation_url",
        "icon_url",
        "provider",
        "scope",
        "currencies",
        "default_currency",
        "default_mileage_unit",
        "default_limit",
        "max_limit",
        "offset",
        "sort_fields",
        "default_sort",
        "filters",
        "code",
        "label",
        "enabled",
        "per_minute",
        "burst",
        "max_body_bytes",
        "cursor_ttl_seconds",
        "count_timeout_ms",
        "dealer_id",
        "welcome_message",
        "legal_name",
        "website",
        "notes",
        "currency",
        "timezone",
        "geo",
        "address",
        "phones",
        "emails",
        "capabilities",
        "fees",
        "schedules",
        "[[dealers]]",
    ):
        assert key in text, key


def _uncommented_examples(text: str) -> str:
    """The template's commented [leads], [poppy] and [mcp] examples, uncommented."""
    region = text[text.index("# -- Lead delivery") :]
    lines = [line[2:] for line in region.splitlines() if line.startswith("# ")]
    return "\n".join(line for line in lines if re.match(r"^(\[\[?[a-z_.]+\]\]?$|[A-Za-z_][A-Za-z0-9_]* = )", line))


def test_template_shows_loadable_leads_poppy_and_mcp_examples():
    from aap.config.leads import AdfHttpTarget, LeadSettings, SmtpTarget
    from aap.config.mcp import McpSettings
    from aap.config.poppy import PoppySettings

    text = packaged_toml("template.toml")
    as_is = parse_settings(tomllib.loads(text), environ=NO_ENV)
    assert (as_is.leads, as_is.poppy, as_is.mcp) == (LeadSettings(), PoppySettings(), McpSettings())

    examples = _uncommented_examples(text)
    for header in (
        "[leads]",
        "[leads.appointments]",
        "[leads.delivery]",
        "[[leads.routes]]",
        "[[leads.routes.targets]]",
        "[poppy]",
        "[[poppy.excluded_tasks]]",
        "[mcp]",
    ):
        assert header in examples.splitlines(), header
    settings = parse_settings(tomllib.loads(text + "\n" + examples), environ=NO_ENV)
    (route,) = settings.leads.routes
    crm, mail = route.targets
    assert isinstance(crm, AdfHttpTarget) and crm.auth is not None and crm.headers
    assert isinstance(mail, SmtpTarget) and mail.to and mail.username_env == "SMTP_USER"
    assert settings.leads.route_for(None, "Example Motors Springfield") is route
    assert settings.poppy.organization_name == "Example Motors"
    assert settings.poppy.excluded_tasks[0].alternative is not None
    assert settings.mcp.allowed_hosts == ("aap.internal:8000",)
    # Every key of the three sections is shown (organization_* as the organization table,
    # sub-tables as [leads.appointments] / [[leads.routes]] headers).
    for section in (settings.leads, settings.leads.appointments, settings.leads.delivery, settings.poppy, settings.mcp):
        for f in dataclasses.fields(section):
            key = "organization" if f.name.startswith("organization_") else f.name
            assert re.search(rf"^({key} = |\[+(leads|poppy)\.{key}\])", examples, re.M), key
    for key in (
        "type",
        "name",
        "url",
        "headers",
        "auth",
        "content_type",
        "host",
        "port",
        "starttls",
        "ssl",
        "from",
        "to",
        "username_env",
        "password_env",
        "subject",
        "rooftop",
        "dealer_id",
        "secret_env",
        "task",
        "alternative",
    ):
        assert key in text, key


def test_minimal_file_gets_defaults():
    settings = parse(MINIMAL)
    assert settings.agent.name == "Test Motors"
    assert "Test Motors" in settings.agent.description
    assert settings.search.filters == ALL_FILTERS
    assert settings.search.default_sort == ("updated_at", "desc")
    assert settings.database_url == "sqlite:///aap.db"
    assert settings.max_body_bytes == 1_048_576 and settings.cursor_ttl_seconds == 86_400
    assert settings.count_timeout_ms == 0  # exact totals, however long they take
    assert settings.features == ()


def test_an_omitted_sections_defaults_are_parsed_once_and_shared_only_when_immutable():
    first, second = parse(MINIMAL), parse(MINIMAL.replace("Test Motors", "Other Motors"))
    assert first.search is second.search and first.leads is second.leads  # one parse of the defaults
    assert first.search.filters == ALL_FILTERS
    given = parse(MINIMAL + "\n[search]\nmax_limit = 7\ndefault_limit = 5\n")
    assert given.search is not first.search and given.search.max_limit == 7 and first.search.max_limit != 7
    assert "agent" not in loader._OMITTED  # its defaults name the dealer: each file's own
    for fields in loader._OMITTED.values():
        for value in fields.values():
            hash(value)  # hashes by content: nothing shared can be changed by one agent


def test_an_override_leaves_the_callers_document_as_it_was_given():
    doc = tomllib.loads(MINIMAL)
    kept = tomllib.loads(MINIMAL)
    settings = parse_settings(
        doc, environ={"AAP_DATABASE_URL": "sqlite:///elsewhere.db"}, overrides={"public_url": "https://x.example"}
    )
    assert settings.database_url == "sqlite:///elsewhere.db" and settings.public_url == "https://x.example"
    assert doc == kept


# -- every problem, each with its path ----------------------------------------------


BROKEN = """
id = ""
public_url = "http://dealer.example"
database = "mysql://db"
bogus = 1

[search]
scope = "aggregate"
currencies = ["USD", "EUR"]
default_limit = 50
max_limit = 40
sort_fields = ["price", "distance_mi"]
filters = ["make", "rooftops"]
default_sort = { field = "distance_mi", order = "up" }

[[features]]
code = "Bad Code"
label = "Bad"

[rate_limit]
per_minute = 0

[server]
max_body_bytes = 10
count_timeout_ms = -5

[dealer]
name = "Broken Motors"
[[dealer.rooftops]]
name = "Main"
timezone = "Mars/Olympus_Mons"
phone = "+14155550100"
[[dealer.rooftops]]
name = "Main"
timezone = "America/Vancouver"
[[dealer.rooftops.schedules]]
name = "sales"
value = { monday = { open = "09:00", close = "08:00" }, sunday = "closed" }

[unknown_table]
x = 1
"""


def test_every_problem_is_reported_at_once_with_its_toml_path():
    problems = problems_of(BROKEN)
    found = paths(problems)
    expected = {
        "id",
        "public_url",
        "database",
        "bogus",
        "unknown_table",
        "search.currencies",
        "search.default_limit",
        "search.filters",
        "search.sort_fields",
        "search.default_sort.field",
        "search.default_sort.order",
        "features[0].code",
        "rate_limit.per_minute",
        "server.max_body_bytes",
        "server.count_timeout_ms",
        "dealer.rooftops[0].timezone",
        "dealer.rooftops[1].name",
        "dealer.rooftops[1].schedules[0].value.monday",
        "dealers",
    }
    assert expected <= found, expected - found
    # The unknown rooftop key is reported by the DealerInformation schema at the rooftop.
    assert any(p.startswith("dealer.rooftops[0]") and "phone" in p for p in problems)
    text = "\n".join(problems)
    assert "dealer.rooftops[0].timezone: unknown IANA timezone" in text
    assert "unknown key" in text


def test_config_error_message_lists_every_problem():
    with pytest.raises(ConfigError) as info:
        parse(BROKEN)
    message = str(info.value)
    for problem in info.value.problems:
        assert problem in message


def test_schema_problems_are_mapped_to_toml_paths():
    problems = problems_of(
        MINIMAL
        + """
geo = { latitude = 123.0, longitude = 0.0 }
fees = [{ name = "Doc", amount = -5 }]
currency = "EUR"
[[dealer.rooftops.schedules]]
value = { monday = { open = "9am", close = "17:00" } }
"""
    )
    found = paths(problems)
    assert {
        "dealer.rooftops[0].geo.latitude",
        "dealer.rooftops[0].fees[0].amount",
        "dealer.rooftops[0].currency",
    } <= found
    assert any(p.startswith("dealer.rooftops[0].schedules[0].value.monday") for p in found)


def test_missing_dealer_and_ids_are_required():
    problems = problems_of('public_url = "https://dealer.example"\n')
    assert {"id", "dealer"} <= paths(problems)


def test_the_a2a_routing_value_is_a2a_tenant_and_its_old_key_is_still_read():
    with_id = MINIMAL.replace('id = "t"', 'id = "t"\n{}')
    assert parse(with_id.format('a2a_tenant = "lot-7"')).a2a_tenant == "lot-7"
    assert parse(with_id.format('tenant = "lot-7"')).a2a_tenant == "lot-7"
    assert parse(MINIMAL).a2a_tenant is None
    problems = problems_of(with_id.format('a2a_tenant = "lot-7"\ntenant = "lot-8"'))
    assert problems == ["tenant: is the old name of a2a_tenant: give one of them"]


def test_type_errors_name_the_expected_type():
    problems = problems_of(
        MINIMAL.replace('id = "t"', "id = 5")
        + """
[search]
offset = "yes"
max_limit = 1.5
"""
    )
    text = "\n".join(problems)
    assert "id: must be a string, not an integer" in text
    assert "search.offset: must be true or false, not a string" in text
    assert "search.max_limit: must be an integer, not a float" in text


def test_default_currency_must_be_supported():
    problems = problems_of(MINIMAL + '[search]\ncurrencies = ["CAD"]\n')
    assert "search.default_currency" in paths(problems)


def test_toml_syntax_error_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("id = \n")
    with pytest.raises(ConfigError) as info:
        load_settings(str(bad), environ=NO_ENV)
    assert info.value.source == str(bad)
    assert info.value.problems[0].startswith("(syntax)")
    with pytest.raises(ConfigError) as info:
        load_settings(str(tmp_path / "missing.toml"), environ=NO_ENV)
    assert "not found" in info.value.problems[0]


def test_loopback_http_is_allowed_but_other_http_is_not():
    for url in ("http://127.0.0.1:8000", "http://localhost:9000", "http://[::1]:8000", "https://dealer.example/aap"):
        assert parse(MINIMAL.replace("https://dealer.example", url)).public_url == url
    for url in (
        "http://dealer.example",
        "ftp://dealer.example",
        "https://dealer.example/?a=1",
        "https://user:pw@dealer.example",
        "dealer.example",
    ):
        assert "public_url" in paths(problems_of(MINIMAL.replace("https://dealer.example", url)))


@pytest.mark.parametrize("url", ["http://127.0.0.2", "http://127.1.2.3:8000", "http://[::ffff:127.0.0.1]"])
def test_loopback_is_only_what_the_agent_card_admits_and_start_up_agrees(url):
    """127.0.0.2 is loopback to the OS but not to the agent card (seed 001,
    ``AgentCard.url``): the file check refuses it with start-up's own message."""
    from aap.server.app import PublicUrlError, check_public_url

    (problem,) = problems_of(MINIMAL.replace("https://dealer.example", url))
    path, message = problem.split(": ", 1)
    assert path == "public_url"
    assert message == public_url_problem(url)
    assert message.startswith("must use https://")
    with pytest.raises(PublicUrlError) as info:
        check_public_url(url)
    assert str(info.value) == f"public_url {url!r}: {message}"


def test_smtp_in_clear_text_is_refused_beyond_the_loopback_names():
    target = """
[[leads.routes]]
[[leads.routes.targets]]
type = "smtp"
host = "{host}"
starttls = false
from = "aap@dealer.example"
to = ["leads@dealer.example"]
"""
    assert parse(MINIMAL + target.format(host="localhost")).leads.routes[0].targets[0].host == "localhost"
    problems = problems_of(MINIMAL + target.format(host="127.0.0.2"))
    assert paths(problems) == {"leads.routes[0].targets[0].starttls"}


# -- aggregate scope --------------------------------------------------------------------

AGGREGATE = """
id = "agg"
public_url = "https://cars.example"

[search]
scope = "aggregate"
filters = ["make", "near"]

[dealer]
name = "Cars Marketplace"
[[dealer.rooftops]]
name = "Cars Marketplace HQ"

[[dealers]]
dealer_id = "springfield-honda"
name = "Springfield Honda"
[[dealers.rooftops]]
name = "Springfield Honda"
timezone = "America/Chicago"

[[dealers]]
dealer_id = "shelbyville-ford"
name = "Shelbyville Ford"
[[dealers.rooftops]]
name = "Shelbyville Ford"
"""


def test_aggregate_scope_loads_sellers():
    settings = parse(AGGREGATE)
    assert settings.scope == "aggregate"
    assert [p.dealer_id for p in settings.dealers] == ["springfield-honda", "shelbyville-ford"]
    assert settings.profile_for("shelbyville-ford").name == "Shelbyville Ford"


def test_aggregate_scope_defaults_to_every_filter_but_rooftops():
    settings = parse(AGGREGATE.replace('filters = ["make", "near"]\n', ""))
    assert "rooftops" not in settings.search.filters
    assert set(settings.search.filters) == set(ALL_FILTERS) - {"rooftops"}


def test_aggregate_rules():
    duplicate = AGGREGATE.replace('dealer_id = "shelbyville-ford"', 'dealer_id = "springfield-honda"')
    assert "dealers[1].dealer_id" in paths(problems_of(duplicate))
    no_id = AGGREGATE.replace('dealer_id = "shelbyville-ford"\n', "")
    assert "dealers[1].dealer_id" in paths(problems_of(no_id))
    rooftops_filter = AGGREGATE.replace('filters = ["make", "near"]', 'filters = ["make", "rooftops"]')
    assert "search.filters" in paths(problems_of(rooftops_filter))
    dealer_scope = AGGREGATE.replace('scope = "aggregate"', 'scope = "dealer"')
    assert "dealers" in paths(problems_of(dealer_scope))
    operator_id = AGGREGATE.replace(
        'name = "Cars Marketplace"\n', 'name = "Cars Marketplace"\ndealer_id = "springfield-honda"\n'
    )
    assert "dealer.dealer_id" in paths(problems_of(operator_id))


# -- environment and explicit overrides -------------------------------------------------


def test_env_overrides_database_and_public_url():
    env = {"AAP_DATABASE_URL": "sqlite:////tmp/other.db", "AAP_PUBLIC_URL": "https://cars.example"}
    settings = parse(MINIMAL, environ=env)
    assert settings.database_url == "sqlite:////tmp/other.db"
    assert settings.public_url == "https://cars.example"


def test_process_environment_is_read_by_default(monkeypatch):
    monkeypatch.setenv("AAP_PUBLIC_URL", "https://env.example")
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    assert load_settings().public_url == "https://env.example"


def test_explicit_overrides_beat_environment_and_are_validated():
    env = {"AAP_PUBLIC_URL": "https://env.example"}
    settings = parse(
        MINIMAL, environ=env, overrides={"public_url": "https://cli.example", "search.max_limit": 50, "database": None}
    )
    assert settings.public_url == "https://cli.example"
    assert settings.search.max_limit == 50
    problems = problems_of(MINIMAL, environ={"AAP_PUBLIC_URL": "http://dealer.example"})
    assert problems[0].startswith("public_url (from AAP_PUBLIC_URL): must use https://")


# -- extension ---------------------------------------------------------------------------


def test_a_new_section_is_one_line_in_sections(monkeypatch):
    def parse_widgets(table, problems):
        size = table.integer("size", 10, minimum=1)
        table.finish()
        return {"size": size}

    monkeypatch.setattr(loader, "SECTIONS", (*loader.SECTIONS, Section("widgets", parse_widgets, fields=("poppy",))))
    settings = parse(MINIMAL + "\n[widgets]\nsize = 3\n")
    assert settings.poppy == {"size": 3}
    assert parse(MINIMAL).poppy == {"size": 10}
    problems = problems_of(MINIMAL + "\n[widgets]\nsize = 0\ncolour = 'red'\n")
    assert {"widgets.size", "widgets.colour"} <= paths(problems)


def test_a_section_without_a_settings_field_fails_fast():
    with pytest.raises(ValueError):
        Section("nowhere", lambda table, problems: None)


def test_count_budget_is_read_from_the_server_section():
    settings = parse(MINIMAL + "\n[server]\ncount_timeout_ms = 15\n")
    assert settings.count_timeout_ms == 15


def test_request_limits_are_read_from_the_server_section():
    assert parse(MINIMAL).limits == ConnectionLimits()
    settings = parse(
        MINIMAL
        + textwrap.dedent("""
        [server]
        max_request_line_bytes = 4096
        max_header_field_bytes = 16384
        max_head_bytes = 65536
        max_header_fields = 50
        header_timeout_seconds = 2.5
        body_timeout_seconds = 60
        keep_alive_seconds = 1
        max_connections = 200
        metrics_listen = "[::1]:9100"
        metrics_token_env = "METRICS_TOKEN"
        hsts_max_age = 0
        """)
    )
    assert settings.limits == ConnectionLimits(4096, 16384, 65536, 50, 2.5, 60.0, 1.0, 200)
    assert settings.metrics_listen == ("::1", 9100)
    assert settings.metrics_token_env == "METRICS_TOKEN"
    assert settings.hsts_max_age == 0


def test_request_limits_out_of_bounds_are_each_reported():
    problems = problems_of(
        MINIMAL
        + textwrap.dedent("""
        [server]
        max_request_line_bytes = 100
        max_header_field_bytes = 32768
        max_head_bytes = 16384
        max_header_fields = 0
        header_timeout_seconds = 0
        body_timeout_seconds = "30"
        max_connections = 1
        metrics_listen = "9100"
        metrics_token_env = "not a name"
        """)
    )
    assert paths(problems) == {
        "server.max_request_line_bytes",
        "server.max_header_field_bytes",
        "server.max_header_fields",
        "server.header_timeout_seconds",
        "server.body_timeout_seconds",
        "server.max_connections",
        "server.metrics_listen",
        "server.metrics_token_env",
    }
    assert any("must not exceed max_head_bytes" in p for p in problems)
    for address in ("::1:9100", "dealer.example:9100", "127.0.0.1:0", "127.0.0.1:http", ":9100"):
        assert paths(problems_of(MINIMAL + f'\n[server]\nmetrics_listen = "{address}"\n')) == {"server.metrics_listen"}


def test_the_metrics_token_variable_must_be_set_to_start():
    text = MINIMAL + '\n[server]\nmetrics_token_env = "METRICS_TOKEN"\n'
    assert parse(text).metrics_token_env == "METRICS_TOKEN"  # a file is valid wherever it is read
    problems = problems_of(text, require_secrets=True)
    assert problems == ["server.metrics_token_env: environment variable METRICS_TOKEN is not set"]
    assert parse(text, require_secrets=True, environ={"METRICS_TOKEN": "t"}).metrics_token_env == "METRICS_TOKEN"
