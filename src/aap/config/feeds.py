"""The ``[[feeds]]`` tables: inventory feeds fetched and imported on a schedule.

Credentials never live in the file: a feed names the *environment variables*
that hold its password or token (``password_env``, ``token_env``), read when
the feed is fetched (docs/feeds.md, "Schedules"). Every problem is reported at
once with its TOML path (``feeds[1].schedule``).

Example::

    [[feeds]]
    name = "nightly"
    source = "sftp://dealer@feeds.provider.example/outgoing/inventory.csv"
    format = "dealer-csv"
    schedule = "every 6h"              # or a cron expression: "30 2 * * *"
    password_env = "PROVIDER_SFTP_PASSWORD"
    known_hosts = "/etc/aap/known_hosts"
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from aap.config.credentials import Credential, credential, stem_credentials
from aap.config.table import Problems, Table
from aap.loopback import is_loopback_host
from aap.util.backoff import doubling

FEED_FORMATS = ("aap", "google-vehicle", "meta-vehicle", "dealer-csv")
_EVERY = re.compile(r"every\s+(\d+)\s*(s|m|h|d)", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Schedule:
    """``every 6h`` (an interval after each run) or a five-field cron expression in ``zone``."""

    text: str
    interval: float | None = None
    cron: str | None = None
    zone: str = "UTC"

    def next_after(self, moment: float) -> float:
        """The next run time (epoch seconds) after ``moment``."""
        if self.interval is not None:
            return moment + self.interval
        from cronsim import CronSim  # only a cron schedule needs it

        assert self.cron is not None
        start = datetime.fromtimestamp(moment, tz=zoneinfo.ZoneInfo(self.zone))
        return next(CronSim(self.cron, start)).timestamp()

    def period(self, moment: float) -> float:
        """The expected time between runs around ``moment`` (the health rule's unit)."""
        if self.interval is not None:
            return self.interval
        first = self.next_after(moment)
        return self.next_after(first) - first


@dataclass(frozen=True)
class FeedSettings:
    """One scheduled feed."""

    name: str
    source: str  # https://..., sftp://..., or a local path
    schedule: Schedule
    format: str | None = None  # None: detect (or the mapping's)
    mapping: str | None = None  # a mapping file (docs/feeds.md)
    dealer_id: str | None = None
    replace: bool = True  # a scheduled feed is the whole inventory
    max_removed_share: float = 0.5  # replace safety: never drop more than this share
    skip_invalid: bool = False
    strict: bool = False
    encoding: str | None = None
    delimiter: str | None = None
    username_env: str | None = None  # https basic auth
    password_env: str | None = None  # https basic auth, or the sftp password
    token_env: str | None = None  # https bearer token
    #: A platform tenant's: the same three as tenant secrets (docs/platform.md, "Secrets").
    username_secret: str | None = None
    password_secret: str | None = None
    token_secret: str | None = None
    key_file: str | None = None  # sftp private key (a path; the key stays in its file)
    known_hosts: str | None = None  # sftp host keys (default: ~/.ssh/known_hosts)
    ca_file: str | None = None  # https: a private certificate authority
    timeout_seconds: float = 300.0  # the whole fetch, from the first connection to the last byte
    retry_seconds: float = 60.0  # first retry after a failure, doubling each time
    min_bytes_per_second: float = 1024.0  # a slower transfer is cut off (after its first 30 s)
    private_network: bool = False  # let the source (and its redirects) reach private/loopback addresses
    rooftop: str | None = None  # the rooftop of rows that name none
    allow_field_loss: bool = False  # lift the content guard
    max_field_loss_share: float = 0.2  # content guard: the share of updated listings that may lose a field
    max_price_change: float = 2.0  # content guard: a price multiplied or divided by more moves "far"

    @property
    def scheme(self) -> str:
        return source_scheme(self.source)

    def credentials(self) -> tuple[tuple[str, Credential], ...]:
        return stem_credentials(self, "username", "password", "token")


def source_scheme(source: str) -> str:
    """``"https"``, ``"http"``, ``"sftp"`` or ``"file"`` (a path)."""
    head = source.split("://", 1)[0].lower() if "://" in source else "file"
    return head


def source_problem(source: str) -> str | None:
    """Why ``source`` cannot be fetched, or None."""
    scheme = source_scheme(source)
    if scheme == "file":
        return None
    if scheme not in ("https", "http", "sftp"):
        return "must be an https:// or sftp:// URL, or a file path"
    try:
        parts = urlsplit(source)
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError:
        return "is not a valid URL"
    if not parts.hostname:
        return "must name a host"
    if parts.password:
        return "must not carry a password: name an environment variable in password_env"
    if scheme == "https" and parts.username:
        return "must not carry credentials: use username_env and password_env"
    if scheme == "http" and not is_loopback_host(parts.hostname):
        return "must use https:// (plain http:// only to localhost, for local development)"
    if scheme == "sftp" and not parts.path.strip("/"):
        return "must name the file to fetch (sftp://user@host/path/feed.csv)"
    return None


def parse_schedule(text: str, zone: str = "UTC") -> Schedule | str:
    """A :class:`Schedule`, or why ``text`` is none (a message)."""
    match = _EVERY.fullmatch(text.strip())
    if match:
        seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
        if seconds < 60:
            return "must be at least every 1m"
        return Schedule(text, interval=float(seconds), zone=zone)
    fields = text.split()
    if len(fields) != 5:
        return "must be 'every <n>m|h|d' or a five-field cron expression such as '30 2 * * *'"
    # only a cron schedule needs it
    from cronsim import CronSim, CronSimError

    try:
        next(CronSim(text, datetime.now(UTC)))
    except (CronSimError, StopIteration) as exc:
        return f"is not a valid cron expression ({exc})"
    return Schedule(text, cron=text, zone=zone)


def _feed(table: Table, index: int, names: dict[str, str]) -> FeedSettings | None:
    before = len(table.problems)
    name = table.string("name", f"feed-{index + 1}")
    if not _NAME.match(name):
        table.problem("name", "must be 1-64 letters, digits, '.', '_' or '-'")
    elif name in names:
        table.problem("name", f"is already the name of {names[name]}")
    names.setdefault(name, table.path)
    source = table.string("source", required=True)
    if source is not None:
        problem = source_problem(source)
        if problem:
            table.problem("source", problem)
    fmt = table.string("format", None, choices=FEED_FORMATS)
    mapping = table.string("mapping", None)
    if fmt is not None and mapping is not None:
        table.problem("mapping", "give either format or mapping, not both")
    zone = table.string("timezone", "UTC")
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        table.problem("timezone", f"unknown IANA time zone {zone!r}")
        zone = "UTC"
    schedule_text = table.string("schedule", "every 6h")
    schedule = parse_schedule(schedule_text, zone)
    if isinstance(schedule, str):
        table.problem("schedule", schedule)
    delimiter = table.string("delimiter", None)
    if delimiter is not None and len(delimiter) != 1:
        table.problem("delimiter", "must be one character")
    encoding = table.string("encoding", None)
    if encoding is not None:
        try:
            "".encode(encoding)
        except LookupError:
            table.problem("encoding", f"unknown encoding {encoding!r}")
    username, password, token = credential(table, "username"), credential(table, "password"), credential(table, "token")
    if token and (username or password) and source is not None and source_scheme(source) != "sftp":
        table.problem("token_env", "give either a token or a user name and password")
    settings = FeedSettings(
        name=name,
        source=source or "",
        schedule=schedule if isinstance(schedule, Schedule) else Schedule("every 6h", interval=21600.0),
        format=fmt,
        mapping=mapping,
        dealer_id=table.string("dealer_id", None),
        replace=table.boolean("replace", True),
        max_removed_share=table.number("max_removed_share", 0.5, minimum=0.0, maximum=1.0),
        skip_invalid=table.boolean("skip_invalid", False),
        strict=table.boolean("strict", False),
        encoding=encoding,
        delimiter=delimiter,
        username_env=username.env,
        password_env=password.env,
        token_env=token.env,
        username_secret=username.secret,
        password_secret=password.secret,
        token_secret=token.secret,
        key_file=table.string("key_file", None),
        known_hosts=table.string("known_hosts", None),
        ca_file=table.string("ca_file", None),
        timeout_seconds=table.number("timeout_seconds", 300.0, minimum=1.0, maximum=86400.0),
        retry_seconds=table.number("retry_seconds", 60.0, minimum=1.0, maximum=86400.0),
        min_bytes_per_second=table.number("min_bytes_per_second", 1024.0, minimum=0.0, maximum=1e12),
        private_network=table.boolean("private_network", False),
        rooftop=table.string("rooftop", None),
        allow_field_loss=table.boolean("allow_field_loss", False),
        max_field_loss_share=table.number("max_field_loss_share", 0.2, minimum=0.0, maximum=1.0),
        max_price_change=table.number("max_price_change", 2.0, minimum=1.0, maximum=1e6),
    )
    table.finish()
    return settings if len(table.problems) == before else None


def parse_feeds_section(tables: list[Table], problems: Problems) -> tuple[FeedSettings, ...]:
    """Every ``[[feeds]]`` table; every problem goes to ``problems``."""
    names: dict[str, str] = {}
    feeds = [_feed(table, i, names) for i, table in enumerate(tables)]
    return tuple(f for f in feeds if f is not None)


def feed_rules(parsed: dict[str, Any], problems: Problems) -> None:
    """Rule: a feed's ``rooftop`` names a configured rooftop (of its ``dealer_id``'s profile)."""
    feeds: tuple[FeedSettings, ...] = parsed.get("feeds") or ()
    profiles = [p for p in (parsed.get("dealer"), *(parsed.get("dealers") or ())) if p is not None]
    for index, feed in enumerate(feeds):
        if feed.rooftop is None:
            continue
        sellers = [p for p in profiles if feed.dealer_id is None or p.dealer_id == feed.dealer_id] or profiles
        names = {r.get("name") for p in sellers for r in p.rooftops}
        if feed.rooftop not in names:
            where = f"of dealer {feed.dealer_id}" if feed.dealer_id else "configured"
            problems.add(f"feeds[{index}].rooftop", f"is not the name of a rooftop {where}")


def retry_delay(feed: FeedSettings, failures: int, moment: float) -> float:
    """Seconds before retrying after ``failures`` failed runs: doubling, capped by the schedule."""
    return doubling(failures, feed.retry_seconds, feed.schedule.period(moment))


def overdue_after(feed: FeedSettings, moment: float) -> timedelta:
    """How long without a success before ``/healthz`` reports the feed: twice its schedule."""
    return timedelta(seconds=2 * feed.schedule.period(moment))
