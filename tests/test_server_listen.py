"""The socket ``aap serve`` binds before it starts (aap.server.listen)."""

from __future__ import annotations

import asyncio
import socket

from aap.server.listen import bind


def test_connections_on_the_asyncio_loop_send_without_delay():
    """asyncio sets ``TCP_NODELAY`` on a connection only when its listening socket names TCP as
    its protocol; without it a keep-alive answer written in two parts waits for the client's
    delayed acknowledgement (RFC 896, RFC 1122 §4.2.3.2)."""
    listening = bind("127.0.0.1", 0)

    async def accepted() -> int:
        loop = asyncio.get_running_loop()
        option: asyncio.Future[int] = loop.create_future()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                option.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await loop.create_server(Protocol, sock=listening)
        _reader, writer = await asyncio.open_connection(*listening.getsockname()[:2])
        try:
            return await asyncio.wait_for(option, 30)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted()) != 0
