"""A small HTTP CONNECT proxy on loopback, for the egress-proxy tests (SWITCHBOARD_OUTBOUND_PROXY).

``ConnectProxy`` records every request head it is sent (the request line and headers), answers CONNECT
with 200 and relays bytes both ways until either side closes. It only ever dials loopback IP literals:
a CONNECT naming a host name, or an address outside 127.0.0.0/8 and ::1, is recorded and answered 502,
never resolved or dialled (the tests assert no such line arrives at all). ``answer`` makes it refuse
every CONNECT with that status, ``credentials`` makes it demand that Basic ``Proxy-Authorization``
(407 otherwise), and ``silent`` makes it read the request and never answer (a proxy that hangs).
``assert_untouched()`` proves, without sleeping, that nothing connected to it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
from dataclasses import dataclass
from types import TracebackType
from typing import Self

MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class ProxyRequest:
    """One request head the proxy received: ``line`` is the request line as sent
    (``CONNECT 127.0.0.1:8443 HTTP/1.1``); header names are lower-cased."""

    line: str
    headers: tuple[tuple[str, str], ...]

    @property
    def method(self) -> str:
        return self.line.split(" ", 1)[0]

    @property
    def target(self) -> str:
        parts = self.line.split(" ")
        return parts[1] if len(parts) > 1 else ""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None


def target_ip(target: str) -> tuple[str, int] | None:
    """``(ip, port)`` when the authority-form ``target`` names an IP literal, else ``None``."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host)), int(port)
    except ValueError:
        return None


class ConnectProxy:
    """An asyncio CONNECT proxy bound to ``host``:``port`` (0: any free port)."""

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        answer: int = 200,
        credentials: tuple[str, str] | None = None,
        silent: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.answer = answer
        self.silent = silent
        self.expected_auth = (
            None
            if credentials is None
            else "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
        )
        self.requests: list[ProxyRequest] = []
        self.peers: list[int] = []  # the client port of every accepted connection
        self.tunnels = 0  # CONNECTs answered 200 and dialled
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()

    @property
    def lines(self) -> list[str]:
        return [r.line for r in self.requests]

    @property
    def connections(self) -> int:
        return len(self.peers)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(
            self._on_connection, self.host, self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # every tunnel, both halves: kept connections through it end too
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=5)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        await self._server.wait_closed()

    async def assert_untouched(self, timeout: float = 5.0) -> None:
        """Nothing connected so far: a probe connection is accepted, and it is the only one seen (the
        kernel accepts in arrival order, so an earlier client would have been seen first)."""
        _, writer = await asyncio.open_connection(self.host, self.port)
        probe = int(writer.get_extra_info("sockname")[1])
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: probe in self.peers)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        others = [p for p in self.peers if p != probe]
        assert others == [], f"{len(others)} connection(s) reached the proxy"

    async def wait_requests(self, count: int, timeout: float = 20.0) -> list[ProxyRequest]:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.peers.append(int(writer.get_extra_info("peername")[1]))
        await self._notify()
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # only __aexit__ cancels
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return
        text = head.decode("latin-1").split("\r\n")
        headers = tuple(
            (k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in text[1:] if h)
        )
        request = ProxyRequest(text[0], headers)
        self.requests.append(request)
        await self._notify()
        if self.silent:
            await asyncio.Event().wait()  # until __aexit__ aborts the connection
        if request.method != "CONNECT":
            return await self._refuse(writer, 405)
        if self.expected_auth is not None and request.header("proxy-authorization") != self.expected_auth:
            return await self._refuse(writer, 407, ("Proxy-Authenticate", 'Basic realm="test"'))
        if self.answer != 200:
            return await self._refuse(writer, self.answer)
        found = target_ip(request.target)
        if found is None or not ipaddress.ip_address(found[0]).is_loopback:
            return await self._refuse(writer, 502)  # never resolve a name, never leave loopback
        try:
            up_reader, up_writer = await asyncio.open_connection(*found)
        except OSError:
            return await self._refuse(writer, 502)
        self._writers.add(up_writer)
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            relays = [
                asyncio.create_task(_relay(reader, up_writer)),
                asyncio.create_task(_relay(up_reader, writer)),
            ]
            # Either side ending ends the tunnel, as common proxies do: a receiver closing a kept
            # connection closes the client's end too.
            _, pending = await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, *headers: tuple[str, str]) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        writer.write(
            f"HTTP/1.1 {status} Refused\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
