"""Shared parts of the platform tests: a deployment file, tenant documents, listings per tenant."""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aap.config.loader import parse_settings
from aap.config.model import Settings
from aap.store import Stores
from aap.tenants import TenantRegistry

PLATFORM_HOST = "agents.platform.example"
#: The ``[platform]`` line that lets tenants' CRM targets be the tests' stand-ins on 127.0.0.1
#: (docs/deployment.md, "Outbound connections": development and tests only).
LOOPBACK_DESTINATIONS = "allow_loopback_destinations = true\n"
#: What a tenant's stored configuration may become and no longer load (an upgrade reads it more
#: strictly, the platform's file changed under it): written past the registry's checks.
UNLOADABLE = '[dealer]\nname = "Beta Cars"\nno_such_key = 1\n'


def eventually(condition: Callable[[], bool], attempts: int = 400) -> bool:
    """``condition`` true within ``attempts`` looks 25 ms apart (bounded by count, not by time: the
    platform's changes poll is 50 to 100 ms in these tests)."""
    for _ in range(attempts):
        if condition():
            return True
        time.sleep(0.025)
    return condition()


def crm_route(url: str, *, once: bool = True, **auth: str) -> str:
    """A tenant's ``[leads]`` routing every lead to the CRM stand-in at ``url`` (ADF over HTTP):
    tried ``once`` (no retry) unless told otherwise, with bearer ``auth`` when given
    (``token_secret="NAME"``, ``token_env="VAR"``)."""
    delivery = "[leads.delivery]\nmax_attempts = 1\n" if once else ""
    named = ", ".join(f'{k} = "{v}"' for k, v in auth.items())
    credentials = f'auth = {{ type = "bearer", {named} }}\n' if auth else ""
    return f"""
{delivery}[[leads.routes]]
rooftop = "*"
[[leads.routes.targets]]
type = "adf_http"
name = "crm"
url = "{url}"
{credentials}"""


def platform_settings(database_url: str, **platform: Any) -> Settings:
    """A platform deployment's own settings: ``[database]`` and ``[platform]``."""
    doc = {"database": database_url, "platform": {"host": PLATFORM_HOST, "changes_poll_ms": 50, **platform}}
    return parse_settings(doc, environ={})


def tenant_config(name: str, *, rooftop: str | None = None, extra: str = "") -> str:
    """A tenant's document: one dealer with one rooftop (and whatever ``extra`` adds)."""
    rooftop = rooftop or f"{name} Main"
    text = f'''
[dealer]
name = "{name}"
[[dealer.rooftops]]
name = "{rooftop}"
timezone = "America/Los_Angeles"
address = {{ city = "Sacramento", state = "CA", country = "US" }}
phones = [{{ name = "Sales", value = "+19165550100" }}]
{extra}
'''
    tomllib.loads(text)  # a typo here fails the test that uses it, not the code it tests
    return text


def listings(prefix: str, make: str, count: int, rooftop: str) -> list[dict[str, Any]]:
    """``count`` available listings of ``make`` at ``rooftop``, ids ``{prefix}-0`` …"""
    return [
        {
            "vehicle_id": f"{prefix}-{i}",
            "status": "available",
            "updated_at": "2026-11-30T08:00:00Z",
            "make": make,
            "model": "Model " + str(i % 3),
            "year": 2020 + i % 5,
            "price": 20_000 + 1_000 * i,
            "rooftop": rooftop,
        }
        for i in range(count)
    ]


def tenant_stores(registry: TenantRegistry, tenant_id: str) -> Stores:
    """The stores of a tenant (its view of the platform database), as ``aap import --tenant`` opens them."""
    return Stores(registry.data.open(tenant_id))


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


class PlatformServer:
    """``aap serve`` of a platform deployment, as a subprocess on 127.0.0.1 (``workers`` processes).

    Requests go to it with the ``Host`` header a proxy forwards (:meth:`client` keeps each URL's
    own host and scheme, so cookies marked Secure and https:// URLs behave as behind TLS).
    """

    def __init__(
        self,
        directory: Path,
        database_url: str,
        *,
        workers: int = 2,
        environ: dict[str, str] | None = None,
        platform: str = "",
    ) -> None:
        import os
        import subprocess
        import sys

        from test_cli_serve import free_port

        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url
        self.config = directory / "platform.toml"
        self.log = directory / "serve.log"
        self.config.write_text(
            f'database = "{database_url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\nchanges_poll_ms = 100\n{platform}',
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")} | (environ or {})
        with self.log.open("wb") as output:  # the child keeps its own descriptor of the file
            self.process = subprocess.Popen(
                [sys.executable, "-m", "aap", "serve", "--config", str(self.config), "--port", str(self.port)]
                + ["--workers", str(workers), "--log-level", "warning"],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self._wait()

    def _wait(self) -> None:
        import time

        import httpx

        for _ in range(600):  # bounded by count: two workers start in a few seconds on a busy machine
            if self.process.poll() is not None:
                raise RuntimeError(self.log_tail())
            try:
                if httpx.get(self.origin + "/healthz", headers={"host": PLATFORM_HOST}, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("aap serve did not come up")

    def client(self, **kwargs: Any) -> Any:
        """An httpx client whose requests for https://ANY-HOST/... reach this server."""
        import httpx

        from aap.client.via import ViaSyncTransport

        return httpx.Client(transport=ViaSyncTransport(self.origin), timeout=30, **kwargs)

    def log_tail(self, size: int = 4000) -> str:
        """The end of what the server wrote (warnings and errors), for a failing test's message."""
        return self.log.read_bytes()[-size:].decode("utf-8", "replace") if self.log.exists() else ""

    def stop(self) -> None:
        from test_cli_serve import stop_server

        stop_server(self.process)
