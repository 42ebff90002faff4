"""``aap users add|passwd|unlock|remove|list``: the staff console's accounts (docs/console.md).

On a platform deployment (docs/platform.md) a tenant's accounts are named with ``--tenant ID``;
without it the commands act on the platform's own accounts, its administrators
(``aap users add EMAIL --platform-admin``).

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

from aap.cli.common import (
    config_option,
    console,
    database_option,
    fail,
    load_agent_or_fail,
    open_stores_or_fail,
    tenant_option,
)

if TYPE_CHECKING:
    from aap.accounts import Accounts
    from aap.store import Stores
    from aap.store.console import User

password_stdin_option = click.option(
    "--password-stdin", is_flag=True, help="Read the password from standard input (one line) instead of asking."
)


def _open(config: str | None, database: str | None, tenant: str | None) -> tuple[Stores, Accounts]:
    from aap.accounts import Accounts  # loaded only when a command runs

    overrides = {"database": database} if database else None
    settings = load_agent_or_fail(config, tenant, overrides, platform_accounts=True)
    stores = open_stores_or_fail(settings)
    return stores, Accounts(stores.console, settings)


def _change(
    config: str | None, database: str | None, tenant: str | None, refused: str, change: Callable[[Accounts], User]
) -> User:
    """Apply one account change; a refusal is printed with its reason (exit 1)."""
    from aap.accounts import AccountError  # loaded only when a command runs

    stores, accounts = _open(config, database, tenant)
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
    """Accounts of the staff console at /console/ (admins manage users; staff see leads).

    On a platform deployment, --tenant ID names the tenant whose console the account is for;
    without it these commands act on the platform's own administrators (--platform-admin).
    """


@users.command("add")
@click.argument("email")
@click.option(
    "--role", type=click.Choice(["admin", "staff"]), default=None, help="The account's role (default: staff)."
)
@click.option(
    "--platform-admin",
    is_flag=True,
    help="A platform deployment's own administrator, who sees and switches between every tenant (no --tenant).",
)
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
@tenant_option
def add_command(
    email: str,
    role: str | None,
    platform_admin: bool,
    seller: str | None,
    rooftops: tuple[str, ...],
    password_stdin: bool,
    config: str | None,
    database: str | None,
    tenant: str | None,
) -> None:
    """Create an account for EMAIL."""
    from aap.accounts import PLATFORM_ADMIN  # loaded only when a command runs

    if platform_admin:
        if tenant is not None:
            raise click.UsageError("--platform-admin is an account of the platform itself: leave out --tenant")
        if role is not None or seller is not None or rooftops:
            raise click.UsageError(
                "a platform administrator has no --role, --seller or --rooftop: it sees every tenant"
            )
    role = PLATFORM_ADMIN if platform_admin else role or "staff"

    def add(accounts: Accounts) -> User:
        scope = tuple(accounts.parse_rooftop(r, seller) for r in rooftops)
        accounts.check_scope(role, seller, scope)  # before the password is asked
        return accounts.add(email, _password(password_stdin), role=role, dealer_id=seller, rooftops=scope)

    user = _change(config, database, tenant, "Account not added", add)
    console.print(Text(f"Account {user.email} ({user.role}) added."))


@users.command("passwd")
@click.argument("email")
@password_stdin_option
@config_option
@database_option
@tenant_option
def passwd_command(
    email: str, password_stdin: bool, config: str | None, database: str | None, tenant: str | None
) -> None:
    """Set a new password for EMAIL (its console sessions end)."""
    user = _change(
        config,
        database,
        tenant,
        "Password not changed",
        lambda accounts: accounts.set_password(email, _password(password_stdin)),
    )
    console.print(Text(f"Password of {user.email} changed; its sessions ended."))


@users.command("unlock")
@click.argument("email")
@config_option
@database_option
@tenant_option
def unlock_command(email: str, config: str | None, database: str | None, tenant: str | None) -> None:
    """Forget the failed sign-ins counted against EMAIL's account (its sign-ins are no longer delayed)."""
    from aap.accounts import AccountError  # loaded only when a command runs

    stores, accounts = _open(config, database, tenant)
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
@tenant_option
def remove_command(email: str, config: str | None, database: str | None, tenant: str | None) -> None:
    """Remove the account of EMAIL (its console sessions end; the audit log keeps its entries)."""
    user = _change(config, database, tenant, "Account not removed", lambda accounts: accounts.remove(email))
    console.print(Text(f"Account {user.email} removed."))


@users.command("list")
@config_option
@database_option
@tenant_option
def list_command(config: str | None, database: str | None, tenant: str | None) -> None:
    """Every account: e-mail, role and what it sees (no password data)."""
    stores, rules = _open(config, database, tenant)
    try:
        accounts = stores.console.users()
    finally:
        stores.close()
    for user in accounts:
        sees = rules.describe_scope(user)
        added = datetime.fromtimestamp(user.created_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        click.echo(f"{user.email}\t{user.role}\t{sees}\tadded {added}")
    if not accounts:
        first = "--platform-admin" if rules.settings.platform is not None else "--role admin"
        console.print(Text(f"No account yet: `aap users add EMAIL {first}`."))
