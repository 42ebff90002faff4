"""Where an outbound connection may go: public addresses, and private ones only when allowed.

One policy for every destination a configuration names (docs/deployment.md, "Outbound
connections"): a dealer's feed and whatever it redirects to, a Poppy client's metadata,
a CRM's ADF or webhook URL, an SMTP server. A deployment that is one agent may reach its
operator's own network (:data:`LOCAL`: a CRM on the LAN, a local SMTP relay); a platform's
tenant only the public internet (:data:`PUBLIC`), since a tenant's configuration comes from
whoever provisions it and the platform's network is not theirs. ``Settings.outbound`` says
which, and a destination is checked twice: by :func:`host_refusal` when the configuration is
checked (an address literal, ``localhost``), and on the connection itself.

A destination names a host, and the host resolves to addresses. A name can resolve to the
cloud metadata service (``169.254.169.254``), to the server's own loopback
services, or to the private network behind it; the answer can change between
a check and the connection (DNS rebinding). So the check is made on the
connection itself: :class:`GuardedBackend` resolves the name, refuses the
connection unless every address is allowed, connects to a vetted address (TLS
still verifies the name) and checks the address of the socket it got.

Link-local, multicast, unspecified and reserved addresses are never allowed;
loopback and private (RFC 1918, shared, unique-local) ones only when the
:class:`Reach` says so.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio
import certifi
import httpcore
import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Reach:
    """Which non-public destinations a connection may reach."""

    loopback: bool = False
    private: bool = False

    def within(self, ceiling: Reach) -> Reach:
        """What this reach allows of what ``ceiling`` (the deployment's policy) allows."""
        return Reach(self.loopback and ceiling.loopback, self.private and ceiling.private)


#: A platform tenant's destinations: the public internet only.
PUBLIC = Reach()
#: A deployment that is one agent: its operator's own network too (link-local never).
LOCAL = Reach(loopback=True, private=True)

#: IETF protocol assignments (RFC 6890 §2.2.2) that :mod:`ipaddress` counts as global.
_NOT_PUBLIC = (ipaddress.ip_network("192.0.0.0/24"),)


def refusal(address: Address | str, reach: Reach) -> str | None:
    """Why a connection to ``address`` is refused (``"a loopback address"``...), or None."""
    ip = ipaddress.ip_address(address.split("%")[0]) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour  # the IPv4 address a packet really goes to
        if embedded is not None:
            ip = embedded
        elif ip.teredo is not None:
            return "a reserved address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_loopback:
        return None if reach.loopback else "a loopback address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified or ip.is_reserved:
        return "a reserved address"
    site_local = isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local
    if not ip.is_global or site_local or any(ip in net for net in _NOT_PUBLIC):
        return None if reach.private else "a private address"
    return None


def host_refusal(host: str, reach: Reach) -> str | None:
    """Why a destination written as ``host`` (a URL's host or an SMTP host) is refused before any
    lookup, or None: an address literal outside ``reach`` (IPv4 in any form the C library reads,
    ``127.1`` and ``0x7f000001`` too; IPv6 bracketed or not), or a ``localhost`` name without
    loopback. Any other name is checked on the connection, once it is resolved."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761 §6.3: always loopback
        return None if reach.loopback else "a loopback address"
    try:
        address: Address = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        if not name or any(c not in "0123456789abcdefx." for c in name):
            return None
        try:  # the forms inet_aton reads (and getaddrinfo resolves): 127.1, 0177.0.0.1, 0x7f000001
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return refusal(address, reach)


#: Resolves a host name to its addresses (``(host, port) -> ["192.0.2.7", ...]``); tests give
#: their own, so no test depends on DNS.
Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for ``host``, in its order, each once."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))


async def vetted_addresses(host: str, port: int, reach: Reach, resolve: Resolve | None = None) -> list[str]:
    """Every address ``host`` resolves to, when each is within ``reach``; else :class:`RefusedAddress`
    (a name resolving to one forbidden address among public ones is refused whole: the
    connection could go to any of them)."""
    try:
        literal = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        literal = None
    try:
        addresses = [str(literal)] if literal is not None else list(await (resolve or system_resolve)(host, port))
    except OSError as exc:
        raise httpcore.ConnectError(f"{host}: name resolution failed") from exc
    if not addresses:
        raise httpcore.ConnectError(f"{host}: name resolution failed")
    for address in addresses:
        why = refusal(address, reach)
        if why is not None:
            raise RefusedAddress(host, address, why)
    return addresses


def connect_socket(host: str, addresses: Sequence[str], port: int, timeout: float, reach: Reach) -> socket.socket:
    """A TCP socket to the first of the vetted ``addresses`` that answers, its peer vetted again
    (for protocols spoken in a thread: SMTP). Raises :class:`RefusedAddress` or ``OSError``."""
    failure: OSError | None = None
    for address in addresses:
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as exc:
            failure = exc
            continue
        peer = str(sock.getpeername()[0]).split("%")[0]
        why = refusal(peer, reach)
        if why is not None:
            sock.close()
            raise RefusedAddress(host, peer, why)
        return sock
    raise failure or OSError(f"{host}: could not connect")


class RefusedAddress(httpcore.ConnectError):
    """The destination resolved to an address the connection may not reach."""

    def __init__(self, host: str, address: str, why: str) -> None:
        self.host = host
        self.address = address
        self.why = why
        super().__init__(f"{host} resolves to {why} ({address})")


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, vet every address, connect to a vetted one, and vet the socket's peer again."""

    def __init__(self, reach: Reach, resolve: Resolve | None = None) -> None:
        self._inner = httpcore.AnyIOBackend()
        self.reach = reach
        self.resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await vetted_addresses(host, port, self.reach, self.resolve)
        failure: Exception | None = None
        for address in addresses:  # every vetted address, in resolver order
            try:
                stream = await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            peer = stream.get_extra_info("server_addr")
            why = refusal(str(peer[0]), self.reach) if peer else "an unknown address"
            if why is not None:  # the connection actually made is what counts
                await stream.aclose()
                raise RefusedAddress(host, str(peer[0]) if peer else "?", why)
            return stream
        raise httpcore.ConnectError(f"{host}: could not connect") from failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def refused_cause(exc: BaseException) -> RefusedAddress | None:
    """The :class:`RefusedAddress` behind a client library's connection error, if that was the cause."""
    cause: BaseException | None = exc
    seen = 0
    while cause is not None and not isinstance(cause, RefusedAddress) and seen < 20:
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return cause if isinstance(cause, RefusedAddress) else None


def peer_refusal(peer: tuple[str, int] | None, reach: Reach) -> str | None:
    """Why a connection whose peer is ``peer`` (host, port) must not be used, or None."""
    if not peer:
        return "an unknown address"
    return refusal(str(peer[0]), reach)


def guarded_transport(
    reach: Reach,
    ssl_context: ssl.SSLContext | None = None,
    *,
    max_connections: int = 10,
    resolve: Resolve | None = None,
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through :class:`GuardedBackend` (HTTP/1.1,
    no retries, no proxy from the environment: the guard must see the destination itself)."""
    context = ssl_context or ssl.create_default_context(cafile=certifi.where())
    transport = httpx.AsyncHTTPTransport(verify=context, trust_env=False, retries=0)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=max_connections,
        http1=True,
        http2=False,
        retries=0,
        network_backend=GuardedBackend(reach, resolve),
    )
    return transport
