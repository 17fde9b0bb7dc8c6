"""Scenario 4: the claim path over MCP, on SQLite and on two instances sharing PostgreSQL, beside
pgqueuer on the same PostgreSQL cluster, with no double claim anywhere.

``ENDPOINTS`` endpoints, each draining ``QUEUES`` queues; ``TODOS`` todos loaded first by signed fan-out
deliveries (one delivery makes one todo per endpoint and queue). Then ``AGENTS_PER_ENDPOINT`` consumers
per endpoint, racing for the same rows, loop until their queues are empty (at most ``MAX_SECONDS``).
Throughput is completed todos (claim + ack) per second; latency per verb is measured at the client.

The consumers are the bench's raw MCP client (:mod:`bench.mcp_wire`, as the floor's load: keep-alive
HTTP/1.1 on asyncio streams, every answer parsed and checked), in two client processes on PostgreSQL,
so they cost the box the servers share about as little CPU as pgqueuer's consumers do. They speak the
2026-07-28 era by default (``ERA``: no handshake, no session, each request carrying its envelope), which
the official SDK client adopts against Switchboard in its default ``mode="auto"``. The one-todo-per-call
variants run once more in the handshake era (``LEGACY_ERA``: ``initialize``, a session per consumer), on
endpoints of their own, as information beside the default-era figures the targets use.

On PostgreSQL, in one run on one cluster, in this order:

1. **one todo per call**: ``claim_next`` then ``ack``, the consumers split between two server instances
   sharing the database; then the same in the handshake era;
2. **pgqueuer, one job per dequeue** (:mod:`bench.pgq`): the same number of jobs and consumers (queue
   managers, each on its own connection) in two processes, ``batch_size=1``: ``claim_next``'s semantics;
3. **batches**: ``claim_many`` (up to ``BATCH`` todos per call) then one ``ack_many`` of them, on the same
   two instances, if the server offers the verbs (otherwise skipped, and said so);
4. **pgqueuer with its default batch** of ``BATCH``.

Switchboard's variants each use endpoints of their own (loaded through a fan-out source of their own),
so what one variant leaves behind is never claimed by the next. pgqueuer lives in a database of its own
on the same cluster. Each Switchboard figure is reported with its ratio to the pgqueuer figure beside it.

No double claim, for every variant: every claimed id is distinct across all consumers; afterwards
Switchboard's database has as many ``done`` todos as acks among that variant's endpoints, none with
``attempt > 1`` (claimed twice) and none left ``claimed``; pgqueuer's own log has every job
``successful`` once, and its queue is empty.

The per-endpoint MCP rate limit (600 calls/min by default) would cap each endpoint at 5 todos/s, so it
is raised for this scenario only (to ``MCP_RATE_PER_MINUTE``). The PostgreSQL server is the test suite's throwaway cluster
(tests/support/pg.py): ``fsync=off``, ``synchronous_commit=off``, on the same two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bench import floor, pgq
from bench.common import CpuMeter, summarize_ms
from bench.context import Bench, running, sqlite_rows
from bench.procs import ClientProc, ServerProc
from bench.world import EndpointInfo, SourceInfo, World, build_world, new_cred_key

ENDPOINTS = 4
QUEUES = ("q1", "q2", "q3", "q4")
TODOS = 2400
AGENTS_PER_ENDPOINT = 4
# Far above what any variant asks (one todo per call at 1,000 todos/s per endpoint), and no higher: on
# PostgreSQL the limit is a cluster-wide window (store/windows.py) made on each endpoint's first call.
# It was once one row per admission (1,000,000 made the first claim wait for a million-row insert);
# it is now one row of time buckets per endpoint, whatever the limit.
MCP_RATE_PER_MINUTE = 120_000
MAX_SECONDS = 15.0  # consumers stop after this even if todos remain
BATCH = 10  # claim_many's max_todos, and pgqueuer's default batch_size
WARMUP_TODOS = 400  # drained on endpoints of their own before the first measured variant
PEER_REPEATS = 3  # pgqueuer's runs are short (a second or two): the median of these is reported
BATCH_VERBS = ("claim_many", "ack_many")

ERA = "2026-07-28"  # what the consumers speak by default: the SDK client's default (mcp_wire.MODERN_VERSION)
LEGACY_ERA = "2025-11-25"  # the handshake era's latest version, which the SDK client offers in mode="legacy"

ESTIMATE = 160.0 + floor.ESTIMATE

DB_CHECK = (
    "SELECT count(*), "
    "sum(CASE WHEN status = 'done' THEN 1 ELSE 0 END), "
    "sum(CASE WHEN attempt > 1 THEN 1 ELSE 0 END), "
    "sum(CASE WHEN status = 'claimed' THEN 1 ELSE 0 END) FROM todos WHERE endpoint_id IN ({ids})"
)


def _only(part: str) -> bool:
    """``BENCH_S4_ONLY=sqlite`` (or ``postgres``) runs that part of the scenario alone, unchanged: for
    work on one backend's claim path. Unset, both run (and the floor), as ``python -m bench`` needs."""
    only = os.environ.get("BENCH_S4_ONLY", "")
    return not only or only == part


