"""The ``[leads]`` configuration table: delivery routes, appointments, retries.

Secrets never live in the file: a target names the *environment variables*
that hold its password, token or signing secret, and the delivery worker
(:mod:`aap.leads.worker`) reads them when it sends. Every problem is reported
at once with its TOML path (``leads.routes[0].targets[1].to``).

Example::

    [leads]
    consent_clock_skew_seconds = 120
    idempotency_retention_hours = 48
    retention_days = 730                # erase leads after two years (absent: keep them)

    [leads.appointments]
    slot_minutes = 30
    capacity_per_slot = 2

    [leads.delivery]
    max_attempts = 12
    base_backoff_seconds = 30

    [[leads.routes]]
    rooftop = "*"                       # the default route
    [[leads.routes.targets]]
    type = "adf_http"
    url = "https://crm.example.com/adf"
    auth = { type = "bearer", token_env = "CRM_TOKEN" }
    [[leads.routes.targets]]
    type = "smtp"
    host = "smtp.example.com"
    from = "aap@dealer.example"
    to = ["leads@dealer.example"]
    username_env = "SMTP_USER"
    password_env = "SMTP_PASSWORD"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aap.config.credentials import Credential, credential, stem_credentials
from aap.config.notifications import NOTIFY_TARGET, NotificationSettings, parse_notifications
from aap.config.scoped import most_specific
from aap.config.smtp import check_address, smtp_server, subject_line
from aap.config.table import Problems, Table
from aap.util.backoff import doubling

#: The longest lead retention period a configuration may set (ten years).
MAX_RETENTION_DAYS = 3650
DEFAULT_ADF_CONTENT_TYPE = "application/x-adf+xml; charset=utf-8"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_RESERVED_HEADERS = {
    "content-type",
    "content-length",
    "host",
    "idempotency-key",
    "x-aap-lead-id",
    "x-aap-delivery-id",
    "x-aap-signature",
    "x-aap-timestamp",
}


@dataclass(frozen=True)
class HttpAuth:
    """``basic`` (user and password) or ``bearer`` (a token), each named by environment variable
    (``X_env``) or tenant secret (``X_secret``)."""

    kind: str
    username_env: str | None = None
    password_env: str | None = None
    token_env: str | None = None
    username_secret: str | None = None
    password_secret: str | None = None
    token_secret: str | None = None

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        return stem_credentials(self, "username", "password", "token")


@dataclass(frozen=True)
class AdfHttpTarget:
    """POST the ADF/XML document to a CRM endpoint."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    auth: HttpAuth | None = None
    content_type: str = DEFAULT_ADF_CONTENT_TYPE
    kind: str = "adf_http"

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        """The secrets of its ``auth`` table, by key stem under the target (``auth.token``)."""
        return tuple((f"auth.{stem}", cred) for stem, cred in self.auth.credentials()) if self.auth else ()


@dataclass(frozen=True)
class SmtpTarget:
    """E-mail the ADF/XML document (the body of a text/plain message) through SMTP."""

    name: str
    host: str
    sender: str
    to: tuple[str, ...]
    port: int = 587
    starttls: bool = True
    ssl: bool = False
    username_env: str | None = None
    password_env: str | None = None
    subject: str = "New AAP lead"
    kind: str = "smtp"
    username_secret: str | None = None
    password_secret: str | None = None

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        return stem_credentials(self, "username", "password")


@dataclass(frozen=True)
class WebhookTarget:
    """POST the AAP lead as JSON, signed with HMAC-SHA256 when ``secret_env`` (or, a platform
    tenant's, ``secret_secret``) is set."""

    name: str
    url: str
    secret_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    kind: str = "webhook"
    secret_secret: str | None = None

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        return stem_credentials(self, "secret")


Target = AdfHttpTarget | SmtpTarget | WebhookTarget


@dataclass(frozen=True)
class Route:
    """Where the leads of one rooftop (``"*"``: any rooftop) of one seller go."""

    rooftop: str = "*"
    dealer_id: str | None = None  # aggregate scope: only this seller's leads
    targets: tuple[Target, ...] = ()


@dataclass(frozen=True)
class AppointmentSettings:
    """Slot grid and booking policy for appointment requests."""

    slot_minutes: int = 30  # grid step from each day's opening time
    capacity_per_slot: int = 1  # concurrent appointments per department and slot
    min_lead_minutes: int = 120  # earliest bookable start is now + this
    proposal_count: int = 3  # alternatives offered with ``proposed``
    horizon_days: int = 14  # how far ahead anything is booked or proposed
    on_unavailable: str = "reject_appointment"  # or "error" (APPOINTMENT_TIME_UNAVAILABLE)


