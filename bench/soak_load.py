"""The soak's client side (``soak`` job of :mod:`bench.client`): ingest and consumers at once, for as long
as it takes ``count`` todos to go through, with latencies kept per time bucket so the report can draw
them as curves.

* Ingest: signed Gitea deliveries to fan-out sources (each delivery makes ``fanout`` todos), open loop
  at ``rate`` deliveries per second, spread over ``base_urls`` (one or more instances) in turn, on the bench's minimal keep-alive HTTP/1.1 client; latency from the
  scheduled send time (no coordinated omission).
* Consumers: one per agent, ``claim_many`` (up to ``batch``, long-polling 1 s) then one ``ack_many`` of
  what it got, each ack naming the claim's lease; they stop once ingest has finished and a claim comes
  back empty. Claim latency is that of each ``claim_many`` call that claimed something.

Bounded by ``max_seconds``. Every answer is checked (ack_many answers every item ok).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from typing import Any

from bench.common import percentile
from bench.mcp_wire import BadAnswer, McpClient

BUCKET_SECONDS = 10.0
_FAILURES = (OSError, asyncio.IncompleteReadError, ValueError, BadAnswer)


class Series:
    """Latencies per ``BUCKET_SECONDS`` since ``start``: p50/p99 and the count of each bucket."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.buckets: defaultdict[int, list[float]] = defaultdict(list)

    def add(self, at: float, seconds: float) -> None:
        self.buckets[int((at - self.start) // BUCKET_SECONDS)].append(seconds * 1000.0)

    def report(self) -> list[dict[str, float]]:
        return [
            {
                "t": (n + 1) * BUCKET_SECONDS,
                "n": len(values),
                "p50": percentile(values, 50),
                "p99": percentile(values, 99),
            }
            for n, values in sorted(self.buckets.items())
        ]


async def job_soak(spec: dict[str, Any]) -> dict[str, Any]:
    from bench.client import _gitea_request, _Pool, _port_of

    ports = [_port_of(url) for url in spec.get("base_urls") or [spec["base_url"]]]
    targets: list[dict[str, str]] = spec["targets"]
    fanout, rate, batch = int(spec["fanout"]), float(spec["rate"]), int(spec["batch"])
    deliveries = -(-int(spec["count"]) // fanout)
    start = time.monotonic()
    deadline = start + float(spec["max_seconds"])
    ingest, claims = Series(start), Series(start)
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    acked = 0
    ingest_done = asyncio.Event()
    per_port = max(1, int(spec.get("concurrency", 32)) // len(ports))
    pools = [_Pool(port, per_port) for port in ports]

    async def deliver(seq: int, due: float) -> None:
        target = targets[seq % len(targets)]
        pool = pools[seq % len(pools)]
        try:
            conn = await pool.get()
            status = await conn.request(_gitea_request(pool.port, target["path"], target["secret"], seq, ""))
        except _FAILURES as exc:
            errors[f"ingest: {type(exc).__name__}"] += 1
            return
        pool.put(conn)
        statuses[status] += 1
        ingest.add(due, time.monotonic() - due)

    async def produce() -> None:
        tasks: set[asyncio.Task[None]] = set()
        for seq in range(deliveries):
            due = start + seq / rate
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            if time.monotonic() > deadline:
                break
            task = asyncio.create_task(deliver(seq, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()))
        ingest_done.set()

    claim_args = json.dumps({"max_todos": batch, "wait_seconds": 1}).encode()

    async def consume(client: McpClient) -> None:
        nonlocal acked
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                todos = (await client.call("claim_many", claim_args)).get("todos")
                if not isinstance(todos, list):
                    raise BadAnswer("claim_many: no todos list")
            except _FAILURES as exc:
                errors[f"claim: {type(exc).__name__}"] += 1
                if client.broken:
                    await client.restart()
                continue
            if not todos:  # a long poll that found nothing: its wait is no claim's latency
                if ingest_done.is_set():
                    return
                continue
            claims.add(t0, time.monotonic() - t0)
            acks = [{"todo_id": t["id"], "lease": t["lease"], "result": {"ok": True}} for t in todos]
            try:
                results = (await client.call("ack_many", json.dumps({"acks": acks}).encode())).get("results")
                if not isinstance(results, list) or not all(r.get("ok") is True for r in results):
                    raise BadAnswer(f"ack_many: not every item ok: {str(results)[:200]}")
            except _FAILURES as exc:
                errors[f"ack: {type(exc).__name__}"] += 1
                if client.broken:
                    await client.restart()
                continue
            acked += len(results)

    clients = [McpClient(_port_of(a["base_url"]), a["token"], name="soak") for a in spec["agents"]]
    await asyncio.gather(*(c.start() for c in clients))
    try:
        await asyncio.gather(produce(), *(consume(c) for c in clients))
    finally:
        await asyncio.gather(*(c.stop() for c in clients))
        for pool in pools:
            pool.close()
    return {
        "elapsed": time.monotonic() - start,
        "deliveries": sum(statuses.values()),
        "statuses": dict(statuses),
        "acked": acked,
        "errors": dict(errors),
        "ingest": ingest.report(),
        "claim": claims.report(),
    }
