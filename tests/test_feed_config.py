"""The ``[[feeds]]`` tables: every problem at once, credentials only as variable names; ``aap feeds run``."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

import feed_samples as samples
from aap.cli.main import main
from aap.config.feeds import parse_schedule
from aap.config.loader import ConfigError, load_settings

BASE = """
id = "demo"
public_url = "https://dealer.example"
[dealer]
name = "Demo Motors"
[[dealer.rooftops]]
name = "Demo Motors"
"""


def test_feed_tables_report_every_problem(tmp_path):
    config = tmp_path / "aap.toml"
    config.write_text(
        BASE
        + """
[[feeds]]
name = "a"
source = "https://user:secret@feeds.example/a.csv"
schedule = "every 10s"
format = "excel"
password_env = "not a variable"
[[feeds]]
name = "a"
source = "http://feeds.example/b.csv"
schedule = "61 * * * *"
colour = "red"
[[feeds]]
name = "c"
source = "sftp://dealer@feeds.example/"
timezone = "Mars/Olympus"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_settings(str(config), environ={})
    text = "\n".join(info.value.problems)
    for expected in (
        "feeds[0].source: must not carry a password",
        "feeds[0].schedule: must be at least every 1m",
        "feeds[0].format: must be one of",
        "feeds[0].password_env: must be an environment variable name",
        "feeds[1].name: is already the name of feeds[0]",
        "feeds[1].source: must use https://",
        "feeds[1].schedule: is not a valid cron expression",
        "feeds[1].colour: unknown key",
        "feeds[2].source: must name the file to fetch",
        "feeds[2].timezone: unknown IANA time zone",
    ):
        assert expected in text


def test_feed_safety_keys_are_read_and_checked(tmp_path):
    config = tmp_path / "aap.toml"
    config.write_text(
        BASE
        + """
[[feeds]]
name = "ok"
source = "https://feeds.example/a.csv"
rooftop = "Demo Motors"
private_network = true
allow_field_loss = true
max_field_loss_share = 0.5
max_price_change = 3
min_bytes_per_second = 100
timeout_seconds = 60
[[feeds]]
name = "bad"
source = "https://feeds.example/b.csv"
rooftop = "Elsewhere"
max_field_loss_share = 2
max_price_change = 0.5
private_network = "yes"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_settings(str(config), environ={})
    text = "\n".join(info.value.problems)
    for expected in (
        "feeds[1].max_field_loss_share: ",
        "feeds[1].max_price_change: ",
        "feeds[1].private_network: ",
    ):
        assert expected in text
    assert "feeds[0]" not in text
    good = config.read_text().split('[[feeds]]\nname = "bad"')[0]
    config.write_text(good + '[[feeds]]\nname = "far"\nsource = "/srv/x.csv"\nrooftop = "Elsewhere"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(str(config), environ={})
    assert info.value.problems == ["feeds[1].rooftop: is not the name of a rooftop configured"]
    config.write_text(good)
    (feed,) = load_settings(str(config), environ={}).feeds
    assert (feed.rooftop, feed.private_network, feed.allow_field_loss) == ("Demo Motors", True, True)
    assert (feed.max_field_loss_share, feed.max_price_change, feed.min_bytes_per_second) == (0.5, 3.0, 100.0)
    from aap.feeds.scheduler import request_for

    request = request_for(feed)
    assert (request.rooftop, request.allow_field_loss, request.guard.max_share) == ("Demo Motors", True, 0.5)
    assert (request.rules.deadline_seconds, request.rules.private_network) == (60.0, True)


def test_schedules():
    every = parse_schedule("every 6h")
    assert every.next_after(1000.0) == 1000.0 + 21600
    cron = parse_schedule("30 2 * * *", "UTC")
    assert cron.next_after(0.0) == 2 * 3600 + 1800
    assert cron.period(0.0) == 86400


def test_aap_feeds_run_once_and_history(tmp_path):
    path = tmp_path / "inventory.csv"
    path.write_bytes(samples.dealer_csv(samples.vehicles(10)))
    config = tmp_path / "aap.toml"
    config.write_text(BASE + f'\n[[feeds]]\nname = "nightly"\nsource = "{path}"\nschedule = "every 6h"\n')
    db = f"sqlite:///{tmp_path}/aap.db"
    runner = CliRunner()
    result = runner.invoke(main, ["feeds", "run", "--once", "--config", str(config), "--database", db])
    assert result.exit_code == 0, result.output
    assert "nightly: imported" in result.output and "10 new" in result.output
    again = runner.invoke(main, ["feeds", "run", "--once", "--config", str(config), "--database", db])
    assert "nightly: unchanged" in again.output
    history = runner.invoke(main, ["feeds", "history", "--feed", "nightly", "--json", "--database", db])
    runs = orjson.loads(history.stdout)
    assert [r["outcome"] for r in runs] == ["unchanged", "imported"]
    assert all(r["trigger"] == "schedule" for r in runs)
    assert (
        runner.invoke(
            main, ["feeds", "run", "--once", "--feed", "other", "--config", str(config), "--database", db]
        ).exit_code
        == 2
    )
