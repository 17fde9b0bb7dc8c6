"""Helpers for the keep-alive and fast-fail tests: a receiver that reports which connection carried
each request and when connections end, a clock to drive the Sender's windows, and a dial counter."""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field

import h11
import pytest

from switchboard.push import _connection
from tests.support.receivers import HTTPSReceiver, RecordedRequest

HOST = "hooks.test"
BODY = json.dumps({"type": "todo.ready", "todo_id": "td_1"}).encode()


class FakeClock:
    """Monotonic seconds for ``Sender(clock=...)``; moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class PeerReceiver(HTTPSReceiver):
    """An ``HTTPSReceiver`` that also records, from its own side of the wire:

    - ``peers``: the client port of every accepted connection that got as far as TLS, in order;
    - ``request_peers``: the client port that carried each recorded request;
    - ``closed``: how many connections have ended (``wait_closed`` awaits a count);
    - with ``drop_reused``, a request that is not the first on its connection is read and then
      the connection is closed without a byte of response (counted in ``dropped``): what a client
      sees when the server shuts an idle keep-alive connection just as the request goes out.
    """

    drop_reused: bool = False
    peers: list[int] = field(default_factory=list, init=False)
    request_peers: list[int] = field(default_factory=list, init=False)
    closed: int = field(default=0, init=False)
    dropped: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._per_task: dict[asyncio.Task[None], list[int]] = {}
        self._ended = asyncio.Condition()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        port = int(writer.get_extra_info("peername")[1])
        self.peers.append(port)
        self._per_task[task] = [port, 0]  # type: ignore[index]
        try:
            await super()._on_connection(reader, writer)
        finally:
            self._per_task.pop(task, None)  # type: ignore[call-overload]
            self.closed += 1
            async with self._ended:
                self._ended.notify_all()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> RecordedRequest | None:
        request = await super()._read_request(conn, reader)
        if request is None:
            return None
        state = self._per_task[asyncio.current_task()]  # type: ignore[index]
        state[1] += 1
        if self.drop_reused and state[1] > 1:
            self.dropped += 1
            return None  # _serve returns and the connection is closed, unanswered
        self.request_peers.append(state[0])
        return request

    async def wait_closed(self, count: int, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` connections have ended."""
        async with asyncio.timeout(timeout), self._ended:
            await self._ended.wait_for(lambda: self.closed >= count)

    def hang_up_all(self) -> None:
        """Close every open connection from the server's side (an idle-timeout sweep)."""
        for writer in list(self._writers):
            writer.transport.abort()


class DialCounter:
    """Counts the TCP connects the Sender makes (``attach`` wraps ``_connection.connect_tcp``, the only
    place the transport opens a socket)."""

    def __init__(self) -> None:
        self.dials: list[tuple[str, int]] = []

    def attach(self, monkeypatch: pytest.MonkeyPatch) -> DialCounter:
        original = _connection.connect_tcp
        counter = self

        async def counting(ip: str, port: int) -> tuple[asyncio.Transport, asyncio.Protocol]:
            counter.dials.append((ip, port))
            return await original(ip, port)

        monkeypatch.setattr(_connection, "connect_tcp", counting)
        return self


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on (connecting to it is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
