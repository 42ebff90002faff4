"""End to end with the official TypeScript MCP client (@modelcontextprotocol/sdk 1.32, the 1.x line).

The 1.x client validates the structuredContent of every result against the tool's outputSchema,
isError results included, and throws ``McpError -32602`` when it does not match: with a
success-only outputSchema a TypeScript agent never sees an AAP error. One dealer, one Node
process (tests/node/mcp_client.mjs) runs every case: list tools, call every tool, three AAP
errors read from ``callTool()``'s result, the same through a signed-in Poppy agent's Bearer
token, and Ajv's verdicts (the SDK's own validator) over the schema corpus of
tests/schema_corpus.py.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from referencing import Registry

from aap.bindings.mcp.schemas import bundled
from aap.bindings.mcp.tools import reference_output_schema
from aap.skills.catalog import SKILLS
from aap.spec import validate
from aap.spec.formats import checker as format_checker
from aap.spec.validator import AapValidator
from factories import signed_in_dealer_fixture
from mcp_helpers import LEGACY, lead_request
from node_env import NODE_PROJECT, installed_sdk_version, run_plan
from schema_corpus import corpus, real_messages
from signed_in_env import SignedInDealer

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

TOOL_NAMES = [s.tool_name for s in SKILLS.values()]
NOT_FOUND_VIN = "1HGCV1F30NA000000"
AN_ERROR = {
    "type": "aap.error",
    "error_id": "err_1",
    "code": "VEHICLE_NOT_FOUND",
    "message": "Not found.",
    "retryable": False,
    "created_at": "2026-05-01T10:00:00Z",
}


def plan_for(dealer: SignedInDealer, token: str, instances: dict[str, list[tuple[str, Any]]]) -> dict[str, Any]:
    vehicle = dealer.available_vehicle()
    no_consent = lead_request(vehicle, uuid.uuid4().hex)
    del no_consent["consent"]
    calls = [
        ("dealer", "aap_dealer_information", {"type": "dealer.information.request"}),
        ("facets", "aap_inventory_facets", {"type": "inventory.facets.request", "filters": {"condition": ["used"]}}),
        ("search", "aap_inventory_search", {"type": "inventory.search.request", "pagination": {"limit": 3}}),
        ("vehicle", "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": vehicle["vin"]}),
        ("lead", "aap_lead_submit", lead_request(vehicle, uuid.uuid4().hex)),
        ("VEHICLE_NOT_FOUND", "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": NOT_FOUND_VIN}),
        (
            "SCHEMA_VALIDATION_FAILED",
            "aap_inventory_search",
            {"type": "inventory.search.request", "filters": {"make": "Honda", "year_min": "new"}},
        ),
        ("CONTACT_CONSENT_REQUIRED", "aap_lead_submit", no_consent),
    ]
    signed_lead = lead_request(vehicle, "node-" + uuid.uuid4().hex)
    plan_calls = [{"id": i, "tool": t, "arguments": a} for i, t, a in calls]
    plan_calls += [
        {
            "id": "signed-in VEHICLE_NOT_FOUND",
            "tool": "aap_inventory_vehicle",
            "token": token,
            "arguments": {"type": "inventory.vehicle.request", "vin": NOT_FOUND_VIN},
        },
        {"id": "signed-in lead", "tool": "aap_lead_submit", "token": token, "arguments": signed_lead},
        {"id": "signed-in lead again", "tool": "aap_lead_submit", "token": token, "arguments": signed_lead},
        {"id": "anonymous lead, same key", "tool": "aap_lead_submit", "arguments": signed_lead},
    ]
    verdicts = {SKILLS[skill_id].tool_name: [i for _, i in items] for skill_id, items in instances.items()}
    # the outputSchema as it was (the response alone), judged by Ajv on one real error
    before = {"schema": bundled("vehicle-detail-response"), "instances": [AN_ERROR]}
    return {
        "url": dealer.mcp_url,
        "calls": plan_calls,
        "verdicts": verdicts,
        "schemaVerdicts": {"success-only": before},
    }


dealer = signed_in_dealer_fixture("node-dealer")


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, Any]]]:
    return corpus(real_messages(tmp_path_factory.mktemp("node-corpus")))


@pytest.fixture(scope="module")
def report(
    dealer: SignedInDealer, instances: dict[str, list[tuple[str, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    agent = dealer.new_agent()
    token = agent.mcp_token()
    plan = plan_for(dealer, token, instances)
    return run_plan(plan, tmp_path_factory.mktemp("node-plan"), ca_file=dealer.ca_file)


def test_the_pinned_sdk_is_the_1_x_line() -> None:
    lock = json.loads((NODE_PROJECT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/@modelcontextprotocol/sdk"]["version"]
    assert pinned.startswith("1.32.") and installed_sdk_version() == pinned


def test_tools_are_listed_with_the_published_output_schemas(report: dict[str, Any]) -> None:
    assert report["protocolVersion"] == LEGACY  # the 1.x client negotiates 2025-11-25 with initialize
    assert [t["name"] for t in report["tools"]] == TOOL_NAMES
    for tool, skill in zip(report["tools"], SKILLS.values()):
        assert tool["outputSchema"] == reference_output_schema(skill)  # by reference (docs/mcp.md, "Tools")


def test_every_tool_answers_with_its_typed_response(report: dict[str, Any]) -> None:
    for call_id, skill_id in (
        ("dealer", "dealer.information"),
        ("facets", "inventory.facets"),
        ("search", "inventory.search"),
        ("vehicle", "inventory.vehicle"),
        ("lead", "lead.submit"),
    ):
        outcome = report["calls"][call_id]
        assert "threw" not in outcome, outcome
        assert outcome["isError"] is False
        assert validate(outcome["structuredContent"], SKILLS[skill_id].response_schema) == []


@pytest.mark.parametrize("code", ["VEHICLE_NOT_FOUND", "SCHEMA_VALIDATION_FAILED", "CONTACT_CONSENT_REQUIRED"])
def test_aap_errors_reach_the_typescript_agent(report: dict[str, Any], code: str) -> None:
    outcome = report["calls"][code]
    assert "threw" not in outcome, outcome  # 1.x threw McpError -32602 here with a success-only schema
    assert outcome["isError"] is True
    assert outcome["structuredContent"]["code"] == code
    assert validate(outcome["structuredContent"], "error") == []


def test_a_signed_in_typescript_agent_uses_its_bearer_token(report: dict[str, Any]) -> None:
    calls = report["calls"]
    assert calls["signed-in VEHICLE_NOT_FOUND"]["structuredContent"]["code"] == "VEHICLE_NOT_FOUND"
    first, again = calls["signed-in lead"]["structuredContent"], calls["signed-in lead again"]["structuredContent"]
    anonymous = calls["anonymous lead, same key"]["structuredContent"]
    assert first["type"] == "lead.submit.response" and not first["data"].get("replayed", False)
    assert again["data"]["replayed"] is True and again["data"]["lead_id"] == first["data"]["lead_id"]
    assert anonymous["data"]["lead_id"] != first["data"]["lead_id"]  # another caller, another lead


def test_ajv_reads_the_output_schemas_as_python_does(
    report: dict[str, Any], instances: dict[str, list[tuple[str, Any]]]
) -> None:
    for skill_id, items in instances.items():
        skill = SKILLS[skill_id]
        published = AapValidator(reference_output_schema(skill), registry=Registry(), format_checker=format_checker)
        expected = [published.is_valid(instance) for _, instance in items]
        got = report["verdicts"][skill.tool_name]
        wrong = [label for (label, _), e, g in zip(items, expected, got) if e != g]
        assert wrong == [], wrong
        # by reference the schema pins the type only: every real answer and error passes
        assert got.count(True) >= 5


def test_a_success_only_schema_is_what_broke_typescript_agents(report: dict[str, Any]) -> None:
    """Ajv fails an aap.error against the response schema alone: the reported bug, caught by this test."""
    assert validate(AN_ERROR, "error") == []
    assert report["schemaVerdicts"]["success-only"] == [False]
