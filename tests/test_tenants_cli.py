"""``aap tenants …``, ``aap init --tenant`` and the per-agent commands with ``--tenant ID``, on
SQLite and PostgreSQL platforms, through click's CliRunner (and ``aap`` as a subprocess)."""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from aap.accounts import PLATFORM_ADMIN, AccountError, Accounts
from aap.agent import CallContext, DealerAgent
from aap.cli.main import main
from aap.config.loader import TEMPLATE_CONFIG, packaged_toml
from aap.config.tenant_template import tenant_template
from aap.store import Stores, open_platform_database, open_stores
from aap.store.platform import MIGRATIONS as PLATFORM_MIGRATIONS
from aap.tenants import TenantRegistry
from console_support import PASSWORD, cheap_hashing
from lead_support import NOW, Receiver, lead_request
from platform_support import (
    LOOPBACK_DESTINATIONS,
    PLATFORM_HOST,
    crm_route,
    listings,
    platform_settings,
    tenant_config,
    tenant_stores,
    write,
)


@pytest.fixture(autouse=True)
def _cheap_hashing():
    with cheap_hashing():
        yield


@pytest.fixture
def platform(tmp_path, database_url, monkeypatch):
    """A platform deployment's ./aap.toml on the test's database; ``platform.aap(*args)`` runs aap."""
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "aap.toml",
        f'database = "{database_url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n{LOOPBACK_DESTINATIONS}',
    )
    logger = logging.getLogger("aap")  # `aap deliver` configures logging, as a command does
    saved = (logger.handlers[:], logger.propagate, logger.level)
    runner = CliRunner()

    class Platform:
        url = database_url
        directory = tmp_path

        @staticmethod
        def aap(*args: str, input: str | None = None):
            return runner.invoke(main, list(args), input=input)

        @staticmethod
        def registry() -> TenantRegistry:
            settings = platform_settings(database_url, allow_loopback_destinations=True)
            return TenantRegistry(settings, open_platform_database(database_url), environ={})

    yield Platform
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


def tenant_file(directory: Path, name: str, **kw) -> str:
    return write(directory / f"{name.split()[0].lower()}.toml", tenant_config(name, **kw))


def rows_of(registry: TenantRegistry, tenant_id: str) -> int:
    """How many rows the tenant has in the shared tables."""
    return sum(registry.data.counts(tenant_id).values())


# -- aap init --tenant ------------------------------------------------------------------------------


def test_the_tenant_template_is_the_dealer_level_tables_of_the_deployment_template(tmp_path):
    text = tenant_template()
    deployment = tomllib.loads(packaged_toml(TEMPLATE_CONFIG))
    for key in ("id", "public_url", "database", "server"):
        deployment.pop(key)
    assert tomllib.loads(text) == deployment
    assert "\n[server]" not in text and "\npublic_url" not in text and "\ndatabase" not in text
    # Every section of the deployment template is there but the server's, with its comments.
    for heading in ("How the agent names itself", "Lead delivery", "Poppy", "MCP endpoint", "The public page"):
        assert f"# -- {heading}" in text
    assert "# -- HTTP server limits" not in text
    # Its feed example is one a platform takes: https or sftp, no file of the platform host.
    feeds = text[text.index("# -- Scheduled inventory feeds") :].split("\n# -- ")[0]
    assert '# source = "https://' in feeds
    assert "known_hosts =" not in feeds and "key_file =" not in feeds and "mapping =" not in feeds


def test_init_tenant_writes_a_template_that_is_added_as_written(platform):
    written = platform.aap("init", "--tenant", "dealer.toml")
    assert written.exit_code == 0, written.output
    assert "aap tenants add ID --config dealer.toml" in written.output
    again = platform.aap("init", "--tenant", "dealer.toml")
    assert again.exit_code == 1 and "already exists" in again.output
    both = platform.aap("init", "aap2.toml", "--tenant", "dealer.toml")
    assert both.exit_code == 2 and "not both" in both.output
    checked = platform.aap("tenants", "check", "example-motors", "--config", "dealer.toml")
    assert checked.exit_code == 0, checked.output
    assert "OK as tenant example-motors" in checked.output and "a new tenant" in checked.output
    added = platform.aap("tenants", "add", "example-motors", "--config", "dealer.toml", "--domain", "cars.example")
    assert added.exit_code == 0, added.output
    assert "https://cars.example/" in added.output and f"https://{PLATFORM_HOST}/t/example-motors/" in added.output
    registry = platform.registry()
    try:
        record = registry.get("example-motors")
        assert record.config == (platform.directory / "dealer.toml").read_text()
        assert registry.settings_for(record, "https://cars.example").dealer.name == "Example Motors"
    finally:
        registry.store.db.close()


