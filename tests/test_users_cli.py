"""``aap users add|passwd|remove|list``: console accounts from the command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from aap.accounts import Accounts
from aap.cli.main import main
from aap.config.loader import load_settings
from aap.store import open_stores
from console_support import PASSWORD, cheap_hashing


@pytest.fixture(autouse=True)
def _cheap_hashing():
    with cheap_hashing():
        yield


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path}/users.db"
    runner = CliRunner()

    def run(*args: str, stdin: str | None = None):
        return runner.invoke(main, ["users", *args, "--database", url], input=stdin)

    run.url = url  # type: ignore[attr-defined]
    return run


def sign_in(url: str, email: str, password: str):
    stores = open_stores(url)
    try:
        return (
            Accounts(stores.console, load_settings(None, overrides={"database": url}))
            .sign_in(email, password, "127.0.0.1")
            .user
        )
    finally:
        stores.close()


def test_add_list_passwd_and_remove(cli):
    added = cli("add", "Boss@Dealer.example", "--role", "admin", "--password-stdin", stdin=PASSWORD + "\n")
    assert added.exit_code == 0, added.output
    assert "Account boss@dealer.example (admin) added." in added.output
    staff = cli("add", "sf@dealer.example", "--rooftop", "Demo Motors San Francisco", stdin=f"{PASSWORD}\n{PASSWORD}\n")
    assert staff.exit_code == 0, staff.output  # asked twice on the terminal
    listed = cli("list")
    assert "boss@dealer.example\tadmin\tevery lead" in listed.output
    assert "sf@dealer.example\tstaff\tDemo Motors San Francisco" in listed.output
    assert PASSWORD not in listed.output
    assert sign_in(cli.url, "boss@dealer.example", PASSWORD) is not None
    changed = cli("passwd", "boss@dealer.example", "--password-stdin", stdin="a completely new one\n")
    assert changed.exit_code == 0 and "sessions ended" in changed.output
    assert sign_in(cli.url, "boss@dealer.example", PASSWORD) is None
    assert sign_in(cli.url, "boss@dealer.example", "a completely new one") is not None
    removed = cli("remove", "sf@dealer.example")
    assert removed.exit_code == 0 and "sf@dealer.example" not in cli("list").output


def test_refusals_say_why_and_exit_non_zero(cli):
    assert cli("add", "a@dealer.example", "--password-stdin", stdin=PASSWORD + "\n").exit_code == 0
    cases = {
        ("add", "a@dealer.example", "--password-stdin"): "there is already an account",
        ("add", "b@dealer.example", "--password-stdin"): "at least 12 characters",
        (
            "add",
            "c@dealer.example",
            "--role",
            "admin",
            "--rooftop",
            "Demo Motors San Francisco",
            "--password-stdin",
        ): "an admin sees every lead",
        ("add", "d@dealer.example", "--rooftop", "Atlantis", "--password-stdin"): "no rooftop 'Atlantis'",
        ("passwd", "nobody@dealer.example", "--password-stdin"): "no account for nobody@dealer.example",
        ("remove", "nobody@dealer.example"): "no account for nobody@dealer.example",
    }
    for args, message in cases.items():
        password = "short\n" if "b@dealer.example" in args else PASSWORD + "\n"
        result = cli(*args, stdin=password)
        assert result.exit_code == 1 and message in result.output, (args, result.output)
    mismatch = cli("add", "e@dealer.example", stdin=f"{PASSWORD}\nsomething else entirely\n")
    assert mismatch.exit_code != 0


def test_unlock_forgets_an_accounts_failed_sign_ins_and_passwd_applies_the_policy(cli):
    assert cli("add", "kit@dealer.example", "--password-stdin", stdin=PASSWORD + "\n").exit_code == 0
    for _ in range(5):
        assert sign_in(cli.url, "kit@dealer.example", "a wrong guess") is None
    assert sign_in(cli.url, "kit@dealer.example", PASSWORD) is None  # held back: five failures
    unlocked = cli("unlock", "KIT@dealer.example")
    assert unlocked.exit_code == 0 and "forgotten" in unlocked.output
    assert sign_in(cli.url, "kit@dealer.example", PASSWORD) is not None
    assert "had no failed sign-in" in cli("unlock", "kit@dealer.example").output
    assert cli("unlock", "nobody@dealer.example").exit_code == 1
    for password, why in (("password1234", "most common"), ("kit@dealer.example", "e-mail address")):
        refused = cli("passwd", "kit@dealer.example", "--password-stdin", stdin=password + "\n")
        assert refused.exit_code == 1 and why in refused.output, refused.output
