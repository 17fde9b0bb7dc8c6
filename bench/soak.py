"""The soak (issue 28): millions of todos through ingest, claim and ack with retention at a short setting,
on SQLite and on PostgreSQL, and what the history costs over the run.

``python -m bench --only soak`` (``BENCH_SOAK_ONLY=sqlite|postgres`` for one backend; ``--quick`` for a
smoke run of 60,000 todos, never published; ``BENCH_SOAK_COUNT=N`` for a shorter diagnostic run, never
published either). One ``switchboard serve`` per backend (the bench launcher,
default settings but three: retention ``RETENTION_MINUTES``, its sweep every ``SWEEP_SECONDS``, and the
per-endpoint MCP rate raised as scenario 4 does; on PostgreSQL two instances share the database, each
taking half the deliveries and half the consumers). ``ENDPOINTS`` endpoints share fan-out sources (one
delivery makes one todo per endpoint; enough sources that none passes ingest's per-source limit); one consumer per endpoint claims up to ``BATCH`` at a time
and acks them. Sampled every ``SAMPLE_SECONDS``: the database's size (SQLite: the file and its WAL;
PostgreSQL: ``pg_database_size``) and its row count; per 10 s bucket: ingest and claim p50/p99.

The report compares the end with the beginning:

* database size, flat within 20% once the first retention period (plus two sweeps) has passed: the
  largest sample after it over the smallest, of the file alone (SQLite's WAL, reset at 64 MiB, is
  reported beside it as its largest sample);
* claim p99 over the last minute within 1.5x of the first minute's, and ingest p99 the same way.

Results go to the run folder's ``results.json``; a published run writes the curves to
``docs/benchmarks-soak.svg``, a table to docs/benchmarks.md between the ``soak`` markers, and both from
``docs/benchmarks-soak.json``, which keeps a backend's last published figures when a run measures only
the other. ``python -m bench.soak <results.json>`` publishes a saved run the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from bench.common import percentile
from bench.context import Bench, running
from bench.world import build_world, new_cred_key

RETENTION_MINUTES = 2.0
SWEEP_SECONDS = 15.0
SAMPLE_SECONDS = 10.0
ENDPOINTS = {"sqlite": 10, "postgres": 20}  # one delivery makes a todo for each
INSTANCES = {"sqlite": 1, "postgres": 2}  # PostgreSQL: two instances share the database, as in s4
BATCH = 100
COUNTS = {"sqlite": 1_000_000, "postgres": 5_000_000}
RATES = {"sqlite": 60.0, "postgres": 75.0}  # deliveries per second (x ENDPOINTS todos)
QUICK_COUNT = 60_000
MCP_RATE_PER_MINUTE = 120_000
PER_SOURCE_PER_SECOND = 10.0  # ingest's per-source limit (600 a minute, switchboard.ingest.app)
ESTIMATE = 3000.0
DOCS = Path(__file__).resolve().parent.parent / "docs"


def _chosen() -> list[str]:
    only = os.environ.get("BENCH_SOAK_ONLY", "")
    return [only] if only in COUNTS else list(COUNTS)


async def run(b: Bench) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in _chosen():
        results[backend] = await _one(b, backend)
    published = not b.quick and "BENCH_SOAK_COUNT" not in os.environ
    if published and all("skipped" not in r for r in results.values()):
        write_docs(results)  # the backends that ran (BENCH_SOAK_ONLY picks one); the table says which
    return results


async def _one(b: Bench, backend: str) -> dict[str, Any]:
    count = QUICK_COUNT if b.quick else int(os.environ.get("BENCH_SOAK_COUNT", COUNTS[backend]))
    rate = float(os.environ.get("BENCH_SOAK_RATE", RATES[backend]))
    settings = b.settings(
        f"soak-{backend}",
        retention_hours=RETENTION_MINUTES / 60,
        retention_interval_seconds=SWEEP_SECONDS,
        mcp_rate_per_minute=MCP_RATE_PER_MINUTE,
    )
    pg: Any = None
    if backend == "postgres":
        from tests.support.pg import PostgresServer, missing_binaries

        if missing_binaries():
            return {"skipped": "PostgreSQL programs not found"}
        pg = PostgresServer()
        pg.start()
        settings["database_url"] = pg.create_database("bench_soak")
        settings["cred_key"] = new_cred_key()
    endpoints = ENDPOINTS[backend]
    try:
        world = await build_world(
            settings,
            endpoints=endpoints,
            own_sources=False,
            # ingest admits 600 deliveries a minute per source: enough sources for the rate, twice over
            fanout_groups=[list(range(endpoints))] * _sources(rate),
            owners="one",
        )
        servers = [b.server(f"soak-{backend}-{n + 1}", dict(settings)) for n in range(INSTANCES[backend])]
        size = _sizer(settings)
        samples: list[dict[str, Any]] = []
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                await stack.enter_async_context(running(server))
            start = time.monotonic()
            sampler = asyncio.create_task(_sample(size, start, samples))
            b.progress.phase(f"soak {backend}: {count:,} todos", count / (rate * endpoints))
            try:
                load = await b.client.run(
                    "soak",
                    {
                        # deliveries and consumers alternate between the instances
                        "base_urls": [server.base_url for server in servers],
                        "targets": [s.target() for s in world.fanout_sources],
                        "fanout": endpoints,
                        "rate": rate,
                        "batch": BATCH,
                        "count": count,
                        "max_seconds": 3 * count / (rate * endpoints) + 120,
                        "agents": [
                            {"base_url": servers[n % len(servers)].base_url, "token": e.token}
                            for n, e in enumerate(world.endpoints)
                        ],
                    },
                    timeout=4 * count / (rate * endpoints) + 300,
                )
            finally:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
        return _judge(backend, count, rate * endpoints, len(servers), load, samples)
    finally:
        if pg is not None:
            pg.stop()


def _sources(rate: float) -> int:
    return max(1, int(2 * rate / PER_SOURCE_PER_SECOND) + 1)


# The largest relations (tables, indexes, TOAST) and their MiB, sampled beside the database's size: where
# the space goes when the size is not flat.
_BIGGEST = (
    "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 2 DESC LIMIT 12"
)


def _sizer(settings: dict[str, Any]) -> Any:
    """A coroutine function answering (bytes, WAL bytes, rows, MiB of the largest relations) of the
    server's database: the WAL apart, since its reset at 64 MiB (store/sqlite_writer.py) is a sawtooth of
    its own, bounded separately; the relations on PostgreSQL only."""
    url = settings.get("database_url")
    if url is None:
        import sqlite3

        db = Path(settings["data_dir"]) / "switchboard.db"

        async def sqlite_size() -> tuple[float, float, float, dict[str, float]]:
            wal_file = db.with_name(db.name + "-wal")
            wal = wal_file.stat().st_size if wal_file.exists() else 0
            total = db.stat().st_size + wal

            def rows() -> int:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
                    return int(conn.execute("SELECT count(*) FROM todos").fetchone()[0])

            return float(total), float(wal), float(await asyncio.to_thread(rows)), {}

        return sqlite_size
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, pool_size=1)

    async def pg_size() -> tuple[float, float, float, dict[str, float]]:
        async with engine.connect() as conn:
            total = (await conn.execute(text("SELECT pg_database_size(current_database())"))).scalar_one()
            rows = (await conn.execute(text("SELECT count(*) FROM todos"))).scalar_one()
            biggest = (await conn.execute(text(_BIGGEST))).all()
        relations = {str(name): round(size / 2**20, 1) for name, size in biggest}
        return float(total), 0.0, float(rows), relations  # pg_database_size: the WAL is the cluster's

    return pg_size


async def _sample(size: Any, start: float, out: list[dict[str, Any]]) -> None:
    while True:
        total, wal, rows, relations = await size()
        sample: dict[str, Any] = {
            "t": round(time.monotonic() - start, 1),
            "mib": total / 2**20,
            "wal_mib": wal / 2**20,
            "rows": rows,
        }
        if relations:
            sample["relations"] = relations
        out.append(sample)
        await asyncio.sleep(SAMPLE_SECONDS)


def _window_p99(series: list[dict[str, float]], first: bool) -> float:
    """The worst bucket p99 of the first (or last) minute: buckets are 10 s, so six of them."""
    picked = series[:6] if first else series[-7:-1] if len(series) > 7 else series[-6:]
    values = [s["p99"] for s in picked if s["n"]]
    return max(values) if values else float("nan")


def _judge(
    backend: str,
    count: int,
    todos_per_s: float,
    instances: int,
    load: dict[str, Any],
    samples: list[dict[str, Any]],
) -> dict[str, Any]:
    settled = RETENTION_MINUTES * 60 + 2 * SWEEP_SECONDS
    after = [s["mib"] - s.get("wal_mib", 0.0) for s in samples if s["t"] >= settled]  # the file alone
    flat = max(after) / min(after) if after and min(after) > 0 else float("nan")
    claim_first, claim_last = _window_p99(load["claim"], True), _window_p99(load["claim"], False)
    ingest_first, ingest_last = _window_p99(load["ingest"], True), _window_p99(load["ingest"], False)
    return {
        "backend": backend,
        "count": count,
        "offered_todos_per_s": todos_per_s,
        "instances": instances,
        "acked": load["acked"],
        "elapsed_s": round(load["elapsed"], 1),
        "errors": load["errors"],
        "statuses": load["statuses"],
        "size_flat_ratio": flat,
        "size_mib_max": max((s["mib"] for s in samples), default=float("nan")),
        "wal_mib_max": max((s.get("wal_mib", 0.0) for s in samples), default=float("nan")),
        "size_mib_end": samples[-1]["mib"] if samples else float("nan"),
        "rows_end": samples[-1]["rows"] if samples else float("nan"),
        "claim_p99_first_ms": claim_first,
        "claim_p99_last_ms": claim_last,
        "claim_p99_ratio": claim_last / claim_first,
        "ingest_p99_first_ms": ingest_first,
        "ingest_p99_last_ms": ingest_last,
        "ingest_p99_ratio": ingest_last / ingest_first,
        "claim_p99_overall_ms": percentile([s["p99"] for s in load["claim"] if s["n"]], 99),
        "met": bool(flat <= 1.2 and claim_last / claim_first <= 1.5 and load["acked"] >= count),
        "samples": samples,
        "ingest": load["ingest"],
        "claim": load["claim"],
    }


def _instances(r: dict[str, Any]) -> str:
    n = int(r.get("instances", 1))
    return f"{n} instance" if n == 1 else f"{n} instances"


STORED = DOCS / "benchmarks-soak.json"  # the published run's figures and curves, per backend
_KEPT = ("samples", "ingest", "claim")


def _stored() -> dict[str, Any]:
    return json.loads(STORED.read_text()) if STORED.exists() else {}


def _slim(r: dict[str, Any]) -> dict[str, Any]:
    """What the page draws and tabulates: the figures, and the curves without the per-relation sizes."""
    out = {k: v for k, v in r.items() if k not in _KEPT}
    for key in _KEPT:
        out[key] = [
            {k: round(v, 2) if isinstance(v, float) else v for k, v in point.items() if k != "relations"}
            for point in r.get(key, [])
        ]
    return out


def write_docs(results: dict[str, Any]) -> None:
    """The table and the curves, of the backends that ran and, for a backend that did not (a run with
    ``BENCH_SOAK_ONLY``), of the published run before, kept in ``docs/benchmarks-soak.json``."""
    from bench.soak_plot import svg

    ran = {name: _slim(r) for name, r in results.items() if name in COUNTS and isinstance(r, dict)}
    results = {**_stored(), **ran}
    results = {name: results[name] for name in COUNTS if name in results}  # the page's order
    STORED.write_text(json.dumps(results, separators=(",", ":"), default=str) + "\n")
    (DOCS / "benchmarks-soak.svg").write_text(svg(results))
    rows = [
        "| backend | todos | acked | file size after settling (max/min; WAL max) | end size | claim p99 first / last min | "
        "ingest p99 first / last min | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        rows.append(
            f"| {r['backend']}, {_instances(r)} | {r['count']:,} at {r['offered_todos_per_s']:,.0f}/s | {r['acked']:,} | "
            f"{r['size_flat_ratio']:.2f}x; {r.get('wal_mib_max', 0.0):.0f} MiB | "
            f"{r['size_mib_end']:.0f} MiB, {r['rows_end']:,.0f} rows | "
            f"{r['claim_p99_first_ms']:.1f} / {r['claim_p99_last_ms']:.1f} ms "
            f"({r['claim_p99_ratio']:.2f}x) | {r['ingest_p99_first_ms']:.1f} / "
            f"{r['ingest_p99_last_ms']:.1f} ms ({r['ingest_p99_ratio']:.2f}x) | "
            f"{'yes' if r['met'] else 'NO'} |"
        )
    block = "\n".join(
        ["<!-- soak:begin -->", *rows, "", "![soak curves](benchmarks-soak.svg)", "<!-- soak:end -->"]
    )
    doc = DOCS / "benchmarks.md"
    text = doc.read_text()
    head, found, rest = text.partition("<!-- soak:begin -->")
    if found:
        _, _, tail = rest.partition("<!-- soak:end -->")
        doc.write_text(head + block + tail)
    else:
        doc.write_text(text.rstrip("\n") + "\n\n## Soak (issue 28)\n\n" + block + "\n")


if __name__ == "__main__":
    import sys

    saved = json.loads(Path(sys.argv[1]).read_text())
    write_docs(saved["results"]["soak"])