# -- aap tenants ------------------------------------------------------------------------------------


def test_add_list_show_update_domains_and_remove(platform):
    a = tenant_file(platform.directory, "Alpha Motors")
    b = tenant_file(platform.directory, "Beta Cars")
    assert platform.aap("tenants", "add", "dealer-b", "--config", b, "--domain", "beta.example").exit_code == 0
    added = platform.aap(
        "tenants", "add", "dealer-a", "--config", a, "--domain", "www.alpha.example", "--domain", "alpha.example"
    )
    assert added.exit_code == 0, added.output
    assert "Tenant dealer-a added (revision 1)" in added.output

    listed = platform.aap("tenants", "list")
    assert listed.exit_code == 0
    lines = listed.stdout.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        ["dealer-a", "alpha.example,www.alpha.example", "revision 1"],
        ["dealer-b", "beta.example", "revision 1"],
    ]
    assert "2 tenant(s)" in listed.stderr
    rows = orjson.loads(platform.aap("tenants", "list", "--json").stdout)
    assert [r["id"] for r in rows] == ["dealer-a", "dealer-b"]
    assert rows[0]["urls"] == [
        "https://alpha.example/",
        "https://www.alpha.example/",
        f"https://{PLATFORM_HOST}/t/dealer-a/",
    ]
    assert "config" not in rows[0]

    shown = platform.aap("tenants", "show", "dealer-a")
    assert shown.exit_code == 0
    assert "domains     alpha.example, www.alpha.example" in shown.stdout
    assert f"url         https://{PLATFORM_HOST}/t/dealer-a/" in shown.stdout
    assert 'name = "Alpha Motors"' in shown.stdout  # the configuration as stored
    assert platform.aap("tenants", "show", "dealer-a", "--toml").stdout == Path(a).read_text()
    as_json = orjson.loads(platform.aap("tenants", "show", "dealer-a", "--json").stdout)
    assert as_json["config"] == Path(a).read_text() and as_json["revision"] == 1

    write(Path(a), tenant_config("Alpha Motors Group"))
    updated = platform.aap("tenants", "update", "dealer-a", "--config", a)
    assert updated.exit_code == 0 and "revision 2" in updated.output
    assert "Alpha Motors Group" in platform.aap("tenants", "show", "dealer-a", "--toml").stdout

    changed = platform.aap(
        "tenants", "domains", "dealer-a", "--add", "alpha-cars.example", "--remove", "www.alpha.example"
    )
    assert changed.exit_code == 0, changed.output
    assert orjson.loads(platform.aap("tenants", "show", "dealer-a", "--json").stdout)["domains"] == [
        "alpha-cars.example",
        "alpha.example",
    ]
    taken = platform.aap("tenants", "domains", "dealer-a", "--add", "beta.example")
    assert taken.exit_code == 1 and "already served by tenant 'dealer-b'" in taken.output
    assert platform.aap("tenants", "domains", "dealer-a").exit_code == 2  # neither --add nor --remove

    registry = platform.registry()
    try:
        stores = tenant_stores(registry, "dealer-a")
        stores.inventory.import_listings(listings("dealer-a", "Honda", 2, "Alpha Motors Main"))
        assert rows_of(registry, "dealer-a") > 0
        kept = platform.aap("tenants", "remove", "dealer-a", input="n\n")
        assert kept.exit_code == 1 and "Nothing removed" in kept.output
        assert "aap db backup FILE --tenant dealer-a" in kept.output and "deletes its data" in kept.output
        assert registry.store.tenant("dealer-a") is not None
        removed = platform.aap("tenants", "remove", "dealer-a", input="y\n")
        assert removed.exit_code == 0, removed.output
        assert registry.store.tenant("dealer-a") is None and rows_of(registry, "dealer-a") == 0
        assert platform.aap("tenants", "remove", "dealer-b", "--yes").exit_code == 0
        assert registry.store.count() == 0
    finally:
        registry.store.db.close()
    gone = platform.aap("tenants", "show", "dealer-a")
    assert gone.exit_code == 1 and "no tenant 'dealer-a'" in gone.output
    empty = platform.aap("tenants", "list", "--json")
    assert orjson.loads(empty.stdout) == []


