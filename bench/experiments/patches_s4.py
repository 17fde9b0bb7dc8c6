"""Scenario 4's SQLite claim-tail patches (issue 18), registered beside bench/experiments/patches.py's what-ifs
(in a module of their own so the two files change apart): ``tail_probe`` is a meter
(bench/experiments/tailprobe.py); ``no_gc_freeze`` and ``writer_autocheckpoint`` undo shipped changes for A/B runs;
``switch_interval``, ``no_autocheckpoint`` and ``no_savepoints`` are measurements only. Imported by
bench/server.py and bench/worker.py before they apply a config's patches."""

from __future__ import annotations

from typing import Any

from bench.experiments.patches import _in_worker, patch


@patch
def tail_probe() -> None:
    """Not a what-if: records GC pauses, the SQLite writer's batches, loop stalls and loop-side writes
    (bench/experiments/tailprobe.py), for scenario 4's claim tail (``BENCH_S4_PATCHES=tail_probe``)."""
    if _in_worker():
        return  # the server's process only
    from bench.experiments import tailprobe

    tailprobe.install()


@patch
def no_gc_freeze() -> None:
    """Undo a shipped change: the startup heap is not frozen (switchboard/process/heap.py), as before."""
    import sys

    def nothing() -> int:
        return 0

    sys.modules["__main__"].freeze_startup_heap = nothing  # type: ignore[attr-defined]  # bench.server


@patch
def switch_interval() -> None:
    """What-if: the GIL's switch interval at 0.5 ms (CPython's default is 5 ms) in the server process."""
    import sys

    if not _in_worker():
        sys.setswitchinterval(0.0005)


@patch
def no_autocheckpoint() -> None:
    """What-if (measurement only: the WAL grows unbounded): no WAL auto-checkpoint on any connection."""
    from switchboard.store import db as dbmod
    from switchboard.store import sqlite_writer as sw

    sw.PRAGMAS = (*sw.PRAGMAS, "PRAGMA wal_autocheckpoint=0")
    dbmod.PRAGMAS = sw.PRAGMAS  # type: ignore[attr-defined]


@patch
def writer_autocheckpoint() -> None:
    """Undo a shipped change: the SQLite writer's COMMIT runs SQLite's auto-checkpoint (1,000 pages)
    again, and no checkpointer thread runs beside it."""
    from switchboard.store.sqlite_writer import SqliteWriter

    init = SqliteWriter.__init__

    def patched(self: SqliteWriter, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.checkpoint_commits = 10**12
        self.on_connect(lambda conn: conn.execute("PRAGMA wal_autocheckpoint=1000") and None)

    SqliteWriter.__init__ = patched  # type: ignore[method-assign]


@patch
def no_savepoints() -> None:
    """What-if, measurement only (a failing work would not be undone alone): the writer runs each work
    without its SAVEPOINT and RELEASE, to price the two statements (and GIL hand-offs) they cost."""
    from switchboard.store import sqlite_writer as sw

    def one(conn: Any, work: Any) -> Any:
        return sw._Outcome(value=work(conn))

    sw.SqliteWriter._one = staticmethod(one)  # type: ignore[method-assign,assignment]