def _spy(pid: int, name: str) -> None:
    """With ``BENCH_S4_PROFILE=<folder>``, record ``pid`` with py-spy for 5 s into ``<folder>/<name>.json``
    (speedscope): where a variant's server time goes (py-spy is not a dependency)."""
    folder = os.environ.get("BENCH_S4_PROFILE")
    if not folder:
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    Path(folder).mkdir(parents=True, exist_ok=True)
    out = Path(folder) / f"{name}.json"
    cmd = [spy, "record", "-p", str(pid), "-d", "5", "-r", "200", "-f", "speedscope", "-o", str(out)]
    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # ends by itself


STATEMENTS_TOP = (
    "SELECT calls, total_exec_time, rows, shared_blks_hit, left(regexp_replace(query, '\\s+', ' ', 'g'), 400) "
    "FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25"
)


async def _statements(url: str, name: str | None) -> None:
    """With ``BENCH_S4_STATEMENTS=<folder>``: ``pg_stat_statements`` per variant into
    ``<folder>/<name>.json`` (the statements PostgreSQL ran for it, by total time), reset before the next.
    Not a dependency of the run: the extension only loads when the variable is set."""
    folder = os.environ.get("BENCH_S4_STATEMENTS")
    if not folder:
        return
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            if name is not None:
                rows = (await conn.execute(text(STATEMENTS_TOP))).all()
                top = [
                    {"calls": r[0], "ms": round(r[1], 1), "rows": r[2], "hit": r[3], "query": r[4]}
                    for r in rows
                ]
                Path(folder).mkdir(parents=True, exist_ok=True)
                (Path(folder) / f"{name}.json").write_text(json.dumps(top, indent=1))
            await conn.execute(text("SELECT pg_stat_statements_reset()"))
    finally:
        await engine.dispose()


def _db_check(endpoints: list[EndpointInfo]) -> str:
    return DB_CHECK.format(ids=", ".join(f"'{ep.id}'" for ep in endpoints))


async def _preload(b: Bench, server: ServerProc, fan: SourceInfo, todos: int, out: dict[str, Any]) -> int:
    """Load the todos with signed fan-out deliveries. If deliveries carrying a delivery id fail (HTTP 5xx),
    that is recorded and the rest are sent without one (no dedup key), so the claim path can still be
    measured."""
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


def _agents(
    endpoints: list[EndpointInfo], base_urls: list[str], per_endpoint: int
) -> list[list[dict[str, str]]]:
    """Consumers per instance: endpoint i's consumers alternate between the instances."""
    out: list[list[dict[str, str]]] = [[] for _ in base_urls]
    for ep in endpoints:
        for k in range(per_endpoint):
            out[k % len(base_urls)].append({"base_url": base_urls[k % len(base_urls)], "token": ep.token})
    return out


