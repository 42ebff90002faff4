"""The rules an SMTP server's table follows, wherever it is configured: an SMTP delivery target
(``[[leads.routes.targets]] type = "smtp"``) and the new-lead notifications
(``[leads.notifications]``) check their keys the same way (docs/configuration.md)."""

from __future__ import annotations

import re

from aap.config.table import Table
from aap.loopback import is_loopback_host

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name(table: Table, key: str) -> str | None:
    """The environment variable named at ``key`` (a secret is named, never written in the file)."""
    value = table.string(key)
    if value is not None and not _ENV_NAME.match(value):
        table.problem(key, "must be an environment variable name (the secret itself never goes in the file)")
        return None
    return value


def check_address(table: Table, key: str, value: str) -> None:
    """One plain e-mail address: no display name, list or line break to smuggle a header in."""
    if value.count("@") != 1 or any(c in value for c in " \r\n<>,"):
        table.problem(key, "must be an e-mail address")


def check_transport(table: Table, host: str | None, ssl: bool, starttls: bool) -> None:
    """TLS one way or the other, unless the server is on this host."""
    if ssl and starttls:
        table.problem("starttls", "cannot be combined with ssl = true (implicit TLS)")
    if host is not None and not (ssl or starttls) and not is_loopback_host(host):
        table.problem(
            "starttls",
            "must be true (or ssl = true) for a non-loopback SMTP host: customer data never travels in clear text",
        )


def credentials(table: Table) -> tuple[str | None, str | None]:
    """``username_env`` and ``password_env``: both or neither."""
    username_env = env_name(table, "username_env")
    password_env = env_name(table, "password_env")
    if (username_env is None) != (password_env is None):
        table.problem(
            "password_env" if password_env is None else "username_env", "username_env and password_env go together"
        )
    return username_env, password_env


def subject_line(table: Table, default: str) -> str:
    subject = table.string("subject", default)
    if "\n" in subject or "\r" in subject:
        table.problem("subject", "must be a single line")
    return subject
