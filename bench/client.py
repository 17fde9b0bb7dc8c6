"""The client side, in a process of its own: inbound load, the peer senders, MCP consumers.

Jobs (sent over a ``multiprocessing`` pipe as ``(kind, spec)``; the reply is ``("ok", result)`` or
``("error", text)``):

* ``ingest``: signed Gitea ``pull_request`` deliveries to ``/in/<source>``, open loop at a fixed offered
  rate (or as fast as ``concurrency`` connections allow), on a minimal keep-alive HTTP/1.1 client so the
  load generator costs as little CPU as possible. The PR title carries ``t=<time.time()>`` taken just
  before the request is written; the receiver reads it back from the notification's ``summary``.
  Latency is measured from the *scheduled* send time (no coordinated omission) and from the actual send.
* ``a2a``: the a2a-sdk ``BasePushNotificationSender`` with its own ``httpx.AsyncClient``, one config per
  task, ``send_notification(task_id, Task)`` called by ``concurrency`` concurrent tasks.
* ``httpx``: a bare ``httpx.AsyncClient`` POST loop (no validation, signing or health writes), same
  concurrency and body size: the ceiling on this machine.
* ``mcp_claim``: consumers doing ``claim_next`` then ``ack`` over MCP streamable HTTP (JSON-RPC on
  httpx, the same wire as the SDK client) until their queues are empty or time runs out; with
  ``batch: N``, ``claim_many`` (up to N todos per call) then one ``ack_many`` of everything claimed.
* ``mcp_tools``: the tool names a server lists to one endpoint (``tools/list``).
* ``pgq``: pgqueuer queue managers draining its queue (scenario 4's peer, :mod:`bench.pgq`).

Every job is bounded by a count and a ``max_seconds`` deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import ssl
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import Any

import httpx

from bench.common import LOOPBACK

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.I)


# -- a minimal keep-alive HTTP/1.1 client -------------------------------------------------------------


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False

    async def request(self, raw: bytes) -> int:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        m = _CONTENT_LENGTH.search(head)
        if m and int(m.group(1)):
            await self.reader.readexactly(int(m.group(1)))
        if _CLOSE.search(head):
            self.close()
        return status

    def close(self) -> None:
        self.closed = True
        self.writer.close()


class _Pool:
    def __init__(self, port: int, size: int) -> None:
        self.port, self.size = port, size
        self.idle: asyncio.Queue[_Conn] = asyncio.Queue()
        self.opened = 0
        self.all: list[_Conn] = []

    async def get(self) -> _Conn:
        if self.idle.empty() and self.opened < self.size:
            self.opened += 1
            reader, writer = await asyncio.open_connection(LOOPBACK, self.port)
            conn = _Conn(reader, writer)
            self.all.append(conn)
            return conn
        return await self.idle.get()

    def put(self, conn: _Conn) -> None:
        if conn.closed:
            self.opened -= 1
            return
        self.idle.put_nowait(conn)

    def close(self) -> None:
        for conn in self.all:
            if not conn.closed:
                conn.close()


def _gitea_request(port: int, path: str, secret: str, seq: int, pad: str, delivery_id: bool = True) -> bytes:
    stamp = time.time()
    payload = {
        "action": "opened",
        "number": seq,
        "pull_request": {"number": seq, "title": f"t={stamp:.6f}", "body": pad},
        "repository": {"full_name": "bench/widgets"},
        "sender": {"login": "bench"},
    }
    body = json.dumps(payload, separators=(",", ":")).encode()
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    delivery = f"x-gitea-delivery: {uuid.uuid4()}\r\n" if delivery_id else ""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {LOOPBACK}:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-gitea-event: pull_request\r\n"
        f"{delivery}x-gitea-signature: {sig}\r\n\r\n"
    )
    return head.encode() + body


async def job_ingest(spec: dict[str, Any]) -> dict[str, Any]:
    port: int = spec["port"]
    targets: list[dict[str, str]] = spec["targets"]
    rate: float = spec.get("rate", 0.0)
    count: int = spec["count"]
    pad = "x" * spec.get("pad", 0)
    delivery_id = spec.get("delivery_id", True)
    pool = _Pool(port, spec.get("concurrency", 32))
    deadline = time.monotonic() + spec.get("max_seconds", 120.0)
    statuses: Counter[int] = Counter()
    from_schedule: list[float] = []
    service: list[float] = []
    errors: Counter[str] = Counter()
    first_send = last_done = 0.0

    async def one(seq: int, due: float) -> None:
        nonlocal first_send, last_done
        target = targets[seq % len(targets)]
        try:
            conn = await pool.get()
        except OSError as exc:
            errors[type(exc).__name__] += 1
            return
        sent = time.monotonic()
        if not first_send:
            first_send = time.time()
        try:
            status = await conn.request(
                _gitea_request(port, target["path"], target["secret"], seq, pad, delivery_id)
            )
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[type(exc).__name__] += 1
            conn.close()
            pool.put(conn)
            return
        done = time.monotonic()
        pool.put(conn)
        statuses[status] += 1
        from_schedule.append(done - due)
        service.append(done - sent)
        last_done = time.time()

    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic() + 0.01
    late = 0
    sent_count = 0
    for seq in range(count):
        due = started + (seq / rate if rate else 0.0)
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        elif rate and now - due > 0.005:
            late += 1
        if time.monotonic() > deadline:
            break
        task = asyncio.create_task(one(seq, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent_count += 1
    unfinished = 0
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 1.0))
        unfinished = len(pending)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    pool.close()
    ended = time.monotonic()
    return {
        "offered": sent_count,
        "offered_rate": rate,
        "statuses": dict(statuses),
        "errors": dict(errors),
        "latency_from_schedule": from_schedule,
        "latency_service": service,
        "late_sends": late,
        "unfinished": unfinished,
        "elapsed": ended - started,
        "first_send": first_send,
        "last_done": last_done,
        "connections": pool.opened,
    }


# -- peers --------------------------------------------------------------------------------------------


def _client_context(ca_pem: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_pem)


async def _run_workers(
    n: int, concurrency: int, call: Callable[[int], Awaitable[None]], deadline: float
) -> None:
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < n and time.monotonic() < deadline:
            index = next_index
            next_index += 1
            await call(index)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def job_a2a(spec: dict[str, Any]) -> dict[str, Any]:
    from a2a.server.context import ServerCallContext
    from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore
    from a2a.types import Task, TaskPushNotificationConfig, TaskState, TaskStatus
    from google.protobuf.struct_pb2 import Struct

    n: int = spec["n"]
    store = InMemoryPushNotificationConfigStore()
    context = ServerCallContext()
    for k in range(n):
        task_id = f"task-{k}"
        await store.set_info(
            task_id,
            TaskPushNotificationConfig(
                id=f"cfg-{k}", task_id=task_id, url=f"{spec['url_base']}/{k}", token="bench-token"
            ),
            context,
        )
    metadata = Struct()
    metadata.update({"note": "p" * spec.get("pad", 0)})
    tasks = [
        Task(
            id=f"task-{k}",
            context_id="bench",
            status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
            metadata=metadata,
        )
        for k in range(n)
    ]
    deadline = time.monotonic() + spec.get("max_seconds", 120.0)
    async with httpx.AsyncClient(verify=_client_context(spec["ca_pem"])) as client:
        sender = BasePushNotificationSender(client, store)

        async def call(k: int) -> None:
            await sender.send_notification(f"task-{k}", tasks[k])

        started = time.monotonic()
        await _run_workers(n, spec["concurrency"], call, deadline)
        elapsed = time.monotonic() - started
    return {"n": n, "elapsed": elapsed}


async def job_httpx(spec: dict[str, Any]) -> dict[str, Any]:
    n: int = spec["n"]
    body = b'{"pad":"' + b"r" * max(spec["body_len"] - 10, 0) + b'"}'
    statuses: Counter[int] = Counter()
    deadline = time.monotonic() + spec.get("max_seconds", 120.0)
    async with httpx.AsyncClient(verify=_client_context(spec["ca_pem"])) as client:

        async def call(k: int) -> None:
            r = await client.post(spec["url"], content=body, headers={"content-type": "application/json"})
            statuses[r.status_code] += 1

        started = time.monotonic()
        await _run_workers(n, spec["concurrency"], call, deadline)
        elapsed = time.monotonic() - started
    return {"n": n, "elapsed": elapsed, "statuses": dict(statuses), "body_len": len(body)}


# -- MCP consumers ----------------------------------------------------------------------------------


class _Mcp:
    """JSON-RPC over MCP streamable HTTP: initialize once, then tools/call. Replies may be SSE."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url,
            timeout=30,
            headers={"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"},
        )
        self.session: dict[str, str] = {}
        self.next_id = 0

    async def _rpc(self, method: str, params: dict[str, Any] | None, notify: bool = False) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        r = await self.http.post("/mcp", json=message, headers=self.session)
        if "mcp-session-id" in r.headers and "mcp-session-id" not in self.session:
            self.session["mcp-session-id"] = r.headers["mcp-session-id"]
        if notify:
            return None
        if r.status_code != 200:
            raise RuntimeError(f"{method}: HTTP {r.status_code}")
        text = r.text
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            text = data[-1] if data else "{}"
        reply = json.loads(text)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    async def start(self) -> None:
        result = await self._rpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        self.session["mcp-protocol-version"] = result.get("protocolVersion", "2025-06-18")
        await self._rpc("notifications/initialized", None, notify=True)

    async def tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self._rpc("tools/call", {"name": name, "arguments": args})
        data = result.get("structuredContent") or {}
        if result.get("isError"):  # the error object is in _meta (docs/mcp.md), not structuredContent
            error = (result.get("_meta") or {}).get("switchboard/error") or {}
            raise RuntimeError(f"{name}: {error.get('code', error)}")
        return dict(data)

    async def close(self) -> None:
        await self.http.aclose()

    async def tool_names(self) -> list[str]:
        result = await self._rpc("tools/list", {})
        return [t["name"] for t in result.get("tools", [])]


