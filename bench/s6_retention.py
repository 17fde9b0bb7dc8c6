"""Scenario 6 (issue 28): ingest and claim p99 while the retention sweep prunes ``TERMINAL`` terminal
todos, against their p99 without a prune, side by side in one run on one server. Target: within 1.2x.

1. ``SOURCES`` endpoints, each with a Gitea source (bench/world.py); the first one's queue is claimed. ``TERMINAL`` done todos (each with its two
   timeline rows, ``created`` and ``done``) and ``PENDING`` pending ones are written straight into the
   database with SQL (fast; ingest would take hours), all stamped with the seeding's start time.
2. The server starts with a retention that ends ``WINDOW`` plus a margin after it is ready, and a sweep
   every ``INTERVAL`` seconds.
3. Window A, no prune: ``INGEST_RATE`` signed deliveries per second (open loop, latency from the
   scheduled send) and ``CLAIM_RATE`` paced ``claim_next`` + ``ack`` pairs per second over MCP, for
   ``WINDOW`` seconds. Nothing is past retention yet (``switchboard_retention_pruned_total`` stays 0).
4. Window B, during the prune: once the counter moves, the same load for ``WINDOW`` seconds. The
   counter is read at the end to show the prune ran throughout (rows left > 0).

The load runs in the bench's own process on raw keep-alive connections (:mod:`bench.mcp_wire` and the
ingest client's pool), paced so the server is not saturated: a saturated server's p99 measures its
queue, not the prune's effect. ``python -m bench --only s6`` (``--quick``: 100,000 rows, shorter
windows). SQLite; the PostgreSQL variant is left for later (docs/reliability.md, "Retention").
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench.client import _gitea_request, _Pool
from bench.common import ratio, summarize_ms
from bench.context import Bench, running
from bench.mcp_wire import McpClient
from bench.world import build_world
from switchboard.ids import new_id

ESTIMATE = 420.0
TERMINAL = 1_000_000
PENDING = 20_000
WINDOW = 45.0
INTERVAL = 5.0
BATCH = int(os.environ.get("S6_BATCH", "100"))  # SWITCHBOARD_RETENTION_BATCH
INGEST_RATE = 40.0
CLAIM_RATE = 40.0
CLAIMERS = 4
SOURCES = 8  # ingest is capped at 600 deliveries a minute per source: 5/s each here
SEED_CHUNK = 20_000


def seed(db_path: Path, endpoint_id: str, terminal: int, pending: int, stamp_ms: int) -> None:
    """``terminal`` done todos with two timeline rows each and ``pending`` pending todos, in chunks."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        payload = json.dumps({"pull_request": {"number": 1, "title": "seeded", "body": "x" * 200}})
        cols = "id, endpoint_id, queue, title, payload, status, attempt, created_at, updated_at"
        for start in range(0, terminal + pending, SEED_CHUNK):
            end = min(start + SEED_CHUNK, terminal + pending)
            todos, events = [], []
            for n in range(start, end):
                status = "done" if n < terminal else "pending"
                tid = new_id("td")  # the verbs check an id's shape
                todos.append((tid, endpoint_id, "inbox", "seeded", payload, status, 1 if n < terminal else 0,
                              stamp_ms, stamp_ms))  # fmt: skip
                events.append((f"te_seed{n:09d}c", tid, "created", 0, stamp_ms))
                if n < terminal:
                    events.append((f"te_seed{n:09d}d", tid, "done", 1, stamp_ms))
            conn.execute("BEGIN")
            conn.executemany(f"INSERT INTO todos ({cols}) VALUES (?,?,?,?,?,?,?,?,?)", todos)
            conn.executemany(
                "INSERT INTO todo_events (id, todo_id, transition, attempt, at) VALUES (?,?,?,?,?)", events
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def ingest(port: int, targets: list[dict[str, str]], seconds: float) -> list[float]:
    """Open loop at INGEST_RATE: each delivery's latency from its scheduled send (no coordinated omission)."""
    pool = _Pool(port, 16)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    started = time.monotonic()

    async def one(seq: int, due: float) -> None:
        target = targets[seq % len(targets)]
        conn = await pool.get()
        try:
            status = await conn.request(_gitea_request(port, target["path"], target["secret"], seq, ""))
        except (OSError, asyncio.IncompleteReadError) as exc:
            conn.close()
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            return
        finally:
            pool.put(conn)
        if 200 <= status < 300:
            latencies.append(time.monotonic() - due)
        else:
            errors[str(status)] = errors.get(str(status), 0) + 1

    tasks = []
    for seq in range(int(seconds * INGEST_RATE)):
        due = started + seq / INGEST_RATE
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(one(seq, due)))
    await asyncio.gather(*tasks)
    pool.close()
    assert not errors, f"deliveries failed: {errors}"
    return latencies


