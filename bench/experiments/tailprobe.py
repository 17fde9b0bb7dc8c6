"""A diagnostic probe for scenario 4's SQLite claim tail (issue 18), NOT shipped behaviour.

Applied to the server process as the bench patch ``tail_probe`` (``BENCH_S4_PATCHES=tail_probe``), it
records events with their wall-clock time and duration, one JSON line each, to ``$BENCH_PROBE_OUT``
(default ``tailprobe.jsonl`` in the working folder), so a variant's window can be cut out afterwards
(``python -m bench.experiments.tailprobe FILE START END``):

* ``gc``: every garbage collection (generation, milliseconds, objects collected), from ``gc.callbacks``;
* ``batch``: each group-commit batch of the SQLite writer: works, BEGIN IMMEDIATE's wait (SQLite's busy
  handler behind another writer), the works, COMMIT (with any WAL auto-checkpoint it ran);
* ``queued``: per work, the time from ``SqliteWriter.run`` to its work starting in the writer thread;
* ``lag``: event-loop lateness of a 5 ms ticker above 5 ms (a stall of the loop: a slow callback);
* ``loopwrite``: each loop-side write (``Database.begin``, ``write_returning``, ``sqlite_transaction``)
  with the innermost Switchboard caller outside the store, and its duration.

It wraps Switchboard's own classes (as the what-if patches do) and uses only public APIs of the
standard library.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

_lock = threading.Lock()
_fh: Any = None


def _emit(kind: str, **fields: Any) -> None:
    line = json.dumps({"k": kind, "t": time.time(), **fields})
    with _lock:
        _fh.write(line + "\n")


def _caller() -> str:
    for frame in reversed(traceback.extract_stack(limit=30)[:-3]):
        name = frame.filename
        if "switchboard" in name and "/store/" not in name and "contextlib" not in name:
            return f"{name.split('switchboard/')[-1]}:{frame.name}"
    return "?"


def install() -> None:
    global _fh
    _fh = open(os.environ.get("BENCH_PROBE_OUT", "tailprobe.jsonl"), "a", buffering=1)  # noqa: SIM115
    _gc()
    _writer()
    _loop_writes()
    _lag()


def _gc() -> None:
    started: dict[str, float] = {}

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        else:
            ms = (time.perf_counter() - started.get("t", time.perf_counter())) * 1000
            more: dict[str, int] = {}
            if info["generation"] == 2:  # how big the heap a full collection walks is (costs a walk)
                more = {"gen2_objects": len(gc.get_objects(2)), "frozen": gc.get_freeze_count()}
            _emit("gc", gen=info["generation"], ms=round(ms, 3), collected=info["collected"], **more)

    gc.callbacks.append(callback)


def _writer() -> None:
    from switchboard.store import sqlite_writer as sw

    cls = sw.SqliteWriter

    last_end = [0.0]

    def commit(self: Any, works: list[Any]) -> list[Any]:
        conn = self._connection()
        t0 = time.perf_counter()
        # How long the thread sat idle while work waited: from the later of the previous batch's end and
        # this batch's oldest work's arrival, to this batch's start (the drainer's turn on the loop).
        oldest = min((getattr(w, "queued", t0) for w in works), default=t0)
        idle_with_work = (t0 - max(last_end[0], oldest)) * 1000
        conn.execute("BEGIN IMMEDIATE")
        t1 = time.perf_counter()
        try:
            outcomes = [self._one(conn, work) for work in works]
            db_file = self._uri.split("?")[0].removeprefix("file://")
            before = os.stat(db_file).st_mtime_ns
            t2 = time.perf_counter()
            conn.execute("COMMIT")
            t3 = time.perf_counter()
            wrote_db = os.stat(db_file).st_mtime_ns != before  # a checkpoint ran (here or beside)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.commits += 1
        self.works += sum(1 for o in outcomes if o.error is None)
        _emit(
            "batch",
            n=len(works),
            begin=round((t1 - t0) * 1000, 3),
            works=round((t2 - t1) * 1000, 3),
            commit=round((t3 - t2) * 1000, 3),
            ckpt=wrote_db,
            idle_with_work=round(idle_with_work, 3),
        )
        last_end[0] = time.perf_counter()
        return outcomes

    cls._commit = commit  # type: ignore[method-assign]
    run = cls.run

    async def timed_run(self: Any, work: Callable[[Any], Any]) -> Any:
        queued = time.perf_counter()

        def wrapped(conn: Any) -> Any:
            _emit("queued", ms=round((time.perf_counter() - queued) * 1000, 3))
            return work(conn)

        wrapped.queued = queued  # type: ignore[attr-defined]

        return await run(self, wrapped)

    cls.run = timed_run  # type: ignore[method-assign]


def _loop_writes() -> None:
    from switchboard.store import db as dbmod

    cls = dbmod.Database
    init = cls.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        from sqlalchemy import event

        @event.listens_for(self.engine.sync_engine, "connect")
        def _connect(_dbapi: Any, _record: Any) -> None:
            _emit("connect")  # a new pooled connection (an aiosqlite thread and a connection)

    cls.__init__ = counted  # type: ignore[method-assign]
    for name in ("begin", "sqlite_transaction"):
        original = getattr(cls, name)

        def make(original: Any, name: str) -> Any:
            @asynccontextmanager
            async def wrapped(self: Any) -> AsyncIterator[Any]:
                who = _caller()
                t0 = time.perf_counter()
                async with original(self) as conn:
                    yield conn
                _emit("loopwrite", via=name, who=who, ms=round((time.perf_counter() - t0) * 1000, 3))

            return wrapped

        setattr(cls, name, make(original, name))
    write_returning = cls.write_returning

    async def timed(self: Any, statement: Any, params: Any) -> Any:
        who = _caller()
        t0 = time.perf_counter()
        try:
            return await write_returning(self, statement, params)
        finally:
            _emit("loopwrite", via="write_returning", who=who, ms=round((time.perf_counter() - t0) * 1000, 3))

    cls.write_returning = timed  # type: ignore[method-assign]


def _lag() -> None:
    async def ticker() -> None:
        step = 0.005
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(step)
            late = (time.perf_counter() - t0 - step) * 1000
            if late > 5:
                _emit("lag", ms=round(late, 3))

    original_new = asyncio.BaseEventLoop.run_forever
    started: list[bool] = []

    def run_forever(self: Any) -> Any:
        if not started:
            started.append(True)
            self.call_soon(lambda: self.create_task(ticker()))
        return original_new(self)

    asyncio.BaseEventLoop.run_forever = run_forever  # type: ignore[method-assign]


# -- analysis ------------------------------------------------------------------------------------------


def summary(path: str, start: float, end: float, claims: int) -> dict[str, Any]:
    """What happened between ``start`` and ``end`` (wall clock), per 1,000 claims where a count."""
    events = [json.loads(line) for line in open(path)]  # noqa: SIM115
    events = [e for e in events if start <= e["t"] <= end]
    per = 1000 / claims if claims else 0.0
    out: dict[str, Any] = {"claims": claims, "seconds": round(end - start, 1)}
    gcs = [e for e in events if e["k"] == "gc"]
    out["gc"] = {
        f"gen{g}": {
            "n": len([e for e in gcs if e["gen"] == g]),
            "ms_total": round(sum(e["ms"] for e in gcs if e["gen"] == g), 1),
            "ms_max": max((e["ms"] for e in gcs if e["gen"] == g), default=0.0),
        }
        for g in (0, 1, 2)
    }
    out["gc_over_20ms_per_1k_claims"] = round(sum(1 for e in gcs if e["ms"] > 20) * per, 2)
    out["gc_over_5ms_per_1k_claims"] = round(sum(1 for e in gcs if e["ms"] > 5) * per, 2)
    batches = [e for e in events if e["k"] == "batch"]
    if batches:
        sizes = sorted(e["n"] for e in batches)
        out["batches"] = {
            "n": len(batches),
            "size_mean": round(sum(sizes) / len(sizes), 2),
            "size_max": sizes[-1],
            **{
                f"{part}_{stat}": round(fn([e[part] for e in batches]), 2)
                for part in ("begin", "works", "commit")
                for stat, fn in (("p50", _p50), ("p99", _p99), ("max", max))
            },
            "begin_over_5ms_per_1k_claims": round(sum(1 for e in batches if e["begin"] > 5) * per, 2),
            "commit_over_5ms_per_1k_claims": round(sum(1 for e in batches if e["commit"] > 5) * per, 2),
            "commit_over_20ms": sum(1 for e in batches if e["commit"] > 20),
            # COMMITs during which the database file was written: a checkpoint ran in it (or beside it)
            "commits_with_checkpoint_per_1k_claims": round(sum(1 for e in batches if e.get("ckpt")) * per, 2),
            "commit_ms_with_checkpoint": sorted(e["commit"] for e in batches if e.get("ckpt")),
            **{
                f"idle_with_work_{stat}": round(fn([e.get("idle_with_work", 0.0) for e in batches]), 2)
                for stat, fn in (("p50", _p50), ("p99", _p99), ("max", max))
            },
        }
    queued = [e["ms"] for e in events if e["k"] == "queued"]
    if queued:
        out["queued"] = {"p50": round(_p50(queued), 2), "p99": round(_p99(queued), 2), "max": max(queued)}
    out["pool_connects_per_1k_claims"] = round(sum(1 for e in events if e["k"] == "connect") * per, 2)
    lags = [e["ms"] for e in events if e["k"] == "lag"]
    out["loop_lag"] = {
        "over_5ms": len(lags),
        "over_20ms": sum(1 for x in lags if x > 20),
        "over_50ms": sum(1 for x in lags if x > 50),
        "max": max(lags, default=0.0),
    }
    writes = [e for e in events if e["k"] == "loopwrite"]
    out["loop_writes"] = {
        f"{who} ({via})": {
            "n": n,
            "ms_max": max(e["ms"] for e in writes if (e["who"], e["via"]) == (who, via)),
        }
        for (who, via), n in Counter((e["who"], e["via"]) for e in writes).most_common()
    }
    return out


def _p50(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


if __name__ == "__main__":
    print(
        json.dumps(summary(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])), indent=1)
    )
