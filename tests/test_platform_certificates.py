"""Certificates for tenants' domains, and what a platform reads from a request's ``Host``
(docs/platform.md, "Certificates" and "Routing").

- the domains a tenant is served at: IP addresses refused, case and IDN normalised to the
  A-label (IDNA 2008, UTS #46), a trailing dot dropped, ports and ``localhost`` refused;
- ``/_platform/tls-allowed`` answered to a direct loopback connection whatever its ``Host``
  (Caddy's ``ask`` sends ``Host: 127.0.0.1:PORT``), hidden from everyone else;
- the real Caddy from Debian in front of ``aap serve``, with its internal CA: a TLS handshake
  completes for a tenant's domain and is refused for any other name;
- two ``Host`` fields or a bad port: 400 (RFC 9112 §3.2); ``/metrics`` private by default.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from click.testing import CliRunner

from aap.cli.main import main
from aap.config.platform import normalise_domain
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database
from aap.tenants import TenantError, TenantRegistry
from aap.work import Work
from http_helpers import LiveServer
from platform_support import PLATFORM_HOST, PlatformServer, platform_settings, tenant_config

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

IP = "is an IP address; a tenant is served at a domain name"


@pytest.mark.parametrize(
    ("text", "domain", "problem"),
    [
        ("alpha.example", "alpha.example", None),
        ("ALPHA.Example", "alpha.example", None),
        ("alpha.example.", "alpha.example", None),
        (" www.alpha.example ", "www.alpha.example", None),
        ("bücher.example", "xn--bcher-kva.example", None),
        ("BÜCHER.Example.", "xn--bcher-kva.example", None),
        ("xn--bcher-kva.example", "xn--bcher-kva.example", None),
        ("faß.example", "xn--fa-hia.example", None),  # IDNA 2008: ß is kept, not mapped to ss
        ("127.0.0.1", "127.0.0.1", IP),
        ("10.0.0.5", "10.0.0.5", IP),
        ("127.1", "127.1", IP),
        ("1.2.3.4.", "1.2.3.4", IP),
        ("::1", "::1", IP),
        ("[::1]", "[::1]", IP),
        ("[fd00::5]", "[fd00::5]", IP),
        ("2001:db8::1", "2001:db8::1", IP),
        ("alpha.example:443", "alpha.example:443", "must be a host name alone: no scheme, port or path"),
        ("alpha.example:abc", "alpha.example:abc", "must be a host name alone: no scheme, port or path"),
        ("https://alpha.example", "https://alpha.example", "must be a host name alone: no scheme, port or path"),
        ("alpha.example/x", "alpha.example/x", "must be a host name alone: no scheme, port or path"),
        ("localhost", "localhost", "is this machine (localhost), not a domain"),
        ("LocalHost.", "localhost", "is this machine (localhost), not a domain"),
        ("crm.localhost", "crm.localhost", "is this machine (localhost), not a domain"),
        ("alpha", "alpha", "must be a fully qualified host name (with a dot)"),
        ("a_b.example", "a_b.example", "is not a valid host name (IDNA 2008)"),
        ("xn--zz.example", "xn--zz.example", "is not a valid host name (IDNA 2008)"),
        ("-alpha.example", "-alpha.example", "is not a valid host name (IDNA 2008)"),
        ("", "", "must be a host name alone: no scheme, port or path"),
        ("a" * 400, "a" * 300, "is longer than a host name can be"),
    ],
)
def test_domains_are_normalised_and_ip_addresses_refused(text, domain, problem):
    assert normalise_domain(text) == (domain, problem)


class Platform:
    def __init__(self, server: LiveServer, registry: TenantRegistry) -> None:
        self.server, self.registry = server, registry
        self.http = httpx.Client(base_url=server.base_url, timeout=30)

    def raw(self, head: bytes) -> bytes:
        """A request written as it is (two Host fields cannot be sent otherwise); the answer."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as sock:
            sock.sendall(head)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        return answer


