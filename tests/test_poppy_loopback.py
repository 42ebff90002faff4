"""Poppy metadata agree with each other in every deployment mode (docs/poppy.md, "Development on loopback").

On an ``http://127.0.0.1:PORT`` development deployment the protected-resource metadata named
``http://127.0.0.1:PORT`` while the issuer listed only ``https://127.0.0.1``, so asking for the
advertised resource was ``invalid_target``. Each mode is checked the same way: the resource of
``/.well-known/oauth-protected-resource`` is one of the issuer's ``protected_resources``, its
authorization server is the issuer, the MCP resource of poppy.json is listed too, and a guest
grant for the advertised resource gets a token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette

from aap.agent import DealerAgent
from aap.gateway import Gateway
from aap.poppy import build
from aap.store import open_stores
from conftest import make_settings
from http_helpers import LiveServer
from poppy_client import PersonalAgent, PoppyClient
from poppy_env import TEST_POPPY, PoppyDeployment, agent_host, poppy_ca  # noqa: F401 (fixtures)


class HttpLoopbackDealer:
    """The Poppy binding served over plain http on 127.0.0.1: local development."""

    def __init__(self, directory, ca, public_url: str | None = None) -> None:
        self.server = LiveServer()
        self.url = public_url or self.server.base_url
        settings = dataclasses.replace(
            make_settings(), public_url=self.url, database_url=f"sqlite:///{directory}/aap.db"
        )
        self.stores = open_stores(settings.database_url)
        parts = build(Gateway.of(DealerAgent(settings, self.stores)), settings=TEST_POPPY, ssl_context=ca.context())

        @asynccontextmanager
        async def lifespan(app: Any):
            async with AsyncExitStack() as stack:
                for factory in parts.lifespans:
                    await stack.enter_async_context(factory(app))
                yield

        self.server.start(Starlette(routes=parts.routes, lifespan=lifespan))

    def stop(self) -> None:
        self.server.stop()
        self.stores.close()


@pytest.fixture(params=["http-loopback", "https"])
def deployment(request, tmp_path, poppy_ca) -> Iterator[Any]:
    dealer: Any = (
        PoppyDeployment(tmp_path, poppy_ca, inventory=0)
        if request.param == "https"
        else HttpLoopbackDealer(tmp_path, poppy_ca)
    )
    yield dealer
    dealer.stop()


def test_the_metadata_documents_agree_and_the_advertised_resource_gets_a_token(deployment, agent_host, poppy_ca):
    client = PoppyClient(
        PersonalAgent(agent_host, name=f"loopback-{id(deployment)}"), deployment.url, poppy_ca.context()
    )
    try:
        client.discover()
        issuer = client.issuer_metadata
        resource = client.http.get(f"{deployment.url}/.well-known/oauth-protected-resource").json()
        assert resource["authorization_servers"] == [issuer["issuer"]] == [client.issuer]
        assert resource["resource"] in issuer["protected_resources"]
        mcp = client.mcp_api()
        assert mcp["resource"] in issuer["protected_resources"]
        mcp_metadata = client.http.get(client.protected_resource_metadata_url(mcp["resource"])).json()
        assert mcp_metadata["resource"] == mcp["resource"]
        assert mcp_metadata["authorization_servers"] == [issuer["issuer"]]
        granted = client.token_request(form=client.grant_form(resource=resource["resource"]))
        assert granted.status_code == 200, granted.text
        # and the organisation's own resource keeps working as before
        organization = f"https://{client.poppy['organization']['domain']}"
        assert organization in issuer["protected_resources"]
        again = client.token_request(form=client.grant_form(resource=organization))
        assert again.status_code == 200, again.text
    finally:
        client.close()
