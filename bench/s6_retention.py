"""Scenario 6 (issue 28): ingest and claim p99 while the retention sweep prunes ``TERMINAL`` terminal
todos, against their p99 without a prune, side by side in one run on one server. Target: within 1.2x.

1. ``SOURCES`` endpoints, each with a Gitea source (bench/world.py); the first one's queue is claimed.
   ``TERMINAL`` done todos (each with its two timeline rows, ``created`` and ``done``) and ``PENDING``
   pending ones are written straight into the database with SQL (fast; ingest would take hours), all
   stamped with the seeding's start time.
2. The server starts (then ``WARM_UP`` seconds of the load, not measured) with a retention that ends ``WINDOW`` plus a margin after it is ready, and a sweep
   every ``INTERVAL`` seconds.
3. Window A, no prune: ``INGEST_RATE`` signed deliveries per second (open loop, latency from the
   scheduled send) and ``CLAIM_RATE`` paced ``claim_next`` + ``ack`` pairs per second over MCP, for
   ``WINDOW`` seconds. Nothing is past retention yet (``switchboard_retention_pruned_total`` stays 0).
4. Window B, during the prune: once the counter moves, the same load for ``WINDOW`` seconds. The
   counter is read at the end to show the prune ran throughout (rows left > 0).

The load runs in the bench's own process on raw keep-alive connections (:mod:`bench.mcp_wire` and the
ingest client's pool), paced so the server is not saturated: a saturated server's p99 measures its
queue, not the prune's effect. ``python -m bench --only s6`` (``--quick``: 100,000 rows, shorter
windows). On SQLite, then on the suite's throwaway PostgreSQL (tests/support/pg.py: fsync off, the
same two cores; ``S6_POSTGRES=0`` or ``S6_SQLITE=0`` skips one). ``S6_BATCH`` / ``S6_PG_BATCH``: SWITCHBOARD_RETENTION_BATCH.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bench.client import _gitea_request, _Pool
from bench.common import ratio, summarize_ms
from bench.context import Bench, running
from bench.mcp_wire import McpClient
from bench.world import build_world
from switchboard.core.ids import new_id

ESTIMATE = 420.0
TERMINAL = 1_000_000
PENDING = 20_000
WINDOW = 45.0
WARM_UP = 8.0  # seconds of the same load before window A
INTERVAL = 5.0
BATCH = int(os.environ.get("S6_BATCH", "100"))  # SWITCHBOARD_RETENTION_BATCH
INGEST_RATE = 40.0
CLAIM_RATE = 40.0
CLAIMERS = 4
SOURCES = 8  # ingest is capped at 600 deliveries a minute per source: 5/s each here
SEED_CHUNK = 20_000


def seed(db_path: Path, endpoint_id: str, terminal: int, pending: int, stamp_ms: int) -> None:
    """SQLite: the seeded rows in one transaction per chunk, then ANALYZE."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        todo_sql = (
            f"INSERT INTO todos ({', '.join(TODO_COLUMNS)}) VALUES ({','.join('?' * len(TODO_COLUMNS))})"
        )
        event_sql = f"INSERT INTO todo_events ({', '.join(EVENT_COLUMNS)}) VALUES (?,?,?,?,?)"
        for todos, events in rows(endpoint_id, terminal, pending, stamp_ms):
            conn.execute("BEGIN")
            conn.executemany(todo_sql, todos)
            conn.executemany(event_sql, events)
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
                await client.call("ack", json.dumps({"todo_id": todo["id"], "lease": todo["lease"]}).encode())
        finally:
            await client.stop()

    await asyncio.gather(*(agent(k) for k in range(CLAIMERS)))
    return latencies


async def window(port: int, targets: list[dict[str, str]], token: str, seconds: float) -> dict[str, Any]:
    ing, cl = await asyncio.gather(ingest(port, targets, seconds), claims(port, token, seconds))
    return {"ingest": summarize_ms(ing), "claim": summarize_ms(cl)}


