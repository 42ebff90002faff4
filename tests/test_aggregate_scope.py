"""What a buyer sees of operator and seller on an aggregate endpoint (docs/leads.md, "Aggregate endpoints: operator and seller").

The seed keeps the two apart: a listing's ``dealer_id`` "identifies the actual seller, not
merely the aggregation platform" (``Vehicle.dealer_id``); a selected seller's profile
describes "only that receiving dealership, not the aggregate operator"
(``DealerInformation.dealer_id``); ``vehicle_id`` is what makes "the owning dealer and listing
resolve unambiguously" (``VehicleDetailRequest.vehicle_id``), all seed 004. The decisions
(docs/search.md "inventory.vehicle", docs/leads.md "Aggregate endpoints"):

- ``inventory.vehicle`` by a VIN or stock number that several sellers list: still
  ``VEHICLE_NOT_FOUND`` (no code of the closed vocabulary says "ambiguous"), but the message
  says the vehicle is listed several times and ``details.matches`` names each listing's
  ``vehicle_id`` and ``dealer_id``, so the buyer can ask again by ``vehicle_id``;
- a lead linked to seller B answers in B's name (``data.dealer.name``, the message) with the
  phone of B's rooftop; ``vehicle_of_interest.dealer_id`` naming a seller of this endpoint
  identifies the seller even when no listing is linked;
- a lead no seller can be identified for is received by the operator and answered in the
  operator's name, never in one of its rooftops' names, and the message says so.

Seller names differ from their rooftops' names here, so each answer shows whose name it is.
"""

from __future__ import annotations

import dataclasses

import pytest

from aap.agent import CallContext
from aap.config.model import DealerProfile
from aap.errors import AapError
from aap.spec import validate
from conftest import make_settings, open_memory_agent, rooftop
from factories import seller_listing
from lead_support import NOW, lead_request

SHARED_VIN = "1HGCV1F34PA000001"

OPERATOR_ROOFTOP = rooftop(
    "Cars Marketplace HQ",
    None,
    city="Chicago",
    timezone="America/Chicago",
    phones=[{"name": "Sales", "value": "+13125550100"}],
)
SPRINGFIELD = DealerProfile(
    {
        "dealer_id": "springfield-honda",
        "name": "Springfield Honda",
        "rooftops": [
            rooftop(
                "Springfield Honda North Lot",
                None,
                city="Springfield",
                timezone="America/Chicago",
                phones=[{"name": "Sales", "value": "+12175550100"}],
            )
        ],
    }
)
SHELBYVILLE = DealerProfile(
    {
        "dealer_id": "shelbyville-ford",
        "name": "Shelbyville Ford",
        "rooftops": [
            rooftop(
                "Shelbyville Ford Downtown",
                None,
                city="Shelbyville",
                timezone="America/Chicago",
                phones=[{"name": "Sales", "value": "+12175550199"}],
            )
        ],
    }
)


LISTINGS = [
    seller_listing("sh-1", SPRINGFIELD.dealer_id, SPRINGFIELD.rooftops[0]["name"], SHARED_VIN, stock="A1"),
    seller_listing("sf-1", SHELBYVILLE.dealer_id, SHELBYVILLE.rooftops[0]["name"], SHARED_VIN, stock="A1"),
    seller_listing("sf-2", SHELBYVILLE.dealer_id, SHELBYVILLE.rooftops[0]["name"], "1FTEW1EP5PKA00003", stock="B2"),
]


def marketplace():
    settings = make_settings(
        rooftops=[OPERATOR_ROOFTOP],
        dealers=(SPRINGFIELD, SHELBYVILLE),
        scope="aggregate",
        filters=("make", "vin", "stock"),
    )
    info = dict(settings.dealer.info, name="Cars Marketplace")
    return open_memory_agent(dataclasses.replace(settings, dealer=DealerProfile(info)), LISTINGS)


def ask(agent, payload) -> dict:
    return agent.handle(payload, CallContext(binding="test", now=NOW))


