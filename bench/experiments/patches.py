"""What-if patches for ``python -m bench.experiments.whatif``: experiments, NOT shipped behaviour.

Each one monkeypatches the server process (the bench launcher applies them before building the
services) to estimate what a proposed change to ``src/`` would buy. They are deliberately small and
keep the guarantees the real change would have to keep; none is used by ``python -m bench``.

* ``sqlite_deferred_reads`` (shipped since ``62f5ee8``; kept to reproduce the first tables): ``Database.read()`` transactions start with plain ``BEGIN`` (deferred)
  instead of ``BEGIN IMMEDIATE``; write transactions (``Database.begin()``) keep ``BEGIN IMMEDIATE``.
  Today every read takes SQLite's write lock, so reads queue behind writes and each other in the busy
  handler's sleep-and-retry loop.
* ``no_keepalive``, ``one_worker_process``, ``one_read_per_attempt`` and
  ``httpcore_transport`` undo shipped changes, so what each buys is measured side by side with the shipped
  code. ``worker_sched_idle`` tries ``SCHED_IDLE`` for the worker processes instead of niceness +10. (The earlier what-ifs ``keepalive``, ``match_cache`` and
  ``lazy_health`` were removed once keep-alive, batch matching and folded health writes shipped.)
* ``sqlite_lock_trace`` is a meter, not a what-if: each process (server and notify workers) writes the
  time of every ``BEGIN IMMEDIATE`` (the wait for SQLite's write lock), every lock hold and every
  autocommit write to a JSON file, so who held the lock while ingest waited can be counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

PATCHES: dict[str, Callable[[], None]] = {}


def patch(fn: Callable[[], None]) -> Callable[[], None]:
    PATCHES[fn.__name__] = fn
    return fn


def apply(names: list[str]) -> None:
    for name in names:
        PATCHES[name]()


@patch
def sqlite_deferred_reads() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

    from switchboard.store import db as dbmod
    from switchboard.store.errors import Conflict, StoreUnavailable

    def pragmas(engine: Any) -> None:
        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get("switchboard_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    dbmod._sqlite_pragmas = pragmas

    @asynccontextmanager
    async def begin(self: Any) -> AsyncIterator[Any]:
        engine = self.engine.execution_options(switchboard_write=True) if self.is_sqlite else self.engine
        try:
            async with engine.begin() as conn:
                yield conn
        except IntegrityError as exc:
            raise Conflict(dbmod._short(exc)) from exc
        except (OperationalError, InterfaceError, OSError, ConnectionError) as exc:
            raise StoreUnavailable("database unavailable") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable("database unavailable") from exc
            raise

    dbmod.Database.begin = begin  # type: ignore[method-assign]


@patch
def no_keepalive() -> None:
    """Undo a shipped change: a new connection per attempt, as before keep-alive (``fda076f``)."""
    from switchboard.push import _transport

    init = _transport.Sender.__init__

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["keepalive_expiry"] = 0.0
        init(self, *args, **kwargs)

    _transport.Sender.__init__ = patched  # type: ignore[method-assign]


def _in_worker() -> bool:
    import sys

    return sys.argv[0].endswith("bench/worker.py")


@patch
def worker_sched_idle() -> None:
    """The notify worker runs under ``SCHED_IDLE`` instead of niceness +10 (server untouched)."""
    import os

    if _in_worker():
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


@patch
def one_worker_process() -> None:
    """Undo a shipped change: one notify worker process, as before ``SWITCHBOARD_NOTIFY_PROCESSES``."""
    from switchboard.settings import Settings

    Settings.notify_worker_processes = lambda self: 1  # type: ignore[method-assign]


@patch
def one_read_per_attempt() -> None:
    """Undo a shipped change: each attempt reads its hook with a statement of its own."""
    from switchboard.notify.reads import HookReads

    async def sendable(self: Any, hook_id: str) -> Any:
        row = (await self._hooks.sendable_rows([hook_id]))[hook_id]
        return None if row is None else self._hooks.open_sendable(hook_id, row)

    HookReads.sendable = sendable  # type: ignore[method-assign]


@patch
def httpcore_transport() -> None:
    """Undo a shipped change: the Sender on httpcore's connection pool, as it was at ``73d3131`` (read
    from git and loaded beside the shipped one), so the h11 connection layer that replaced it is
    measured against it side by side. Needs git, the repository's history and httpcore (installed
    with httpx)."""
    import subprocess
    import sys
    import types
    from pathlib import Path

    import switchboard.push.from_settings

    root = Path(__file__).resolve().parent.parent.parent
    source = subprocess.run(
        ["git", "-C", str(root), "show", "73d3131:src/switchboard/push/_transport.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("switchboard.push._transport_73d3131")
    module.__package__ = "switchboard.push"
    sys.modules[module.__name__] = module
    exec(compile(source, "switchboard/push/_transport_73d3131.py", "exec"), module.__dict__)
    switchboard.push.from_settings.Sender = module.Sender  # type: ignore[attr-defined]


@patch
def sqlite_lock_trace() -> None:
    """A meter, not a what-if: times every SQLite statement this process runs (every connection,
    aiosqlite's and the group-commit writer's) and writes the totals to
    ``$SWITCHBOARD_BENCH_TRACE_DIR/<pid>.json`` (default ``/tmp/switchboard-lock-trace``) twice a second.
    ``BEGIN IMMEDIATE`` time is the wait for SQLite's write lock (the busy handler's sleeps);
    ``hold`` runs from its return to ``COMMIT``/``ROLLBACK``'s; a write outside a transaction
    (``Database.write_returning``) counts as its own transaction, its time as both wait and hold."""
    import atexit
    import json
    import os
    import sqlite3
    import sys
    import threading
    import time
    from pathlib import Path

    folder = Path(os.environ.get("SWITCHBOARD_BENCH_TRACE_DIR", "/tmp/switchboard-lock-trace"))
    folder.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    stats: dict[str, list[tuple[float, float]]] = {}  # kind -> (start, ms): perf_counter is system-wide
    opened: dict[int, float] = {}  # id(connection) -> when its transaction got the lock

    def note(kind: str, start: float, ms: float) -> None:
        with lock:
            stats.setdefault(kind, []).append((round(start, 6), round(ms, 3)))

    def timed(conn: sqlite3.Connection, sql: str, run: Callable[[], Any]) -> Any:
        head = " ".join(sql.split()[:2]).upper()
        words = set(sql.upper().split())
        autocommit_write = not conn.in_transaction and bool(words & {"INSERT", "UPDATE", "DELETE"})
        t0 = time.perf_counter()
        try:
            return run()
        finally:
            t1 = time.perf_counter()
            ms = (t1 - t0) * 1000
            if head.startswith("BEGIN IMMEDIATE"):
                note("begin_immediate", t0, ms)
                opened[id(conn)] = t1
            elif head.startswith(("COMMIT", "END")) or head == "ROLLBACK":
                note("commit", t0, ms)
                since = opened.pop(id(conn), None)
                if since is not None:
                    note("hold", since, (t1 - since) * 1000)
            elif autocommit_write:
                note("autocommit_write", t0, ms)

    class Cursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            return timed(self.connection, sql, lambda: super(Cursor, self).execute(sql, parameters))

        def executemany(self, sql: str, seq: Any, /) -> Any:
            return timed(self.connection, sql, lambda: super(Cursor, self).executemany(sql, seq))

    class Connection(sqlite3.Connection):
        def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
            return super().cursor(factory or Cursor)

        def execute(self, sql: str, parameters: Any = (), /) -> Any:  # type: ignore[override]
            return self.cursor().execute(sql, parameters)

        def executemany(self, sql: str, seq: Any, /) -> Any:  # type: ignore[override]
            return self.cursor().executemany(sql, seq)

        def commit(self) -> None:
            timed(self, "COMMIT", super().commit)

        def rollback(self) -> None:
            timed(self, "ROLLBACK", super().rollback)

    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("factory", Connection)
        return real_connect(*args, **kwargs)

    sqlite3.connect = connect  # type: ignore[assignment]
    path = folder / f"{os.getpid()}.json"

    def dump() -> None:
        with lock:
            data = {k: list(v) for k, v in stats.items()}
        path.write_text(
            json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "stats": data})
        )

    def loop() -> None:
        while True:
            time.sleep(0.5)
            dump()

    threading.Thread(target=loop, daemon=True, name="lock-trace").start()
    atexit.register(dump)
