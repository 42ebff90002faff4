"""RFC 3339 timestamps: strict parsing (an offset is mandatory) and formatting.

Python's ``fromisoformat`` happily accepts a local time without an offset; AAP
does not (every lead timestamp "MUST include a timezone offset"), so the shape
is checked first.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$")


def parse_rfc3339(value: object) -> datetime | None:
    """An aware datetime, or None when ``value`` is not an RFC 3339 date-time with offset."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
    text = value.upper().replace("Z", "+00:00")
    if "." in text:  # Python keeps at most 6 fractional digits
        head, _, rest = text.partition(".")
        digits = rest[: len(rest) - 6]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits) :]}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def to_utc_z(moment: datetime) -> str:
    """``2026-05-03T18:00:00Z`` (second precision, UTC)."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def to_local(moment: datetime, tz: tzinfo) -> str:
    """RFC 3339 in ``tz`` with its numeric offset, e.g. ``2026-05-03T11:00:00-07:00``."""
    return moment.astimezone(tz).replace(microsecond=0).isoformat()


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
