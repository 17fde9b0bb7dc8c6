"""A raw MCP client for the bench's load generators (the floor's and scenario 4's consumers): keep-alive
HTTP/1.1 over asyncio streams, one connection per client, request heads built once, so the generator
costs as little CPU as possible on a box it shares with the server.

It speaks either era the official SDK client (``mcp.client.client.Client``) speaks:

* **2026-07-28** (``modern=True``), what the SDK client adopts by default (``mode="auto"`` probes
  ``server/discover``): no handshake and no session; each request carries its envelope in
  ``params._meta`` (protocol version, client capabilities, client info) and the
  ``mcp-protocol-version``/``mcp-method``/``mcp-name`` headers, as the SDK's ``_stamp`` writes them.
* **the handshake era** (``modern=False``), what the SDK client does in ``mode="legacy"``: the same
  ``accept``/``content-type`` headers, ``initialize`` with the latest handshake version, the
  ``mcp-session-id`` it answers, then ``notifications/initialized``; calls carry the session id and the
  negotiated ``mcp-protocol-version``; ``DELETE`` ends the session.

Every answer is parsed (an SSE stream or a JSON body) and is a success only when it is one: HTTP 200, the
JSON-RPC id of the request, no JSON-RPC error, no ``isError``, and a ``structuredContent`` object.
Anything else raises :class:`BadAnswer`. After a failure that leaves the connection out of step (a broken
read, a timeout, the server closing it) :attr:`McpClient.broken` is true and :meth:`McpClient.restart`
opens a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

HANDSHAKE_VERSION = "2025-11-25"  # mcp_types.version.LATEST_HANDSHAKE_VERSION, what the SDK client offers
MODERN_VERSION = "2026-07-28"  # mcp_types.version.LATEST_MODERN_VERSION, what the SDK client adopts
HOST = "127.0.0.1"
TIMEOUT = 30.0  # seconds for one exchange, as the httpx client the bench once used
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class BadAnswer(Exception):
    """An answer that is not a success: never counted as one."""


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


class RawConn:
    """One keep-alive HTTP/1.1 connection: write a request, read one response (content-length or
    chunked), nothing else. ``broken`` is true unless the last exchange ended with the connection in
    step and open."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.broken = False

    @classmethod
    async def open(cls, port: int) -> RawConn:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    async def exchange(self, raw: bytes) -> Answer:
        self.broken = True  # until the whole answer is read
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0][9:12])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            body = await self.reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            chunks: list[bytes] = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers are sent
                    break
                chunks.append((await self.reader.readexactly(size + 2))[:-2])
            body = b"".join(chunks)
        else:
            raise BadAnswer(f"HTTP {status} with neither content-length nor chunked body")
        if headers.get(b"connection", b"").lower() == b"close":
            raise BadAnswer(f"HTTP {status}: the server closed the connection")
        self.broken = False
        return Answer(status, headers, body)

    def close(self) -> None:
        self.broken = True
        self.writer.close()


def jsonrpc_of(answer: Answer) -> dict[str, Any]:
    """The one JSON-RPC message of an answer: a JSON body, or the last ``data:`` of an SSE stream."""
    ctype = answer.headers.get(b"content-type", b"")
    if ctype.startswith(b"text/event-stream"):
        data = [
            line[5:].strip()
            for line in answer.body.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:") and line[5:].strip()
        ]
        if not data:
            raise BadAnswer("an SSE answer without a message")
        message: Any = json.loads(data[-1])
    elif ctype.startswith(b"application/json"):
        message = json.loads(answer.body)
    else:
        raise BadAnswer(f"HTTP {answer.status} with content-type {ctype[:40]!r}")
    if not isinstance(message, dict):
        raise BadAnswer("not a JSON-RPC message")
    return message


