"""The ``aap`` command line, through click's CliRunner."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from aap.cli.main import main
from aap.config.loader import load_settings
from aap.store import open_stores


@pytest.fixture
def runner(monkeypatch):
    for name in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL", "AAP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_help_lists_the_commands(runner):
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("serve", "import", "init", "demo-inventory"):
        assert name in result.output


# -- init ----------------------------------------------------------------------------


def test_init_writes_a_loadable_template_and_refuses_to_overwrite(runner, tmp_path):
    path = tmp_path / "aap.toml"
    result = runner.invoke(main, ["init", str(path)])
    assert result.exit_code == 0, result.output
    settings = load_settings(str(path), environ={})
    assert settings.source_path == str(path)
    assert settings.dealer.rooftops[0]["timezone"] == "America/Chicago"

    path.write_text("# mine\n")
    result = runner.invoke(main, ["init", str(path)])
    assert result.exit_code == 1
    assert "--force" in result.output
    assert path.read_text() == "# mine\n"

    result = runner.invoke(main, ["init", str(path), "--force"])
    assert result.exit_code == 0
    assert load_settings(str(path), environ={}).deployment_id == "example-motors"


def test_init_defaults_to_aap_toml(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(main, ["init"]).exit_code == 0
    assert load_settings(str(tmp_path / "aap.toml"), environ={}).deployment_id == "example-motors"


# -- demo-inventory --------------------------------------------------------------------


def test_demo_inventory_writes_n_json_lines(runner, tmp_path):
    path = tmp_path / "demo.jsonl"
    result = runner.invoke(main, ["demo-inventory", "--count", "250", "--seed", "4", "-o", str(path)])
    assert result.exit_code == 0, result.output
    lines = path.read_bytes().splitlines()
    assert len(lines) == 250
    first = orjson.loads(lines[0])
    assert first["status"] in ("available", "intransit", "pending")
    again = tmp_path / "again.jsonl"
    runner.invoke(main, ["demo-inventory", "-n", "250", "--seed", "4", "-o", str(again)])
    assert again.read_bytes() == path.read_bytes()


def test_demo_inventory_writes_csv_and_stdout(runner, tmp_path):
    path = tmp_path / "demo.csv"
    assert runner.invoke(main, ["demo-inventory", "--count", "30", "-o", str(path)]).exit_code == 0
    assert path.read_text(encoding="utf-8").startswith("vehicle_id,dealer_id,vin,stock,")
    result = runner.invoke(main, ["demo-inventory", "--count", "3", "-o", "-"])
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3


def test_demo_inventory_follows_a_config(runner, tmp_path):
    config = tmp_path / "aap.toml"
    runner.invoke(main, ["init", str(config)])
    out = tmp_path / "feed.jsonl"
    result = runner.invoke(main, ["demo-inventory", "-n", "20", "--config", str(config), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert {orjson.loads(line)["rooftop"] for line in out.read_bytes().splitlines()} == {"Example Motors Springfield"}


# -- import ------------------------------------------------------------------------------


def demo_feed(runner, tmp_path, count=120, name="feed.jsonl", seed=0):
    path = tmp_path / name
    assert (
        runner.invoke(main, ["demo-inventory", "-n", str(count), "--seed", str(seed), "-o", str(path)]).exit_code == 0
    )
    return path


def test_import_loads_a_feed_then_replaces_it(runner, tmp_path):
    db = f"sqlite:///{tmp_path}/aap.db"
    feed = demo_feed(runner, tmp_path)
    result = runner.invoke(main, ["import", str(feed), "--database", db])
    assert result.exit_code == 0, result.output
    assert "120 new" in result.output
    smaller = demo_feed(runner, tmp_path, count=40, name="small.csv")
    result = runner.invoke(main, ["import", str(smaller), "--replace", "--database", db])
    assert result.exit_code == 1  # removing 80 of 120 is more than the default 50 %
    assert "would remove 80 of 120 listings" in result.output
    result = runner.invoke(main, ["import", str(smaller), "--replace", "--allow-shrink", "--database", db])
    assert result.exit_code == 0, result.output
    assert "0 updated, 40 unchanged, 80 removed; 40 available" in result.output  # repeated as published
    stores = open_stores(db)
    try:
        assert stores.inventory.count() == 40
    finally:
        stores.close()


def test_import_of_a_bad_feed_exits_nonzero_listing_problems(runner, tmp_path):
    db = f"sqlite:///{tmp_path}/aap.db"
    feed = demo_feed(runner, tmp_path, count=30)
    assert runner.invoke(main, ["import", str(feed), "--database", db]).exit_code == 0
    lines = feed.read_bytes().splitlines()
    broken = orjson.loads(lines[4])
    broken.update(status="sold", price=-3, rooftop="Nowhere")
    lines[4] = orjson.dumps(broken)
    lines.append(lines[0])  # the same listing twice
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    result = runner.invoke(main, ["import", str(bad), "--replace", "--database", db])
    assert result.exit_code == 1
    assert "nothing was imported" in result.output
    assert "line 5: /status" in result.output
    assert "line 5: /price" in result.output
    assert "line 5: /rooftop" in result.output
    assert "line 31: /vehicle_id: duplicates the vehicle_id of line 1" in result.output
    stores = open_stores(db)
    try:
        assert stores.inventory.count() == 30  # the previous inventory is intact
    finally:
        stores.close()


def test_import_reports_a_bad_config(runner, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('id = "x"\npublic_url = "http://dealer.example"\n')
    feed = demo_feed(runner, tmp_path, count=1)
    result = runner.invoke(main, ["import", str(feed), "--config", str(config)])
    assert result.exit_code == 1
    assert "public_url: must use https://" in result.output
    assert "dealer: is required" in result.output


def test_import_dealer_id_must_match_the_configured_dealer(runner, tmp_path):
    db = f"sqlite:///{tmp_path}/aap.db"
    feed = demo_feed(runner, tmp_path, count=5)
    result = runner.invoke(main, ["import", str(feed), "--database", db, "--dealer-id", "a"])
    assert result.exit_code == 1
    assert "line 1: /dealer_id: does not match dealer.dealer_id" in result.output


AGGREGATE = """
id = "cars"
public_url = "https://cars.example"
[search]
scope = "aggregate"
filters = ["make", "near"]
[dealer]
name = "Cars Marketplace"
[[dealer.rooftops]]
name = "Cars Marketplace"
[[dealers]]
dealer_id = "north"
name = "North Motors"
[[dealers.rooftops]]
name = "North Motors"
[[dealers]]
dealer_id = "south"
name = "South Motors"
[[dealers.rooftops]]
name = "South Motors"
"""


def test_aggregate_import_per_dealer_and_store_conflicts_with_line(runner, tmp_path):
    config = tmp_path / "cars.toml"
    config.write_text(AGGREGATE)
    db = f"sqlite:///{tmp_path}/cars.db"
    generated = tmp_path / "generated.jsonl"
    assert (
        runner.invoke(main, ["demo-inventory", "-n", "6", "--config", str(config), "-o", str(generated)]).exit_code == 0
    )
    rows = []
    for line in generated.read_bytes().splitlines():
        row = orjson.loads(line)
        assert row.pop("dealer_id") in ("north", "south")
        rows.append(dict(row, rooftop="North Motors"))
    north = tmp_path / "north.jsonl"
    north.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    base = ["import", "--config", str(config), "--database", db]
    result = runner.invoke(main, [*base, str(north)])
    assert result.exit_code == 1
    assert "needs a dealer_id in aggregate scope" in result.output
    assert runner.invoke(main, [*base, str(north), "--dealer-id", "north"]).exit_code == 0
    # South's feed reuses North's vehicle_ids: the store refuses, the line is named.
    south = tmp_path / "south.jsonl"
    south.write_bytes(b"".join(orjson.dumps(dict(r, rooftop="South Motors")) + b"\n" for r in rows))
    result = runner.invoke(main, [*base, str(south), "--dealer-id", "south"])
    assert result.exit_code == 1
    assert "line 1: vehicle_id already belongs to another dealer" in result.output
    stores = open_stores(db)
    try:
        assert stores.inventory.count() == 6
    finally:
        stores.close()


# -- serve ---------------------------------------------------------------------------------


@pytest.fixture
def fake_run(monkeypatch):
    """``aap serve``'s call of the runner: (the settings its source loads, the options)."""
    calls = []
    import aap.server.runner

    def run(source, **kw):
        assert isinstance(source, aap.server.runner.SettingsSource)  # what workers can load again
        sock = kw.pop("sock")  # bound by `aap serve` before its banner
        assert sock.getsockname()[1] == kw["port"]
        sock.close()
        metrics_sock = kw.pop("metrics_sock")  # bound too when [server] metrics_listen is set
        if metrics_sock is not None:
            metrics_sock.close()
        calls.append((source.load(), kw))

    monkeypatch.setattr(aap.server.runner, "run", run)
    return calls