@dataclass(frozen=True)
class DeliverySettings:
    """Outbox retry policy and worker pacing."""

    max_attempts: int = 12
    base_backoff_seconds: float = 30.0
    max_backoff_seconds: float = 3600.0
    timeout_seconds: float = 15.0  # one HTTP request or SMTP session
    poll_seconds: float = 2.0  # idle wait between outbox scans
    lease_seconds: float = 30.0  # a claim lapses this long after its worker's last renewal (a crash)
    batch_size: int = 10  # rows claimed and sent concurrently per scan
    in_process: bool = True  # run the worker inside ``aap serve``

    def backoff(self, attempts: int) -> float:
        """Delay after the ``attempts``-th failed try: base * 2^(attempts-1), capped."""
        return doubling(attempts, self.base_backoff_seconds, self.max_backoff_seconds)


@dataclass(frozen=True)
class LeadSettings:
    """Everything ``lead.submit`` and the delivery worker are configured with."""

    routes: tuple[Route, ...] = ()
    appointments: AppointmentSettings = field(default_factory=AppointmentSettings)
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    consent_clock_skew_seconds: int = 120
    idempotency_retention_hours: int = 48
    unavailable_vehicle: str = "accept"  # "accept" or "reject" a lead for a sold listing
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    #: Days a lead is kept before it is erased (docs/leads.md, "Erasure and retention"); None: for ever.
    retention_days: int | None = None

    def route_for(self, dealer_id: str | None, rooftop: str | None) -> Route | None:
        """The most specific matching route (seller + rooftop > seller > rooftop > ``*``)."""
        return most_specific(self.routes, dealer_id, rooftop)

    def target(self, name: str) -> Target | None:
        for route in self.routes:
            for target in route.targets:
                if target.name == name:
                    return target
        return None


# -- parsing ------------------------------------------------------------------------


def parse_leads_section(table: Table, problems: Problems) -> LeadSettings:
    """The ``[leads]`` table (defaults when absent); every problem goes to ``problems``."""
    base = LeadSettings()
    skew = table.integer("consent_clock_skew_seconds", base.consent_clock_skew_seconds, minimum=0, maximum=3600)
    retention = table.integer(
        "idempotency_retention_hours", base.idempotency_retention_hours, minimum=24, maximum=24 * 365
    )
    unavailable = table.string("unavailable_vehicle", base.unavailable_vehicle, choices=("accept", "reject"))
    keep_days = (
        table.integer("retention_days", MAX_RETENTION_DAYS, minimum=1, maximum=MAX_RETENTION_DAYS)
        if table.has("retention_days")
        else None
    )
    appointments = _appointments(table.table("appointments"))
    delivery = _delivery(table.table("delivery"))
    routes = _routes(table)
    notifications = parse_notifications(table.table("notifications"))
    table.finish()
    return LeadSettings(routes, appointments, delivery, skew, retention, unavailable, notifications, keep_days)


def _appointments(table: Table) -> AppointmentSettings:
    base = AppointmentSettings()
    appointments = AppointmentSettings(
        slot_minutes=table.integer("slot_minutes", base.slot_minutes, minimum=5, maximum=480),
        capacity_per_slot=table.integer("capacity_per_slot", base.capacity_per_slot, minimum=1, maximum=1000),
        min_lead_minutes=table.integer("min_lead_minutes", base.min_lead_minutes, minimum=0, maximum=7 * 24 * 60),
        proposal_count=table.integer("proposal_count", base.proposal_count, minimum=1, maximum=10),
        horizon_days=table.integer("horizon_days", base.horizon_days, minimum=1, maximum=365),
        on_unavailable=table.string("on_unavailable", base.on_unavailable, choices=("reject_appointment", "error")),
    )
    table.finish()
    return appointments


def _delivery(table: Table) -> DeliverySettings:
    base = DeliverySettings()
    delivery = DeliverySettings(
        max_attempts=table.integer("max_attempts", base.max_attempts, minimum=1, maximum=100),
        base_backoff_seconds=table.number(
            "base_backoff_seconds", base.base_backoff_seconds, minimum=0.01, maximum=86400
        ),
        max_backoff_seconds=table.number(
            "max_backoff_seconds", base.max_backoff_seconds, minimum=0.01, maximum=7 * 86400
        ),
        timeout_seconds=table.number("timeout_seconds", base.timeout_seconds, minimum=0.1, maximum=600),
        poll_seconds=table.number("poll_seconds", base.poll_seconds, minimum=0.01, maximum=3600),
        lease_seconds=table.number("lease_seconds", base.lease_seconds, minimum=1, maximum=86400),
        batch_size=table.integer("batch_size", base.batch_size, minimum=1, maximum=1000),
        in_process=table.boolean("in_process", base.in_process),
    )
    if delivery.max_backoff_seconds < delivery.base_backoff_seconds:
        table.problem("max_backoff_seconds", "must not be smaller than base_backoff_seconds")
    table.finish()
    return delivery