@pytest.mark.parametrize("identifier", [{"vin": SHARED_VIN}, {"stock": "A1"}])
def test_a_vehicle_two_sellers_list_is_ambiguous_not_missing(identifier):
    with marketplace() as agent:
        with pytest.raises(AapError) as caught:
            ask(agent, {"type": "inventory.vehicle.request", **identifier})
        for match in caught.value.details["matches"]:  # each one resolves by its vehicle_id
            got = ask(agent, {"type": "inventory.vehicle.request", "vehicle_id": match["vehicle_id"]})
            assert got["data"]["dealer_id"] == match["dealer_id"]
    error = caught.value
    assert error.code == "VEHICLE_NOT_FOUND"
    assert "could not be found" not in error.message and "several listings" in error.message.lower()
    assert validate(error.to_dict(), "error") == []
    assert error.details["matches"] == [
        {"vehicle_id": "sf-1", "dealer_id": "shelbyville-ford"},
        {"vehicle_id": "sh-1", "dealer_id": "springfield-honda"},
    ]
    assert "vehicle_id" in error.details["hint"]


def test_a_vehicle_one_seller_lists_resolves_and_an_unknown_one_is_not_found():
    with marketplace() as agent:
        assert (
            ask(agent, {"type": "inventory.vehicle.request", "vin": "1FTEW1EP5PKA00003"})["data"]["vehicle_id"]
            == "sf-2"
        )
        with pytest.raises(AapError) as caught:
            ask(agent, {"type": "inventory.vehicle.request", "vin": "1FTEW1EP5PKA00009"})
    assert caught.value.code == "VEHICLE_NOT_FOUND" and "matches" not in caught.value.details


def test_a_lead_linked_to_a_seller_is_answered_in_the_sellers_name():
    with marketplace() as agent:
        answer = ask(agent, lead_request(vehicle_of_interest={"vehicle_id": "sf-2"}))
        lead = agent.stores.leads.get_lead(answer["data"]["lead_id"])
    assert validate(answer, "lead-submit-response") == []
    assert answer["data"]["dealer"] == {"name": "Shelbyville Ford", "phone": "+12175550199"}
    assert "Shelbyville Ford received your inquiry" in answer["message"]
    assert (lead["dealer_id"], lead["rooftop"]) == ("shelbyville-ford", "Shelbyville Ford Downtown")


def test_a_seller_named_in_the_vehicle_of_interest_receives_an_unlinked_lead():
    with marketplace() as agent:
        answer = ask(
            agent,
            lead_request(vehicle_of_interest={"dealer_id": "springfield-honda", "make": "Honda", "model": "Civic"}),
        )
        lead = agent.stores.leads.get_lead(answer["data"]["lead_id"])
    assert answer["data"]["dealer"] == {"name": "Springfield Honda", "phone": "+12175550100"}
    assert lead["dealer_id"] == "springfield-honda"


@pytest.mark.parametrize(
    "vehicle", [None, {"make": "Honda"}, {"vin": SHARED_VIN}, {"dealer_id": "capital-city-kia", "make": "Kia"}]
)
def test_a_lead_no_seller_can_be_identified_for_is_answered_by_the_operator(vehicle):
    with marketplace() as agent:
        answer = ask(agent, lead_request(vehicle_of_interest=vehicle))
        lead = agent.stores.leads.get_lead(answer["data"]["lead_id"])
    assert validate(answer, "lead-submit-response") == []
    assert answer["data"]["dealer"]["name"] == "Cars Marketplace"  # the operator, not its rooftop
    assert "Cars Marketplace HQ" not in answer["message"]
    assert "could not be matched to one seller" in answer["message"]
    assert lead["dealer_id"] == "test-deployment"  # the operator's own id (no [dealer] dealer_id here)


def test_in_dealer_scope_a_lead_still_names_the_rooftop():
    oakland = {
        **seller_listing(
            "bm-1", SPRINGFIELD.dealer_id, SPRINGFIELD.rooftops[0]["name"], "1HGCV1F34PA000007", stock="C3"
        ),
        "rooftop": "Bay Motors Oakland",
    }
    del oakland["dealer_id"]
    with open_memory_agent(make_settings(), [oakland]) as agent:
        answer = ask(agent, lead_request(vehicle_of_interest={"vehicle_id": "bm-1"}))
    assert answer["data"]["dealer"]["name"] == "Bay Motors Oakland"
    assert "could not be matched" not in answer["message"]
