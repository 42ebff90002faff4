"""The rules an SMTP server's table follows, wherever it is configured: an SMTP delivery target
(``[[leads.routes.targets]] type = "smtp"``) and the new-lead notifications
(``[leads.notifications]``) check their keys the same way (docs/configuration.md)."""

from __future__ import annotations

import re
from typing import NamedTuple

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


class ServerKeys(NamedTuple):
    """The keys every SMTP table has; ``host`` or ``sender`` None when missing (reported)."""

    host: str | None
    sender: str | None
    to: tuple[str, ...]
    port: int
    starttls: bool
    ssl: bool
    username_env: str | None
    password_env: str | None
    subject: str


def server_keys(table: Table, default_subject: str, *, with_to: bool) -> ServerKeys:
    """Read and check the server, the sender, the credentials' names and the subject (and, with
    ``with_to``, the ``to`` addresses) of an SMTP table, reporting every problem on ``table``."""
    host = table.string("host", required=True)
    ssl = table.boolean("ssl", False)
    starttls = table.boolean("starttls", not ssl)
    port = table.integer("port", 465 if ssl else 587, minimum=1, maximum=65535)
    sender = table.string("from", required=True)
    if sender is not None:
        check_address(table, "from", sender)
    to = table.strings("to", (), required=True) if with_to else ()
    for i, address in enumerate(to):
        check_address(table, f"to[{i}]", address)
    check_transport(table, host, ssl, starttls)
    username_env, password_env = credentials(table)
    subject = subject_line(table, default_subject)
    return ServerKeys(host, sender, to, port, starttls, ssl, username_env, password_env, subject)