def pruned(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return samples.get(("switchboard_retention_pruned_total", (("table", "todos"),)), 0.0)


Seeder = Callable[[str, int, int, int], Awaitable[None]]  # (endpoint id, terminal, pending, stamp ms)


def rows(
    endpoint_id: str, terminal: int, pending: int, stamp_ms: int
) -> Iterator[tuple[list[Any], list[Any]]]:
    """The seeded todos and their timeline rows, ``SEED_CHUNK`` todos at a time."""
    payload = json.dumps({"pull_request": {"number": 1, "title": "seeded", "body": "x" * 200}})
    for start in range(0, terminal + pending, SEED_CHUNK):
        todos: list[Any] = []
        events: list[Any] = []
        for n in range(start, min(start + SEED_CHUNK, terminal + pending)):
            done = n < terminal
            tid = new_id("td")  # the verbs check an id's shape
            todos.append((tid, endpoint_id, "inbox", "seeded", payload, "done" if done else "pending",
                          1 if done else 0, stamp_ms, stamp_ms))  # fmt: skip
            events.append((f"te_seed{n:09d}c", tid, "created", 0, stamp_ms))
            if done:
                events.append((f"te_seed{n:09d}d", tid, "done", 1, stamp_ms))
        yield todos, events


TODO_COLUMNS = (
    "id",
    "endpoint_id",
    "queue",
    "title",
    "payload",
    "status",
    "attempt",
    "created_at",
    "updated_at",
)
EVENT_COLUMNS = ("id", "todo_id", "transition", "attempt", "at")


def pg_seeder(url: str) -> Seeder:
    async def seed_pg(endpoint_id: str, terminal: int, pending: int, stamp_ms: int) -> None:
        import asyncpg

        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            for todos, events in rows(endpoint_id, terminal, pending, stamp_ms):
                await conn.copy_records_to_table("todos", records=todos, columns=TODO_COLUMNS)
                await conn.copy_records_to_table("todo_events", records=events, columns=EVENT_COLUMNS)
            await conn.execute("VACUUM ANALYZE todos")
            await conn.execute("VACUUM ANALYZE todo_events")
        finally:
            await conn.close()

    return seed_pg


async def run(bench: Bench) -> dict[str, Any]:
    terminal = 100_000 if bench.quick else TERMINAL
    settings = bench.settings(
        "s6", retention_interval_seconds=INTERVAL, retention_batch=BATCH, mcp_rate_per_minute=1_000_000
    )
    db_path = Path(settings["data_dir"]) / "switchboard.db"

    async def seed_sqlite(endpoint_id: str, terminal: int, pending: int, stamp_ms: int) -> None:
        await asyncio.to_thread(seed, db_path, endpoint_id, terminal, pending, stamp_ms)

    results: dict[str, Any] = {}
    if os.environ.get("S6_SQLITE", "1") == "1":
        results["sqlite"] = await measure(bench, "s6", settings, seed_sqlite, terminal)
    if os.environ.get("S6_POSTGRES", "1") == "1":
        results["postgresql"] = await _postgres(bench, terminal)
    return results


async def _postgres(bench: Bench, terminal: int) -> dict[str, Any]:
    from tests.support.pg import PostgresServer, missing_binaries

    if missing_binaries():
        return {"skipped": "PostgreSQL programs not found"}
    pg = PostgresServer()
    pg.start()
    try:
        url = pg.create_database("bench_retention")
        settings = bench.settings(
            "s6-pg",
            database_url=url,
            retention_interval_seconds=INTERVAL,
            retention_batch=int(os.environ.get("S6_PG_BATCH", "100")),
            mcp_rate_per_minute=1_000_000,
        )
        return await measure(bench, "s6-pg", settings, pg_seeder(url), terminal)
    finally:
        with contextlib.suppress(Exception):
            pg.stop()


async def measure(
    bench: Bench, name: str, settings: dict[str, Any], seeder: Seeder, terminal: int
) -> dict[str, Any]:
    seconds = 15.0 if bench.quick else WINDOW
    bench.progress.phase(f"{name} world + seed", 120)
    world = await build_world(settings, endpoints=SOURCES)
    t0 = time.time()
    await seeder(world.endpoints[0].id, terminal, PENDING, int(t0 * 1000))
    seeded = time.time() - t0
    # Past retention a margin after the warm-up and window A (server start: ~5 s).
    retention = seeded + WARM_UP + seconds + 25.0
    settings["retention_hours"] = retention / 3600
    server = bench.server(name, settings)
    targets = [source.target() for source in world.own_sources]
    token = world.endpoints[0].token
    async with running(server):
        bench.progress.phase(f"{name} warm-up", WARM_UP)
        await window(server.port, targets, token, WARM_UP)  # caches, pools, plans: not measured
        bench.progress.phase(f"{name} window A (no prune)", seconds)
        quiet = await window(server.port, targets, token, seconds)
        assert pruned(await server.metrics()) == 0, "the prune started during window A: raise the margin"
        bench.progress.phase(f"{name} waiting for the prune", 40)
        deadline = time.monotonic() + 60 + retention
        while pruned(await server.metrics()) == 0:
            assert time.monotonic() < deadline, "the prune never started"
            await asyncio.sleep(0.5)
        start_count, b0 = pruned(await server.metrics()), time.monotonic()
        bench.progress.phase(f"{name} window B (prune)", seconds)
        busy = await window(server.port, targets, token, seconds)
        end_count, took = pruned(await server.metrics()), time.monotonic() - b0
    rate = (end_count - start_count) / took
    result = {
        "terminal_rows": terminal,
        "seed_seconds": round(seeded, 1),
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
        f"{name}: ingest p99 {quiet['ingest']['p99']:.1f} -> {busy['ingest']['p99']:.1f} ms "
        f"({result['ingest_p99_ratio']}x), claim p99 {quiet['claim']['p99']:.1f} -> "
        f"{busy['claim']['p99']:.1f} ms ({result['claim_p99_ratio']}x) during a prune at {rate:.0f} rows/s"
    )
    return result
