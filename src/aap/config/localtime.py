"""Local time: the time zone each instant is read in, and how people read it (docs/console.md).

A dealership works in its own wall-clock time, so the console, the public page,
the notification e-mails and the CLI show every instant in the time zone of the
rooftop it belongs to — ``DealerInformation.rooftops[].timezone`` (seed 004),
an IANA name checked when the configuration is read — with the zone's
abbreviation shown (``Thu 3 Dec 2026, 09:00 (PST)``). **Decision:**
``DealerInformation`` has no dealer-wide zone, so "the dealer's zone" (for what
belongs to no one rooftop: the inbox's date filters, the audit log, feed runs)
is the zone of its first rooftop that names one; a dealer whose rooftops name
none reads in UTC.

Names of days and months are English and fixed here, never taken from the
process locale (a server's ``LANG`` must not change what the pages say).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aap.config.model import DealerProfile, Settings

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def zone_named(name: Any) -> tzinfo | None:
    """The IANA zone ``name``, or None when it is not one."""
    if not isinstance(name, str) or not name:
        return None
    try:
        return ZoneInfo(name)  # ZoneInfo keeps one instance per key: no cache of our own
    except (ZoneInfoNotFoundError, ValueError):
        return None


def dealer_zone(profile: DealerProfile | None) -> tzinfo:
    """The zone of the dealer's first rooftop that names one; UTC when none does."""
    for rooftop in profile.rooftops if profile is not None else ():
        zone = zone_named(rooftop.get("timezone"))
        if zone is not None:
            return zone
    return UTC


def rooftop_zone(profile: DealerProfile | None, rooftop: str | None) -> tzinfo:
    """The zone of the named rooftop, else the dealer's."""
    if profile is not None and rooftop is not None:
        found = profile.rooftop(rooftop)
        zone = zone_named(found.get("timezone")) if found else None
        if zone is not None:
            return zone
    return dealer_zone(profile)


def zone_for(settings: Settings, dealer_id: str | None = None, rooftop: str | None = None) -> tzinfo:
    """The zone an instant of ``dealer_id``'s ``rooftop`` is read in (a lead's, a listing's).

    A seller id the configuration does not know (a lead stored under the
    deployment id) reads in the endpoint's own dealer's zones.
    """
    profile = settings.profile_for(dealer_id) or settings.dealer
    return rooftop_zone(profile, rooftop)


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)  # epoch milliseconds


def abbreviation(moment: datetime) -> str:
    """``PST``, ``CEST``; a zone without a letter abbreviation gives its offset (``-03``, ``UTC``)."""
    name = moment.tzname() or ""
    return name or moment.strftime("%z")


def format_day(day: date) -> str:
    """``Thu 3 Dec 2026``."""
    return f"{DAYS[day.weekday()]} {day.day} {MONTHS[day.month - 1]} {day.year}"


def format_local(value: Any, zone: tzinfo, *, seconds: bool = False, with_zone: bool = True) -> str:
    """An instant (aware datetime, or epoch milliseconds) as ``Thu 3 Dec 2026, 09:00 (PST)`` in ``zone``."""
    moment = _moment(value)
    if moment is None:
        return ""
    local = moment.astimezone(zone)
    clock = f"{local.hour:02d}:{local.minute:02d}" + (f":{local.second:02d}" if seconds else "")
    text = f"{format_day(local.date())}, {clock}"
    return f"{text} ({abbreviation(local)})" if with_zone else text


def format_rfc3339(value: Any, zone: tzinfo, **options: Any) -> str:
    """An RFC 3339 date-time string (``2026-12-03T09:00:00-08:00``) as :func:`format_local` says it;
    a string that is not one is given back as it is."""
    if not isinstance(value, str):
        return ""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return value
    if moment.tzinfo is None:
        return value
    return format_local(moment, zone, **options)


def local_today(zone: tzinfo, now: datetime | None = None) -> date:
    return (now or datetime.now(UTC)).astimezone(zone).date()


def day_start_ms(day: date, zone: tzinfo) -> int:
    """Epoch milliseconds of ``day``'s first instant in ``zone`` (midnight, or the first valid time
    of a day whose midnight a clock change skips)."""
    local = datetime.combine(day, time(0), tzinfo=zone)
    return int(local.astimezone(UTC).timestamp() * 1000)


def day_range_ms(first: date | None, last: date | None, zone: tzinfo) -> tuple[int | None, int | None]:
    """``[start, end)`` in epoch milliseconds of the local days ``first`` .. ``last`` (both included)."""
    start = day_start_ms(first, zone) if first is not None else None
    end = day_start_ms(last + timedelta(days=1), zone) if last is not None else None
    return start, end


def days_between(earlier: date, later: date) -> int:
    return (later - earlier).days
