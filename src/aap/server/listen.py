"""The listening socket, bound before anything is announced, and the URL it is reached at.

``aap serve`` binds its socket first and hands it to uvicorn
(:func:`aap.server.runner.run`), so a port already in use is one clear line
and exit status 2 before any banner, and ``--port 0`` publishes the port the
system really chose.

Published URLs come from ``public_url``. Behind a reverse proxy it names
another host, port and scheme than the socket by design and is published as
configured. But a plain development set-up (``public_url =
"http://127.0.0.1:8000"`` from ``aap init``, then ``aap serve --port 8746``)
would publish a card that sends every client to some other local server.
:func:`local_public_url` recognises that case — a loopback ``public_url`` of
the scheme this server speaks that does not name the served address — and
answers the served address instead (docs/deployment.md, "Public URL").
"""

from __future__ import annotations

import errno
import socket
from urllib.parse import urlsplit, urlunsplit

from aap.loopback import is_loopback_host

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


class ListenError(Exception):
    """The socket cannot be bound; ``str()`` is the one line an operator reads."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening), inheritable by worker processes.

    Same options as uvicorn's own binding: ``SO_REUSEADDR``, IPv6 when the
    host is an IPv6 address. The protocol is named (``IPPROTO_TCP``): asyncio's event loop
    sets ``TCP_NODELAY`` only on connections of a socket that says it is TCP, and without it
    an answer written in two parts (its head, then its body) waited for the client's delayed
    acknowledgement (Nagle's algorithm, RFC 896; delayed ACKs, RFC 1122 §4.2.3.2): tens of
    milliseconds per answer on a connection kept alive (docs/benchmarks.md, "Back at the floor").
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            reason = "the port is already in use (another aap serve, or another program)"
        elif exc.errno == errno.EACCES:
            reason = "permission denied (ports below 1024 need privileges)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "no network interface has this address"
        else:
            reason = exc.strerror or type(exc).__name__
        raise ListenError(f"Cannot listen on {where}: {reason}.") from None
    sock.set_inheritable(True)
    return sock


def own_url(host: str, port: int, *, tls: bool) -> str:
    """The base URL of a server on ``host:port`` as a local client reaches it."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def local_public_url(public_url: str, host: str, port: int, *, tls: bool) -> str | None:
    """The URL to publish instead of ``public_url``, or None to publish it as configured.

    Only a loopback ``public_url`` with this server's scheme is this server's
    own address; anything else (https on another host, a local TLS proxy in
    front of a plain-http server) is a proxy set-up and left alone. Such a URL
    that names another port or loopback host than the socket's is replaced by
    the served address, keeping its host spelling (``localhost``) when the
    socket listens there too, and its path.
    """
    try:
        parts = urlsplit(public_url)
        public_port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None  # the configuration check reports it
    if not is_loopback_host(parts.hostname) or parts.scheme != ("https" if tls else "http"):
        return None
    public_host = (parts.hostname or "").lower()
    same_host = host in WILDCARD_HOSTS or public_host == "localhost" or public_host == host.strip("[]").lower()
    if same_host and public_port == port:
        return None
    if not same_host:
        served = own_url(host, port, tls=tls)
    else:
        bracketed = f"[{public_host}]" if ":" in public_host else public_host
        served = f"{parts.scheme}://{bracketed}:{port}"
    path = parts.path.rstrip("/")
    return urlunsplit(urlsplit(served)._replace(path=path)) if path else served