async def job_mcp_tools(spec: dict[str, Any]) -> dict[str, Any]:
    client = _Mcp(spec["base_url"], spec["token"])
    try:
        await client.start()
        return {"tools": await client.tool_names()}
    finally:
        await client.close()


async def job_mcp_claim(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("batch"):
        return await _mcp_claim_batch(spec)
    deadline = time.monotonic() + spec.get("max_seconds", 60.0)
    claimed: list[str] = []
    claim_lat: list[float] = []
    ack_lat: list[float] = []
    errors: Counter[str] = Counter()
    clients = [_Mcp(a["base_url"], a["token"]) for a in spec["agents"]]
    await asyncio.gather(*(c.start() for c in clients))
    per_agent: list[int] = [0] * len(clients)
    limit = spec.get("max_per_agent", 10**9)

    async def consume(index: int, client: _Mcp) -> None:
        while time.monotonic() < deadline and per_agent[index] < limit:
            t0 = time.monotonic()
            try:
                got = await client.tool("claim_next", {})
            except (RuntimeError, httpx.HTTPError) as exc:
                errors[(str(exc) or type(exc).__name__)[:80]] += 1
                continue
            t1 = time.monotonic()
            todo = got.get("todo")
            if todo is None:
                return
            claim_lat.append(t1 - t0)
            claimed.append(todo["id"])
            try:
                await client.tool("ack", {"todo_id": todo["id"], "result": {"ok": True}})
            except (RuntimeError, httpx.HTTPError) as exc:
                errors[(str(exc) or type(exc).__name__)[:80]] += 1
                continue
            ack_lat.append(time.monotonic() - t1)
            per_agent[index] += 1

    started = time.monotonic()
    await asyncio.gather(*(consume(i, c) for i, c in enumerate(clients)))
    elapsed = time.monotonic() - started
    await asyncio.gather(*(c.close() for c in clients))
    return {
        "claimed": claimed,
        "claim_latency": claim_lat,
        "ack_latency": ack_lat,
        "errors": dict(errors),
        "elapsed": elapsed,
        "per_agent": per_agent,
    }


async def _mcp_claim_batch(spec: dict[str, Any]) -> dict[str, Any]:
    """``claim_many`` (at most ``batch`` todos per call) then one ``ack_many`` of all of them, until a
    claim comes back empty. A todo counts as completed when ``ack_many`` reports it ``ok``."""
    deadline = time.monotonic() + spec.get("max_seconds", 60.0)
    batch = int(spec["batch"])
    claimed: list[str] = []
    acked: list[str] = []
    claim_lat: list[float] = []
    ack_lat: list[float] = []
    sizes: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    clients = [_Mcp(a["base_url"], a["token"]) for a in spec["agents"]]
    await asyncio.gather(*(c.start() for c in clients))

    async def consume(client: _Mcp) -> None:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                got = await client.tool("claim_many", {"max_todos": batch})
            except (RuntimeError, httpx.HTTPError) as exc:
                errors[(str(exc) or type(exc).__name__)[:80]] += 1
                continue
            t1 = time.monotonic()
            todos = got.get("todos") or []
            if not todos:
                return
            claim_lat.append(t1 - t0)
            sizes[len(todos)] += 1
            ids = [t["id"] for t in todos]
            claimed.extend(ids)
            acks = [{"todo_id": i, "result": {"ok": True}} for i in ids]
            try:
                answer = await client.tool("ack_many", {"acks": acks})
            except (RuntimeError, httpx.HTTPError) as exc:
                errors[(str(exc) or type(exc).__name__)[:80]] += 1
                continue
            ack_lat.append(time.monotonic() - t1)
            for r in answer.get("results") or []:
                if r.get("ok"):
                    acked.append(r["todo_id"])
                else:
                    errors[f"ack_many: {r.get('error', r)}"[:80]] += 1

    started = time.monotonic()
    await asyncio.gather(*(consume(c) for c in clients))
    elapsed = time.monotonic() - started
    await asyncio.gather(*(c.close() for c in clients))
    return {
        "claimed": claimed,
        "acked": acked,
        "claim_latency": claim_lat,
        "ack_latency": ack_lat,
        "batch_sizes": dict(sizes),
        "errors": dict(errors),
        "elapsed": elapsed,
    }


async def job_pgq(spec: dict[str, Any]) -> dict[str, Any]:
    from bench import pgq

    return await pgq.consume(spec)


async def job_warm(spec: dict[str, Any]) -> dict[str, Any]:
    """Import what the timed jobs need, so no job pays for imports."""
    import a2a.server.tasks
    import a2a.types  # noqa: F401

    return {}


JOBS: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "ingest": job_ingest,
    "a2a": job_a2a,
    "httpx": job_httpx,
    "mcp_claim": job_mcp_claim,
    "mcp_tools": job_mcp_tools,
    "pgq": job_pgq,
    "warm": job_warm,
}


async def _main(conn: Connection) -> None:
    while True:
        command = await asyncio.to_thread(conn.recv)
        if command[0] == "stop":
            return
        kind, spec = command
        try:
            result = await JOBS[kind](spec)
        except Exception:
            conn.send(("error", traceback.format_exc()))
        else:
            conn.send(("ok", result))


def run(conn: Connection) -> None:
    """The child process's entry point."""
    asyncio.run(_main(conn))
