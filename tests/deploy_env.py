"""Our own demo dealer, fully assembled by ``create_app``, served over HTTPS on loopback.

Used by the client end-to-end tests and by the ``aap check`` run against our
server. TLS comes from a throw-away CA (``poppy_client.TestCA``) so that the
HTTPS-only discovery rules are checked for real; the dealer trusts that CA
through ``SSL_CERT_FILE`` when it fetches a personal agent's client metadata
(``allow_loopback_clients`` on, as for any local development deployment).
A personal-agent identity made with :class:`aap.client.PoppyIdentity` is
published on a separate HTTPS host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from aap.client import PoppyIdentity
from aap.client.poppy_auth import generate_es256_key
from aap.config.poppy import PoppySettings
from aap.server.app import create_app
from aap.store import open_stores
from http_helpers import LiveServer, load_demo_inventory, make_settings
from poppy_client import AgentHost, HttpsServer, TestCA

INVENTORY = 120


@dataclasses.dataclass
class OwnDealer:
    url: str
    ca: TestCA
    identity: PoppyIdentity
    key_file: Path
    settings: object
    stores: object


def publish_identity(host: AgentHost, name: str) -> PoppyIdentity:
    """A personal-agent identity whose metadata and JWKS the dealer can fetch over HTTPS."""
    identity = PoppyIdentity(f"{host.base_url}/{name}/agent.json", generate_es256_key(f"{name}-key-1"))
    jwks_uri = f"{host.base_url}/{name}/jwks.json"
    host.publish(
        f"/{name}/agent.json",
        identity.client_metadata(jwks_uri, [f"{host.base_url}/{name}/callback"], f"aap test agent {name}"),
    )
    host.publish(f"/{name}/jwks.json", identity.public_jwks())
    return identity


@pytest.fixture(scope="module")
def own_dealer(tmp_path_factory) -> Iterator[OwnDealer]:
    directory = tmp_path_factory.mktemp("own-dealer")
    ca = TestCA(directory)
    patch = pytest.MonkeyPatch()
    patch.setenv("SSL_CERT_FILE", str(ca.ca_file))
    host = AgentHost(ca)
    server = HttpsServer(ca, "own-dealer")
    settings = make_settings(
        server.base_url, f"sqlite:///{directory}/aap.db", poppy=PoppySettings(allow_loopback_clients=True)
    )
    stores = open_stores(settings.database_url)
    load_demo_inventory(stores, settings, INVENTORY)
    server.start(create_app(settings, stores))
    identity = publish_identity(host, "buyer")
    key_file = directory / "buyer-key.pem"
    key_file.write_bytes(identity.key.as_pem(private=True))
    try:
        yield OwnDealer(server.base_url, ca, identity, key_file, settings, stores)
    finally:
        server.stop()
        host.stop()
        stores.close()
        patch.undo()


@pytest.fixture(scope="module")
def own_dealer_http(tmp_path_factory) -> Iterator[str]:
    """The same dealer on plain http://127.0.0.1 (the loopback development mode)."""
    directory = tmp_path_factory.mktemp("own-dealer-http")
    server = LiveServer()
    settings = make_settings(server.base_url, f"sqlite:///{directory}/aap.db")
    stores = open_stores(settings.database_url)
    load_demo_inventory(stores, settings, 40)
    server.start(create_app(settings, stores))
    try:
        yield server.base_url
    finally:
        server.stop()
        stores.close()
