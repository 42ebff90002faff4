"""`aap check` against our own demo dealer (create_app, every binding, real HTTPS on loopback) passes every rule."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aap.check import CheckOptions, run_checks
from aap.cli.check import check_command
from deploy_env import own_dealer, own_dealer_http  # noqa: F401  (fixtures)

# The demo deployment advertises all 30 filters and every sort field, so there is
# nothing unsupported to probe, and its card is not signed; every other rule must run and pass.
EXPECTED_SKIPS = {"search.unsupported", "card.signature"}


def summary(report) -> dict[str, tuple[str, str, list[str]]]:
    return {r.rule.id: (r.status, r.message, r.details) for r in report.results if r.status not in ("pass", "skip")}


@pytest.mark.slow
async def test_our_server_passes_every_rule_over_every_binding(own_dealer):
    options = CheckOptions(allow_writes=True, poppy_identity=own_dealer.identity)
    report = await run_checks(own_dealer.url, options, verify=own_dealer.ca.context())
    assert summary(report) == {}
    skipped = {r.rule.id: r.message for r in report.results if r.status == "skip"}
    assert set(skipped) == EXPECTED_SKIPS, skipped
    assert report.ok
    assert report.card_url == own_dealer.url + "/.well-known/agent-card.json"
    assert "mcp" in report.result("bindings.equivalent").message
    assert "poppy" in report.result("bindings.equivalent").message
    assert "replayed over a2a, mcp" in report.result("lead.replay").message


@pytest.mark.slow
def test_cli_check_of_our_server_exits_zero(own_dealer):
    runner = CliRunner()
    result = runner.invoke(
        check_command,
        [
            own_dealer.url,
            "--json",
            "--allow-writes",
            "--ca-file",
            str(own_dealer.ca.ca_file),
            "--poppy-client-id",
            own_dealer.identity.client_id,
            "--poppy-client-key",
            str(own_dealer.key_file),
            "--poppy-key-id",
            own_dealer.identity.kid,
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert report["summary"]["fail"] == 0 and report["summary"]["error"] == 0


async def test_without_identity_or_writes_those_rules_skip_with_a_reason(own_dealer):
    report = await run_checks(
        own_dealer.url, CheckOptions(), verify=own_dealer.ca.context(), rules=["poppy.*", "skills.poppy", "lead.*"]
    )
    by_id = {r.rule.id: r for r in report.results}
    for rule_id in ("poppy.document", "poppy.issuer", "poppy.openapi", "poppy.auth_required"):
        assert by_id[rule_id].status == "pass", (rule_id, by_id[rule_id].message)
    for rule_id in ("poppy.token", "poppy.dpop_replay", "skills.poppy"):
        assert by_id[rule_id].status == "skip" and "--poppy-client-id" in by_id[rule_id].message
    for rule_id in ("lead.replay", "lead.conflict", "lead.consent"):
        assert by_id[rule_id].status == "skip" and "--allow-writes" in by_id[rule_id].message


@pytest.mark.slow
async def test_loopback_http_development_server_passes(own_dealer_http):
    report = await run_checks(own_dealer_http, CheckOptions(bindings=("a2a", "mcp")))
    assert summary(report) == {}
    assert "loopback" in report.result("discovery.https").message