@pytest.fixture
def platform(database_url, monkeypatch) -> Iterator[Platform]:
    monkeypatch.delenv("AAP_METRICS_TOKEN", raising=False)
    deployment = platform_settings(database_url)
    stores = Stores(open_platform_database(database_url))
    registry = TenantRegistry(deployment, stores.db, environ={})
    registry.add("alpha", tenant_config("Alpha Motors"), ["ALPHA.Example.", "Bücher.example"])
    server = LiveServer().start(create_platform_app(deployment, stores))
    platform = Platform(server, registry)
    try:
        yield platform
    finally:
        platform.http.close()
        server.stop()
        stores.close()


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_domains_are_stored_as_served_and_tls_allowed_answers_the_proxy_whatever_its_host(platform):
    assert list(platform.registry.get("alpha").domains) == ["alpha.example", "xn--bcher-kva.example"]
    with pytest.raises(TenantError) as taken:  # the same domain, written another way, is taken
        platform.registry.add("beta", tenant_config("Beta Cars"), ["Alpha.Example"])
    assert taken.value.status == 409 and taken.value.problems == [
        "domain 'alpha.example': already served by tenant 'alpha'"
    ]
    with pytest.raises(TenantError) as ip:
        platform.registry.set_domains("alpha", add=["192.0.2.7", "[2001:db8::7]"])
    assert ip.value.status == 400 and all(IP in p for p in ip.value.problems)

    def ask(domain: str, **headers: str) -> int:
        return platform.http.get("/_platform/tls-allowed", params={"domain": domain}, headers=headers).status_code

    port = platform.server.port
    # What Caddy sends: its ask URL's host, on a loopback connection of its own.
    for host in (f"127.0.0.1:{port}", "127.0.0.1", PLATFORM_HOST, "alpha.example", "anything.example"):
        assert ask("alpha.example", host=host) == 200, host
    for domain in ("xn--bcher-kva.example", "bücher.example", "ALPHA.example", "alpha.example."):
        assert ask(domain) == 200, domain
    for domain in ("evil.example", PLATFORM_HOST, "127.0.0.1", "::1", "[::1]", "localhost", "alpha.example:443", ""):
        assert ask(domain) == 404, domain
    # A request a proxy forwarded (a client's, not the proxy's own question) is never answered.
    assert ask("alpha.example", **{"x-forwarded-for": "203.0.113.9"}) == 404
    assert ask("alpha.example", forwarded="for=203.0.113.9") == 404
    assert ask("alpha.example", **{"x-forwarded-for": "127.0.0.1", "host": PLATFORM_HOST}) == 404
    # The tenant is served at its normalised domains.
    card = platform.http.get("/.well-known/agent-card.json", headers={"host": "xn--bcher-kva.example"})
    assert card.status_code == 200 and "https://xn--bcher-kva.example" in card.text
    assert platform.http.get("/.well-known/agent-card.json", headers={"host": "alpha.example."}).status_code == 200


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_two_host_fields_or_a_bad_port_are_400_and_never_a_tenant(platform):
    def status(head: bytes) -> int:
        return int(platform.raw(head).split(b" ", 2)[1])

    path = b"GET /.well-known/agent-card.json HTTP/1.1\r\n"
    assert status(path + b"Host: alpha.example\r\nConnection: close\r\n\r\n") == 200
    assert status(path + b"Host: alpha.example:8443\r\nConnection: close\r\n\r\n") == 200
    for hosts in (
        b"Host: alpha.example\r\nHost: evil.example\r\n",
        b"Host: alpha.example\r\nHost: alpha.example\r\n",
        b"Host: alpha.example:abc\r\n",
        b"Host: alpha.example:99999\r\n",
        b"Host: alpha.example:-1\r\n",
        b"Host: alpha example\r\n",
        b"Host: [::1\r\n",
        b"Host: [zz::1]\r\n",
    ):
        answer = platform.raw(path + hosts + b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 "), (hosts, answer[:200])
        assert b"Alpha" not in answer
    # An IP address is no tenant's domain: 404, naming none.
    answer = platform.raw(path + b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 404 ") and b"Alpha" not in answer


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_metrics_are_private_by_default_on_a_platform(platform):
    get = platform.http.get
    assert get("/metrics", headers={"host": PLATFORM_HOST}).status_code == 200  # a scraper on this host
    for headers in (
        {"host": PLATFORM_HOST, "x-forwarded-for": "203.0.113.9"},  # through the proxy
        {"host": PLATFORM_HOST, "forwarded": "for=203.0.113.9"},
        {"host": "alpha.example"},
    ):
        assert get("/metrics", headers=headers).status_code == 404, headers


def test_metrics_with_a_token_are_for_its_bearer_wherever_they_come_from(database_url, monkeypatch):
    from starlette.testclient import TestClient

    monkeypatch.setenv("AAP_METRICS_TOKEN", "m" * 40)
    import dataclasses

    deployment = dataclasses.replace(platform_settings(database_url), metrics_token_env="AAP_METRICS_TOKEN")
    stores = Stores(open_platform_database(database_url))
    try:
        app = create_platform_app(deployment, stores)
        with TestClient(app, base_url=f"https://{PLATFORM_HOST}", client=("203.0.113.9", 5000)) as remote:
            assert remote.get("/metrics").status_code == 401
            assert remote.get("/metrics", headers={"authorization": "Bearer " + "m" * 40}).status_code == 200
            # and tls-allowed stays hidden from such a peer
            assert remote.get("/_platform/tls-allowed?domain=x.example").status_code == 404
    finally:
        stores.close()


# -- the real Caddy in front of aap serve ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CADDYFILE = """{{
	admin off
	default_bind 127.0.0.1
	auto_https disable_redirects
	skip_install_trust
	http_port {http_port}
	https_port {https_port}
	storage file_system {storage}
	on_demand_tls {{
		ask http://127.0.0.1:{aap_port}/_platform/tls-allowed
	}}
}}

