"""``aap leads status|assign|follow-up|note|history|list`` on the pipeline: the console's rules from a
terminal, each change in the audit log (docs/console.md, "The lead pipeline")."""

from __future__ import annotations

import copy

import orjson
import pytest
from click.testing import CliRunner

from aap.accounts import Accounts
from aap.agent import CallContext, DealerAgent
from aap.cli import leads as cli
from aap.store import open_stores
from console_support import PASSWORD, cheap_hashing
from lead_support import EMAIL, FIRST, NOW, lead_request, lead_settings


@pytest.fixture
def deployment(tmp_path, monkeypatch):
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    url = f"sqlite:///{tmp_path}/cli.db"
    settings = lead_settings(database_url=url)
    agent = DealerAgent(settings, open_stores(url))
    with cheap_hashing():
        accounts = Accounts(agent.stores.console, settings)
        accounts.add("ann@dealer.example", PASSWORD)
        accounts.add("oak@dealer.example", PASSWORD, rooftops=("Bay Motors Oakland",))
    yield agent
    agent.stores.close()


def submit(agent):
    body = lead_request()
    return agent.handle(copy.deepcopy(body), CallContext(binding="test", now=NOW))["data"]["lead_id"]


def run(agent, *args):
    return CliRunner().invoke(cli.leads, [*args, "--database", agent.settings.database_url])


def test_a_lead_is_worked_from_the_terminal_with_the_consoles_rules(deployment):
    lead_id = submit(deployment)  # at San Francisco (the dealer's first rooftop)
    result = run(deployment, "status", lead_id, "contacted", "--note", "Called back.", "--as", "ann@dealer.example")
    assert result.exit_code == 0, result.output
    assert "status new -> contacted" in result.output and "note added" in result.output
    assert run(deployment, "assign", lead_id, "ANN@dealer.example").exit_code == 0
    refused = run(deployment, "assign", lead_id, "oak@dealer.example")  # sees Oakland's leads only
    assert refused.exit_code == 1 and "Owner" in refused.output
    assert run(deployment, "follow-up", lead_id, "2026-03-09").exit_code == 0
    bad = run(deployment, "follow-up", lead_id, "next tuesday")
    assert bad.exit_code == 1 and "YYYY-MM-DD" in bad.output
    assert run(deployment, "status", lead_id, "won").exit_code == 2  # not a documented status
    assert run(deployment, "note", "lead_nope", "x").exit_code == 1
    unknown = run(deployment, "note", lead_id, "x", "--as", "nobody@dealer.example")
    assert unknown.exit_code == 1 and "No console account" in unknown.output

    history = run(deployment, "history", lead_id)
    assert history.exit_code == 0, history.output
    assert "Called back." in history.output and "Mon 2 Mar 2026" not in history.output.splitlines()[0]
    assert "received        Mon 2 Mar 2026, 09:00 (PST)" in history.output
    data = orjson.loads(run(deployment, "history", lead_id, "--json").stdout)
    assert data["stage"] == "contacted" and data["owner"] == "ann@dealer.example"
    assert data["follow_up"] == "2026-03-09"
    assert [e["kind"] for e in data["events"]] == ["stage", "note", "owner", "follow_up"]
    assert data["events"][2]["actor"].startswith("cli:")

    entries = deployment.stores.console.audit_entries(subject=lead_id)
    assert {e.action for e in entries} == {"lead.pipeline"} and len(entries) == 3
    assert all("Called back." not in orjson.dumps(e.detail).decode() for e in entries)  # never a note's text


def test_list_filters_by_the_pipeline_and_shows_no_customer_data(deployment):
    first, second = submit(deployment), submit(deployment)
    assert run(deployment, "assign", second, "ann@dealer.example").exit_code == 0
    rows = orjson.loads(run(deployment, "list", "--owner", "ann@dealer.example", "--json").stdout)
    assert [r["lead_id"] for r in rows] == [second] and rows[0]["stage"] == "new"
    rows = orjson.loads(run(deployment, "list", "--owner", "none", "--json").stdout)
    assert [r["lead_id"] for r in rows] == [first]
    assert run(deployment, "status", first, "lost").exit_code == 0
    rows = orjson.loads(run(deployment, "list", "--stage", "open", "--json").stdout)
    assert [r["lead_id"] for r in rows] == [second]
    table = run(deployment, "list", "--sort", "status")
    assert table.exit_code == 0 and table.output.index(second) < table.output.index(first)
    assert FIRST not in table.output and EMAIL not in table.output