def test_serve_demo_seeds_an_empty_database_once(runner, tmp_path, fake_run):
    db = f"sqlite:///{tmp_path}/demo.db"
    result = runner.invoke(main, ["serve", "--database", db, "--port", "0"])
    assert result.exit_code == 0, result.output
    ((settings, kw),) = fake_run
    port = kw["port"]
    assert settings.database_url == db
    assert settings.public_url == f"http://127.0.0.1:{port}"  # the port the system chose
    assert kw == {
        "host": "127.0.0.1",
        "port": port,
        "ssl_certfile": None,
        "ssl_keyfile": None,
        "workers": 1,
        "log_level": "info",
        "log_format": "json",
    }
    stores = open_stores(db)
    try:
        assert stores.inventory.count() == 2000
    finally:
        stores.close()
    result = runner.invoke(main, ["serve", "--database", db, "--port", "0"])
    assert result.exit_code == 0
    assert "demo listings" not in result.output  # already stocked: not seeded again


def test_serve_with_config_does_not_seed_and_passes_options(runner, tmp_path, fake_run, monkeypatch):
    config = tmp_path / "aap.toml"
    runner.invoke(main, ["init", str(config)])
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert")
    key.write_text("key")
    db = f"sqlite:///{tmp_path}/mine.db"
    monkeypatch.setenv("AAP_DATABASE_URL", db)
    result = runner.invoke(
        main,
        [
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--public-url",
            "https://localhost:8443",
            "--ssl-certfile",
            str(cert),
            "--ssl-keyfile",
            str(key),
            "--workers",
            "2",
            "--log-level",
            "warning",
            "--log-format",
            "text",
        ],
    )
    assert result.exit_code == 0, result.output
    ((settings, kw),) = fake_run
    assert settings.public_url == "https://localhost:8443"  # given on the command line: as given
    assert settings.database_url == db
    assert kw == {
        "host": "127.0.0.1",
        "port": kw["port"],
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
        "workers": 2,
        "log_level": "warning",
        "log_format": "text",
    }
    stores = open_stores(db)
    try:
        assert stores.inventory.count() == 0
    finally:
        stores.close()


def test_serve_demo_with_tls_publishes_https(runner, tmp_path, fake_run):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert")
    key.write_text("key")
    result = runner.invoke(
        main,
        [
            "serve",
            "--database",
            f"sqlite:///{tmp_path}/d.db",
            "--host",
            "localhost",
            "--port",
            "0",
            "--ssl-certfile",
            str(cert),
            "--ssl-keyfile",
            str(key),
        ],
    )
    assert result.exit_code == 0, result.output
    ((settings, kw),) = fake_run
    assert settings.public_url == f"https://localhost:{kw['port']}"


def test_serve_needs_both_tls_files(runner, tmp_path, fake_run):
    cert = tmp_path / "cert.pem"
    cert.write_text("cert")
    result = runner.invoke(main, ["serve", "--ssl-certfile", str(cert)])
    assert result.exit_code == 2
    assert fake_run == []
