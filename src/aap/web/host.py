"""What a request's head says about where it was sent and where it came from.

- :func:`request_host`: the ``Host`` a request names (RFC 9110 §7.2), or :class:`BadHost` for
  one a server must answer 400 (RFC 9112 §3.2: more than one ``Host`` field line, or a value
  that is not ``uri-host [ ":" port ]``, RFC 3986 §3.2.2–3.2.3) — a platform routes by it, so
  it is never guessed at;
- :func:`direct_loopback`: the request came over a loopback connection straight from a process
  of this host — not through a proxy that forwarded a client's request (it would carry
  ``Forwarded``/``X-Forwarded-For``) — as a co-located proxy's own questions do (Caddy's
  ``on_demand_tls ask``) and a local scraper's.
"""

from __future__ import annotations

import ipaddress
import re

from starlette.types import Scope

#: RFC 3986 §3.2.2 reg-name: unreserved, pct-encoded and sub-delims characters.
_REG_NAME = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=%]*$")
#: Header fields a proxy adds to a request it forwards (RFC 7239 and the de-facto ones).
_FORWARDING = frozenset({b"forwarded", b"x-forwarded-for", b"x-real-ip"})


class BadHost(ValueError):
    """A ``Host`` header a server must refuse with 400 (RFC 9112 §3.2)."""


def parse_host(value: str) -> str:
    """The host of a ``Host`` value: lower case, without its port or a trailing dot (an IPv6
    literal keeps its brackets); :class:`BadHost` when the value is not ``uri-host [":" port]``."""
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadHost("an IPv6 literal without its closing bracket")
        name, rest = text[: end + 1], text[end + 1 :]
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            raise BadHost("not an IPv6 literal between the brackets") from None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
        if not _REG_NAME.match(name):
            raise BadHost("not a host name")
    if rest:
        digits = rest[1:]
        if not rest.startswith(":") or (digits and not (digits.isascii() and digits.isdigit() and len(digits) <= 5)):
            raise BadHost("the port is not a number")
        if digits and int(digits) > 65535:
            raise BadHost("the port is out of range")
    name = name.lower()
    return name[:-1] if name.endswith(".") and not name.startswith("[") else name


def request_host(scope: Scope) -> str:
    """The request's host name (:func:`parse_host`; "" without a ``Host`` field)."""
    values = [value for name, value in scope.get("headers", ()) if name == b"host"]
    if len(values) > 1:
        raise BadHost("more than one Host header field")
    return parse_host(values[0].decode("latin-1")) if values else ""


def direct_loopback(scope: Scope) -> bool:
    """Whether the request came from this host over loopback and was not forwarded by a proxy."""
    client = scope.get("client")
    if not client:
        return False
    try:
        address = ipaddress.ip_address(str(client[0]).split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not address.is_loopback:
        return False
    return not any(name in _FORWARDING for name, _ in scope.get("headers", ()))
