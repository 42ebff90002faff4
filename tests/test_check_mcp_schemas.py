"""`aap check` rule mcp.error_schema: it passes on our server and fails a dealer whose tools publish a
success-only outputSchema (what made the TypeScript SDK 1.x throw every AAP error away)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aap.bindings.mcp import schemas, tools
from aap.check import CheckOptions, run_checks
from aap.check.rules.mcp import schema_problems
from mcp_helpers import live_dealer

AN_ERROR = {
    "type": "aap.error",
    "error_id": "err_1",
    "code": "VEHICLE_NOT_FOUND",
    "message": "Not found.",
    "retryable": False,
    "created_at": "2026-05-01T10:00:00Z",
}
OPTIONS = CheckOptions(bindings=("a2a", "mcp"))


@pytest.mark.slow
async def test_our_tools_pass(tmp_path: Path) -> None:
    with live_dealer(tmp_path, count=10) as dealer:
        report = await run_checks(dealer.base_url, OPTIONS, rules=["mcp.error_schema"])
    result = report.result("mcp.error_schema")
    assert result.status == "pass", (result.message, result.details)


@pytest.mark.slow
async def test_a_success_only_output_schema_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a success-only outputSchema, as the tools once had
    monkeypatch.setattr(tools, "reference_output_schema", lambda skill: schemas.bundled(skill.response_schema))
    with live_dealer(tmp_path, count=10) as dealer:
        report = await run_checks(dealer.base_url, OPTIONS, rules=["mcp.error_schema"])
    result = report.result("mcp.error_schema")
    assert result.status == "fail"
    assert "McpError -32602" in result.message
    details = " ".join(result.details)
    assert "read as draft-07" in details and "read as 2020-12" in details
    assert "aap_inventory_vehicle" in details and "VEHICLE_NOT_FOUND" in details


def test_schema_problems_name_an_unusable_schema() -> None:
    unresolvable = {"type": "object", "anyOf": [{"$ref": "https://elsewhere.example/error.json"}]}
    problems = schema_problems("aap_x", unresolvable, [("probe", AN_ERROR)])
    assert problems and all("cannot be used" in p for p in problems)
    assert schema_problems("aap_x", schemas.output_schema("vehicle-detail-response"), [("probe", AN_ERROR)]) == []
