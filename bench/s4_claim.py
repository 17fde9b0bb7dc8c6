"""Scenario 4: the claim path, ``claim_next`` + ``ack`` over MCP, on SQLite and on two instances sharing
PostgreSQL, with no double claim.

``ENDPOINTS`` endpoints, each draining ``QUEUES`` queues; ``TODOS`` todos loaded first by signed fan-out
deliveries (one delivery makes one todo per endpoint and queue). Then ``AGENTS`` consumers, several per
endpoint so they race for the same rows, loop ``claim_next`` then ``ack`` until their queues are empty.
On PostgreSQL two server instances share the database and each endpoint's consumers are split between
them. Throughput is completed todos (claim + ack) per second over at most ``MAX_SECONDS``; latency per
verb is measured at the client.

No double claim: every claimed id is distinct across all consumers, and afterwards the database has
as many ``done`` todos as acks, none with ``attempt > 1`` (claimed twice) and none left ``claimed``.

The per-endpoint MCP rate limit (600 calls/min by default) would cap each endpoint at 5 todos/s, so it
is raised for this scenario only. The PostgreSQL server is the test suite's throwaway cluster
(tests/support/pg.py): ``fsync=off``, ``synchronous_commit=off``, on the same two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bench.common import CpuMeter, children_of, summarize_ms
from bench.context import Bench, running, sqlite_rows
from bench.procs import ClientProc, ServerProc
from bench.world import World, build_world, new_cred_key

ENDPOINTS = 4
QUEUES = ("q1", "q2", "q3", "q4")
TODOS = 2400
AGENTS_PER_ENDPOINT = 4
MCP_RATE_PER_MINUTE = 1_000_000
MAX_SECONDS = 15.0  # consumers stop after this even if todos remain

ESTIMATE = 90.0

DB_CHECK = (
    "SELECT count(*), "
    "sum(CASE WHEN status = 'done' THEN 1 ELSE 0 END), "
    "sum(CASE WHEN attempt > 1 THEN 1 ELSE 0 END), "
    "sum(CASE WHEN status = 'claimed' THEN 1 ELSE 0 END) FROM todos"
)


async def _preload(b: Bench, server: ServerProc, world: World, todos: int, out: dict[str, Any]) -> int:
    """Load the todos with signed fan-out deliveries. If deliveries carrying a delivery id fail (HTTP 5xx),
    that is recorded and the rest are sent without one (no dedup key), so the claim path can still be
    measured."""
    fan = world.fanout_sources[0]
    deliveries = todos // fan.fanout
    spec: dict[str, Any] = {
        "port": server.port,
        "targets": [fan.target()],
        "rate": 0,
        "count": deliveries,
        "concurrency": 4,
    }
    result = await b.client.run("ingest", spec)
    ok = sum(n for status, n in result["statuses"].items() if 200 <= int(status) < 300)
    failed = sum(n for status, n in result["statuses"].items() if int(status) >= 500)
    if failed:
        note = (
            f"{failed} of {deliveries} signed deliveries carrying a delivery id were answered "
            f"{', '.join(str(k) for k in result['statuses'] if int(k) >= 500)} (see the server log); the "
            "rest of the load was sent without a delivery id (no dedup key)"
        )
        out["preload_note"] = note
        b.note(f"s4 {out.get('name', '')}: {note}")
        retry = await b.client.run("ingest", {**spec, "count": deliveries - ok, "delivery_id": False})
        ok += sum(n for status, n in retry["statuses"].items() if 200 <= int(status) < 300)
    return int(ok * fan.fanout)


def _agents(world: World, base_urls: list[str], per_endpoint: int) -> list[list[dict[str, str]]]:
    """Consumers per instance: endpoint i's consumers alternate between the instances."""
    out: list[list[dict[str, str]]] = [[] for _ in base_urls]
    for ep in world.endpoints:
        for k in range(per_endpoint):
            out[k % len(base_urls)].append({"base_url": base_urls[k % len(base_urls)], "token": ep.token})
    return out


def _combine(results: list[dict[str, Any]], db: tuple[Any, ...], loaded: int) -> dict[str, Any]:
    claimed = [c for r in results for c in r["claimed"]]
    elapsed = max(r["elapsed"] for r in results)
    total, done, reclaimed, still_claimed = (int(x or 0) for x in db)
    return {
        "loaded": loaded,
        "completed": len(claimed),
        "elapsed": elapsed,
        "todos_per_second": len(claimed) / elapsed if elapsed else 0.0,
        "calls_per_second": 2 * len(claimed) / elapsed if elapsed else 0.0,
        "claim_latency": summarize_ms(x for r in results for x in r["claim_latency"]),
        "ack_latency": summarize_ms(x for r in results for x in r["ack_latency"]),
        "errors": [r["errors"] for r in results],
        "distinct_claimed": len(set(claimed)),
        "double_claims": len(claimed) - len(set(claimed)),
        "db_total": total,
        "db_done": done,
        "db_attempt_gt_1": reclaimed,
        "db_still_claimed": still_claimed,
    }


