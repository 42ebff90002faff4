"""The buyer client against our own demo dealer over A2A, MCP (both revisions) and Poppy, real HTTPS on loopback."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from aap.client import (
    AapClient,
    IdempotencyConflictError,
    InvalidCursorError,
    SchemaValidationFailedError,
    VehicleNotFoundError,
)
from aap.spec import validate
from deploy_env import own_dealer  # noqa: F401  (fixture)

BINDINGS = [
    pytest.param({"binding": "a2a"}, id="a2a"),
    pytest.param({"binding": "mcp", "mcp_protocol_version": "2026-07-28"}, id="mcp-2026-07-28"),
    pytest.param({"binding": "mcp", "mcp_protocol_version": "2025-11-25"}, id="mcp-2025-11-25"),
    pytest.param({"binding": "poppy"}, id="poppy"),
]


def connect(own_dealer, options):
    kwargs = dict(options)
    if kwargs["binding"] == "poppy":
        kwargs["poppy_identity"] = own_dealer.identity
    return AapClient.discover(own_dealer.url, verify=own_dealer.ca.context(), **kwargs)


def lead(key: str, message: str = "Client test lead: please ignore.") -> dict:
    granted = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0).isoformat()
    return {
        "customer": {"first_name": "Client", "last_name": "Test", "email": "client-test@example.com"},
        "consent": {
            "granted_at": granted,
            "allowed_channels": ["email"],
            "consent_text": "I agree to be contacted about this test.",
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "aap-client-tests"},
        "idempotency_key": key,
        "message": message,
    }


@pytest.mark.parametrize("options", BINDINGS)
async def test_every_skill_over_the_binding(own_dealer, options):
    async with connect(own_dealer, options) as dealer:
        info = await dealer.dealer_information()
        assert validate(info.raw, "dealer-information-response") == []
        assert info.name and info.rooftops

        facets = await dealer.facets()
        makes = facets.terms("makes")
        assert makes
        make = min(makes, key=lambda f: f.count)

        page = await dealer.search({"make": [make.value]}, sort="price:asc", limit=2)
        assert validate(page.raw, "inventory-search-response") == []
        assert page.total == make.count and page.limit == 2
        assert all(car.make.casefold() == str(make.value).casefold() for car in page.vehicles)

        walked = [car async for car in dealer.iter_search({"make": [make.value]}, sort="price:asc", limit=2)]
        assert len(walked) == make.count == len({car.key for car in walked})

        detail = (
            await dealer.vehicle(vehicle_id=walked[0].vehicle_id)
            if walked[0].vehicle_id
            else await dealer.vehicle(vin=walked[0].vin)
        )
        assert validate(detail.raw, "vehicle-detail-response") == []
        assert detail.vehicle.key == walked[0].key

        with pytest.raises(VehicleNotFoundError) as missing:
            await dealer.vehicle(vin="AAPCHECK000000001")
        assert missing.value.binding == options["binding"]
        assert validate(missing.value.payload, "error") == []

        with pytest.raises(SchemaValidationFailedError) as invalid:
            await dealer.search({"make": [], "year_min": 1800}, limit=500)
        assert {"/filters/make", "/filters/year_min", "/pagination/limit"} <= {
            e["instanceLocation"] for e in invalid.value.errors
        }

        if page.next_cursor:
            with pytest.raises(InvalidCursorError):
                await dealer.search({"make": [make.value]}, sort="price:desc", limit=2, cursor=page.next_cursor)


@pytest.mark.parametrize("options", BINDINGS)
async def test_lead_submit_replays_and_conflicts(own_dealer, options):
    key = f"client-e2e-{uuid.uuid4()}"
    async with connect(own_dealer, options) as dealer:
        request = lead(key)
        first = await dealer.submit_lead(**request)
        assert validate(first.raw, "lead-submit-response") == []
        assert first.status in ("received", "rejected") and first.lead_id and not first.replayed
        again = await dealer.submit_lead(**request)
        assert again.replayed and again.lead_id == first.lead_id and again.status == first.status
        with pytest.raises(IdempotencyConflictError):
            await dealer.submit_lead(**dict(request, message="A different message."))


async def test_bindings_return_the_same_data(own_dealer):
    results = {}
    for options in BINDINGS:
        async with connect(own_dealer, options.values[0]) as dealer:
            page = await dealer.search({"condition": ["used"]}, sort=("year", "desc"), limit=5)
            info = await dealer.dealer_information()
            results[options.id] = (info.data, page.total, [car.key for car in page.vehicles])
    assert len({repr(v) for v in results.values()}) == 1, results


async def test_poppy_session_is_renewed_when_the_token_is_refused(own_dealer):
    async with connect(own_dealer, {"binding": "poppy"}) as dealer:
        await dealer.dealer_information()
        transport = dealer.transport
        transport.token = "not-a-token-the-dealer-issued"  # as if revoked or expired early
        info = await dealer.dealer_information()
        assert info.name
        assert transport.token != "not-a-token-the-dealer-issued"
