"""Host and Origin policy of the MCP endpoint (defaults derived from the public URL)."""

from __future__ import annotations

import pytest

from aap.bindings.mcp.policy import OriginPolicy


def test_public_https_deployment_defaults() -> None:
    policy = OriginPolicy("https://dealer.example")
    assert policy.host_allowed("dealer.example")
    assert policy.host_allowed("dealer.example:443")
    assert policy.host_allowed("DEALER.example")
    assert policy.host_allowed("127.0.0.1:8123")  # loopback names are never a rebinding vector
    assert policy.host_allowed("[::1]:9000")
    assert not policy.host_allowed("evil.example")
    assert not policy.host_allowed("dealer.example:8443")
    assert not policy.host_allowed(None)
    assert not policy.host_allowed("")

    assert policy.origin_allowed(None)  # non-browser clients send no Origin
    assert policy.origin_allowed("https://dealer.example")
    assert policy.origin_allowed("https://dealer.example/")
    assert not policy.origin_allowed("http://dealer.example")
    assert not policy.origin_allowed("https://evil.example")
    assert not policy.origin_allowed("http://localhost:3000")  # loopback origins only for loopback deployments
    assert not policy.origin_allowed("null")


def test_non_default_port_is_part_of_host_and_origin() -> None:
    policy = OriginPolicy("https://dealer.example:8443/")
    assert policy.host_allowed("dealer.example:8443")
    assert not policy.host_allowed("dealer.example:443")
    assert policy.origin_allowed("https://dealer.example:8443")
    assert not policy.origin_allowed("https://dealer.example")


def test_loopback_deployment_allows_loopback_origins_on_any_port() -> None:
    policy = OriginPolicy("http://127.0.0.1:8000")
    assert policy.host_allowed("127.0.0.1:8000")
    assert policy.host_allowed("localhost:5555")
    assert policy.origin_allowed("http://localhost:5173")
    assert policy.origin_allowed("http://127.0.0.1:8000")
    assert policy.origin_allowed("http://[::1]:8000")
    assert not policy.origin_allowed("http://evil.example:8000")
    assert not policy.host_allowed("evil.example:8000")


@pytest.mark.parametrize(
    ("hosts", "origins", "host", "origin", "ok"),
    [
        (("aap.internal:8000",), (), "aap.internal:8000", None, True),
        (("aap.internal:*",), (), "aap.internal:9", None, True),
        (("aap.internal:*",), (), "aap.internal.evil:9", None, False),
        ((), ("https://chat.example.com",), "dealer.example", "https://chat.example.com", True),
        ((), ("https://chat.example.com:*",), "dealer.example", "https://chat.example.com:444", True),
        ((), ("https://chat.example.com",), "dealer.example", "https://chat.example.com.evil", False),
        (("*",), ("*",), "anything.example", "https://anything.example", True),
    ],
)
def test_configured_values_add_to_the_defaults(
    hosts: tuple[str, ...], origins: tuple[str, ...], host: str, origin: str | None, ok: bool
) -> None:
    policy = OriginPolicy("https://dealer.example", hosts, origins)
    assert (policy.host_allowed(host) and policy.origin_allowed(origin)) is ok
    assert policy.host_allowed("dealer.example")  # defaults stay


def test_the_mcp_config_table_is_parsed_and_checked() -> None:
    from aap.config.mcp import McpSettings, parse_mcp_section
    from aap.config.model import AgentIdentity, DealerProfile, Settings
    from aap.config.table import Problems, Table

    problems = Problems()
    table = Table(
        {
            "allowed_hosts": ["aap.internal:8000", "https://wrong.example", "*"],
            "allowed_origins": ["https://chat.example.com", "chat.example.com"],
            "tools_cache_ttl_ms": 0,
            "alowed_hosts": [],
        },
        "mcp",
        problems,
    )
    parsed = parse_mcp_section(table, problems)
    assert parsed.tools_cache_ttl_ms == 0
    assert parsed.allowed_origins[0] == "https://chat.example.com"
    assert sorted(path for path, _ in problems.items) == [
        "mcp.allowed_hosts",
        "mcp.allowed_origins",
        "mcp.alowed_hosts",
    ]

    empty = Problems()
    assert parse_mcp_section(Table({}, "mcp", empty), empty) == McpSettings()
    assert empty.items == []
    # Settings built in code without an [mcp] section get its defaults.
    built = Settings(
        deployment_id="t",
        public_url="https://dealer.example",
        agent=AgentIdentity("Test agent", "Test."),
        dealer=DealerProfile({"name": "Test Motors", "rooftops": [{"name": "Main"}]}),
    )
    assert built.mcp == McpSettings()
