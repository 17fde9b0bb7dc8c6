"""A response's head and body in one write (issue 18: the cost of an MCP call).

uvicorn writes a response's status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two ``send()`` calls, two TCP segments and two wake-ups of
the client for every answer. On this project's claim path, a quarter of the server's CPU samples were
inside ``send()``. :class:`HeadWithBody` is the transport uvicorn's protocol is given: a write that
ends a header block is held until the next write (the body, normally in the same step of the same
task), or until the event loop's next turn (a streamed response's first event, or no body at all), and
goes out with it. Nothing else is delayed or reordered; every other call goes to the real transport.
"""

from __future__ import annotations

import asyncio
from typing import Any

HEADER_END = b"\r\n\r\n"


class HeadWithBody(asyncio.Transport):
    """The real transport, except that a header block waits for what follows it (at most one turn)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self.real = transport
        self._held = b""
        self._flush: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        if self._held:
            data, self._held = self._held + data, b""
        if data.endswith(HEADER_END) and not self.real.is_closing():
            self._held = data
            if self._flush is None:
                self._flush = asyncio.get_running_loop().call_soon(self.flush)
            return
        self.real.write(data)

    def flush(self) -> None:
        """Send what is held (the loop calls this one turn after a header block was written)."""
        self._flush = None
        if self._held:
            data, self._held = self._held, b""
            if not self.real.is_closing():
                self.real.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        self.flush()
        self.real.write_eof()

    def can_write_eof(self) -> bool:
        return self.real.can_write_eof()

    def close(self) -> None:
        self.flush()
        self.real.close()

    def abort(self) -> None:
        self._held = b""
        self.real.abort()

    def is_closing(self) -> bool:
        return self.real.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.real.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.real.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.real.get_protocol()

    def pause_reading(self) -> None:
        self.real.pause_reading()

    def resume_reading(self) -> None:
        self.real.resume_reading()

    def is_reading(self) -> bool:
        return self.real.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.real.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.real.get_write_buffer_size() + len(self._held)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.real.get_write_buffer_limits()
