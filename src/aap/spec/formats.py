"""Format assertions for the formats the AAP schemas use.

JSON Schema 2020-12 treats ``format`` as an annotation unless asked; AAP's contract
depends on it (timestamps must carry an offset, URLs must be URLs), so these are on.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from jsonschema import FormatChecker
from rfc3986_validator import validate_rfc3986

from aap.util import rfc3339

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
# dot-atom local part, a domain of dot-separated labels (RFC 5322 without comments,
# quoted strings or address literals, which no buyer agent should need)
_EMAIL = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
)
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)", re.ASCII)
# all used with fullmatch: `$` would also accept a trailing newline, and so would
# rfc3339-validator and rfc3986-validator (they end their patterns with `$`)

# Fast paths (feeds check a few URLs and timestamps on every row, through these functions):
# conservative subsets of each grammar, in the form nearly every value comes in. A value one
# matches is valid without the full grammar; any other value goes to the full check, so the
# verdicts are the full checks' (tests/test_formats.py); the date-time one is
# aap.util.rfc3339.PLAIN_DATE_TIME. An absolute http(s) URI whose host is
# a reg-name, with an optional port, a path of unreserved, sub-delims, ":" and "@" characters
# and a query of those and "/" and "?" (RFC 3986 §3; no percent-encoding, no fragment):
_PLAIN_HTTP_URI = re.compile(
    r"https?://[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?"
    r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)?(?:\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?",
    re.ASCII,
)

checker = FormatChecker(formats=())


@checker.checks("date-time")
def is_date_time(value: object) -> bool:
    """RFC 3339 ``date-time``, the offset (``Z`` or ``±hh:mm``) mandatory: the one grammar of
    :mod:`aap.util.rfc3339`, which every parser of timestamps shares."""
    return not isinstance(value, str) or rfc3339.is_date_time(value)


@checker.checks("date")
def is_date(value: object) -> bool:
    """RFC 3339 ``full-date`` (``2026-04-21``), a real calendar day."""
    if not isinstance(value, str):
        return True
    if not _DATE.fullmatch(value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


@checker.checks("email")
def is_email(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return len(value) <= 254 and bool(_EMAIL.fullmatch(value))


@checker.checks("uri")
def is_uri(value: object) -> bool:
    """An absolute RFC 3986 URI (scheme required)."""
    if not isinstance(value, str):
        return True
    if _PLAIN_HTTP_URI.fullmatch(value):
        return True
    return not value.endswith("\n") and bool(validate_rfc3986(value, rule="URI"))


@checker.checks("uri-reference")
def is_uri_reference(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return not value.endswith("\n") and bool(validate_rfc3986(value, rule="URI_reference"))


@checker.checks("hostname")
def is_hostname(value: object) -> bool:
    """RFC 1123 host name: dot-separated labels, 253 characters at most."""
    if not isinstance(value, str):
        return True
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in name.split("."))


def functions() -> dict[str, Callable[[object], bool]]:
    """name -> check, the same functions for jsonschema-rs (its own format checks never run)."""
    return {name: func for name, (func, _raises) in checker.checkers.items()}
