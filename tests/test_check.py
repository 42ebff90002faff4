"""`aap check` against an independent fake dealer: it passes, and each deliberate break fails the right rule."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from rich.console import Console

from aap.check import CheckOptions, all_rules, run_checks
from aap.check.registry import RULES, Fail, Skip, rule
from aap.check.report import render_json, render_table
from aap.cli.check import check_command
from check_fakes import BASE, Breaks, FakeDealer
from http_helpers import LiveServer

# Rules that cannot apply to the fake (it advertises MCP and Poppy but the run selects A2A only,
# and it declares no lead.submit).
SKIPPED_ON_FAKE = {
    "card.signature",  # the fake's card is not signed (tests/test_card_signature.py checks a signed one)
    "mcp.endpoint",
    "mcp.tools",
    "mcp.capabilities",
    "poppy.auth_required",
    "poppy.token",
    "poppy.dpop_replay",
    "skills.mcp",
    "skills.poppy",
    "bindings.equivalent",
    "errors.mcp",
    "errors.poppy",
    "mcp.error_schema",
    "lead.replay",
    "lead.conflict",
    "lead.consent",
}


async def check_fake(breaks: Breaks | None = None, **options) -> Report:  # noqa: F821
    fake = FakeDealer(breaks or Breaks())
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))
    try:
        return await run_checks(BASE, CheckOptions(bindings=("a2a",), **options), http=http)
    finally:
        await http.aclose()


def statuses(report) -> dict[str, str]:
    return {r.rule.id: r.status for r in report.results}


async def test_a_conformant_fake_passes_every_applicable_rule():
    report = await check_fake()
    by_id = statuses(report)
    failing = {r.rule.id: (r.message, r.details) for r in report.results if r.status not in ("pass", "skip")}
    assert failing == {}
    assert report.ok
    assert {i for i, s in by_id.items() if s == "skip"} == SKIPPED_ON_FAKE
    assert set(by_id) == set(RULES)
    # The loopback development allowance is reported, not silent.
    assert "loopback" in report.result("card.schema").message


@pytest.mark.parametrize(
    "breaks, rule_id, evidence",
    [
        (
            Breaks(wrong_extension_uri=True),
            "card.extension",
            "expected 'https://autoagentprotocol.org/extensions/aap/v3.1'",
        ),
        (Breaks(clamp_limit=True), "search.limit", "clamped to 25"),
        (Breaks(repeat_listing=True), "search.pagination", "appears twice"),
        (Breaks(legacy_error_type=True), "errors.a2a", "forbidden @type"),
        (Breaks(mismatched_urls=True), "discovery.consistent", "elsewhere.example"),
        (Breaks(unbound_cursor=True), "search.cursor_binding", "expected INVALID_CURSOR"),
        (Breaks(lenient_version=True), "a2a.version_header", "A2A-Version 0.3: expected -32009"),
        (Breaks(capped_total=True), "search.pagination", "total is 20"),
        (Breaks(drops_context=True), "a2a.envelope", "contextId was not preserved"),
        (Breaks(mcp_metadata_wrong_resource=True), "poppy.mcp_resource", "is not the advertised MCP URL"),
        (Breaks(mcp_challenge_without_metadata=True), "poppy.mcp_resource", "names no resource_metadata"),
    ],
)
async def test_each_break_fails_its_rule(breaks, rule_id, evidence):
    report = await check_fake(breaks)
    result = report.result(rule_id)
    assert result.status == "fail", (result.message, result.details)
    assert evidence in " ".join([result.message, *result.details])
    assert not report.ok
    assert not any(r.status == "error" for r in report.results), [
        (r.rule.id, r.message) for r in report.results if r.status == "error"
    ]


async def test_a_rate_limited_dealer_is_waited_out_not_failed():
    fake = FakeDealer(Breaks(rate_limit_every=7))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))
    report = await run_checks(BASE, CheckOptions(bindings=("a2a",)), http=http)
    await http.aclose()
    assert fake.limited > 10
    assert {r.rule.id: r.message for r in report.results if r.status not in ("pass", "skip")} == {}


async def test_wrong_extension_uri_skips_what_depends_on_the_card():
    report = await check_fake(Breaks(wrong_extension_uri=True))
    by_id = statuses(report)
    assert by_id["card.available"] == "pass"
    assert by_id["card.schema"] == "fail"
    assert by_id["skills.a2a"] == "skip"
    assert "unusable" in report.result("skills.a2a").message


async def test_repeat_listing_also_breaks_the_exact_total():
    report = await check_fake(Breaks(repeat_listing=True))
    details = " ".join(report.result("search.pagination").details)
    assert "visited" in details


async def test_rule_selection_by_glob():
    fake = FakeDealer()
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))
    report = await run_checks(BASE, CheckOptions(bindings=("a2a",)), http=http, rules=["search.*", "card.schema"])
    await http.aclose()
    assert [r.rule.id for r in report.results] == ["card.schema"] + [
        r.id for r in all_rules() if r.id.startswith("search.")
    ]
    assert report.ok


def test_docs_list_every_rule():
    text = (Path(__file__).resolve().parents[1] / "docs" / "check.md").read_text()
    for r in all_rules():
        assert f"| `{r.id}` | {r.title}" in text, r.id


def test_registry_entries_are_complete():
    rules = all_rules()
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert r.title and r.spec and r.level in ("must", "should")
        assert r.area == r.id.split(".")[0]
    with pytest.raises(ValueError, match="duplicate"):
        rule("card.schema", "x", "y")(lambda ctx: None)


async def test_a_crashing_rule_is_reported_as_error_not_hidden():
    @rule("zz_test.crash", "A rule that crashes", "none")
    async def crash(ctx):
        raise RuntimeError("boom")

    @rule("zz_test.skip", "A rule that skips", "none")
    async def skip(ctx):
        raise Skip("not today")

    @rule("zz_test.warn", "A should-rule that fails", "none", level="should")
    async def warn(ctx):
        raise Fail("meh", ["detail"])

    try:
        fake = FakeDealer()
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))
        report = await run_checks(BASE, http=http, rules=["zz_test.*"])
        await http.aclose()
    finally:
        for key in ("zz_test.crash", "zz_test.skip", "zz_test.warn"):
            RULES.pop(key)
    by_id = statuses(report)
    assert by_id == {"zz_test.crash": "error", "zz_test.skip": "skip", "zz_test.warn": "warn"}
    assert "RuntimeError: boom" in report.result("zz_test.crash").message
    assert not report.ok


async def test_reports_render_as_table_and_json():
    report = await check_fake(Breaks(clamp_limit=True))
    console = Console(record=True, width=200)
    render_table(report, console)
    text = console.export_text()
    assert "search.limit" in text and "FAIL" in text and "NOT CONFORMANT" in text
    assert "spec: InventorySearchRequest.pagination" in text
    data = json.loads(render_json(report))
    assert data["ok"] is False and data["summary"]["fail"] >= 1
    failed = [r for r in data["results"] if r["status"] == "fail"]
    assert {"id", "title", "spec", "message", "details"} <= set(failed[0])


@pytest.fixture
def served_fake():
    """A fake dealer on a real loopback socket, for the CLI (which makes its own HTTP client)."""

    def start(breaks: Breaks | None = None) -> LiveServer:
        server = LiveServer()
        server.start(FakeDealer(breaks or Breaks(), base=server.base_url).app)
        servers.append(server)
        return server

    servers: list[LiveServer] = []
    yield start
    for server in servers:
        server.stop()


@pytest.mark.slow
def test_cli_exit_codes_and_json(served_fake):
    runner = CliRunner()
    good = served_fake()
    result = runner.invoke(check_command, [good.base_url, "--binding", "a2a", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ok"] is True
    bad = served_fake(Breaks(repeat_listing=True))
    result = runner.invoke(check_command, [bad.base_url, "--binding", "a2a", "--rule", "search.*"])
    assert result.exit_code == 1
    assert "search.pagination" in result.output and "NOT CONFORMANT" in result.output
    result = runner.invoke(check_command, [good.base_url, "--poppy-client-id", "https://agent.example/a.json"])
    assert result.exit_code == 2 and "go together" in result.output
