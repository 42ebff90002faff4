"""Who is calling, as far as HTTP can tell: the client address and its anonymous rate-limit key.

A caller that proves no identity (every A2A call, anonymous MCP calls, the
unauthenticated OAuth endpoints) is rate-limited by the address the ASGI
server reports for the connection (behind a proxy, uvicorn substitutes the
forwarded client address only for proxies it trusts).
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from aap.ratelimit import anonymous_caller_key


def client_address(connection: HTTPConnection | None) -> str | None:
    """The client's IP address, or None when the server does not know it."""
    client = connection.client if connection is not None else None
    return client.host if client else None


def anonymous_caller(connection: HTTPConnection | None) -> str:
    """The rate-limit bucket key of an unauthenticated caller (a hash, never the raw address)."""
    return anonymous_caller_key(client_address(connection))