def _routes(leads: Table) -> tuple[Route, ...]:
    """``[[leads.routes]]``: one route per (dealer_id, rooftop); target names unique overall."""
    routes: list[Route] = []
    seen_routes: dict[tuple[str | None, str], str] = {}
    seen_names: dict[str, str] = {}
    for table in leads.tables("routes"):
        rooftop = table.string("rooftop", "*")
        dealer_id = table.string("dealer_id")
        ident = (dealer_id, rooftop)
        if ident in seen_routes:
            table.problem("rooftop", f"duplicates {seen_routes[ident]} (same dealer_id and rooftop)")
        seen_routes[ident] = table.path
        targets: list[Target] = []
        for raw in table.tables("targets", min_items=1):
            kind = raw.data.get("type", "adf_http")
            default_name = f"{kind}@{dealer_id + '/' if dealer_id else ''}{rooftop}"
            target = _target(raw, default_name)
            if target is None:
                continue
            if target.name == NOTIFY_TARGET:
                raw.problem("name", f'"{NOTIFY_TARGET}" is the name of the lead notifications; choose another')
                continue
            if target.name in seen_names:
                raw.problem(
                    "name",
                    f'target name "{target.name}" is already used by '
                    f"{seen_names[target.name]}; give each target a unique name",
                )
                continue
            seen_names[target.name] = raw.path
            targets.append(target)
        table.finish()
        routes.append(Route(rooftop, dealer_id, tuple(targets)))
    return tuple(routes)


def _target(table: Table, default_name: str) -> Target | None:
    """One ``[[leads.routes.targets]]`` table; None when it has a problem."""
    before = len(table.problems)
    kind = table.string("type", "adf_http", choices=("adf_http", "smtp", "webhook"))
    name = table.string("name", default_name)
    target: Target | None
    if kind == "adf_http":
        url = table.url("url", required=True, endpoint=True)
        headers = _headers(table.table("headers"))
        auth = _auth(table.table("auth"))
        content_type = table.string("content_type", DEFAULT_ADF_CONTENT_TYPE)
        target = None if url is None else AdfHttpTarget(name, url, headers, auth, content_type)
    elif kind == "webhook":
        url = table.url("url", required=True, endpoint=True)
        secret = credential(table, "secret")
        headers = _headers(table.table("headers"))
        target = None if url is None else WebhookTarget(name, url, secret.env, headers, secret_secret=secret.secret)
    else:
        target = _smtp(table, name)
    table.finish()
    return target if len(table.problems) == before else None


def _smtp(table: Table, name: str) -> SmtpTarget | None:
    """The SMTP target; None when ``host`` or ``from`` is missing (already reported)."""
    server = smtp_server(table)
    to = table.strings("to", (), required=True)
    for i, address in enumerate(to):
        check_address(table, f"to[{i}]", address)
    subject = subject_line(table, "New AAP lead")
    if server.host is None or server.sender is None:
        return None
    return SmtpTarget(
        name,
        server.host,
        server.sender,
        to,
        server.port,
        server.starttls,
        server.ssl,
        server.username.env,
        server.password.env,
        subject,
        username_secret=server.username.secret,
        password_secret=server.password.secret,
    )


def _headers(table: Table) -> tuple[tuple[str, str], ...]:
    """``headers = { Name = "value" }``: extra single-line headers the worker does not own."""
    out = []
    for name in list(table.data):
        value = table.raw(name)
        if not _HEADER_NAME.match(name):
            table.problem(name, "is not a valid HTTP header name")
        elif name.lower() in _RESERVED_HEADERS:
            table.problem(name, "is set by the delivery worker and cannot be configured")
        elif not isinstance(value, str) or "\n" in value or "\r" in value:
            table.problem(name, "must be a single-line string")
        else:
            out.append((name, value))
    table.finish()
    return tuple(out)


def _auth(table: Table) -> HttpAuth | None:
    """``auth = { type = "basic" | "bearer", ... }``: credentials named by environment variable
    or tenant secret (:mod:`aap.config.credentials`)."""
    if not table.present:
        return None
    kind = table.string("type", "bearer", choices=("basic", "bearer"))

    def required(stem: str) -> Credential:
        found = credential(table, stem)
        if (
            not found
            and not table.problems.has(table.at(f"{stem}_env"))
            and not table.problems.has(table.at(f"{stem}_secret"))
        ):
            table.problem(f"{stem}_env", f"is required for {kind} auth (or {stem}_secret)")
        return found

    if kind == "basic":
        username, password = required("username"), required("password")
        auth = HttpAuth(
            "basic",
            username_env=username.env,
            password_env=password.env,
            username_secret=username.secret,
            password_secret=password.secret,
        )
    else:
        token = required("token")
        auth = HttpAuth("bearer", token_env=token.env, token_secret=token.secret)
    table.finish()
    return auth
