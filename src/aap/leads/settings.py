"""The ``[leads]`` configuration table: delivery routes, appointments, retries.

Secrets never live in the file: a target names the *environment variables*
that hold its password, token or signing secret, and the worker reads them
when it sends. Every problem in the table is reported at once, each as
``"leads.path: message"`` (the config loader's problem format).

Example::

    [leads]
    consent_clock_skew_seconds = 120
    idempotency_retention_hours = 48

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

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Union
from urllib.parse import urlsplit

DEFAULT_ADF_CONTENT_TYPE = "application/x-adf+xml; charset=utf-8"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_RESERVED_HEADERS = {"content-type", "content-length", "host", "idempotency-key",
                     "x-aap-lead-id", "x-aap-delivery-id", "x-aap-signature", "x-aap-timestamp"}


@dataclass(frozen=True)
class HttpAuth:
    """``basic`` (user and password from env) or ``bearer`` (token from env)."""

    kind: str
    username_env: str | None = None
    password_env: str | None = None
    token_env: str | None = None


@dataclass(frozen=True)
class AdfHttpTarget:
    """POST the ADF/XML document to a CRM endpoint."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    auth: HttpAuth | None = None
    content_type: str = DEFAULT_ADF_CONTENT_TYPE
    kind: str = "adf_http"


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


@dataclass(frozen=True)
class WebhookTarget:
    """POST the AAP lead as JSON, signed with HMAC-SHA256 when ``secret_env`` is set."""

    name: str
    url: str
    secret_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    kind: str = "webhook"


Target = Union[AdfHttpTarget, SmtpTarget, WebhookTarget]


@dataclass(frozen=True)
class Route:
    """Where the leads of one rooftop (``"*"``: any rooftop) of one seller go."""

    rooftop: str = "*"
    dealer_id: str | None = None  # aggregate scope: only this seller's leads
    targets: tuple[Target, ...] = ()

    def specificity(self, dealer_id: str | None, rooftop: str | None) -> int | None:
        """How well this route matches a lead; ``None`` when it does not apply."""
        if self.dealer_id is not None and self.dealer_id != dealer_id:
            return None
        if self.rooftop != "*" and self.rooftop != rooftop:
            return None
        return (2 if self.dealer_id is not None else 0) + (1 if self.rooftop != "*" else 0)


@dataclass(frozen=True)
class AppointmentSettings:
    """Slot grid and booking policy for appointment requests."""

    slot_minutes: int = 30          # grid step from each day's opening time
    capacity_per_slot: int = 1      # concurrent appointments per department and slot
    min_lead_minutes: int = 120     # earliest bookable start is now + this
    proposal_count: int = 3         # alternatives offered with ``proposed``
    horizon_days: int = 14          # how far ahead anything is booked or proposed
    on_unavailable: str = "reject_appointment"  # or "error" (APPOINTMENT_TIME_UNAVAILABLE)


@dataclass(frozen=True)
class DeliverySettings:
    """Outbox retry policy and worker pacing."""

    max_attempts: int = 12
    base_backoff_seconds: float = 30.0
    max_backoff_seconds: float = 3600.0
    timeout_seconds: float = 15.0   # one HTTP request or SMTP session
    poll_seconds: float = 2.0       # idle wait between outbox scans
    lease_seconds: float = 120.0    # a claimed row is re-claimable after this (worker crash)
    batch_size: int = 10            # rows claimed and sent concurrently per scan
    in_process: bool = True         # run the worker inside ``aap serve``

    def backoff(self, attempts: int) -> float:
        """Delay after the ``attempts``-th failed try: base * 2^(attempts-1), capped."""
        exponent = max(0, attempts - 1)
        if exponent > 60:
            return self.max_backoff_seconds
        return min(self.max_backoff_seconds, self.base_backoff_seconds * (2 ** exponent))


