"""dealer.information: the endpoint's profile, or one seller's by dealer_id."""

from __future__ import annotations

import pytest

from aap.agent import CallContext
from aap.config.model import DealerProfile
from aap.errors import AapError
from conftest import DEFAULT_ROOFTOPS, assert_valid

CTX = CallContext(binding="test")


def test_default_profile(agent):
    response = assert_valid(agent.handle({"type": "dealer.information.request"}, CTX), "dealer-information-response")
    data = response["data"]
    assert data["name"] == "Bay Motors Group"
    assert [r["name"] for r in data["rooftops"]] == [r["name"] for r in DEFAULT_ROOFTOPS]
    vancouver = data["rooftops"][2]
    assert (vancouver["timezone"], vancouver["currency"]) == ("America/Vancouver", "CAD")


def test_answer_is_a_copy_of_the_configuration(agent):
    data = agent.handle({"type": "dealer.information.request"}, CTX)["data"]
    data["rooftops"].clear()
    again = agent.handle({"type": "dealer.information.request"}, CTX)["data"]
    assert len(again["rooftops"]) == 3


def test_seller_lookup_on_an_aggregate_endpoint(agent_factory, settings_factory):
    seller = DealerProfile({"dealer_id": "north", "name": "North Cars", "rooftops": [dict(DEFAULT_ROOFTOPS[1])]})
    agent = agent_factory(settings_factory(scope="aggregate", dealers=(seller,), dealer_id="hub"))
    data = assert_valid(
        agent.handle({"type": "dealer.information.request", "dealer_id": "north"}, CTX), "dealer-information-response"
    )["data"]
    assert (data["dealer_id"], data["name"]) == ("north", "North Cars")
    assert [r["name"] for r in data["rooftops"]] == ["Bay Motors Oakland"]
    hub = agent.handle({"type": "dealer.information.request", "dealer_id": "hub"}, CTX)["data"]
    assert hub["name"] == "Bay Motors Group"


@pytest.mark.parametrize("dealer_id", ["nobody", "Hub"])
def test_unknown_dealer(agent_factory, settings_factory, dealer_id):
    agent = agent_factory(settings_factory(dealer_id="hub"))
    with pytest.raises(AapError) as err:
        agent.handle({"type": "dealer.information.request", "dealer_id": dealer_id}, CTX)
    assert err.value.code == "DEALER_NOT_FOUND"
    assert_valid(err.value.to_dict(), "error")


def test_schema_errors_for_extra_keys(agent):
    with pytest.raises(AapError) as err:
        agent.handle({"type": "dealer.information.request", "dealer": "x"}, CTX)
    assert err.value.code == "SCHEMA_VALIDATION_FAILED"