async def claims(port: int, token: str, seconds: float) -> list[float]:
    """CLAIMERS agents, each pacing claim_next + ack at CLAIM_RATE / CLAIMERS pairs per second; the
    claim's latency from its scheduled start."""
    latencies: list[float] = []
    period = CLAIMERS / CLAIM_RATE

    async def agent(k: int) -> None:
        client = McpClient(port, token)
        await client.start()
        try:
            started = time.monotonic() + k * period / CLAIMERS
            for n in range(int(seconds / period)):
                due = started + n * period
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                todo = (await client.call("claim_next"))["todo"]
                latencies.append(time.monotonic() - due)
                assert todo is not None, "the seeded backlog ran out"
                await client.call("ack", json.dumps({"todo_id": todo["id"]}).encode())
        finally:
            await client.stop()

    await asyncio.gather(*(agent(k) for k in range(CLAIMERS)))
    return latencies


async def window(port: int, targets: list[dict[str, str]], token: str, seconds: float) -> dict[str, Any]:
    ing, cl = await asyncio.gather(ingest(port, targets, seconds), claims(port, token, seconds))
    return {"ingest": summarize_ms(ing), "claim": summarize_ms(cl)}


def pruned(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return samples.get(("switchboard_retention_pruned_total", (("table", "todos"),)), 0.0)


async def run(bench: Bench) -> dict[str, Any]:
    terminal = 100_000 if bench.quick else TERMINAL
    seconds = 15.0 if bench.quick else WINDOW
    settings = bench.settings(
        "s6", retention_interval_seconds=INTERVAL, retention_batch=BATCH, mcp_rate_per_minute=1_000_000
    )
    bench.progress.phase("s6 world + seed", 120)
    world = await build_world(settings, endpoints=SOURCES)
    db_path = Path(settings["data_dir"]) / "switchboard.db"
    t0 = time.time()
    await asyncio.to_thread(seed, db_path, world.endpoints[0].id, terminal, PENDING, int(t0 * 1000))
    seeded = time.time() - t0
    size_before = db_path.stat().st_size
    # Past retention WINDOW + 25 s after now: server start (~5 s) and window A come first.
    retention = seeded + seconds + 25.0
    settings["retention_hours"] = retention / 3600
    server = bench.server("s6", settings)
    targets = [source.target() for source in world.own_sources]
    token = world.endpoints[0].token
    async with running(server):
        bench.progress.phase("s6 window A (no prune)", seconds)
        quiet = await window(server.port, targets, token, seconds)
        assert pruned(await server.metrics()) == 0, "the prune started during window A: raise the margin"
        bench.progress.phase("s6 waiting for the prune", 40)
        deadline = time.monotonic() + 60 + retention
        while pruned(await server.metrics()) == 0:
            assert time.monotonic() < deadline, "the prune never started"
            await asyncio.sleep(0.5)
        start_count, b0 = pruned(await server.metrics()), time.monotonic()
        bench.progress.phase("s6 window B (prune)", seconds)
        busy = await window(server.port, targets, token, seconds)
        end_count, took = pruned(await server.metrics()), time.monotonic() - b0
    rate = (end_count - start_count) / took
    result = {
        "terminal_rows": terminal,
        "seed_seconds": round(seeded, 1),
        "db_bytes_before": size_before,
        "db_bytes_after": db_path.stat().st_size,
        "window_seconds": seconds,
        "ingest_rate": INGEST_RATE,
        "claim_rate": CLAIM_RATE,
        "without_prune": quiet,
        "during_prune": busy,
        "pruned_during_window": end_count - start_count,
        "pruned_at_window_end": end_count,
        "prune_rows_per_second": round(rate),
        "prune_ran_throughout": end_count < terminal,
        "ingest_p99_ratio": round(ratio(busy["ingest"]["p99"], quiet["ingest"]["p99"]), 2),
        "claim_p99_ratio": round(ratio(busy["claim"]["p99"], quiet["claim"]["p99"]), 2),
    }
    bench.note(
        f"s6: ingest p99 {quiet['ingest']['p99']:.1f} -> {busy['ingest']['p99']:.1f} ms "
        f"({result['ingest_p99_ratio']}x), claim p99 {quiet['claim']['p99']:.1f} -> "
        f"{busy['claim']['p99']:.1f} ms ({result['claim_p99_ratio']}x) during a prune at {rate:.0f} rows/s"
    )
    return result