@dataclass(frozen=True)
class LeadSettings:
    """Everything ``lead.submit`` and the delivery worker are configured with."""

    routes: tuple[Route, ...] = ()
    appointments: AppointmentSettings = field(default_factory=AppointmentSettings)
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    consent_clock_skew_seconds: int = 120
    idempotency_retention_hours: int = 48
    unavailable_vehicle: str = "accept"  # "accept" or "reject" a lead for a sold listing

    def route_for(self, dealer_id: str | None, rooftop: str | None) -> Route | None:
        """The most specific matching route (seller + rooftop > seller > rooftop > ``*``)."""
        best: tuple[int, Route] | None = None
        for route in self.routes:
            score = route.specificity(dealer_id, rooftop)
            if score is not None and (best is None or score > best[0]):
                best = (score, route)
        return best[1] if best else None

    def target(self, name: str) -> Target | None:
        for route in self.routes:
            for target in route.targets:
                if target.name == name:
                    return target
        return None


def lead_settings(settings: Any) -> LeadSettings:
    """The deployment's lead settings (``Settings.leads``), or the defaults."""
    return getattr(settings, "leads", None) or LeadSettings()


# -- parsing ------------------------------------------------------------------------


class _Reader:
    """Typed getters over one TOML table that record problems instead of raising."""

    def __init__(self, table: Any, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        if table is None:
            table = {}
        if not isinstance(table, dict):
            problems.append(f"{path}: must be a table")
            table = {}
        self.table = table
        self.read: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.at(key)}: {message}")

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.table.get(key, default)

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problem(key, f"must be an integer between {low} and {high}")
            return default
        return value

    def number(self, key: str, default: float, low: float, high: float) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            self.problem(key, f"must be a number between {low:g} and {high:g}")
            return default
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.problem(key, "must be true or false")
            return default
        return value

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        value = self.get(key, default)
        if value not in options:
            self.problem(key, "must be one of " + ", ".join(f'"{o}"' for o in options))
            return default
        return value

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.get(key, None)
        if value is None:
            if required:
                self.problem(key, "is required")
            return default
        if not isinstance(value, str) or not value.strip():
            self.problem(key, "must be a non-empty string")
            return default
        return value

    def env_name(self, key: str) -> str | None:
        value = self.string(key)
        if value is not None and not _ENV_NAME.match(value):
            self.problem(key, "must be an environment variable name (the secret itself never goes in the file)")
            return None
        return value

    def finish(self) -> None:
        for key in sorted(set(self.table) - self.read):
            self.problem(key, "unknown setting")


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url(reader: _Reader, key: str) -> str | None:
    value = reader.string(key, required=True)
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        reader.problem(key, "is not a valid URL")
        return None
    if parts.scheme not in ("http", "https") or not host:
        reader.problem(key, "must be an absolute http(s) URL")
        return None
    if parts.scheme == "http" and not is_loopback_host(host):
        reader.problem(key, "must use https (customer data never travels in clear text; "
                            "plain http is only allowed to a loopback address)")
        return None
    return value


def _headers(reader: _Reader, key: str) -> tuple[tuple[str, str], ...]:
    value = reader.get(key, {})
    if not isinstance(value, dict):
        reader.problem(key, "must be a table of header names to string values")
        return ()
    out = []
    for name, item in value.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            reader.problem(f"{key}.{name}", "is not a valid HTTP header name")
        elif name.lower() in _RESERVED_HEADERS:
            reader.problem(f"{key}.{name}", "is set by the delivery worker and cannot be configured")
        elif not isinstance(item, str) or "\n" in item or "\r" in item:
            reader.problem(f"{key}.{name}", "must be a single-line string")
        else:
            out.append((name, item))
    return tuple(out)


def _auth(reader: _Reader, key: str) -> HttpAuth | None:
    value = reader.get(key)
    if value is None:
        return None
    sub = _Reader(value, reader.at(key), reader.problems)
    kind = sub.choice("type", "bearer", ("basic", "bearer"))
    if kind == "basic":
        auth = HttpAuth("basic", username_env=sub.env_name("username_env"),
                        password_env=sub.env_name("password_env"))
        if auth.username_env is None:
            sub.problem("username_env", "is required for basic auth")
        if auth.password_env is None:
            sub.problem("password_env", "is required for basic auth")
    else:
        auth = HttpAuth("bearer", token_env=sub.env_name("token_env"))
        if auth.token_env is None:
            sub.problem("token_env", "is required for bearer auth")
    sub.finish()
    return auth


