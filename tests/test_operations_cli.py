"""The operator's side of the command line: where the configuration and the data
are, what ``aap serve`` publishes and when it says so, ``aap config check``, ``aap db backup``,
``aap check`` answers that cannot pass by mistake, and the log formats."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from aap.cli.common import CONFIG_ENV, DEMO_MARK, find_config
from aap.cli.main import main
from aap.config.loader import ConfigError, load_settings
from aap.server.listen import local_public_url
from aap.server.logconfig import JsonFormatter, TextFormatter
from aap.store import open_stores

HOOK = """
[leads]
[[leads.routes]]
rooftop = "*"
[[leads.routes.targets]]
type = "webhook"
url = "https://hooks.example/aap"
secret_env = "HOOK_SECRET"
"""


@pytest.fixture
def runner(monkeypatch, tmp_path):
    """A CliRunner in an empty working directory, with no AAP_* variable from outside."""
    for name in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL", CONFIG_ENV, "HOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return CliRunner()


@pytest.fixture
def fake_run(monkeypatch):
    """``aap serve``'s call of the runner: (settings, options); the bound sockets are closed."""
    calls = []
    import aap.server.runner

    def run(source, **kw):
        sock = kw.pop("sock")
        kw["bound_port"] = sock.getsockname()[1]
        sock.close()
        metrics_sock = kw.pop("metrics_sock", None)  # bound too when [server] metrics_listen is set
        if metrics_sock is not None:
            metrics_sock.close()
        calls.append((source.load(), kw))

    monkeypatch.setattr(aap.server.runner, "run", run)
    return calls


def write_config(path, *, public_url="http://127.0.0.1:8000", database=None, extra=""):
    """The `aap init` template with another public_url / database, plus ``extra`` TOML."""
    assert CliRunner().invoke(main, ["init", str(path), "--force"]).exit_code == 0
    text = path.read_text().replace('public_url = "http://127.0.0.1:8000"', f'public_url = "{public_url}"')
    if database:
        text = text.replace('database = "sqlite:///aap.db"', f'database = "{database}"')
    path.write_text(text + extra)
    return path


# -- where the configuration comes from --------------------------------------------------------