async def _sqlite(b: Bench, todos: int) -> dict[str, Any]:
    b.progress.phase("s4 claim: SQLite setup and load", 10)
    server = b.server("s4-sqlite", b.settings("s4-sqlite", mcp_rate_per_minute=MCP_RATE_PER_MINUTE))
    world = await build_world(
        server.settings,
        endpoints=ENDPOINTS,
        queues=QUEUES,
        own_sources=False,
        fanout_groups=[list(range(ENDPOINTS))],
        owners="one",  # a source routes only to its own human's endpoints
    )
    info: dict[str, Any] = {"name": "sqlite"}
    async with running(server):
        loaded = await _preload(b, server, world, todos, info)
        b.progress.phase("s4 claim: SQLite claim_next + ack", MAX_SECONDS)
        agents = _agents(world, [server.base_url], AGENTS_PER_ENDPOINT)[0]
        meter = CpuMeter({"server": server.pids(), "client": b.client.pid})
        meter.start()
        result = await b.client.run("mcp_claim", {"agents": agents, "max_seconds": MAX_SECONDS})
        cpu = meter.stop()
    db = sqlite_rows(server.settings["data_dir"], DB_CHECK)[0]
    info.pop("name")
    return {"instances": 1, "agents": len(agents), **_combine([result], db, loaded), "cpu": cpu, **info}


async def _postgres(b: Bench, todos: int) -> dict[str, Any]:
    from tests.support.pg import PostgresServer, missing_binaries

    missing = missing_binaries()
    if missing:
        return {"skipped": f"PostgreSQL programs not found: {', '.join(missing)}"}
    b.progress.phase("s4 claim: PostgreSQL start, setup and load", 15)
    pg = PostgresServer()  # in the system temp folder: the server runs as another user when we are root
    pg.start()
    extra = ClientProc()
    try:
        url = pg.create_database("bench_claim")
        key = new_cred_key()
        settings: dict[str, Any] = {
            "data_dir": str(b.root / "s4-pg"),
            "database_url": url,
            "cred_key": key,
            "mcp_rate_per_minute": MCP_RATE_PER_MINUTE,
        }
        Path(settings["data_dir"]).mkdir(parents=True, exist_ok=True)
        one = b.server("s4-pg-1", dict(settings))
        two = b.server("s4-pg-2", dict(settings))
        world = await build_world(
            one.settings,
            endpoints=ENDPOINTS,
            queues=QUEUES,
            own_sources=False,
            fanout_groups=[list(range(ENDPOINTS))],
            owners="one",
        )
        await extra.run("warm", {})
        info: dict[str, Any] = {"name": "postgres"}
        async with running(one), running(two):
            loaded = await _preload(b, one, world, todos, info)
            b.progress.phase("s4 claim: two instances on PostgreSQL, claim_next + ack", MAX_SECONDS)
            per_instance = _agents(world, [one.base_url, two.base_url], AGENTS_PER_ENDPOINT)
            postmaster = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
            meter = CpuMeter(
                {
                    "server_1": one.pid,
                    "server_2": two.pid,
                    "postgres": [postmaster, *children_of(postmaster)],
                    "client_1": b.client.pid,
                    "client_2": extra.pid,
                }
            )
            meter.start()
            results = await asyncio.gather(
                b.client.run("mcp_claim", {"agents": per_instance[0], "max_seconds": MAX_SECONDS}),
                extra.run("mcp_claim", {"agents": per_instance[1], "max_seconds": MAX_SECONDS}),
            )
            cpu = meter.stop()
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                db = tuple((await conn.execute(text(DB_CHECK))).one())
        finally:
            await engine.dispose()
        return {
            "instances": 2,
            "agents": sum(len(a) for a in per_instance),
            **_combine(list(results), db, loaded),
            "per_instance_completed": [len(r["claimed"]) for r in results],
            "cpu": cpu,
            **{k: v for k, v in info.items() if k != "name"},
        }
    finally:
        await extra.stop()
        with contextlib.suppress(Exception):
            pg.stop()


async def run(b: Bench) -> dict[str, Any]:
    todos = 800 if b.quick else TODOS
    return {
        "endpoints": ENDPOINTS,
        "queues": list(QUEUES),
        "agents_per_endpoint": AGENTS_PER_ENDPOINT,
        "mcp_rate_per_minute": MCP_RATE_PER_MINUTE,
        "sqlite": await _sqlite(b, todos),
        "postgres": await _postgres(b, todos),
    }