def head_bytes(port: int, method: str, path: str, headers: dict[str, str], agent: str) -> bytes:
    """A request's head without its closing blank line (and without content-length)."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {HOST}:{port}", f"user-agent: {agent}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines).encode()


def request_bytes(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None = None,
    agent: str = "bench",
) -> bytes:
    head = head_bytes(port, method, path, headers, agent)
    if body is None:
        return head + b"\r\n\r\n"
    return head + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body


def _with_body(head: bytes, body: bytes) -> bytes:
    return head + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body


@dataclass
class McpClient:
    """One SDK-like MCP client on its own connection (and, in the handshake era, its own session)."""

    port: int
    token: str
    modern: bool = True  # the 2026-07-28 era; False: the handshake era
    name: str = "switchboard-bench"  # clientInfo.name and the user-agent
    conn: RawConn | None = None
    next_id: int = 1
    session: str = ""
    version: str = ""  # the protocol version the calls carry
    headers: dict[str, str] = field(default_factory=dict)  # every request's, after the handshake
    meta: bytes = b""  # ',"_meta":{...}' in the 2026-07-28 era, else empty
    heads: dict[str, bytes] = field(default_factory=dict)  # request head per tool (modern) or method

    @property
    def broken(self) -> bool:
        return self.conn is None or self.conn.broken

    async def start(self) -> None:
        self.conn = await RawConn.open(self.port)
        self.heads = {}
        self.headers = {**MCP_HEADERS, "authorization": f"Bearer {self.token}"}
        if self.modern:
            self.version = MODERN_VERSION
            envelope = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": self.name, "version": "1"},
            }
            self.meta = b',"_meta":' + json.dumps(envelope, separators=(",", ":")).encode()
            self.headers["mcp-protocol-version"] = MODERN_VERSION
            return
        self.meta = b""
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": {"name": self.name, "version": "1"},
            },
        }
        answer = await self.conn.exchange(
            request_bytes(self.port, "POST", "/mcp", self.headers, json.dumps(init).encode(), self.name)
        )
        message = jsonrpc_of(answer)
        if answer.status != 200 or "result" not in message or b"mcp-session-id" not in answer.headers:
            raise BadAnswer(f"initialize: HTTP {answer.status} {str(message)[:200]}")
        self.session = answer.headers[b"mcp-session-id"].decode()
        self.version = message["result"].get("protocolVersion", HANDSHAKE_VERSION)
        self.headers |= {"mcp-session-id": self.session, "mcp-protocol-version": self.version}
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        answer = await self.conn.exchange(
            request_bytes(self.port, "POST", "/mcp", self.headers, note, self.name)
        )
        if answer.status != 202:
            raise BadAnswer(f"notifications/initialized: HTTP {answer.status}")

    def _head(self, method: str, tool: str | None) -> bytes:
        key = tool or method
        head = self.heads.get(key)
        if head is None:
            headers = dict(self.headers)
            if self.modern:  # the routing headers the SDK's _stamp adds in the 2026-07-28 era
                headers["mcp-method"] = method
                if tool is not None:
                    headers["mcp-name"] = tool
            head = self.heads[key] = head_bytes(self.port, "POST", "/mcp", headers, self.name)
        return head

    async def _request(self, method: str, params: bytes, tool: str | None) -> dict[str, Any]:
        """``params`` is the JSON object's inside without its braces; the envelope is added here."""
        if self.conn is None:
            raise BadAnswer(f"{tool or method}: not started")
        rid = self.next_id
        self.next_id += 1
        body = b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":{%s%s}}' % (
            rid,
            method.encode(),
            params,
            self.meta if params else self.meta[1:],
        )
        async with asyncio.timeout(TIMEOUT):
            answer = await self.conn.exchange(_with_body(self._head(method, tool), body))
        what = tool or method
        if answer.status != 200:
            raise BadAnswer(f"{what}: HTTP {answer.status}")
        message = jsonrpc_of(answer)
        if "error" in message:
            error = message["error"]
            raise BadAnswer(f"{what}: JSON-RPC error {str(error)[:160]}")
        result = message.get("result")
        if message.get("id") != rid or not isinstance(result, dict):
            raise BadAnswer(f"{what}: {str(message)[:200]}")
        return result

    async def call(self, tool: str, arguments: bytes = b"{}") -> dict[str, Any]:
        """``tools/call`` of ``tool`` with ``arguments`` (a JSON object, encoded): its
        ``structuredContent``. A tool error (``isError``) raises with its ``switchboard/error`` code."""
        params = b'"name":"%s","arguments":%s' % (tool.encode(), arguments)
        result = await self._request("tools/call", params, tool)
        if result.get("isError"):  # the error object is in _meta (docs/mcp.md), not structuredContent
            error = (result.get("_meta") or {}).get("switchboard/error") or {}
            raise BadAnswer(f"{tool}: {error.get('code', error) if isinstance(error, dict) else error}")
        structured = result.get("structuredContent")
        if not isinstance(structured, dict):
            raise BadAnswer(f"{tool}: no structuredContent")
        return structured

    async def tool_names(self) -> list[str]:
        result = await self._request("tools/list", b"", None)
        return [t["name"] for t in result.get("tools", [])]

    async def restart(self) -> None:
        """A fresh connection (and session) after one that broke."""
        await self.stop()
        await self.start()

    async def stop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if not self.modern and self.session and not conn.broken:
            headers = {k: v for k, v in self.headers.items() if k != "content-type"}
            ending = request_bytes(self.port, "DELETE", "/mcp", headers, agent=self.name)
            with contextlib.suppress(OSError, TimeoutError, BadAnswer, asyncio.IncompleteReadError):
                await asyncio.wait_for(conn.exchange(ending), 5)
        conn.close()
