"""SQLite: one writer thread that commits this process's claims and acks in groups (issue 18).

A claim or an ack on the pool's aiosqlite connection holds SQLite's write lock for every trip between
the event loop and the driver's thread (BEGIN IMMEDIATE, the UPDATE, the timeline INSERT, COMMIT), each
waiting for the busy loop's next turn: about 180 writes/s, whatever the disk can do. Here the loop only
queues work and awaits a future. One thread owns one stdlib ``sqlite3`` connection to the same file, and
whenever it is free it takes everything queued (at most ``max_batch``) and runs it in one call:

    BEGIN IMMEDIATE; per work: SAVEPOINT, the work's statements, RELEASE; COMMIT

Work queued meanwhile forms the next batch: one commit (one WAL append) per batch, and the write lock is
held only while SQLite works, never across a loop turn. The thread takes the next batch as soon as it
has committed one, and hands the outcomes to the loop (``call_soon_threadsafe``) without waiting for
it: when a task on the loop took the next batch, the thread sat idle for a turn of a busy loop with
claims queued, 2-4 ms at the median and 18-80 ms at the 99th percentile per batch (scenario 4, issue 18).

* Per-work isolation: a work that raises is rolled back to its savepoint and its caller gets the error;
  the rest of the batch commits. :class:`Declined` is how a work says "not here" (an A2A task's claim
  needs the hub's in-transaction handlers, which need an ``AsyncConnection``): undone, and its caller
  takes the loop-side path. ``sqlite3.IntegrityError`` in a work is that work's :class:`Conflict`.
* Any other SQLite or OS error (BEGIN IMMEDIATE timed out, disk full, COMMIT failed) rolls the batch back
  and fails each of its works with :class:`StoreUnavailable` (``Conflict`` for a constraint); the writer
  goes on with the next batch.
* Other processes (the CLI, the notify workers, a second server) and this process's loop-side writers
  (``Database.begin``, ``write_returning``, ``sqlite_transaction``) still write the file. BEGIN IMMEDIATE
  waits for them in this thread, never on the loop, in finer steps than SQLite's busy handler (``_begin``). No
  deadlock: a work is synchronous SQL plus pure Python, so this thread never waits for the loop or an
  asyncio lock while it holds the write lock, and a loop-side transaction never awaits this writer while
  it holds the lock (each side waits for the other only in the bounded busy handler, at its BEGIN).
* A caller cancelled while its work is still queued is skipped; one cancelled while its batch runs does
  not undo it (as after a crash past COMMIT: a claim stays held until its lease runs out).
* WAL checkpoints off the critical path: SQLite's auto-checkpoint runs inside the COMMIT that takes the
  WAL past 1,000 pages, and with this thread doing most of the process's writes that was mostly this
  COMMIT: a batch of claims, and every claim queued behind it, waited while a checkpoint copied pages
  to the database file (10 to 15 COMMITs per 1,000 claims above 5 ms, 1.7 to 3.3 without checkpoints,
  in scenario 4; issue 18). So the writer's connection has no auto-checkpoint, and every
  ``checkpoint_commits`` commits a second thread, on a connection of its own, runs a PASSIVE checkpoint
  while the writer goes on (a checkpoint never takes the write lock). At 20 to 40 pages a batch that is
  about SQLite's own 1,000 pages. Other connections keep their auto-checkpoint, so the WAL stays bounded
  if this one falls behind. A failed checkpoint is logged and the next one retries.
* Lazy: the threads and their connections are made by the first work (the checkpointer's by its first
  checkpoint); :meth:`close` (from ``Database.dispose``) lets the writer finish what is queued and
  the checkpoint in flight without blocking the loop, closes each connection in its thread and joins
  the threads. Callers may be on different event loops: each outcome goes to its caller's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from switchboard.obs.logs import get_logger
from switchboard.store.errors import Conflict, StoreUnavailable

log = get_logger("switchboard.store")

T = TypeVar("T")
Work = Callable[[sqlite3.Connection], T]  # runs in the writer thread, inside its batch's transaction

MAX_BATCH = 64  # works per transaction: bounds how long one commit keeps its callers waiting
CHECKPOINT_COMMITS = 32  # writer commits between two checkpoints (see the module docstring)
# A WAL of this many frames (4 KiB pages: 64 MiB) is reset: a PASSIVE checkpoint never restarts the WAL
# while some reader still reads from it, and under steady load one always does, so without a reset the
# file grows for as long as the load lasts (the soak: 740 MiB of WAL for 60,000 todos; issue 28).
WAL_RESET_FRAMES = 16_384
WAL_RESET_WAIT_MS = 50  # how long a reset may hold the write lock waiting for readers; else next time
BUSY_TIMEOUT_MS = 30_000
BEGIN_RETRY_FIRST = 0.00005  # the writer's first wait for another connection's write lock (_begin)
BEGIN_RETRY_MAX = 0.001  # and its longest

# Every connection to the database file runs these first: the pool's (db.py) and the writer's. WAL so
# readers never wait for a writer; a busy timeout so writers queue on the lock instead of failing.
# auto_vacuum first: it takes effect only on a file with no tables yet, and before journal_mode=WAL
# writes the header (a new database can then give the retention sweep's freed pages back to the file
# with PRAGMA incremental_vacuum; on an existing file it changes nothing, docs/reliability.md).
PRAGMAS = (
    "PRAGMA auto_vacuum=INCREMENTAL",
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)


def _settle(settled: list[tuple[asyncio.Future[Any], _Outcome[Any]]]) -> None:
    """On the callers' loop: each future gets its work's outcome (unless its caller has gone)."""
    for future, outcome in settled:
        if future.done():
            continue
        if outcome.error is not None:
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome.value)


class Declined(Exception):
    """Raised by a work that must not run in the writer: its writes are undone, its caller told so."""


@dataclass(frozen=True, slots=True)
class _Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None


def _store_error(exc: BaseException) -> Exception:
    """A fresh store error per caller (one exception object raised in many tasks grows one traceback)."""
    if isinstance(exc, sqlite3.IntegrityError):
        error: Exception = Conflict(str(exc).splitlines()[0][:200])
    else:
        error = StoreUnavailable("database unavailable")
    error.__cause__ = exc
    return error


class SqliteWriter:
    """Group commit for one SQLite file; see the module docstring. ``commits`` counts the transactions
    committed (each batch is one), ``works`` the works that committed with them, ``checkpoints`` the
    checkpoints run off the writer's thread."""

    def __init__(
        self,
        path: Path,
        *,
        max_batch: int = MAX_BATCH,
        checkpoint_commits: int = CHECKPOINT_COMMITS,
        wal_reset_frames: int = WAL_RESET_FRAMES,
    ) -> None:
        # mode=rw: the writer never creates the file (Database.secure_files creates it 0600).
        self._uri = f"{path.absolute().as_uri()}?mode=rw"
        self.max_batch = max_batch
        self.checkpoint_commits = checkpoint_commits
        self.wal_reset_frames = wal_reset_frames
        self.wal_resets = 0
        self._reset_due = False  # set by the checkpointer thread, read by the writer's
        self.commits = 0
        self.works = 0
        self.checkpoints = 0
        self._checkpoint_mark = 0  # self.commits when the last checkpoint started
        self._checkpointing: Future[None] | None = None
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None  # the checkpointer thread's only
        self._pending: deque[tuple[Work[Any], asyncio.Future[Any]]] = deque()
        self._ready = threading.Condition()  # guards _pending and _stopping
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None  # the writer thread's only
        self._on_connect: list[Callable[[sqlite3.Connection], None]] = []
        self._closed = False

    def on_connect(self, setup: Callable[[sqlite3.Connection], None]) -> None:
        """``setup`` runs in the writer thread on its connection when it is opened (after PRAGMAS)."""
        self._on_connect.append(setup)

    async def run(self, work: Work[T]) -> T:
        """Run ``work`` in the next batch's transaction; its return value once that batch committed.
        Raises what ``work`` raised (its writes undone), or a store error for the whole batch."""
        if self._closed:
            raise StoreUnavailable("database closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._ready:
            self._pending.append((work, future))
            self._ready.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sqlite-writer", daemon=True)
                self._thread.start()
        return await future

    async def close(self) -> None:
        """Finish what is queued, close the connections in their threads, and join the threads."""
        self._closed = True
        with self._ready:
            self._stopping = True
            self._ready.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join)
        checkpoint = self._checkpointing
        if checkpoint is not None:
            with contextlib.suppress(Exception):  # logged by _checkpointed
                await asyncio.wrap_future(checkpoint)
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await asyncio.wrap_future(checkpointer.submit(self._disconnect_checkpointer))
            await asyncio.to_thread(checkpointer.shutdown, True)

    # -- the writer thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        """The writer thread: batch after batch while work is queued; on close, what is left, then out."""
        try:
            while True:
                with self._ready:
                    while not self._pending and not self._stopping:
                        self._ready.wait()
                    if not self._pending:
                        return
                    batch: list[tuple[Work[Any], asyncio.Future[Any]]] = []
                    while self._pending and len(batch) < self.max_batch:
                        work, future = self._pending.popleft()
                        if not future.done():  # its caller was cancelled while it waited
                            batch.append((work, future))
                if batch:
                    self._run_batch(batch)
        finally:
            self._disconnect()

    def _run_batch(self, batch: list[tuple[Work[Any], asyncio.Future[Any]]]) -> None:
        try:
            outcomes: list[_Outcome[Any]] = self._commit([w for w, _ in batch])
        except Exception as exc:  # the batch's own: BEGIN, COMMIT, a broken connection
            store = isinstance(exc, (sqlite3.Error, OSError))
            outcomes = [_Outcome(error=_store_error(exc) if store else exc) for _ in batch]
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Outcome[Any]]]] = {}
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            by_loop.setdefault(future.get_loop(), []).append((future, outcome))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, settled)
        if self._reset_due:
            self._reset_due = False
            if self._conn is not None and reset_wal(self._conn):
                self.wal_resets += 1
        try:
            self._maybe_checkpoint()
        except Exception:  # never the writer's problem: the next commit tries again
            log.warning("sqlite checkpoint not started", exc_info=True)

    def _maybe_checkpoint(self) -> None:
        """Start a checkpoint on the checkpointer thread once ``checkpoint_commits`` commits have
        gone by since the last one started, unless one is still running."""
        running = self._checkpointing is not None and not self._checkpointing.done()
        if running or self.commits - self._checkpoint_mark < self.checkpoint_commits:
            return
        self._checkpoint_mark = self.commits
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-checkpoint")
        future = self._checkpointer.submit(self._checkpoint)
        self._checkpointing = future
        future.add_done_callback(self._checkpointed)

    def _checkpointed(self, future: Future[None]) -> None:
        error = future.exception()
        if error is None:
            self.checkpoints += 1
        else:  # the next one retries; meanwhile the other connections' auto-checkpoint bounds the WAL
            log.warning("sqlite checkpoint failed", error=type(error).__name__)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self._uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
            )  # autocommit: BEGIN IMMEDIATE and COMMIT are sent here
            try:
                for pragma in PRAGMAS:
                    conn.execute(pragma)
                conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread's job
                conn.execute("PRAGMA busy_timeout=0")  # _begin waits for the lock itself, in finer steps
                for setup in self._on_connect:
                    setup(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    @staticmethod
    def _begin(conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting for another connection's write (a notify worker's health flush, the
        CLI) in steps of 50 us doubling up to 1 ms, for ``BUSY_TIMEOUT_MS`` at most. SQLite's own busy
        handler sleeps 1, 2, 5, 10, 15, 20 ms...: a batch that met a write of half a millisecond waited
        at least one, two after a second miss, and every delivery and claim in it with it (SPEC-0024
        REQ-7's ingest p99 with dead hooks, whose failures the workers write ten times a second)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        delay = BEGIN_RETRY_FIRST
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, BEGIN_RETRY_MAX)

    def _commit(self, works: list[Work[Any]]) -> list[_Outcome[Any]]:
        conn = self._connection()
        self._begin(conn)
        try:
            outcomes = [self._one(conn, work) for work in works]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    self._disconnect()  # a connection that cannot roll back is not reused
            raise
        self.commits += 1
        self.works += sum(1 for o in outcomes if o.error is None)
        return outcomes

    @staticmethod
    def _one(conn: sqlite3.Connection, work: Work[Any]) -> _Outcome[Any]:
        conn.execute("SAVEPOINT work")
        try:
            value = work(conn)
        except sqlite3.IntegrityError as exc:
            error: BaseException = _store_error(exc)
        except sqlite3.Error:
            raise  # the batch's: rolled back whole
        except Exception as exc:  # the work's own (an answer that raised, Declined)
            error = exc
        else:
            conn.execute("RELEASE work")
            return _Outcome(value=value)
        conn.execute("ROLLBACK TO work")
        conn.execute("RELEASE work")
        return _Outcome(error=error)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- the checkpointer thread ---------------------------------------------------------------------

    def _checkpoint(self) -> None:
        """A PASSIVE checkpoint: copies what no reader still needs, never waits for a lock, and lets the
        writer append meanwhile. Once the WAL holds ``wal_reset_frames``, the writer
        resets it after its next commit (:func:`reset_wal`). A failure closes the connection
        (the next checkpoint opens another)."""
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(
                    self._uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
                )
            _busy, frames, _ = self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # Just copied: the writer's reset has only the newest frames left to copy.
            self._reset_due = frames >= self.wal_reset_frames
        except BaseException:
            self._disconnect_checkpointer()
            raise

    def _disconnect_checkpointer(self) -> None:
        conn, self._checkpoint_conn = self._checkpoint_conn, None
        if conn is not None:
            conn.close()


def reset_wal(conn: sqlite3.Connection) -> bool:
    """Empty the WAL (a TRUNCATE checkpoint) on the writer's own connection, between two batches: the
    checkpointer thread could not, since it would wait for the write lock the writer takes back after
    every batch. The checkpointer has copied nearly everything, so this copies a few frames and waits
    for the readers still on the old frames, at most ``WAL_RESET_WAIT_MS``; whether it emptied it (if
    not, the next full checkpoint asks again)."""
    try:
        conn.execute(f"PRAGMA busy_timeout={WAL_RESET_WAIT_MS}")
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except sqlite3.Error:
        log.warning("sqlite WAL reset failed", exc_info=True)
        return False
    return not busy