def test_every_problem_is_listed_at_once_and_nothing_is_registered(platform):
    good = tenant_file(platform.directory, "Alpha Motors")
    assert platform.aap("tenants", "add", "dealer-a", "--config", good, "--domain", "alpha.example").exit_code == 0
    bad = write(
        platform.directory / "bad.toml",
        'public_url = "https://x.example"\n'
        + tenant_config("Beta Cars", extra="[server]\nmax_body_bytes = 2048\n")
        .replace('timezone = "America/Los_Angeles"', 'timezone = "Mars/Olympus"')
        .replace("[dealer]", "[dealer]\ncolour = 1"),
    )
    refused = platform.aap(
        "tenants", "add", "dealer-b", "--config", bad, "--domain", "alpha.example", "--domain", "10.0.0.5"
    )
    assert refused.exit_code == 1
    for expected in (
        "public_url: is the platform's",
        "server: is the platform's, not a tenant's",
        "dealer.rooftops[0].timezone",
        "dealer.colour",
        "domain 'alpha.example': already served by tenant 'dealer-a'",
        "domain '10.0.0.5': is an IP address",
    ):
        assert expected in refused.output, (expected, refused.output)
    assert "problem(s)" in refused.output
    checked = platform.aap("tenants", "check", "dealer-b", "--config", bad)
    assert checked.exit_code == 1 and "dealer.rooftops[0].timezone" in checked.output
    syntax = write(platform.directory / "syntax.toml", "[dealer\n")
    assert "(syntax)" in platform.aap("tenants", "update", "dealer-a", "--config", syntax).output
    missing = platform.aap("tenants", "add", "dealer-c", "--config", "nowhere.toml")
    assert missing.exit_code == 1 and "aap init --tenant nowhere.toml" in missing.output
    assert orjson.loads(platform.aap("tenants", "list", "--json").stdout)[0]["revision"] == 1
    assert [r["id"] for r in orjson.loads(platform.aap("tenants", "list", "--json").stdout)] == ["dealer-a"]


def test_list_reads_the_registry_a_page_at_a_time(platform, monkeypatch):
    import aap.cli.tenants

    registry = platform.registry()
    try:
        for i in range(5):
            registry.add(f"dealer-{i}", tenant_config(f"Dealer {i}"), [f"d{i}.example"])
        pages: list[tuple[str, int]] = []
        original = TenantRegistry.list

        def spy(self, *, after="", limit=1000):
            pages.append((after, limit))
            return original(self, after=after, limit=limit)

        monkeypatch.setattr(aap.cli.tenants, "PAGE", 2)
        monkeypatch.setattr(TenantRegistry, "list", spy)
        listed = platform.aap("tenants", "list", "--json")
        assert [r["id"] for r in orjson.loads(listed.stdout)] == [f"dealer-{i}" for i in range(5)]
        assert pages == [("", 2), ("dealer-1", 2), ("dealer-3", 2)]
        text = platform.aap("tenants", "list")
        assert [line.split("\t")[0] for line in text.stdout.splitlines()] == [f"dealer-{i}" for i in range(5)]
    finally:
        registry.store.db.close()


