"""End to end with the official A2A Python SDK (a2a-sdk 1.x) over real HTTP on loopback:
card resolution, client creation from the card, every read skill, AAP errors as the
SDK surfaces them and as the raw body carries them."""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import new_data_part
from a2a.types import (
    InvalidParamsError,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from aap import EXTENSION_URI
from aap.config.model import RateLimit
from aap.skills.catalog import SKILLS
from aap.spec import validate
from factories import deployment_fixture
from http_helpers import Deployment, aap_error_of, assert_valid_response

deployment = deployment_fixture("sdk", rate_limit=RateLimit(enabled=False))


class Session:
    """An SDK client plus every raw JSON-RPC body it received (httpx response hook)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.bodies: list[dict] = []
        self.http = httpx.AsyncClient(event_hooks={"response": [self._keep]}, timeout=30)
        self.client = None
        self.card = None

    async def _keep(self, response: httpx.Response) -> None:
        if response.request.method == "POST":
            await response.aread()
            self.bodies.append(response.json())

    async def __aenter__(self) -> Session:
        self.card = await A2ACardResolver(self.http, self.base_url).get_agent_card()
        self.client = ClientFactory(ClientConfig(httpx_client=self.http)).create(self.card)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.http.aclose()

    async def ask(self, data: dict, *, context: ClientCallContext | None = None, context_id: str | None = None) -> dict:
        """Send one AAP request; return the response DataPart (as the SDK parsed it)."""
        skill = next(s for s in SKILLS.values() if s.request_type == data["type"])
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            context_id=context_id or "",
            parts=[new_data_part(data, media_type=skill.request_media_type)],
        )
        request = SendMessageRequest(
            message=message,
            configuration=SendMessageConfiguration(accepted_output_modes=[skill.response_media_type]),
        )
        events = [event async for event in self.client.send_message(request, context=context)]
        assert len(events) == 1 and events[0].HasField("message")
        reply = MessageToDict(events[0].message)
        assert reply["role"] == "ROLE_AGENT" and reply["contextId"]
        assert reply["parts"][0]["mediaType"] == skill.response_media_type
        if context_id:
            assert reply["contextId"] == context_id
        raw = self.bodies[-1]
        assert_valid_response(raw)
        response = raw["result"]["message"]["parts"][0]["data"]
        assert validate(response, skill.response_schema) == []
        return response


async def test_card_resolution(deployment):
    async with Session(deployment.base_url) as session:
        card = session.card
        assert card.name == deployment.settings.agent.name
        interface = card.supported_interfaces[0]
        assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
            deployment.base_url + "/a2a",
            "JSONRPC",
            "1.0",
        )
        assert not card.capabilities.streaming
        (extension,) = card.capabilities.extensions
        assert extension.uri == EXTENSION_URI and extension.required


async def test_every_read_skill(deployment):
    async with Session(deployment.base_url) as session:
        info = await session.ask({"type": "dealer.information.request"}, context_id="conv-1")
        assert info["data"]["name"] == deployment.settings.dealer.name

        facets = await session.ask({"type": "inventory.facets.request"})
        assert facets["type"] == "inventory.facets.response"

        search = await session.ask(
            {
                "type": "inventory.search.request",
                "pagination": {"limit": 5},
                "sort": {"field": "price", "order": "asc"},
            }
        )
        vehicles = search["data"]["vehicles"]
        assert 0 < len(vehicles) <= 5
        # Currency scoping: an unscoped search covers the default currency (USD) only.
        usd = [v for v in deployment.listings if v.get("currency", "USD") == "USD"]
        assert search["data"]["total"] == len(usd)
        prices = [v["price"] for v in vehicles if "price" in v]
        assert prices == sorted(prices)
        # The SDK client sends and receives numbers as doubles; the wire stays integral.
        assert isinstance(session.bodies[-1]["result"]["message"]["parts"][0]["data"]["data"]["limit"], int)

        vin = next(v["vin"] for v in vehicles if v.get("vin"))
        detail = await session.ask({"type": "inventory.vehicle.request", "vin": vin})
        assert detail["data"]["vin"] == vin


async def test_explicit_extension_header(deployment):
    """A portable client activates the extension explicitly; the server echoes it."""
    async with Session(deployment.base_url) as session:
        context = ClientCallContext(service_parameters={"A2A-Extensions": EXTENSION_URI})
        await session.ask({"type": "dealer.information.request"}, context=context)


async def test_validation_error_surfaces_metadata(deployment):
    """-32602 maps to InvalidParamsError; the SDK keeps only ErrorInfo.metadata."""
    async with Session(deployment.base_url) as session:
        with pytest.raises(InvalidParamsError) as info:
            await session.ask({"type": "inventory.search.request", "filters": {"year_min": "new"}})
        metadata = info.value.data
        assert metadata["code"] == "SCHEMA_VALIDATION_FAILED"
        assert metadata["retryable"] == "false"
        raw = session.bodies[-1]
        assert_valid_response(raw)
        err = aap_error_of(raw)
        assert err["error_id"] == metadata["error_id"]
        assert [e["instanceLocation"] for e in err["details"]["errors"]] == ["/filters/year_min"]


async def test_not_found_error_in_raw_body(deployment):
    """-32000 is outside the A2A code map: the SDK raises a bare A2AClientError and
    drops error.data, so a buyer reads the aap.error from the raw body."""
    async with Session(deployment.base_url) as session:
        with pytest.raises(A2AClientError) as info:
            await session.ask({"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"})
        assert "-32000" in str(info.value)
        err = aap_error_of(session.bodies[-1])
        assert err["code"] == "VEHICLE_NOT_FOUND" and err["retryable"] is False
        assert validate(err, "error") == []


async def test_unsupported_skill(deployment):
    async with Session(deployment.base_url) as session:
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[new_data_part({"type": "service.booking.request"})],
        )
        with pytest.raises(UnsupportedOperationError) as info:
            async for _ in session.client.send_message(SendMessageRequest(message=message)):
                pass
        assert info.value.data["code"] == "UNSUPPORTED_SKILL"
        assert aap_error_of(session.bodies[-1])["code"] == "UNSUPPORTED_SKILL"


@pytest.mark.slow
async def test_tenant_echoed_by_sdk(tmp_path):
    with Deployment(tmp_path, inventory=0, a2a_tenant="lot-7", rate_limit=RateLimit(enabled=False)) as dep:
        async with Session(dep.base_url) as session:
            assert session.card.supported_interfaces[0].tenant == "lot-7"
            await session.ask({"type": "dealer.information.request"})
        # A hand-written request that forgets the tenant is refused.
        async with httpx.AsyncClient() as http:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "parts": [{"data": {"type": "dealer.information.request"}}],
                    }
                },
            }
            missing = (await http.post(dep.base_url + "/a2a", json=body)).json()
            body["params"]["tenant"] = "lot-8"
            wrong = (await http.post(dep.base_url + "/a2a", json=body)).json()
            body["params"]["tenant"] = "lot-7"
            right = (await http.post(dep.base_url + "/a2a", json=body)).json()
    for payload in (missing, wrong):
        assert_valid_response(payload)
        assert payload["error"]["code"] == -32602
        violations = payload["error"]["data"][1]["fieldViolations"]
        assert [v["field"] for v in violations] == ["tenant"]
    assert "result" in right
