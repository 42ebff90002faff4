"""``aap leads list|show|retry`` and ``aap deliver`` through click's CliRunner."""

from __future__ import annotations

import copy
import logging
from datetime import timedelta

import orjson
import pytest
from click.testing import CliRunner

from aap.agent import CallContext, DealerAgent
from aap.cli import leads as cli
from aap.config.leads import DeliverySettings
from aap.store import open_stores
from lead_support import (
    CONSENT_TEXT,
    EMAIL,
    FIRST,
    LAST,
    MESSAGE,
    NOW,
    PHONE,
    http_route,
    lead_request,
    lead_settings,
)

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    # `aap deliver` configures this process's logging, as a command does; give the
    # other tests (caplog) theirs back.
    logger = logging.getLogger("aap")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    yield CliRunner()
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


@pytest.fixture
def deployment(tmp_path, receiver):
    url = f"sqlite:///{tmp_path}/cli.db"
    settings = lead_settings(
        routes=[http_route(receiver.url)], database_url=url, delivery=DeliverySettings(max_attempts=1)
    )
    agent = DealerAgent(settings, open_stores(url))
    yield agent
    agent.stores.close()


def submit(agent, now=NOW, **changes):
    body = lead_request(**changes)
    return agent.handle(copy.deepcopy(body), CallContext(binding="test", now=now))["data"]["lead_id"]


def test_list_shows_ids_and_states_but_no_customer_data(runner, deployment):
    first = submit(deployment)
    second = submit(deployment, now=NOW + timedelta(seconds=1), appointment={"appointment_type": "sales"})
    result = runner.invoke(cli.leads, ["list", "--database", deployment.settings.database_url])
    assert result.exit_code == 0, result.output
    assert first in result.output and second in result.output
    assert "pending 1" in result.output and "requested" in result.output
    for value in (FIRST, LAST, EMAIL, PHONE, MESSAGE[:10]):
        assert value not in result.output
    rows = orjson.loads(
        runner.invoke(cli.leads, ["list", "--json", "--database", deployment.settings.database_url]).stdout
    )
    assert [r["lead_id"] for r in rows] == [second, first]  # newest first
    assert rows[0]["deliveries"] == {"pending": 1}


def test_every_listed_lead_id_is_whole_and_shown_as_it_is_given(runner, deployment):
    """Long values in every other column fold (or, in a pipe, widen the line): the id is never cut."""
    long_agent = {"name": "a-buyer-agent-with-a-very-long-name " * 4, "url": "https://buyer.example"}
    ids = [
        submit(
            deployment,
            now=NOW + timedelta(seconds=i),
            source_agent=long_agent,
            appointment={"appointment_type": "sales"},
        )
        for i in range(3)
    ]
    url = deployment.settings.database_url
    piped = runner.invoke(cli.leads, ["list", "--database", url])  # not a terminal
    assert piped.exit_code == 0 and "…" not in piped.output
    for lead_id in ids:
        (line,) = [line for line in piped.output.splitlines() if lead_id in line]
        assert long_agent["name"].strip() in line  # one line per lead, every value whole
        shown = runner.invoke(cli.leads, ["show", lead_id, "--database", url])
        assert shown.exit_code == 0 and lead_id in shown.output
    # In a narrow terminal the other columns fold; the id stays whole on one line.
    rows = orjson.loads(runner.invoke(cli.leads, ["list", "--json", "--database", url]).stdout)
    table = cli.lead_table(rows)
    narrow = cli._render(table, width=60)
    assert "…" not in narrow and all(lead_id in narrow for lead_id in ids)


def test_show_is_where_the_customer_data_is(runner, deployment):
    lead_id = submit(deployment)
    result = runner.invoke(cli.leads, ["show", lead_id, "--database", deployment.settings.database_url])
    assert result.exit_code == 0, result.output
    for value in (FIRST, LAST, EMAIL, PHONE, CONSENT_TEXT, MESSAGE):
        assert value in result.output
    record = orjson.loads(
        runner.invoke(cli.leads, ["show", lead_id, "--json", "--database", deployment.settings.database_url]).stdout
    )
    assert record["consent"]["consent_text"] == CONSENT_TEXT
    missing = runner.invoke(cli.leads, ["show", "lead_nope", "--database", deployment.settings.database_url])
    assert missing.exit_code == 1 and "No lead lead_nope" in missing.output


def test_deliver_once_then_retry_a_dead_delivery(runner, deployment, receiver, monkeypatch):
    monkeypatch.setattr(cli, "load_agent_or_fail", lambda config, tenant, overrides=None, **kw: deployment.settings)
    lead_id = submit(deployment)
    url = deployment.settings.database_url
    receiver.status = 503
    result = runner.invoke(cli.deliver, ["--once"])
    assert result.exit_code == 0, result.output
    assert "1 delivery(ies) processed" in result.output
    assert deployment.stores.leads.get_lead(lead_id)["deliveries"][0]["status"] == "dead"  # max_attempts = 1
    dead = runner.invoke(cli.leads, ["list", "--delivery", "dead", "--json", "--database", url])
    assert [r["lead_id"] for r in orjson.loads(dead.stdout)] == [lead_id]

    result = runner.invoke(cli.leads, ["retry", lead_id, "--database", url])
    assert result.exit_code == 0, result.output
    assert "1 delivery(ies)" in result.output
    receiver.status = 200
    assert runner.invoke(cli.deliver, ["--once"]).exit_code == 0
    assert deployment.stores.leads.get_lead(lead_id)["deliveries"][0]["status"] == "delivered"
    shown = runner.invoke(cli.leads, ["show", lead_id, "--database", url])
    assert "delivered  attempts 2" in shown.output  # tried twice: the retry keeps the count
    nothing = runner.invoke(cli.leads, ["retry", lead_id, "--database", url])
    assert nothing.exit_code == 1 and "--all" in nothing.output
    again = runner.invoke(cli.leads, ["retry", lead_id, "--all", "--database", url])
    assert again.exit_code == 0
    assert runner.invoke(cli.deliver, ["--once"]).exit_code == 0
    assert len(receiver.accepted()) == 2


def test_retry_refuses_a_lead_whose_consent_expired(runner, deployment):
    body = lead_request()
    body["consent"]["expires_at"] = "2026-03-02T18:00:00Z"  # long past on the real clock
    lead_id = deployment.handle(body, CallContext(binding="test", now=NOW))["data"]["lead_id"]
    result = runner.invoke(cli.leads, ["retry", lead_id, "--database", deployment.settings.database_url])
    assert result.exit_code == 1 and "consent expired" in result.output
    assert deployment.stores.leads.get_lead(lead_id)["deliveries"][0]["attempts"] == 0  # untouched