def test_a_deployment_without_platform_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(main, ["init"]).exit_code == 0  # one agent's aap.toml
    for args in (["tenants", "list"], ["tenants", "show", "x"], ["tenants", "--config", "aap.toml", "list"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 1
        assert "aap.toml is not a platform deployment: it has no [platform] table" in result.output
    demo = runner.invoke(main, ["tenants", "list", "--config", "missing.toml"])
    assert demo.exit_code == 1 and "not found" in demo.output
    imported = runner.invoke(main, ["import", "aap.toml", "--tenant", "dealer-a"])
    assert imported.exit_code == 1 and "--tenant dealer-a: aap.toml is not a platform deployment" in imported.output
    admin = runner.invoke(main, ["users", "add", "root@x.example", "--platform-admin", "--password-stdin"], "x\n")
    assert admin.exit_code == 1 and "a platform administrator is an account of a platform deployment" in admin.output


def test_the_platform_file_is_found_as_every_command_finds_its_configuration(platform, monkeypatch):
    """--config before the command, $AAP_CONFIG or ./aap.toml; a tenant file where the
    platform's belongs (or the other way round) is refused with a pointer."""
    alpha = tenant_file(platform.directory, "Alpha Motors")
    os.rename(platform.directory / "aap.toml", platform.directory / "platform.toml")
    assert platform.aap("tenants", "--config", "platform.toml", "add", "a", "--config", alpha).exit_code == 0
    assert platform.aap("tenants", "list", "--config", "platform.toml").stdout.startswith("a\t")
    monkeypatch.setenv("AAP_CONFIG", "platform.toml")
    assert platform.aap("tenants", "show", "a").exit_code == 0
    swapped = platform.aap("tenants", "--config", alpha, "list")
    assert swapped.exit_code == 1 and "is not a platform deployment" in swapped.output
    assert "it looks like a tenant's configuration" in swapped.output
    wrong = platform.aap("tenants", "update", "a", "--config", "platform.toml")
    assert wrong.exit_code == 1
    assert "database: is the platform's" in wrong.output and "platform: is the platform's" in wrong.output


# -- the per-agent commands with --tenant ---------------------------------------------------------


def test_import_leads_deliver_and_feeds_act_on_one_tenant(platform):
    receiver = Receiver()
    try:
        a = tenant_file(platform.directory, "Alpha Motors", extra=crm_route(receiver.url))
        b = tenant_file(platform.directory, "Beta Cars")
        assert platform.aap("tenants", "add", "dealer-a", "--config", a, "--domain", "alpha.example").exit_code == 0
        assert platform.aap("tenants", "add", "dealer-b", "--config", b).exit_code == 0
        feed = platform.directory / "alpha.jsonl"
        feed.write_bytes(b"\n".join(orjson.dumps(x) for x in listings("a", "Honda", 7, "Alpha Motors Main")))

        imported = platform.aap("import", str(feed), "--tenant", "dealer-a")
        assert imported.exit_code == 0, imported.output
        assert "Tenant: dealer-a (https://alpha.example)" in imported.output and "7 new" in imported.output
        refused = platform.aap("import", str(feed))
        assert refused.exit_code == 1 and "--tenant ID" in refused.output
        unknown = platform.aap("import", str(feed), "--tenant", "dealer-z")
        assert unknown.exit_code == 1 and "No tenant 'dealer-z'" in unknown.output

        registry = platform.registry()
        try:
            stores = {t: tenant_stores(registry, t) for t in ("dealer-a", "dealer-b")}
            assert stores["dealer-a"].inventory.count() == 7 and stores["dealer-b"].inventory.count() == 0
            assert platform.aap("feeds", "history", "--tenant", "dealer-b", "--json").stdout.strip() == "[]"
            (run,) = orjson.loads(platform.aap("feeds", "history", "--tenant", "dealer-a", "--json").stdout)
            assert run["inserted"] == 7 and run["trigger"] == "cli"
            no_feeds = platform.aap("feeds", "run", "--once", "--tenant", "dealer-a")
            assert no_feeds.exit_code == 2 and "no [[feeds]]" in no_feeds.output

            record = registry.get("dealer-a")
            agent = DealerAgent(registry.settings_for(record, registry.public_url(record)), stores["dealer-a"])
            answer = agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=NOW))
            lead_id = answer["data"]["lead_id"]
            listed = platform.aap("leads", "list", "--json", "--tenant", "dealer-a")
            assert [r["lead_id"] for r in orjson.loads(listed.stdout)] == [lead_id]
            assert orjson.loads(platform.aap("leads", "list", "--json", "--tenant", "dealer-b").stdout) == []
            assert platform.aap("leads", "show", lead_id, "--tenant", "dealer-b").exit_code == 1
            assert lead_id in platform.aap("leads", "show", lead_id, "--tenant", "dealer-a").stdout

            assert platform.aap("deliver", "--once", "--tenant", "dealer-b").exit_code == 0
            assert receiver.accepted() == []
            delivered = platform.aap("deliver", "--once", "--tenant", "dealer-a", "--log-format", "text")
            assert delivered.exit_code == 0, delivered.output
            assert "1 delivery(ies) processed" in delivered.output
            (sent,) = receiver.accepted()
            assert b"Alpha Motors" in sent["body"] or b"dealer-a" in sent["body"]
            (row,) = orjson.loads(platform.aap("leads", "list", "--json", "--tenant", "dealer-a").stdout)
            assert row["deliveries"] == {"delivered": 1}
        finally:
            for own in stores.values():
                own.close()
            registry.store.db.close()
    finally:
        receiver.close()


