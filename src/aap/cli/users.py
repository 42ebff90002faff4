"""``aap users add|passwd|unlock|remove|list``: the staff console's accounts (docs/console.md).

Passwords are read from the terminal (asked twice, never echoed) or, for
scripts, from standard input with ``--password-stdin``; never from an option,
which would leave them in the shell history and the process list.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click
from rich.text import Text

from aap.cli.common import config_option, console, database_option, fail, load_or_fail, open_stores_or_fail

if TYPE_CHECKING:
    from aap.accounts import Accounts
    from aap.store import Stores
    from aap.store.console import User

password_stdin_option = click.option(
    "--password-stdin", is_flag=True, help="Read the password from standard input (one line) instead of asking."
)


def _open(config: str | None, database: str | None) -> tuple[Stores, Accounts]:
    from aap.accounts import Accounts  # loaded only when a command runs

    settings = load_or_fail(config, {"database": database} if database else None)
    stores = open_stores_or_fail(settings)
    return stores, Accounts(stores.console, settings)


def _change(config: str | None, database: str | None, refused: str, change: Callable[[Accounts], User]) -> User:
    """Apply one account change; a refusal is printed with its reason (exit 1)."""
    from aap.accounts import AccountError

    stores, accounts = _open(config, database)
    try:
        return change(accounts)
    except AccountError as exc:
        fail(f"{refused}: {exc}.")
    finally:
        stores.close()


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    value: str = click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True)
    return value


@click.group("users")
def users() -> None:
    """Accounts of the staff console at /console/ (admins manage users; staff see leads)."""


@users.command("add")
@click.argument("email")
@click.option("--role", type=click.Choice(["admin", "staff"]), default="staff", show_default=True)
@click.option(
    "--seller",
    "seller",
    metavar="DEALER_ID",
    default=None,
    help="Aggregate scope: the seller whose leads this staff account sees.",
)
@click.option(
    "--rooftop",
    "rooftops",
    multiple=True,
    metavar="NAME",
    help="A rooftop whose leads this staff account sees (repeatable; none: every rooftop). On a marketplace"
    " it names its seller: SELLER:ROOFTOP, or ROOFTOP with --seller.",
)
@password_stdin_option
@config_option
@database_option
def add_command(
    email: str,
    role: str,
    seller: str | None,
    rooftops: tuple[str, ...],
    password_stdin: bool,
    config: str | None,
    database: str | None,
) -> None:
    """Create an account for EMAIL."""

    def add(accounts: Accounts) -> User:
        scope = tuple(accounts.parse_rooftop(r, seller) for r in rooftops)  # before the password is asked
        return accounts.add(email, _password(password_stdin), role=role, dealer_id=seller, rooftops=scope)

    user = _change(config, database, "Account not added", add)
    console.print(Text(f"Account {user.email} ({user.role}) added."))


@users.command("passwd")
@click.argument("email")
@password_stdin_option
@config_option
@database_option
def passwd_command(email: str, password_stdin: bool, config: str | None, database: str | None) -> None:
    """Set a new password for EMAIL (its console sessions end)."""
    user = _change(
        config,
        database,
        "Password not changed",
        lambda accounts: accounts.set_password(email, _password(password_stdin)),
    )
    console.print(Text(f"Password of {user.email} changed; its sessions ended."))


@users.command("unlock")
@click.argument("email")
@config_option
@database_option
def unlock_command(email: str, config: str | None, database: str | None) -> None:
    """Forget the failed sign-ins counted against EMAIL's account (its sign-ins are no longer delayed)."""
    from aap.accounts import AccountError

    stores, accounts = _open(config, database)
    try:
        cleared = accounts.unlock(email)
    except AccountError as exc:
        fail(f"Not unlocked: {exc}.")
    finally:
        stores.close()
    console.print(
        Text(f"Failed sign-ins of {email.strip()} forgotten." if cleared else f"{email.strip()} had no failed sign-in.")
    )


@users.command("remove")
@click.argument("email")
@config_option
@database_option
def remove_command(email: str, config: str | None, database: str | None) -> None:
    """Remove the account of EMAIL (its console sessions end; the audit log keeps its entries)."""
    user = _change(config, database, "Account not removed", lambda accounts: accounts.remove(email))
    console.print(Text(f"Account {user.email} removed."))


@users.command("list")
@config_option
@database_option
def list_command(config: str | None, database: str | None) -> None:
    """Every account: e-mail, role and what it sees (no password data)."""
    stores, rules = _open(config, database)
    try:
        accounts = stores.console.users()
    finally:
        stores.close()
    for user in accounts:
        sees = rules.describe_scope(user)
        added = datetime.fromtimestamp(user.created_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        click.echo(f"{user.email}\t{user.role}\t{sees}\tadded {added}")
    if not accounts:
        console.print(Text("No account yet: `aap users add EMAIL --role admin`."))
