"""``[leads.notifications]``: an e-mail to a rooftop's sales people when a lead arrives (docs/leads.md).

A dealer without a CRM learns of a lead the moment it is stored: the lead's
outbox gets one more delivery (kind ``notify``) next to its CRM targets, sent
by the same durable worker with the same retries, through the same SMTP
transport. The e-mail carries a link to the lead in the console and, unless
``include`` says more, nothing about the customer.

```toml
[leads.notifications]
host = "smtp.example.com"          # port, ssl, starttls, username_env, password_env as for an smtp target
from = "aap@dealer.example"
subject = "New lead"               # the rooftop's name is added: "New lead at Bay Motors Oakland"
include = ["vehicle"]              # more than the link: vehicle, appointment, source_agent,
                                   # customer_name, customer_contact, message
published_sales = true             # no entry below for a rooftop: its published "Sales" e-mails

[[leads.notifications.recipients]]
rooftop = "Bay Motors Oakland"     # or "*" (any rooftop); dealer_id = "..." on a marketplace
to = ["sales@oakland.example", "bdc@baymotors.example"]
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aap.config.credentials import Credential, stem_credentials
from aap.config.scoped import most_specific
from aap.config.smtp import check_address, smtp_server, subject_line
from aap.config.table import Table

if TYPE_CHECKING:  # config.model imports this module (through config.leads)
    from aap.config.model import DealerProfile

#: The outbox rows of notifications: their ``kind``, and the one target name they use.
NOTIFY_KIND = "notify"
NOTIFY_TARGET = "aap:notify"
#: What an e-mail may carry beyond the link to the lead, the rooftop and the time it came in.
INCLUDE_CHOICES = ("vehicle", "appointment", "source_agent", "customer_name", "customer_contact", "message")


@dataclass(frozen=True)
class Recipients:
    """Who is told of a rooftop's leads (``"*"``: any rooftop; ``dealer_id``: one seller's)."""

    to: tuple[str, ...]
    rooftop: str = "*"
    dealer_id: str | None = None


@dataclass(frozen=True)
class NotificationSettings:
    """The SMTP server and sender of the notifications, what they carry, and their recipients."""

    enabled: bool = False
    host: str = ""
    sender: str = ""
    port: int = 587
    starttls: bool = True
    ssl: bool = False
    username_env: str | None = None
    password_env: str | None = None
    subject: str = "New lead"
    include: tuple[str, ...] = ()
    published_sales: bool = True
    recipients: tuple[Recipients, ...] = field(default_factory=tuple)
    username_secret: str | None = None
    password_secret: str | None = None

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        return stem_credentials(self, "username", "password")

    def recipients_for(
        self, profile: DealerProfile | None, dealer_id: str | None, rooftop: str | None
    ) -> tuple[str, ...]:
        """The addresses told of a lead at ``rooftop``: the most specific entry's, else (with
        ``published_sales``) the rooftop's published e-mails named "Sales" (seed 004,
        ``DealerInformation.rooftops[].emails``); none: no notification."""
        best = most_specific(self.recipients, dealer_id, rooftop)
        if best is not None:
            return best.to
        if not self.published_sales or profile is None:
            return ()
        found = profile.rooftop(rooftop) if rooftop is not None else None
        emails: list[Any] = (found or {}).get("emails") or []
        return tuple(
            dict.fromkeys(
                e["value"]
                for e in emails
                if isinstance(e, dict)
                and "sales" in str(e.get("name", "")).casefold()
                and isinstance(e.get("value"), str)
            )
        )


def parse_notifications(table: Table) -> NotificationSettings:
    """``[leads.notifications]``; absent: no notification is sent."""
    if not table.present:
        return NotificationSettings()
    server = smtp_server(table)
    subject = subject_line(table, "New lead")
    include = table.strings("include", (), choices=INCLUDE_CHOICES, min_items=0)
    published = table.boolean("published_sales", True)
    recipients: list[Recipients] = []
    seen: dict[tuple[str | None, str], str] = {}
    for entry in table.tables("recipients"):
        rooftop = entry.string("rooftop", "*")
        dealer_id = entry.string("dealer_id")
        to = entry.strings("to", (), required=True)
        for i, address in enumerate(to):
            check_address(entry, f"to[{i}]", address)
        if (dealer_id, rooftop) in seen:
            entry.problem("rooftop", f"duplicates {seen[(dealer_id, rooftop)]} (same dealer_id and rooftop)")
        seen[(dealer_id, rooftop)] = entry.path
        entry.finish()
        recipients.append(Recipients(to, rooftop, dealer_id))
    table.finish()
    return NotificationSettings(
        enabled=server.host is not None and server.sender is not None,
        host=server.host or "",
        sender=server.sender or "",
        port=server.port,
        starttls=server.starttls,
        ssl=server.ssl,
        username_env=server.username.env,
        password_env=server.password.env,
        username_secret=server.username.secret,
        password_secret=server.password.secret,
        subject=subject,
        include=include,
        published_sales=published,
        recipients=tuple(recipients),
    )