def test_demo_inventory_writes_a_feed_for_one_tenants_rooftops(platform):
    path = tenant_file(platform.directory, "Alpha Motors")
    assert platform.aap("tenants", "add", "dealer-a", "--config", path).exit_code == 0
    written = platform.aap("demo-inventory", "--tenant", "dealer-a", "-n", "6", "-o", "demo.jsonl")
    assert written.exit_code == 0 and "Wrote 6 listings to demo.jsonl." in written.output, written.output
    rows = [orjson.loads(line) for line in (platform.directory / "demo.jsonl").read_bytes().splitlines()]
    assert {row["rooftop"] for row in rows} == {"Alpha Motors Main"}
    imported = platform.aap("import", "demo.jsonl", "--tenant", "dealer-a")
    assert imported.exit_code == 0 and "6 new" in imported.output, imported.output
    refused = platform.aap("demo-inventory", "-n", "1", "-o", "x.jsonl")
    assert refused.exit_code == 1 and "--tenant ID" in refused.output
    unknown = platform.aap("demo-inventory", "--tenant", "dealer-z", "-n", "1", "-o", "x.jsonl")
    assert unknown.exit_code == 1 and "No tenant 'dealer-z'" in unknown.output


def test_console_accounts_of_tenants_and_platform_administrators(platform):
    for name, tenant_id in (("Alpha Motors", "dealer-a"), ("Beta Cars", "dealer-b")):
        path = tenant_file(platform.directory, name)
        assert platform.aap("tenants", "add", tenant_id, "--config", path).exit_code == 0
    stdin = PASSWORD + "\n"
    boss = platform.aap(
        "users", "add", "boss@alpha.example", "--tenant", "dealer-a", "--role", "admin", "--password-stdin", input=stdin
    )
    assert boss.exit_code == 0, boss.output
    staff = platform.aap(
        "users",
        "add",
        "sales@alpha.example",
        "--tenant",
        "dealer-a",
        "--rooftop",
        "Alpha Motors Main",
        "--password-stdin",
        input=stdin,
    )
    assert staff.exit_code == 0, staff.output
    other = platform.aap("users", "add", "x@beta.example", "--tenant", "dealer-b", "--rooftop", "Alpha Motors Main")
    assert other.exit_code == 1 and "no rooftop 'Alpha Motors Main'" in other.output  # its own rooftops only
    root = platform.aap("users", "add", "root@platform.example", "--platform-admin", "--password-stdin", input=stdin)
    assert root.exit_code == 0 and f"({PLATFORM_ADMIN}) added" in root.output
    # Without --tenant a platform's accounts are its administrators: refused before a password is asked.
    plain = platform.aap("users", "add", "who@platform.example")
    assert plain.exit_code == 1 and "--platform-admin" in plain.output and "Password" not in plain.output
    assert platform.aap("users", "add", "r@p.example", "--platform-admin", "--tenant", "dealer-a").exit_code == 2
    assert platform.aap("users", "add", "r@p.example", "--platform-admin", "--role", "admin").exit_code == 2

    tenant_a = platform.aap("users", "list", "--tenant", "dealer-a").stdout
    assert "boss@alpha.example\tadmin\tevery lead" in tenant_a
    assert "sales@alpha.example\tstaff\tAlpha Motors Main" in tenant_a and "root@" not in tenant_a
    assert platform.aap("users", "list", "--tenant", "dealer-b").stdout == ""
    own = platform.aap("users", "list").stdout
    assert own.startswith(f"root@platform.example\t{PLATFORM_ADMIN}\tevery tenant") and "alpha" not in own
    assert platform.aap("users", "remove", "boss@alpha.example").exit_code == 1  # not the platform's

    registry = platform.registry()
    try:
        mine = Stores(registry.store.db)
        deployment = platform_settings(platform.url)
        accounts = Accounts(mine.console, deployment)
        admin = accounts.find("root@platform.example")
        assert accounts.is_platform_admin(admin)
        assert accounts.sign_in("root@platform.example", PASSWORD, "127.0.0.1").user == admin
        alpha = tenant_stores(registry, "dealer-a")
        try:
            record = registry.get("dealer-a")
            tenant_accounts = Accounts(alpha.console, registry.settings_for(record, registry.public_url(record)))
            assert not tenant_accounts.is_platform_admin(tenant_accounts.find("boss@alpha.example"))
            with pytest.raises(AccountError):  # the administrator is nobody in a tenant's console
                tenant_accounts.find("root@platform.example")
            with pytest.raises(AccountError, match="account of a platform deployment"):
                tenant_accounts.add("root2@platform.example", PASSWORD, role=PLATFORM_ADMIN)
            with pytest.raises(AccountError, match="platform administrators"):
                accounts.add("admin@platform.example", PASSWORD, role="admin")
        finally:
            alpha.close()
    finally:
        registry.store.db.close()
    for command in (["passwd", "sales@alpha.example"], ["unlock", "sales@alpha.example"]):
        extra = ["--password-stdin"] if command[0] == "passwd" else []
        done = platform.aap("users", *command, "--tenant", "dealer-a", *extra, input="a brand new passphrase 7\n")
        assert done.exit_code == 0, done.output
    assert platform.aap("users", "remove", "sales@alpha.example", "--tenant", "dealer-a").exit_code == 0


