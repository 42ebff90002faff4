"""The rules an SMTP server's table follows, wherever it is configured: an SMTP delivery target
(``[[leads.routes.targets]] type = "smtp"``) and the new-lead notifications
(``[leads.notifications]``) check their keys the same way (docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass

from aap.config.credentials import Credential, credential
from aap.config.table import Table
from aap.loopback import is_loopback_host


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


def credentials(table: Table) -> tuple[Credential, Credential]:
    """The user name and the password (each ``X_env`` or ``X_secret``:
    :mod:`aap.config.credentials`): both or neither."""
    username, password = credential(table, "username"), credential(table, "password")
    if bool(username) != bool(password):
        missing = "password" if not password else "username"
        table.problem(f"{missing}_env", "a user name and a password go together (each X_env or X_secret)")
    return username, password


def subject_line(table: Table, default: str) -> str:
    subject = table.string("subject", default)
    if "\n" in subject or "\r" in subject:
        table.problem("subject", "must be a single line")
    return subject


@dataclass(frozen=True)
class SmtpServer:
    """The server keys of an SMTP table, checked (``host``/``sender`` None: missing, reported)."""

    host: str | None
    sender: str | None
    port: int
    starttls: bool
    ssl: bool
    username: Credential
    password: Credential


def smtp_server(table: Table) -> SmtpServer:
    """``host``, ``from``, ``port``, ``ssl``, ``starttls`` and the login: implicit TLS on 465,
    STARTTLS on 587 unless ``ssl``."""
    host = table.string("host", required=True)
    ssl = table.boolean("ssl", False)
    starttls = table.boolean("starttls", not ssl)
    port = table.integer("port", 465 if ssl else 587, minimum=1, maximum=65535)
    sender = table.string("from", required=True)
    if sender is not None:
        check_address(table, "from", sender)
    check_transport(table, host, ssl, starttls)
    username, password = credentials(table)
    return SmtpServer(host, sender, port, starttls, ssl, username, password)
