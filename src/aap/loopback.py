"""What "loopback" means, once for every layer.

The AAP agent card admits plain ``http://`` URLs only on ``localhost``,
``127.0.0.1`` and ``[::1]`` (seed 001, ``AgentCard.url`` pattern). The project
uses that one definition everywhere it asks "is this a local development
host?": the public URL a deployment publishes, the URLs its configuration
calls (CRM endpoints, SMTP hosts sent in clear text), the MCP Host/Origin
allow-list and the buyer client's default scheme. A wider notion (the whole
``127.0.0.0/8``) would let a configuration pass its check and then be refused
when the agent card is built.

Resolved *addresses* (the SSRF guard on client metadata fetches) are a
different question, answered with :mod:`ipaddress` where they are checked.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: Host names (lower case, IPv6 without brackets) that count as loopback.
LOOPBACK_HOSTS: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback_host(host: str | None) -> bool:
    """``localhost``, ``127.0.0.1`` or ``::1`` (bracketed or not, any case)."""
    if not host:
        return False
    return host.strip("[]").lower() in LOOPBACK_HOSTS


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is loopback (a malformed URL is not)."""
    try:
        return is_loopback_host(urlsplit(url).hostname)
    except ValueError:
        return False
