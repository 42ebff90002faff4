"""Proxy headers are believed only from ``[server] forwarded_allow_ips`` (docs/deployment.md, "Behind a reverse proxy").

uvicorn believes ``X-Forwarded-For`` from 127.0.0.1 by default, so a same-host process (or a
proxy passing a client's header through) could reset its rate-limit bucket at will. Served by
the real runner (``aap.server.runner.run`` in a child process), a server without the setting
counts every request from loopback as loopback, even with ``FORWARDED_ALLOW_IPS=*`` in its
environment; one that names its proxy counts the forwarded client, in the rate limit and in the
access log's ``client`` alike.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from aap.config.loader import ConfigError, load_settings
from aap.ratelimit import anonymous_caller_key
from aap.server.runner import proxy_options
from http_helpers import AAP_HEADERS, aap_error_of, send_message
from runner_child import RunnerChild

DEALER = {"type": "dealer.information.request"}

CONFIG = """
id = "proxy-test"
public_url = "{base}"
database = "sqlite:///{directory}/aap.db"
[rate_limit]
per_minute = 1
burst = 3
[dealer]
name = "Proxy Motors"
[[dealer.rooftops]]
name = "Proxy Motors"
{server}
"""


class Served(RunnerChild):
    """``aap.server.runner.run`` on a configuration file, in a child process with JSON logs."""

    def __init__(self, tmp_path: Path, server_table: str = "", env: dict[str, str] | None = None) -> None:
        super().__init__()
        config = tmp_path / "aap.toml"
        config.write_text(CONFIG.format(base=self.base, directory=tmp_path, server=server_table))
        self.start(tmp_path, f"SettingsSource({str(config)!r}, {{}}, environ={{}})", env)

    def ask(self, forwarded_for: str) -> dict:
        headers = {**AAP_HEADERS, "X-Forwarded-For": forwarded_for, "X-Forwarded-Proto": "https"}
        return httpx.post(self.base + "/a2a", json=send_message(DEALER), headers=headers, timeout=30).json()

    def access_clients(self) -> list[str]:
        lines = self.lines()
        return [line["client"] for line in lines if line.get("event") == "request" and line.get("path") == "/a2a"]


@pytest.mark.slow
def test_by_default_a_forwarded_address_from_loopback_changes_nothing(tmp_path):
    served = Served(tmp_path, env={"FORWARDED_ALLOW_IPS": "*"})  # uvicorn's own knob: not ours
    try:
        answers = [served.ask(f"203.0.113.{i}") for i in range(4)]
    finally:
        served.stop()
    assert ["result" in a for a in answers] == [True, True, True, False]  # one bucket: burst 3
    assert aap_error_of(answers[3])["code"] == "RATE_LIMITED"
    assert served.access_clients() == [anonymous_caller_key("127.0.0.1")] * 4


@pytest.mark.slow
def test_a_configured_proxy_has_its_clients_counted_apart(tmp_path):
    served = Served(tmp_path, '[server]\nforwarded_allow_ips = ["127.0.0.1", "10.0.0.0/8"]')
    try:
        clients = [served.ask(f"203.0.113.{i}") for i in range(5)]
        same = [served.ask("198.51.100.7") for _ in range(4)]
    finally:
        served.stop()
    assert all("result" in a for a in clients)  # five clients, one request each
    assert ["result" in a for a in same] == [True, True, True, False]  # one client, burst 3
    assert (
        served.access_clients()
        == [anonymous_caller_key(f"203.0.113.{i}") for i in range(5)] + [anonymous_caller_key("198.51.100.7")] * 4
    )


def test_forwarded_allow_ips_is_checked_and_normalised(tmp_path):
    config = tmp_path / "aap.toml"
    config.write_text(
        CONFIG.format(
            base="https://dealer.example",
            directory=tmp_path,
            server='[server]\nforwarded_allow_ips = ["10.1.2.3", "10.0.0.9/8", "::1"]',
        )
    )
    settings = load_settings(str(config), environ={})
    assert settings.forwarded_allow_ips == ("10.1.2.3", "10.0.0.0/8", "::1")
    assert proxy_options(settings) == {"proxy_headers": True, "forwarded_allow_ips": ["10.1.2.3", "10.0.0.0/8", "::1"]}
    assert load_settings(None, environ={}).forwarded_allow_ips == ()
    assert proxy_options(load_settings(None, environ={})) == {"proxy_headers": False}
    for bad in ('"*"', '"proxy.internal"', '"10.0.0.0/33"'):
        config.write_text(
            CONFIG.format(
                base="https://dealer.example", directory=tmp_path, server=f"[server]\nforwarded_allow_ips = [{bad}]"
            )
        )
        with pytest.raises(ConfigError, match="forwarded_allow_ips"):
            load_settings(str(config), environ={})
