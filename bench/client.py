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
* ``mcp_claim``: consumers doing ``claim_next`` then ``ack`` over MCP streamable HTTP until their queues
  are empty or time runs out; with ``batch: N``, ``claim_many`` (up to N todos per call) then one
  ``ack_many`` of everything claimed. Each consumer is the bench's raw MCP client
  (:mod:`bench.mcp_wire`, the same wire as the SDK client at a fraction of its CPU), in the 2026-07-28
  era the SDK client adopts by default, or with ``modern: false`` in the handshake era (a session each).
* ``mcp_tools``: the tool names a server lists to one endpoint (``tools/list``).
* ``pgq``: pgqueuer queue managers draining its queue (scenario 4's peer, :mod:`bench.pgq`).

Every job is bounded by a count and a ``max_seconds`` deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from urllib.parse import urlsplit

import httpx

from bench.common import LOOPBACK
from bench.mcp_wire import BadAnswer, McpClient

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
# On the bench's raw MCP client (bench.mcp_wire), as the floor's load is: each consumer costs the box
# the server shares as little CPU as the peer's consumers do. ``modern`` (default true) picks the era.

_FAILURES = (BadAnswer, OSError, TimeoutError, ValueError, asyncio.IncompleteReadError)
AGENT = "switchboard-bench"


def _port_of(base_url: str) -> int:
    port = urlsplit(base_url).port
    if port is None:
        raise ValueError(f"no port in {base_url!r}")
    return port


def _failure(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:80]


def _todo(todo: Any, tool: str, status: str) -> dict[str, Any]:
    """A todo from a verb's structuredContent, checked: an id and the status the verb leaves it in."""
    if not isinstance(todo, dict) or not isinstance(todo.get("id"), str) or todo.get("status") != status:
        raise BadAnswer(f"{tool}: not a {status} todo: {str(todo)[:120]}")
    if status == "claimed" and not isinstance(todo.get("lease"), str):
        raise BadAnswer(f"{tool}: a claimed todo without its lease handle: {str(todo)[:120]}")
    return todo


def _todo_id(outcome: Any) -> Any:
    return outcome.get("todo_id") if isinstance(outcome, dict) else None


class _Consumers:
    """What both claim loops share: one client per agent, in one era, the error count, the deadline,
    and recovery from a broken connection."""

    def __init__(self, spec: dict[str, Any]) -> None:
        modern = bool(spec.get("modern", True))
        self.clients = [
            McpClient(_port_of(a["base_url"]), a["token"], modern=modern, name=AGENT) for a in spec["agents"]
        ]
        self.deadline = time.monotonic() + spec.get("max_seconds", 60.0)
        self.errors: Counter[str] = Counter()

    async def failed(self, client: McpClient, exc: BaseException) -> bool:
        """Count ``exc``; whether the consumer can go on (its connection intact, or open again)."""
        self.errors[_failure(exc)] += 1
        if not client.broken:
            return True
        try:
            await client.restart()
        except _FAILURES as again:
            self.errors[f"reconnect: {_failure(again)}"] += 1
            return False
        return True

    async def run(self, consume: Callable[[int, McpClient], Awaitable[None]]) -> dict[str, Any]:
        """Start every client, run ``consume`` on each until it returns, stop them: the elapsed time,
        the era and the errors."""
        try:
            await asyncio.gather(*(c.start() for c in self.clients))
            started = time.monotonic()
            await asyncio.gather(*(consume(i, c) for i, c in enumerate(self.clients)))
            elapsed = time.monotonic() - started
        finally:
            await asyncio.gather(*(c.stop() for c in self.clients))
        era = self.clients[0].version if self.clients else ""
        return {"elapsed": elapsed, "era": era, "errors": dict(self.errors)}


async def job_mcp_tools(spec: dict[str, Any]) -> dict[str, Any]:
    client = McpClient(_port_of(spec["base_url"]), spec["token"], modern=spec.get("modern", True), name=AGENT)
    try:
        await client.start()
        return {"tools": await client.tool_names()}
    finally:
        await client.stop()


async def job_mcp_claim(spec: dict[str, Any]) -> dict[str, Any]:
    """``claim_next`` then ``ack`` until the queues are empty (or ``max_per_agent`` each, or time is up);
    with ``batch``, :func:`_mcp_claim_batch`; with ``combined``, :func:`_mcp_claim_combined`. A todo
    counts once its ``ack`` answers it ``done``."""
    if spec.get("batch"):
        return await _mcp_claim_batch(spec)
    if spec.get("combined"):
        return await _mcp_claim_combined(spec)
    run = _Consumers(spec)
    claimed: list[str] = []
    claim_lat: list[float] = []
    ack_lat: list[float] = []
    per_agent: list[int] = [0] * len(run.clients)
    limit = spec.get("max_per_agent", 10**9)

    async def consume(index: int, client: McpClient) -> None:
        while time.monotonic() < run.deadline and per_agent[index] < limit:
            t0 = time.monotonic()
            try:
                got = await client.call("claim_next")
                if "todo" not in got:
                    raise BadAnswer("claim_next: no todo key in structuredContent")
                todo = None if got["todo"] is None else _todo(got["todo"], "claim_next", "claimed")
            except _FAILURES as exc:
                if await run.failed(client, exc):
                    continue
                return
            t1 = time.monotonic()
            if todo is None:
                return
            claim_lat.append(t1 - t0)
            todo_id = todo["id"]
            claimed.append(todo_id)
            try:
                args = json.dumps(
                    {"todo_id": todo_id, "lease": todo["lease"], "result": {"ok": True}}
                ).encode()
                if _todo((await client.call("ack", args)).get("todo"), "ack", "done")["id"] != todo_id:
                    raise BadAnswer("ack: answered another todo")
            except _FAILURES as exc:
                if await run.failed(client, exc):
                    continue
                return
            ack_lat.append(time.monotonic() - t1)
            per_agent[index] += 1

    summary = await run.run(consume)
    return {
        "claimed": claimed,
        "claim_latency": claim_lat,
        "ack_latency": ack_lat,
        "per_agent": per_agent,
        **summary,
    }


async def _mcp_claim_combined(spec: dict[str, Any]) -> dict[str, Any]:
    """One call per todo: ``claim_next`` with ``ack`` of the todo the consumer holds (docs/mcp.md), the
    first call without one. A todo counts as completed when a later call's ``acked`` reports it ``ok``;
    the last todo held is acked by the call that finds the queue empty."""
    run = _Consumers(spec)
    claimed: list[str] = []
    acked: list[str] = []
    claim_lat: list[float] = []

    async def consume(index: int, client: McpClient) -> None:
        held: str | None = None
        lease = ""  # the held todo's claim handle
        while True:
            t0 = time.monotonic()
            args = (
                b"{}"
                if held is None
                else json.dumps({"ack": {"todo_id": held, "lease": lease, "result": {"ok": True}}}).encode()
            )
            try:
                got = await client.call("claim_next", args)
                if "todo" not in got:
                    raise BadAnswer("claim_next: no todo key in structuredContent")
                if held is not None and got.get("acked") != {"todo_id": held, "ok": True}:
                    raise BadAnswer(
                        f"claim_next: the ack of {held} was answered {str(got.get('acked'))[:80]}"
                    )
                todo = None if got["todo"] is None else _todo(got["todo"], "claim_next", "claimed")
            except _FAILURES as exc:
                held = None  # not counted as completed; its lease runs out
                if await run.failed(client, exc):
                    continue
                return
            if held is not None:
                acked.append(held)
                held = None
            if todo is None:
                return
            claim_lat.append(time.monotonic() - t0)
            claimed.append(todo["id"])
            if time.monotonic() >= run.deadline:  # out of time: finish this one alone, claim no more
                finish = json.dumps(
                    {"todo_id": todo["id"], "lease": todo["lease"], "result": {"ok": True}}
                ).encode()
                with contextlib.suppress(*_FAILURES):
                    if (
                        _todo((await client.call("ack", finish)).get("todo"), "ack", "done")["id"]
                        == todo["id"]
                    ):
                        acked.append(todo["id"])
                return
            held, lease = todo["id"], todo["lease"]

    summary = await run.run(consume)
    return {"claimed": claimed, "acked": acked, "claim_latency": claim_lat, "ack_latency": [], **summary}


async def _mcp_claim_batch(spec: dict[str, Any]) -> dict[str, Any]:
    """``claim_many`` (at most ``batch`` todos per call) then one ``ack_many`` of all of them, until a
    claim comes back empty. A todo counts as completed when ``ack_many`` reports it ``ok``."""
    batch = int(spec["batch"])
    run = _Consumers(spec)
    claimed: list[str] = []
    acked: list[str] = []
    claim_lat: list[float] = []
    ack_lat: list[float] = []
    sizes: Counter[int] = Counter()
    args = json.dumps({"max_todos": batch}).encode()

    async def consume(index: int, client: McpClient) -> None:
        while time.monotonic() < run.deadline:
            t0 = time.monotonic()
            try:
                todos = (await client.call("claim_many", args)).get("todos")
                if not isinstance(todos, list) or len(todos) > batch:
                    raise BadAnswer(f"claim_many: todos is not a list of at most {batch}")
                ids = [_todo(t, "claim_many", "claimed")["id"] for t in todos]
                leases = [t["lease"] for t in todos]
            except _FAILURES as exc:
                if await run.failed(client, exc):
                    continue
                return
            t1 = time.monotonic()
            if not ids:
                return
            claim_lat.append(t1 - t0)
            sizes[len(ids)] += 1
            claimed.extend(ids)
            acks = [
                {"todo_id": i, "lease": ls, "result": {"ok": True}} for i, ls in zip(ids, leases, strict=True)
            ]
            try:
                results = (await client.call("ack_many", json.dumps({"acks": acks}).encode())).get("results")
                if not isinstance(results, list) or [_todo_id(r) for r in results] != ids:
                    raise BadAnswer("ack_many: results do not answer the acks in order")
            except _FAILURES as exc:
                if await run.failed(client, exc):
                    continue
                return
            ack_lat.append(time.monotonic() - t1)
            for r in results:
                if r.get("ok") is True:
                    acked.append(r["todo_id"])
                else:
                    run.errors[f"ack_many: {r.get('error', r)}"[:80]] += 1

    summary = await run.run(consume)
    return {
        "claimed": claimed,
        "acked": acked,
        "claim_latency": claim_lat,
        "ack_latency": ack_lat,
        "batch_sizes": dict(sizes),
        **summary,
    }


async def job_pgq(spec: dict[str, Any]) -> dict[str, Any]:
    from bench import pgq

    return await pgq.consume(spec)


async def job_soak(spec: dict[str, Any]) -> dict[str, Any]:
    from bench.soak_load import job_soak as soak

    return await soak(spec)


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
    "soak": job_soak,
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