def test_config_discovery_order_option_then_env_then_local_file_then_demo(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    assert find_config(None, {}, str(work)).path is None  # nothing: the demo
    (work / "aap.toml").write_text("")
    assert find_config(None, {}, str(work)).path == str(work / "aap.toml")
    assert find_config(None, {CONFIG_ENV: "/etc/aap/env.toml"}, str(work)).path == "/etc/aap/env.toml"
    chosen = find_config("given.toml", {CONFIG_ENV: "/etc/aap/env.toml"}, str(work))
    assert (chosen.path, chosen.reason) == ("given.toml", "--config")


def test_every_command_says_which_configuration_it_uses(runner, monkeypatch):
    demo = runner.invoke(main, ["config", "check"])
    assert demo.exit_code == 0, demo.output
    assert "Configuration: the built-in demo dealer group" in demo.stderr

    write_config(Path("aap.toml"))  # ./aap.toml, no option
    local = runner.invoke(main, ["config", "check"])
    assert local.exit_code == 0
    assert "Configuration: aap.toml (found in the current directory)" in local.stderr
    assert "example-motors" in local.stderr

    monkeypatch.setenv(CONFIG_ENV, "missing.toml")  # named explicitly: never the demo instead
    named = runner.invoke(main, ["config", "check"])
    assert named.exit_code == 1
    assert f"Configuration: missing.toml ({CONFIG_ENV})" in named.stderr
    assert "(file): not found" in named.stderr


def test_serve_in_a_folder_with_aap_toml_serves_it_not_the_demo(runner, fake_run):
    write_config(Path("aap.toml"))
    result = runner.invoke(main, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    ((settings, _),) = fake_run
    assert settings.deployment_id == "example-motors" and settings.source_path == "aap.toml"
    assert not os.path.exists("aap-demo.db")  # nothing seeded


# -- the demo keeps to its own database --------------------------------------------------------


def test_demo_data_never_reaches_a_real_configuration(runner, fake_run, tmp_path):
    assert load_settings(environ={}).database_url == "sqlite:///aap-demo.db"
    assert load_settings(write_config(tmp_path / "t.toml"), environ={}).database_url == "sqlite:///aap.db"

    served = runner.invoke(main, ["serve", "--port", "0"])  # the demo, seeded into ./aap-demo.db
    assert served.exit_code == 0, served.output
    stores = open_stores("sqlite:///aap-demo.db")
    try:
        assert stores.inventory.count() == 2000 and stores.state.mark(DEMO_MARK) == "demo-motors-group"
    finally:
        stores.close()

    feed = tmp_path / "mine.jsonl"
    assert (
        runner.invoke(
            main, ["demo-inventory", "-n", "3", "-o", str(feed), "--config", str(tmp_path / "t.toml")]
        ).exit_code
        == 0
    )
    mine = write_config(tmp_path / "mine.toml")  # its own aap.db: three listings, nothing else
    imported = runner.invoke(main, ["import", str(feed), "--config", str(mine)])
    assert imported.exit_code == 0, imported.output
    assert "3 available in total" in imported.output

    shared = write_config(tmp_path / "shared.toml", database="sqlite:///aap-demo.db")
    for args in (["import", str(feed)], ["serve", "--port", "0"], ["leads", "list"]):
        refused = runner.invoke(main, [*args, "--config", str(shared)])
        assert refused.exit_code == 1, args
        assert "holds the demo dealer group" in refused.output
    assert len(fake_run) == 1  # the refused serve never reached the runner

    # The other way round: the demo never serves inventory it did not load as its own.
    refused = runner.invoke(main, ["serve", "--port", "0", "--database", "sqlite:///aap.db"])
    assert refused.exit_code == 1
    assert "holds inventory the demo dealer group did not load" in refused.output
    assert len(fake_run) == 1
    stores = open_stores("sqlite:///aap.db")
    try:
        assert stores.state.mark(DEMO_MARK) is None  # and leaves it unmarked: mine.toml still opens it
    finally:
        stores.close()
    assert runner.invoke(main, ["leads", "list", "--config", str(mine)]).exit_code == 0


def test_a_feed_imported_as_the_demos_is_served_by_the_demo(runner, fake_run, tmp_path):
    feed = tmp_path / "demo.jsonl"
    assert runner.invoke(main, ["demo-inventory", "-n", "5", "-o", str(feed)]).exit_code == 0
    assert runner.invoke(main, ["import", str(feed)]).exit_code == 0  # into ./aap-demo.db, marked
    served = runner.invoke(main, ["serve", "--port", "0"])
    assert served.exit_code == 0, served.output
    assert "demo listings" not in served.output  # not seeded over the imported feed


# -- what aap serve publishes, and when it says so -----------------------------------------------


def test_a_loopback_public_url_on_another_port_publishes_the_served_address(runner, fake_run, tmp_path):
    config = write_config(
        tmp_path / "dev.toml", public_url="http://127.0.0.1:8000", database=f"sqlite:///{tmp_path}/dev.db"
    )
    result = runner.invoke(main, ["serve", "--config", str(config), "--port", "0"])
    assert result.exit_code == 0, result.output
    ((settings, kw),) = fake_run
    port = kw["bound_port"]
    assert port != 8000
    assert settings.public_url == f"http://127.0.0.1:{port}"
    assert "public_url http://127.0.0.1:8000 is a loopback address other than this server's" in result.stderr
    assert result.stderr.index("publishing") < result.stderr.index("Serving")
    assert f"Serving Example Motors at http://127.0.0.1:{port}" in result.stderr


def test_a_proxied_public_url_stays_as_configured(runner, fake_run, tmp_path):
    config = write_config(
        tmp_path / "prod.toml", public_url="https://dealer.example", database=f"sqlite:///{tmp_path}/prod.db"
    )
    result = runner.invoke(main, ["serve", "--config", str(config), "--port", "0"])
    assert result.exit_code == 0, result.output
    ((settings, _),) = fake_run
    assert settings.public_url == "https://dealer.example"
    assert "publishing" not in result.output


def test_local_public_url_rules():
    # The served address already: nothing to change (localhost reaches 127.0.0.1 and a wildcard).
    assert local_public_url("http://127.0.0.1:8000", "127.0.0.1", 8000, tls=False) is None
    assert local_public_url("http://localhost:8000", "0.0.0.0", 8000, tls=False) is None
    # Another port: the served one, keeping the host spelling and the path.
    assert local_public_url("http://localhost:8000/aap/", "127.0.0.1", 8746, tls=False) == "http://localhost:8746/aap"
    assert local_public_url("http://127.0.0.1", "127.0.0.1", 8746, tls=False) == "http://127.0.0.1:8746"
    # Another loopback host than the one listening: the socket's own address.
    assert local_public_url("http://[::1]:8000", "127.0.0.1", 8000, tls=False) == "http://127.0.0.1:8000"
    # A proxy in front by design: another scheme (local TLS proxy) or a real host.
    assert local_public_url("https://localhost:8443", "127.0.0.1", 8000, tls=False) is None
    assert local_public_url("https://dealer.example", "0.0.0.0", 8000, tls=False) is None
    assert local_public_url("https://localhost:9443", "localhost", 8443, tls=True) == "https://localhost:8443"


def test_a_port_in_use_is_one_line_and_exit_2_before_any_banner(runner, fake_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(main, ["serve", "--port", str(port), "--database", "sqlite:///d.db"])
    assert result.exit_code == 2
    assert fake_run == []
    assert "Serving" not in result.output and "demo listings" not in result.output
    errors = [line for line in result.stderr.splitlines() if not line.startswith("Configuration:")]
    assert errors == [
        f"Cannot listen on 127.0.0.1:{port}: the port is already in use (another aap serve, or another program)."
    ]


def test_a_metrics_port_in_use_is_one_line_and_exit_2(runner, fake_run, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "m.toml", database=f"sqlite:///{tmp_path}/m.db")
        text = config.read_text().replace("\n[server]\n", f'\n[server]\nmetrics_listen = "127.0.0.1:{port}"\n', 1)
        config.write_text(text)
        result = runner.invoke(main, ["serve", "--config", str(config), "--port", "0"])
    assert result.exit_code == 2 and fake_run == []
    assert f"Cannot listen on 127.0.0.1:{port}: the port is already in use" in result.stderr


def test_serve_refuses_to_start_without_a_secret_it_will_need(runner, fake_run, tmp_path, monkeypatch):
    config = write_config(tmp_path / "hook.toml", database=f"sqlite:///{tmp_path}/h.db", extra=HOOK)
    result = runner.invoke(main, ["serve", "--config", str(config), "--port", "0"])
    assert result.exit_code == 1 and fake_run == []
    assert "leads.routes[0].targets[0].secret_env: environment variable HOOK_SECRET is not set" in result.output
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    assert runner.invoke(main, ["serve", "--config", str(config), "--port", "0"]).exit_code == 0
    assert len(fake_run) == 1


# -- aap config check ----------------------------------------------------------------------------


def test_config_check_exit_codes_and_every_problem_at_once(runner, tmp_path, monkeypatch):
    good = write_config(tmp_path / "good.toml")
    result = runner.invoke(main, ["config", "check", "--config", str(good)])
    assert result.exit_code == 0, result.output
    assert f"{good}: OK" in result.stderr

    bad = write_config(tmp_path / "bad.toml", extra=HOOK)
    text = bad.read_text()
    text = text.replace(
        'phones = [{ name = "Sales", value = "+12175550100" }]',
        'phones = [{ name = "Sales", value = "(217) 555-0100" }, { value = "555" }]',
    )
    text = text.replace('timezone = "America/Chicago"', 'timezone = "America/Chicgo"')
    text = text.replace('website = "https://www.example-motors.example"', 'website = "www example"')
    bad.write_text(text)
    result = runner.invoke(main, ["config", "check", "--config", str(bad)])
    assert result.exit_code == 1
    problems = [line.strip()[2:] for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert [p.split(":")[0] for p in problems] == [
        "dealer.rooftops[0].website",
        "dealer.rooftops[0].phones[1].value",
        "dealer.rooftops[0].timezone",
        "leads.routes[0].targets[0].secret_env",
    ]
    assert "environment variable HOOK_SECRET is not set" in problems[-1]

    monkeypatch.setenv("HOOK_SECRET", "set")
    bad.write_text(
        text.replace(', { value = "555" }', "")
        .replace("America/Chicgo", "America/Chicago")
        .replace('"www example"', '"https://www.example-motors.example"')
    )
    assert runner.invoke(main, ["config", "check", "--config", str(bad)]).exit_code == 0
    settings = load_settings(str(bad), environ={})
    assert settings.dealer.rooftops[0]["phones"] == [{"name": "Sales", "value": "+12175550100"}]


def test_phone_numbers_are_read_in_the_rooftops_country(tmp_path):
    config = write_config(tmp_path / "ca.toml")
    text = (
        config.read_text().replace('country = "US" }', 'country = "CA" }').replace('"+12175550100"', '"604 555 0199"')
    )
    config.write_text(text)
    assert load_settings(str(config), environ={}).dealer.rooftops[0]["phones"][0]["value"] == "+16045550199"
    config.write_text(text.replace('"604 555 0199"', '"0199"'))
    with pytest.raises(ConfigError) as caught:
        load_settings(str(config), environ={})
    assert caught.value.problems == [
        "dealer.rooftops[0].phones[0].value: '0199' is not a valid phone "
        "number in region CA; write it in E.164 form, e.g. +14155550100"
    ]


# -- aap db backup -------------------------------------------------------------------------------


@pytest.mark.slow
def test_db_backup_is_a_consistent_restorable_copy(runner, backend, database_url_factory, tmp_path):
    url = database_url_factory()
    stores = open_stores(url)
    feed = tmp_path / "feed.jsonl"
    assert runner.invoke(main, ["demo-inventory", "-n", "25", "-o", str(feed)]).exit_code == 0
    from aap.inventory.formats.aap import read_feed

    try:
        stores.inventory.import_listings(read_feed(str(feed), settings=load_settings(environ={})).listings)
        target = tmp_path / ("copy.db" if backend == "sqlite" else "copy.dump")
        result = runner.invoke(main, ["db", "backup", str(target), "--database", url])  # while open
        assert result.exit_code == 0, result.output
        assert "Backed up" in result.stderr
        again = runner.invoke(main, ["db", "backup", str(target), "--database", url])
        assert again.exit_code == 1 if backend == "sqlite" else True  # SQLite never overwrites
    finally:
        stores.close()
    if backend == "sqlite":
        restored_url = f"sqlite:///{target}"
    else:  # the restore of docs/deployment.md, into a fresh database
        restored_url = database_url_factory("restored")
        subprocess.run(
            ["pg_restore", "--no-owner", f"--dbname={restored_url}", str(target)], check=True, capture_output=True
        )
    restored = open_stores(restored_url)
    try:
        assert restored.inventory.count() == 25
    finally:
        restored.close()


def test_db_backup_without_pg_dump_prints_the_command_without_the_password(runner, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    result = runner.invoke(
        main, ["db", "backup", "x.dump", "--database", "postgresql://aap:pa55word@db.internal:5432/aap"]
    )
    assert result.exit_code == 1
    assert "pg_dump --format=custom --file=x.dump --dbname=postgresql://aap@db.internal:5432/aap" in result.output
    assert "pa55word" not in result.output


# -- aap check: answers that cannot pass by mistake ---------------------------------------------


def test_check_with_a_rule_pattern_matching_nothing_is_a_usage_error(runner):
    result = runner.invoke(main, ["check", "http://127.0.0.1:9", "--rule", "search.*", "--rule", "serch.*"])
    assert result.exit_code == 2
    assert "--rule 'serch.*' matches no rule" in result.output
    from aap.check.rules import all_rules

    for rule in all_rules():
        assert f"  {rule.id}\n" in result.output


def test_check_against_an_unreachable_endpoint_is_one_failure(runner):
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        table = runner.invoke(main, ["check", url])
        as_json = runner.invoke(main, ["check", url, "--json"])
    assert table.exit_code == 1
    assert table.output.count("UNREACHABLE") == 1 and "ConnectError" in table.output
    assert "NOT CONFORMANT" in table.output
    report = orjson.loads(as_json.stdout)
    assert as_json.exit_code == 1
    assert report["ok"] is False and report["results"] == []
    assert report["unreachable"].startswith(f"nothing answers at {url}")


# -- logs ------------------------------------------------------------------------------------------


def record(message: str, **fields) -> logging.LogRecord:
    rec = logging.LogRecord("aap.leads.delivery", logging.WARNING, __file__, 1, message, (), None)
    rec.fields = fields
    return rec


def test_log_formats_carry_ids_as_fields():
    rec = record(
        "delivery failed; will retry",
        delivery_id="dlv_1",
        lead_id="lead_2",
        attempt=3,
        error="HTTP 503 from crm",
        skipped=None,
    )
    line = orjson.loads(JsonFormatter().format(rec))
    assert line["event"] == "delivery failed; will retry"
    assert (line["delivery_id"], line["lead_id"], line["attempt"]) == ("dlv_1", "lead_2", 3)
    assert "skipped" not in line
    text = TextFormatter().format(rec)
    assert text.split(" ", 1)[1] == (
        "warning aap.leads.delivery delivery failed; will retry "
        'delivery_id=dlv_1 lead_id=lead_2 attempt=3 error="HTTP 503 from crm"'
    )


def test_deliver_takes_the_log_options(runner, tmp_path):
    config = write_config(tmp_path / "d.toml", database=f"sqlite:///{tmp_path}/d.db")
    logger = logging.getLogger("aap")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    try:
        result = runner.invoke(
            main, ["deliver", "--once", "--config", str(config), "--log-level", "warning", "--log-format", "text"]
        )
        assert result.exit_code == 0, result.output
        assert logger.level == logging.WARNING
        assert isinstance(logger.handlers[0].formatter, TextFormatter)
    finally:
        logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]
    bad = runner.invoke(main, ["deliver", "--once", "--config", str(config), "--log-format", "xml"])
    assert bad.exit_code == 2


def test_shell_completion_is_served_by_click(runner, monkeypatch):
    monkeypatch.setenv("_AAP_COMPLETE", "bash_source")
    result = runner.invoke(main, [], prog_name="aap")
    assert result.exit_code == 0
    assert "_AAP_COMPLETE=bash_complete" in result.output


def test_an_import_logs_its_counts_as_fields(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="aap.import")
    stores = open_stores(f"sqlite:///{tmp_path}/i.db")
    try:
        from aap.inventory.demo import generate_listings

        stores.inventory.import_listings(generate_listings(1, settings=load_settings(environ={})), replace=True)
    finally:
        stores.close()
    (rec,) = [r for r in caplog.records if r.name == "aap.import"]
    assert rec.getMessage() == "inventory imported"
    assert {k: rec.fields[k] for k in ("inserted", "updated", "removed", "total", "replace")} == {
        "inserted": 1,
        "updated": 0,
        "removed": 0,
        "total": 1,
        "replace": True,
    }