def _combine(results: list[dict[str, Any]], db: tuple[Any, ...], loaded: int) -> dict[str, Any]:
    claimed = [c for r in results for c in r["claimed"]]
    completed = [c for r in results for c in r.get("acked", r["claimed"])]
    elapsed = max(r["elapsed"] for r in results)
    total, done, reclaimed, still_claimed = (int(x or 0) for x in db)
    out = {
        "era": results[0].get("era", ""),
        "loaded": loaded,
        "completed": len(completed),
        "elapsed": elapsed,
        "todos_per_second": len(completed) / elapsed if elapsed else 0.0,
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
    sizes: dict[str, int] = {}
    for r in results:
        for size, n in r.get("batch_sizes", {}).items():
            sizes[str(size)] = sizes.get(str(size), 0) + n
    if sizes:
        calls = sum(sizes.values())
        out["claim_calls"] = calls
        out["todos_per_claim"] = len(claimed) / calls if calls else 0.0
    return out


async def _sqlite(b: Bench, todos: int) -> dict[str, Any]:
    """One instance on SQLite: one todo per call in the default era, then in the handshake era, each on
    endpoints of its own (loaded through a fan-out source of its own just before it runs)."""
    b.progress.phase("s4 claim: SQLite setup", 10)
    server = b.server("s4-sqlite", b.settings("s4-sqlite", mcp_rate_per_minute=MCP_RATE_PER_MINUTE))
    # BENCH_S4_PATCHES: bench patches for the SQLite server (bench/experiments/patches_s4.py; a diagnostic such as
    # tail_probe). Never set by python -m bench.
    server.patches = [p for p in os.environ.get("BENCH_S4_PATCHES", "").split(",") if p]
    world = await build_world(
        server.settings,
        endpoints=4 * ENDPOINTS,  # one set per era, one for the warm-up, one for the reference consumer
        queues=QUEUES,
        own_sources=False,
        fanout_groups=[list(range(g * ENDPOINTS, (g + 1) * ENDPOINTS)) for g in range(4)],
        owners="one",  # a source routes only to its own human's endpoints
    )
    variants: dict[str, Any] = {}
    async with running(server):
        await _sqlite_variant(b, server, world, 2, WARMUP_TODOS, ERA)  # not measured, as on PostgreSQL
        for group, (name, era) in enumerate((("one", ERA), ("one_legacy", LEGACY_ERA))):
            variants[name] = await _sqlite_variant(b, server, world, group, todos, era)
        variants["reference"] = await _reference(b, server, world, 3, todos)
    return {**variants["one"], "variants": variants}


REFERENCE = Path(__file__).resolve().parent.parent / "examples" / "mcp_consumer.py"


async def _reference(b: Bench, server: ServerProc, world: World, group: int, todos: int) -> dict[str, Any]:
    """The reference consumer (examples/mcp_consumer.py, the official SDK's client) as an agent runs it:
    one process per endpoint, claim_next carrying the previous ack, until a claim finds nothing. Its
    CPU and wall time less one ``--help`` run's (the interpreter's start and the imports), per todo."""
    endpoints = world.endpoints[group * ENDPOINTS : (group + 1) * ENDPOINTS]
    info: dict[str, Any] = {"name": "sqlite, reference consumer"}
    b.progress.phase("s4 claim: SQLite load for the reference consumer", 5)
    loaded = await _preload(b, server, world.fanout_sources[group], todos, info)
    before = _reaped_cpu()
    start_wall = await _run_child([sys.executable, str(REFERENCE), "--help"], {})
    start_cpu = _reaped_cpu() - before
    b.progress.phase("s4 claim: SQLite, the reference consumer on the official SDK", MAX_SECONDS)
    meter = CpuMeter({"server": server.pids()})
    meter.start()
    url = f"{server.base_url}/mcp"
    before = _reaped_cpu()
    runs = [
        _run_child(
            [sys.executable, str(REFERENCE), "--url", url, "--wait", "0", "--idle-exit"],
            {"SWITCHBOARD_TOKEN": ep.token},
        )
        for ep in endpoints
    ]
    walls = await asyncio.gather(*runs)
    client_cpu = _reaped_cpu() - before - len(walls) * start_cpu
    cpu = meter.stop()
    db = sqlite_rows(server.settings["data_dir"], _db_check(endpoints))[0]
    done = int(db[1] or 0)
    wall = max(walls) - start_wall
    info.pop("name")
    return {
        "instances": 1,
        "agents": len(endpoints),
        "loaded": loaded,
        "completed": done,
        "elapsed": wall,
        "todos_per_second": done / wall if wall > 0 else 0.0,
        "client_cpu_ms_per_todo": 1000 * client_cpu / max(done, 1),
        "start_cpu_s": start_cpu,
        "db_attempt_gt_1": int(db[2] or 0),
        "db_still_claimed": int(db[3] or 0),
        "cpu": cpu,
        **info,
    }


def _reaped_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have ended and been waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def _run_child(cmd: list[str], env: dict[str, str]) -> float:
    """Run one child process to its end; its wall seconds."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[1]).name} exited {proc.returncode}: {err.decode()[-400:]}")
    return wall


async def _sqlite_variant(
    b: Bench, server: ServerProc, world: World, group: int, todos: int, era: str
) -> dict[str, Any]:
    endpoints = world.endpoints[group * ENDPOINTS : (group + 1) * ENDPOINTS]
    info: dict[str, Any] = {"name": f"sqlite, {era}"}
    b.progress.phase(f"s4 claim: SQLite load for the {era} era", 5)
    loaded = await _preload(b, server, world.fanout_sources[group], todos, info)
    b.progress.phase(f"s4 claim: SQLite claim_next + ack, {era} era", MAX_SECONDS)
    agents = _agents(endpoints, [server.base_url], AGENTS_PER_ENDPOINT)[0]
    meter = CpuMeter({"server": server.pids(), "client": b.client.pid})
    meter.start()
    _spy(server.pid, f"sqlite-{era}")
    spec = {"agents": agents, "max_seconds": MAX_SECONDS, "modern": era == ERA}
    window = [time.time()]
    result = await b.client.run("mcp_claim", spec)
    window.append(time.time())
    cpu = meter.stop()
    db = sqlite_rows(server.settings["data_dir"], _db_check(endpoints))[0]
    info.pop("name")
    return {
        "instances": 1,
        "agents": len(agents),
        **_combine([result], db, loaded),
        "cpu": cpu,
        "window": window,  # wall clock, to cut a diagnostic's record (bench/experiments/tailprobe.py) to this run
        **info,
    }


class _Cluster:
    """What every PostgreSQL variant shares: the cluster, the two instances, the two client processes."""

    def __init__(self, b: Bench, url: str, postmaster: int, servers: list[ServerProc], extra: ClientProc):
        self.b, self.url, self.postmaster, self.servers = b, url, postmaster, servers
        self.clients = [b.client, extra]

    def meter(self, **more: int | list[int]) -> CpuMeter:
        # the cluster as a tree: pgqueuer's connections open and close within its window
        return CpuMeter(
            {"client_1": self.clients[0].pid, "client_2": self.clients[1].pid, **more},
            trees={"postgres": self.postmaster},
        )

    async def db_check(self, endpoints: list[EndpointInfo]) -> tuple[Any, ...]:
        engine = create_async_engine(self.url)
        try:
            async with engine.connect() as conn:
                return tuple((await conn.execute(text(_db_check(endpoints)))).one())
        finally:
            await engine.dispose()


async def _switchboard(
    c: _Cluster,
    world: World,
    group: int,
    todos: int,
    *,
    batch: int,
    label: str,
    era: str = ERA,
    combined: bool = False,
) -> dict[str, Any]:
    """One Switchboard variant on the two instances: load ``todos`` through fan-out source ``group``
    (its endpoints are this variant's alone), then drain them, the consumers speaking ``era``."""
    b = c.b
    endpoints = world.endpoints[group * ENDPOINTS : (group + 1) * ENDPOINTS]
    info: dict[str, Any] = {"name": f"postgres, {label}"}
    b.progress.phase(f"s4 claim: load for {label}", 5)
    loaded = await _preload(b, c.servers[0], world.fanout_sources[group], todos, info)
    b.progress.phase(f"s4 claim: two instances on PostgreSQL, {label}", MAX_SECONDS)
    per_instance = _agents(endpoints, [s.base_url for s in c.servers], AGENTS_PER_ENDPOINT)
    meter = c.meter(server_1=c.servers[0].pid, server_2=c.servers[1].pid)
    meter.start()
    _spy(c.servers[0].pid, f"pg-{batch}-{era}")
    spec: dict[str, Any] = {
        "max_seconds": MAX_SECONDS,
        "batch": batch,
        "modern": era == ERA,
        "combined": combined,
    }
    results = await asyncio.gather(
        *(
            client.run("mcp_claim", {**spec, "agents": agents})
            for client, agents in zip(c.clients, per_instance, strict=True)
        )
    )
    cpu = meter.stop()
    db = await c.db_check(endpoints)
    return {
        "instances": len(c.servers),
        "agents": sum(len(a) for a in per_instance),
        "batch": batch,
        **_combine(list(results), db, loaded),
        "per_instance_completed": [len(r.get("acked", r["claimed"])) for r in results],
        "cpu": cpu,
        **{k: v for k, v in info.items() if k != "name"},
    }


async def _pgqueuer(
    c: _Cluster, url: str, jobs: int, consumers: int, batch: int, install: bool
) -> dict[str, Any]:
    """pgqueuer on the same cluster: ``PEER_REPEATS`` runs of ``jobs`` jobs, ``consumers`` queue managers
    split over the two client processes; the median run's rate is the figure."""
    runs: list[dict[str, Any]] = []
    split = [consumers - consumers // 2, consumers // 2]
    for repeat in range(PEER_REPEATS):
        c.b.progress.phase(f"s4 claim: pgqueuer, batch {batch}, run {repeat + 1}", 4)
        ids = await pgq.load(url, jobs, install=install and repeat == 0)
        start_at = time.time() + 1.0  # both processes connect first, then start together
        meter = c.meter()

        async def metered(meter: CpuMeter = meter, start_at: float = start_at) -> None:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            meter.start()

        spec = {"url": url, "batch_size": batch, "start_at": start_at, "max_seconds": 60.0}
        *results, _ = await asyncio.gather(
            *(
                client.run("pgq", {**spec, "consumers": n})
                for client, n in zip(c.clients, split, strict=True)
            ),
            metered(),
        )
        cpu = meter.stop()
        check = await pgq.check(url, ids)
        ran = [i for r in results for i in r["ran"]]
        first = min((r["first"] for r in results if r["ran"]), default=0.0)
        last = max((r["last"] for r in results if r["ran"]), default=0.0)
        window = last - first
        runs.append(
            {
                "jobs": len(ids),
                "completed": len(ran),
                "elapsed": window,
                "jobs_per_second": len(ran) / window if window > 0 else 0.0,
                "claim_latency": summarize_ms(x for r in results for x in r["claim_latency"]),
                "double_claims": len(ran) - len(set(ran)),
                "not_run": len(set(ids) - set(ran)),
                "statuses": check["statuses"],
                "left_in_queue": check["left_in_queue"],
                "timed_out": any(r["timed_out"] for r in results),
                "cpu": cpu,
            }
        )
    median = statistics.median(r["jobs_per_second"] for r in runs)
    chosen = min(runs, key=lambda r: abs(r["jobs_per_second"] - median))
    return {
        "consumers": consumers,
        "processes": len(c.clients),
        "batch": batch,
        **chosen,
        "jobs_per_second": median,
        "runs": runs,
        "clean": all(
            r["double_claims"] == 0
            and r["not_run"] == 0
            and r["left_in_queue"] == 0
            and r["statuses"] == {"successful": r["jobs"]}
            and not r["timed_out"]
            for r in runs
        ),
    }


async def _offered(c: _Cluster, world: World) -> list[str]:
    answer = await c.b.client.run(
        "mcp_tools", {"base_url": c.servers[0].base_url, "token": world.endpoints[0].token}
    )
    return list(answer["tools"])


async def _postgres(b: Bench, todos: int) -> dict[str, Any]:
    from tests.support.pg import PostgresServer, missing_binaries

    missing = missing_binaries()
    if missing:
        return {"skipped": f"PostgreSQL programs not found: {', '.join(missing)}"}
    b.progress.phase("s4 claim: PostgreSQL start, setup and load", 15)
    more = (
        {"shared_preload_libraries": "'pg_stat_statements'"} if os.environ.get("BENCH_S4_STATEMENTS") else {}
    )
    explain_ms = os.environ.get("BENCH_S4_EXPLAIN_MS")  # plans of slower statements, in the cluster's log
    if explain_ms:
        more = {
            "shared_preload_libraries": "'pg_stat_statements,auto_explain'",
            "auto_explain.log_min_duration": f"'{int(explain_ms)}ms'",
            "auto_explain.log_analyze": "on",
            "auto_explain.log_buffers": "on",
            "auto_explain.log_nested_statements": "on",
        }
    pg = PostgresServer(settings=more)  # in the system temp folder: the server runs as another user when root
    pg.start()
    extra = ClientProc()
    try:
        url = pg.create_database("bench_claim")
        if more:
            engine = create_async_engine(url)
            async with engine.begin() as conn:
                await conn.execute(text("CREATE EXTENSION pg_stat_statements"))
            await engine.dispose()
        peer_url = pg.create_database("bench_pgqueuer")  # pgqueuer's tables, apart from Switchboard's
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
            endpoints=5 * ENDPOINTS,  # one set per Switchboard variant, and one for the warm-up
            queues=QUEUES,
            own_sources=False,
            fanout_groups=[list(range(g * ENDPOINTS, (g + 1) * ENDPOINTS)) for g in range(5)],
            owners="one",
        )
        await extra.run("warm", {})
        postmaster = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
        async with running(one), running(two):
            c = _Cluster(b, url, postmaster, [one, two], extra)
            b.progress.phase("s4 claim: a first MCP call per endpoint", 10)
            for ep in world.endpoints:  # the cluster's rate window for each endpoint is made on its first
                # call (one row per admission): made here, before anything is timed
                await b.client.run("mcp_tools", {"base_url": one.base_url, "token": ep.token})
            consumers = ENDPOINTS * AGENTS_PER_ENDPOINT
            # Each step is one variant; a further measurement (a no-op MCP call's floor) is one more step.
            steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
                ("one", lambda: _switchboard(c, world, 0, todos, batch=0, label=f"claim_next + ack, {ERA}")),
                (
                    "one_legacy",
                    lambda: _switchboard(
                        c, world, 2, todos, batch=0, label=f"claim_next + ack, {LEGACY_ERA}", era=LEGACY_ERA
                    ),
                ),
                (
                    "combined",
                    lambda: _switchboard(
                        c, world, 3, todos, batch=0, label=f"claim_next with ack, {ERA}", combined=True
                    ),
                ),
                ("pgqueuer_1", lambda: _pgqueuer(c, peer_url, todos, consumers, 1, install=True)),
                ("batch", lambda: _batch(c, world, todos)),
                ("pgqueuer_batch", lambda: _pgqueuer(c, peer_url, todos, consumers, BATCH, install=False)),
            ]
            # Not measured: the first variant would otherwise pay for the instances' first connections
            # to PostgreSQL, their prepared statements and the rate leases growing to the load.
            await _switchboard(c, world, 4, WARMUP_TODOS, batch=0, label="warm-up (not measured)")
            variants: dict[str, Any] = {}
            for name, step in steps:
                await _statements(url, None)
                variants[name] = await step()
                await _statements(url, name)
        one_call = variants["one"]
        return {
            **one_call,  # the one-todo-per-call figures stay at the top (the line every run prints)
            "variants": variants,
            "ratios": _ratios(variants),
        }
    finally:
        await extra.stop()
        with contextlib.suppress(Exception):
            pg.stop()


async def _batch(c: _Cluster, world: World, todos: int) -> dict[str, Any]:
    offered = await _offered(c, world)
    missing = [v for v in BATCH_VERBS if v not in offered]
    if missing:
        return {"skipped": f"verb not offered: the server lists no {' or '.join(missing)}"}
    label = f"claim_many (up to {BATCH}) + ack_many, {ERA}"
    return await _switchboard(c, world, 1, todos, batch=BATCH, label=label)


def _ratios(variants: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for ours, theirs in (
        ("one", "pgqueuer_1"),
        ("one_legacy", "pgqueuer_1"),
        ("combined", "pgqueuer_1"),
        ("batch", "pgqueuer_batch"),
    ):
        a = variants.get(ours, {}).get("todos_per_second")
        p = variants.get(theirs, {}).get("jobs_per_second")
        if a is not None and p:
            out[ours] = a / p
    return out


async def run(b: Bench) -> dict[str, Any]:
    todos = 800 if b.quick else TODOS
    return {
        "endpoints": ENDPOINTS,
        "queues": list(QUEUES),
        "agents_per_endpoint": AGENTS_PER_ENDPOINT,
        "mcp_rate_per_minute": MCP_RATE_PER_MINUTE,
        "batch": BATCH,
        "era": ERA,
        "legacy_era": LEGACY_ERA,
        "sqlite": await _sqlite(b, todos) if _only("sqlite") else {"skipped": "BENCH_S4_ONLY"},
        "postgres": await _postgres(b, todos) if _only("postgres") else {"skipped": "BENCH_S4_ONLY"},
        "floor": await _floor(b) if not os.environ.get("BENCH_S4_ONLY") else {"skipped": "BENCH_S4_ONLY"},
    }


async def _floor(b: Bench) -> dict[str, Any]:
    """The floor beside the claim path: a no-op MCP call per second through the same server (a fresh
    ``switchboard serve``, SQLite, default layout), with ``/healthz`` in the same run (bench.floor)."""
    b.progress.phase("s4 claim: the MCP floor (whoami beside /healthz)", floor.ESTIMATE)
    result = await floor.run_floor(b.root / "s4", seconds=5.0 if b.quick else floor.SECONDS)
    b.note(floor.line(result))
    return result
