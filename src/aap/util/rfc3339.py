"""RFC 3339 timestamps: one grammar (the seed's), one parser, one ``Z`` form.

The grammar is the ``date-time`` format of the AAP schemas (seed 004: every timestamp is "an
ISO 8601 / RFC 3339 timestamp" with ``format: date-time`` and "MUST include a timezone offset
(Z or ±HH:MM)"), as the one validator checks it (:mod:`aap.spec.formats`): RFC 3339 §5.6
``date-time``, ``T`` and ``Z`` in either case, a fraction of any length, a real calendar day, no
leap second (rfc3339-validator, which jsonschema uses too, declines them). A value the request
validator accepted therefore always parses here, and a value it refused never does: the leads
code, the inventory store and the validator cannot disagree (docs/seeds.md, "Timestamps").

What the project writes is the ``Z`` form in whole seconds (``2026-05-03T18:00:00Z``), the
seed's own examples' form, unless a caller keeps a fraction or a local offset on purpose.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from rfc3339_validator import validate_rfc3339

#: An RFC 3339 date-time in upper case whose day exists in every month (01-28) of a year after
#: 0: valid without the full check (feeds send nearly every timestamp in this form).
PLAIN_DATE_TIME = re.compile(
    r"(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?"
    r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
    re.ASCII,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def is_date_time(value: str) -> bool:
    """Whether ``value`` is a ``date-time`` of the seed's grammar (the offset is mandatory)."""
    if PLAIN_DATE_TIME.fullmatch(value):
        return True
    # rfc3339-validator ends its pattern with `$`, which also accepts a trailing newline
    return not value.endswith("\n") and bool(validate_rfc3339(value.upper()))


def parse_rfc3339(value: object) -> datetime | None:
    """The aware datetime of ``value``, or None when it is not a ``date-time`` of the grammar.

    Python keeps microseconds: a longer fraction is cut, never rounded up.
    """
    if not isinstance(value, str):
        return None
    if PLAIN_DATE_TIME.fullmatch(value):
        return datetime.fromisoformat(value)
    return datetime.fromisoformat(value.upper()) if is_date_time(value) else None


def epoch_us(value: str) -> int:
    """``value`` as exact epoch microseconds; ValueError when it is not a ``date-time``."""
    moment = parse_rfc3339(value)
    if moment is None:
        raise ValueError("not an RFC 3339 date-time with offset")
    return (moment - _EPOCH) // _MICROSECOND


def epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime (how the stores keep moments)."""
    return int(moment.timestamp() * 1000)


def to_utc_z(moment: datetime) -> str:
    """``2026-05-03T18:00:00Z``: ``moment`` in UTC, whole seconds."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def now_utc_z() -> str:
    """The current time in the ``Z`` form, whole seconds."""
    return to_utc_z(datetime.now(UTC))


def ms_to_utc_z(ms: float) -> str:
    """Epoch milliseconds in the ``Z`` form, whole seconds."""
    return to_utc_z(datetime.fromtimestamp(ms / 1000, tz=UTC))


def to_rfc3339(moment: datetime) -> str:
    """An aware ``moment`` in its own offset, ``Z`` for UTC, its fraction kept
    (``2026-05-03T11:00:00-07:00``, ``2026-05-03T18:00:00.250000Z``)."""
    if moment.utcoffset() is None:
        raise ValueError("a moment without a time-zone offset has no RFC 3339 form")
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def to_local(moment: datetime, tz: tzinfo) -> str:
    """``moment`` in ``tz`` with its numeric offset, whole seconds (``2026-05-03T11:00:00-07:00``)."""
    return moment.astimezone(tz).replace(microsecond=0).isoformat()
