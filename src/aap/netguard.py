"""Where an outbound connection may go: public addresses, and private ones only when allowed.

A URL the deployment fetches (a dealer's feed, and whatever it redirects to)
names a host, and the host resolves to addresses. A name can resolve to the
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
from collections.abc import Iterable
from dataclasses import dataclass

import anyio
import httpcore

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Reach:
    """Which non-public destinations a connection may reach."""

    loopback: bool = False
    private: bool = False


def refusal(address: Address | str, reach: Reach) -> str | None:
    """Why a connection to ``address`` is refused (``"a loopback address"``...), or None."""
    ip = ipaddress.ip_address(address.split("%")[0]) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_loopback:
        return None if reach.loopback else "a loopback address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return None if reach.private else "a private address"
    return None


class RefusedAddress(httpcore.ConnectError):
    """The destination resolved to an address the connection may not reach."""

    def __init__(self, host: str, address: str, why: str) -> None:
        self.host = host
        self.address = address
        self.why = why
        super().__init__(f"{host} resolves to {why} ({address})")


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, vet every address, connect to a vetted one, and vet the socket's peer again."""

    def __init__(self, reach: Reach) -> None:
        self._inner = httpcore.AnyIOBackend()
        self.reach = reach

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: name resolution failed") from exc
        addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
        if not addresses:
            raise httpcore.ConnectError(f"{host}: name resolution failed")
        for address in addresses:
            why = refusal(address, self.reach)
            if why is not None:
                raise RefusedAddress(host, address, why)
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


def peer_refusal(peer: tuple[str, int] | None, reach: Reach) -> str | None:
    """Why a connection whose peer is ``peer`` (host, port) must not be used, or None."""
    if not peer:
        return "an unknown address"
    return refusal(str(peer[0]), reach)