def _address(reader: _Reader, key: str, value: Any) -> bool:
    if not isinstance(value, str) or value.count("@") != 1 or any(c in value for c in " \r\n<>,"):
        reader.problem(key, "must be an e-mail address")
        return False
    return True


def _target(value: Any, path: str, default_name: str, problems: list[str]) -> Target | None:
    reader = _Reader(value, path, problems)
    before = len(problems)
    kind = reader.choice("type", "adf_http", ("adf_http", "smtp", "webhook"))
    name = reader.string("name", default_name)
    target: Target | None = None
    if kind == "adf_http":
        url = _url(reader, "url")
        headers = _headers(reader, "headers")
        auth = _auth(reader, "auth")
        content_type = reader.string("content_type", DEFAULT_ADF_CONTENT_TYPE)
        if url is not None:
            target = AdfHttpTarget(name, url, headers, auth, content_type or DEFAULT_ADF_CONTENT_TYPE)
    elif kind == "webhook":
        url = _url(reader, "url")
        headers = _headers(reader, "headers")
        secret_env = reader.env_name("secret_env")
        if url is not None:
            target = WebhookTarget(name, url, secret_env, headers)
    else:
        host = reader.string("host", required=True)
        ssl = reader.boolean("ssl", False)
        starttls = reader.boolean("starttls", not ssl)
        port = reader.integer("port", 465 if ssl else 587, 1, 65535)
        sender = reader.get("from")
        if sender is None:
            reader.problem("from", "is required")
        else:
            _address(reader, "from", sender)
        to = reader.get("to")
        if not isinstance(to, list) or not to:
            reader.problem("to", "must be a non-empty array of e-mail addresses")
            to = []
        else:
            for i, item in enumerate(to):
                _address(reader, f"to[{i}]", item)
        if ssl and starttls:
            reader.problem("starttls", "cannot be combined with ssl = true (implicit TLS)")
        if host is not None and not (ssl or starttls) and not is_loopback_host(host):
            reader.problem("starttls", "must be true (or ssl = true) for a non-loopback SMTP host: "
                                       "customer data never travels in clear text")
        username_env = reader.env_name("username_env")
        password_env = reader.env_name("password_env")
        if (username_env is None) != (password_env is None):
            reader.problem("password_env" if password_env is None else "username_env",
                           "username_env and password_env go together")
        subject = reader.string("subject", "New AAP lead")
        if subject is not None and ("\n" in subject or "\r" in subject):
            reader.problem("subject", "must be a single line")
        if host is not None and isinstance(sender, str):
            target = SmtpTarget(name, host, sender, tuple(str(t) for t in to), port, starttls, ssl,
                                username_env, password_env, subject or "New AAP lead")
    reader.finish()
    return target if len(problems) == before else None


