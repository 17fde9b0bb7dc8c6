"""A connection flood in a process of its own (so the measuring test's event loop stays idle):
``python -m tests.reliability.flood PORT N SECONDS`` opens N connections to 127.0.0.1:PORT, half of
them silent and half sending one byte a second, never finishing a request, and prints one JSON list:
for each connection, seconds until the server closed it (-1: the connect failed; 0: still open after
SECONDS)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time


async def one(port: int, index: int, seconds: float, out: list[float]) -> None:
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        out[index] = -1.0
        return
    try:
        while time.monotonic() - started < seconds:
            if index % 2:
                writer.write(b"G")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    if await reader.read(1) == b"":
                        out[index] = time.monotonic() - started
                        return
    except ConnectionError:
        out[index] = time.monotonic() - started
    finally:
        writer.close()


async def main(port: int, n: int, seconds: float) -> None:
    out = [0.0] * n
    await asyncio.gather(*(one(port, i, seconds, out) for i in range(n)))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