def test_db_backup_of_one_tenant_restore_and_upgrade(platform, backend):
    """docs/platform.md, "Backups": a tenant's backup is a SQLite database of one agent, restored
    as that tenant's rows (here after the tenant was removed and added again)."""
    registry = platform.registry()
    try:
        for tenant_id, make, count in (("dealer-a", "Honda", 4), ("dealer-b", "Kia", 6)):
            registry.add(tenant_id, tenant_config(tenant_id), [])
            own = tenant_stores(registry, tenant_id)
            own.inventory.import_listings(listings(tenant_id, make, count, f"{tenant_id} Main"))
    finally:
        registry.store.db.close()
    upgraded = platform.aap("db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert "its 2 tenant(s)" in upgraded.output and f"platform\t{len(PLATFORM_MIGRATIONS.steps)}" in upgraded.stdout

    target = platform.directory / "a.db"
    copied = platform.aap("db", "backup", str(target), "--tenant", "dealer-a")
    assert copied.exit_code == 0, copied.output
    assert platform.aap("db", "backup", str(target), "--tenant", "dealer-a").exit_code == 1  # never overwritten
    single = open_stores(f"sqlite:///{target}")  # a database of one agent, as aap serve opens it
    try:
        assert single.inventory.count() == 4
    finally:
        single.close()
    assert platform.aap("tenants", "remove", "dealer-a", "--yes").exit_code == 0
    readded = platform.aap("tenants", "add", "dealer-a", "--config", tenant_file(platform.directory, "dealer-a"))
    assert readded.exit_code == 0
    registry = platform.registry()
    try:
        assert tenant_stores(registry, "dealer-a").inventory.count() == 0  # a re-added id starts empty
        restored = platform.aap("db", "restore", str(target), "--tenant", "dealer-a", "--yes")
        assert restored.exit_code == 0, restored.output
        assert tenant_stores(registry, "dealer-a").inventory.count() == 4
        assert tenant_stores(registry, "dealer-b").inventory.count() == 6
    finally:
        registry.store.db.close()


# -- help that teaches, and aap itself ------------------------------------------------------------------


def test_tenants_help_teaches_and_aap_runs_as_a_subprocess(platform):
    env = {k: v for k, v in os.environ.items() if k not in ("AAP_CONFIG", "AAP_DATABASE_URL")}

    def aap(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aap", *args], cwd=platform.directory, env=env, capture_output=True, text=True
        )

    helped = aap("tenants", "--help")
    assert helped.returncode == 0
    for taught in ("aap init --tenant", "https://PLATFORM_HOST/t/ID/", "aap tenants add dealer-a", "--tenant"):
        assert taught in helped.stdout, taught
    assert "tenants" in aap("--help").stdout
    path = tenant_file(platform.directory, "Alpha Motors")
    added = aap("tenants", "add", "dealer-a", "--config", path, "--domain", "alpha.example")
    assert added.returncode == 0, added.stderr
    listed = aap("tenants", "list", "--json")
    assert [r["id"] for r in orjson.loads(listed.stdout)] == ["dealer-a"]
    assert "--add HOST" in aap("tenants", "domains", "--help").stdout