def _routes(value: Any, path: str, problems: list[str]) -> tuple[Route, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        problems.append(f"{path}: must be an array of tables ([[leads.routes]])")
        return ()
    routes: list[Route] = []
    seen_routes: dict[tuple[str | None, str], int] = {}
    seen_names: dict[str, str] = {}
    for i, entry in enumerate(value):
        at = f"{path}[{i}]"
        reader = _Reader(entry, at, problems)
        rooftop = reader.string("rooftop", "*") or "*"
        dealer_id = reader.string("dealer_id")
        ident = (dealer_id, rooftop)
        if ident in seen_routes:
            reader.problem("rooftop", f"duplicates {path}[{seen_routes[ident]}] (same dealer_id and rooftop)")
        seen_routes[ident] = i
        raw_targets = reader.get("targets")
        targets: list[Target] = []
        if not isinstance(raw_targets, list) or not raw_targets or not all(isinstance(t, dict) for t in raw_targets):
            reader.problem("targets", "must be a non-empty array of tables ([[leads.routes.targets]])")
            raw_targets = []
        for j, raw in enumerate(raw_targets):
            kind = raw.get("type", "adf_http")
            default_name = f"{kind}@{dealer_id + '/' if dealer_id else ''}{rooftop}"
            target = _target(raw, f"{at}.targets[{j}]", default_name, problems)
            if target is None:
                continue
            if target.name in seen_names:
                problems.append(f"{at}.targets[{j}].name: target name \"{target.name}\" is already used by "
                                f"{seen_names[target.name]}; give each target a unique name")
                continue
            seen_names[target.name] = f"{at}.targets[{j}]"
            targets.append(target)
        reader.finish()
        routes.append(Route(rooftop, dealer_id, tuple(targets)))
    return tuple(routes)


def parse_leads_table(table: Any, path: str = "leads") -> tuple[LeadSettings, list[str]]:
    """Build :class:`LeadSettings` from the ``[leads]`` TOML table; every problem at once."""
    problems: list[str] = []
    reader = _Reader(table, path, problems)
    skew = reader.integer("consent_clock_skew_seconds", 120, 0, 3600)
    retention = reader.integer("idempotency_retention_hours", 48, 24, 24 * 365)
    unavailable = reader.choice("unavailable_vehicle", "accept", ("accept", "reject"))

    appt = _Reader(reader.get("appointments"), reader.at("appointments"), problems)
    appointments = AppointmentSettings(
        slot_minutes=appt.integer("slot_minutes", 30, 5, 480),
        capacity_per_slot=appt.integer("capacity_per_slot", 1, 1, 1000),
        min_lead_minutes=appt.integer("min_lead_minutes", 120, 0, 7 * 24 * 60),
        proposal_count=appt.integer("proposal_count", 3, 1, 10),
        horizon_days=appt.integer("horizon_days", 14, 1, 365),
        on_unavailable=appt.choice("on_unavailable", "reject_appointment", ("reject_appointment", "error")),
    )
    appt.finish()

    dlv = _Reader(reader.get("delivery"), reader.at("delivery"), problems)
    delivery = DeliverySettings(
        max_attempts=dlv.integer("max_attempts", 12, 1, 100),
        base_backoff_seconds=dlv.number("base_backoff_seconds", 30.0, 0.01, 86400),
        max_backoff_seconds=dlv.number("max_backoff_seconds", 3600.0, 0.01, 7 * 86400),
        timeout_seconds=dlv.number("timeout_seconds", 15.0, 0.1, 600),
        poll_seconds=dlv.number("poll_seconds", 2.0, 0.01, 3600),
        lease_seconds=dlv.number("lease_seconds", 120.0, 1, 86400),
        batch_size=dlv.integer("batch_size", 10, 1, 1000),
        in_process=dlv.boolean("in_process", True),
    )
    if delivery.max_backoff_seconds < delivery.base_backoff_seconds:
        dlv.problem("max_backoff_seconds", "must not be smaller than base_backoff_seconds")
    if delivery.lease_seconds <= delivery.timeout_seconds:
        dlv.problem("lease_seconds", "must be longer than timeout_seconds (a live send must not "
                                     "lose its claim)")
    dlv.finish()

    routes = _routes(reader.get("routes"), reader.at("routes"), problems)
    reader.finish()
    settings = LeadSettings(routes, appointments, delivery, skew, retention, unavailable)
    return settings, problems


def parse_leads_section(table: Any, problems: Any) -> LeadSettings:
    """Adapter for ``aap.config.loader.register_section("leads", ...)``.

    ``table`` is the loader's ``Table`` (``.data``, ``.path``, ``.present``) and
    ``problems`` its ``Problems`` (``.add(path, message)``).
    """
    data = table.data if getattr(table, "present", True) else {}
    settings, found = parse_leads_table(data, getattr(table, "path", "leads") or "leads")
    for item in found:
        where, _, message = item.partition(": ")
        problems.add(where, message)
    return settings


__all__ = [
    "AdfHttpTarget", "AppointmentSettings", "DeliverySettings", "HttpAuth", "LeadSettings",
    "Route", "SmtpTarget", "Target", "WebhookTarget", "lead_settings", "parse_leads_section",
    "parse_leads_table", "DEFAULT_ADF_CONTENT_TYPE",
]


def _register_section() -> None:
    """Declare ``[leads]`` to the config loader (once ``Settings`` has its ``leads`` field).

    The loader imports this module through ``SECTION_MODULES``; the section
    parser is :func:`parse_leads_section`.
    """
    import dataclasses

    from aap.config.model import Settings

    if "leads" in {f.name for f in dataclasses.fields(Settings)}:
        from aap.config.loader import register_section

        register_section("leads", parse_leads_section)


_register_section()
