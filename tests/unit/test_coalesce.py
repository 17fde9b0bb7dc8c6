"""A response's head and body leave in one write (switchboard.coalesce), over a real TCP connection."""

from __future__ import annotations

import asyncio
from typing import Any

from switchboard.coalesce import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


async def _pair() -> tuple[asyncio.Transport, asyncio.StreamReader, list[bytes], Any]:
    """A real loopback connection: our transport (its writes counted) and the peer's reader."""
    accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def on_client(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await accepted.put(reader)

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, "127.0.0.1", port)
    sent: list[bytes] = []
    real_write = transport.write

    def counted(data: Any) -> None:
        sent.append(bytes(data))
        real_write(data)

    transport.write = counted  # type: ignore[method-assign]
    return transport, await accepted.get(), sent, server


async def test_a_head_and_its_body_go_out_in_one_write() -> None:
    transport, reader, sent, server = await _pair()
    try:
        wire = HeadWithBody(transport)
        wire.write(HEAD)
        wire.write(b"ok")
        assert sent == [HEAD + b"ok"]
        assert await reader.readexactly(len(HEAD) + 2) == HEAD + b"ok"
    finally:
        transport.close()
        server.close()


async def test_a_head_alone_goes_out_on_the_next_turn_and_before_a_close() -> None:
    transport, reader, sent, server = await _pair()
    try:
        wire = HeadWithBody(transport)
        wire.write(HEAD)  # a streamed response's head: nothing follows in this step
        assert sent == [] and wire.get_write_buffer_size() == len(HEAD)
        await asyncio.sleep(0)  # one turn of the loop
        assert sent == [HEAD]
        wire.write(b"data: 1\n\n")  # later writes are not held
        assert sent == [HEAD, b"data: 1\n\n"]
        wire.write(HEAD)
        wire.close()  # what is held goes out before the close
        assert sent[-1] == HEAD
        assert await reader.read() == HEAD + b"data: 1\n\n" + HEAD
    finally:
        server.close()
