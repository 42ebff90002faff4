"""Which ``Host`` and ``Origin`` values the MCP endpoint answers.

The MCP transport rules ask every server to validate ``Origin`` (a present but
disallowed value gets 403) so that a web page cannot drive a local server
through DNS rebinding; checking ``Host`` closes the same hole from the other
side. The safe default is derived from the deployment's public URL, so a
correctly configured dealer needs no extra setting:

* hosts: the public host (with and without its port) plus the loopback names
  of :mod:`aap.loopback` on any port (a rebinding page can never make a
  browser send those);
* origins: the public origin, plus the loopback origins when the public URL
  itself is loopback (local development). A request without ``Origin``
  (every non-browser client) is always allowed.

``[mcp] allowed_hosts`` / ``allowed_origins`` (:mod:`aap.config.mcp`) *add* to those defaults
(an internal host name behind a proxy, a browser app's origin); ``"*"``
allows everything. Patterns are exact values, or ``name:*`` for any port.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aap.config.model import Settings
from aap.loopback import LOOPBACK_HOSTS, is_loopback_host

# As they appear in a Host header or an origin (an IPv6 literal in brackets).
_LOOPBACK_NAMES = tuple(sorted(f"[{host}]" if ":" in host else host for host in LOOPBACK_HOSTS))
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _split_public(public_url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(public_url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return parts.scheme.lower(), host, parts.port


def _matches(value: str, patterns: frozenset[str]) -> bool:
    """Exact match, ``*``, or ``name:*`` for ``name:<digits>``."""
    if "*" in patterns or value in patterns:
        return True
    base, sep, port = value.rpartition(":")
    return bool(sep) and port.isdigit() and f"{base}:*" in patterns


class OriginPolicy:
    """Decides whether a request's ``Host`` and ``Origin`` are acceptable."""

    def __init__(self, public_url: str, extra_hosts: tuple[str, ...] = (), extra_origins: tuple[str, ...] = ()):
        scheme, host, port = _split_public(public_url)
        hosts = {host}
        origins = {f"{scheme}://{host}"}
        effective_port = port or _DEFAULT_PORTS.get(scheme)
        if effective_port is not None:
            hosts.add(f"{host}:{effective_port}")
            if port is not None and port != _DEFAULT_PORTS.get(scheme):
                origins = {f"{scheme}://{host}:{port}"}
        for name in _LOOPBACK_NAMES:
            hosts.update({name, f"{name}:*"})
        if is_loopback_host(host):
            for name in _LOOPBACK_NAMES:
                origins.update({f"http://{name}", f"http://{name}:*", f"https://{name}", f"https://{name}:*"})
        self.allowed_hosts = frozenset(h.lower() for h in (*hosts, *extra_hosts))
        self.allowed_origins = frozenset(o.lower().rstrip("/") for o in (*origins, *extra_origins))

    @classmethod
    def for_settings(cls, settings: Settings) -> OriginPolicy:
        mcp = settings.mcp
        return cls(settings.public_url, mcp.allowed_hosts, mcp.allowed_origins)

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        return _matches(host.lower(), self.allowed_hosts)

    def origin_allowed(self, origin: str | None) -> bool:
        """An absent ``Origin`` is a non-browser client: allowed."""
        if origin is None:
            return True
        return _matches(origin.lower().rstrip("/"), self.allowed_origins)
