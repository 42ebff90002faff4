"""lead.submit over /a2a on a live loopback server, with the delivery worker in the app lifespan."""

from __future__ import annotations

import dataclasses
import time

import httpx
import pytest

from aap.server.app import create_app
from aap.spec import validate
from aap.store import open_stores
from http_helpers import AAP_HEADERS, LiveServer, aap_error_of, assert_valid_response, send_message
from lead_support import EMAIL, FIRST, Receiver, http_route, lead_request, lead_settings

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow


@pytest.fixture
def deployment(tmp_path):
    receiver = Receiver()
    server = LiveServer()
    settings = dataclasses.replace(
        lead_settings(routes=[http_route(receiver.url)], database_url=f"sqlite:///{tmp_path}/a2a.db"),
        public_url=server.base_url,
    )
    stores = open_stores(settings.database_url)
    server.start(create_app(settings, stores))
    yield server, receiver, stores
    server.stop()
    stores.close()
    receiver.close()


def post(server, body, **kw):
    response = httpx.post(server.base_url + "/a2a", json=send_message(body, **kw), headers=AAP_HEADERS, timeout=30)
    assert response.status_code == 200
    reply = response.json()
    assert_valid_response(reply)
    return reply


def test_agent_card_declares_lead_submit(deployment):
    server, _, _ = deployment
    card = httpx.get(server.base_url + "/.well-known/agent-card.json", timeout=10).json()
    assert "lead.submit" in [skill["id"] for skill in card["skills"]]


def test_lead_over_a2a_is_stored_replayed_and_delivered(deployment):
    server, receiver, stores = deployment
    body = lead_request()
    reply = post(server, body)
    part = reply["result"]["message"]["parts"][0]
    assert part["mediaType"] == "application/vnd.autoagent.lead-submit-response+json"
    assert validate(part["data"], "lead-submit-response") == []
    lead_id = part["data"]["data"]["lead_id"]
    assert stores.leads.get_lead(lead_id)["binding"] == "a2a"

    replay = post(server, body, request_id="req-2")["result"]["message"]["parts"][0]["data"]
    assert replay["data"]["replayed"] is True and replay["data"]["lead_id"] == lead_id

    for _ in range(400):  # bounded: the worker polls every 0.05 s
        if receiver.accepted():
            break
        time.sleep(0.025)
    assert [r["headers"]["X-AAP-Lead-Id"] for r in receiver.accepted()] == [lead_id]


def test_consent_errors_over_a2a_carry_the_aap_code_and_no_customer_value(deployment):
    server, _, stores = deployment
    body = lead_request()
    body["consent"]["scope"] = ["marketing"]
    reply = post(server, body)
    error = aap_error_of(reply)
    assert error["code"] == "INVALID_CONSENT"
    assert "/consent/scope/0" in [p["instanceLocation"] for p in error["details"]["errors"]]
    assert EMAIL not in str(reply) and FIRST not in str(reply)
    del body["consent"]
    assert aap_error_of(post(server, body))["code"] == "CONTACT_CONSENT_REQUIRED"
    assert stores.leads.count_leads() == 0