https:// {{
	tls internal {{
		on_demand
	}}
	reverse_proxy 127.0.0.1:{aap_port}
}}
"""


def caddy_binary() -> str:
    found = shutil.which("caddy")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("caddy is not installed (.ci/run installs Debian's package)")
        pytest.skip("caddy is not installed (apt-get install caddy)")
    return found


def handshake(port: int, name: str, root: Path) -> bytes:
    """A TLS handshake with Caddy for ``name`` (the name resolved to 127.0.0.1 here, never by
    DNS), verified with Caddy's internal root, then a request for the agent card; the answer."""
    context = ssl.create_default_context(cafile=str(root))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(
                f"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    return answer


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_caddy_gets_a_certificate_for_a_tenants_domain_and_for_no_other_name(tmp_path, monkeypatch):
    caddy = caddy_binary()
    url = f"sqlite:///{tmp_path}/platform.db"
    registry = TenantRegistry(platform_settings(url), open_platform_database(url), environ={})
    registry.add("alpha", tenant_config("Alpha Motors"), ["alpha.example", "bücher.example"])
    server = PlatformServer(tmp_path, url, workers=1, platform="", environ={})
    http_port, https_port = _free_port(), _free_port()
    home = tmp_path / "caddy-home"
    caddyfile = tmp_path / "Caddyfile"
    caddyfile.write_text(
        CADDYFILE.format(http_port=http_port, https_port=https_port, storage=home / "data", aap_port=server.port)
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home),
        "XDG_CONFIG_HOME": str(home),
    }
    log = (tmp_path / "caddy.log").open("wb")
    process = subprocess.Popen(
        [caddy, "run", "--config", str(caddyfile), "--adapter", "caddyfile"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        for _ in range(300):  # bounded by count: Caddy makes its root CA on start
            if process.poll() is not None:
                raise AssertionError((tmp_path / "caddy.log").read_text())
            try:
                socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        root = home / "data" / "pki" / "authorities" / "local" / "root.crt"
        answer = b""
        for _ in range(100):  # the root is written as the listener starts; the first handshake makes the leaf
            if root.exists():
                answer = handshake(https_port, "alpha.example", root)
                break
            time.sleep(0.1)
        assert answer.startswith(b"HTTP/1.1 200 "), (answer[:300], (tmp_path / "caddy.log").read_text()[-3000:])
        assert b'"url":"https://alpha.example' in answer.replace(b" ", b"")
        assert handshake(https_port, "xn--bcher-kva.example", root).startswith(b"HTTP/1.1 200 ")
        for name in ("unknown.example", PLATFORM_HOST, "localhost.example"):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                handshake(https_port, name, root)
        issued = {p.name for p in (home / "data" / "certificates").rglob("*.crt")}
        assert issued == {"alpha.example.crt", "xn--bcher-kva.example.crt"}, issued
        # aap check through the proxy: the tenant's name in SNI (and Host), its certificate verified.
        origin = f"https://127.0.0.1:{https_port}"
        checked = CliRunner().invoke(
            main,
            ["check", "https://alpha.example", "--via", origin, "--ca-file", str(root), "--json"]
            + ["--rule", "card.available", "--rule", "card.schema", "--rule", "discovery.https"],
        )
        report = orjson.loads(checked.stdout)
        assert checked.exit_code == 0 and report["ok"] and report["unreachable"] is None, checked.stdout
        refused = CliRunner().invoke(
            main, ["check", "https://unknown.example", "--via", origin, "--ca-file", str(root), "--json"]
        )
        assert refused.exit_code == 1 and orjson.loads(refused.stdout)["unreachable"], refused.stdout
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        server.stop()


def test_an_ip_domain_registered_before_these_rules_is_not_served_and_can_be_removed(database_url):
    deployment = platform_settings(database_url)
    stores = Stores(open_platform_database(database_url))
    try:
        registry = TenantRegistry(deployment, stores.db, environ={})
        registry.add("alpha", tenant_config("Alpha Motors"), ["alpha.example"])
        registry.store.set_domains("alpha", ["10.0.0.5"], [], 0)  # as an older version stored it
        import asyncio

        from aap.server.tenant_routing import Hosts

        assert asyncio.run(Hosts(registry.store, WORK).tenant("10.0.0.5")) is None
        assert list(registry.set_domains("alpha", remove=["10.0.0.5"]).domains) == ["alpha.example"]
    finally:
        stores.close()
