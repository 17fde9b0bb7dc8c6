"""SQLite: one writer thread that commits this process's claims and acks in groups (issue 18).

A claim or an ack on the pool's aiosqlite connection holds SQLite's write lock for every trip between
the event loop and the driver's thread (BEGIN IMMEDIATE, the UPDATE, the timeline INSERT, COMMIT), each
waiting for the busy loop's next turn: about 180 writes/s, whatever the disk can do. Here the loop only
queues work and awaits a future. One thread owns one stdlib ``sqlite3`` connection to the same file, and
while no batch is in flight it takes everything queued (at most ``max_batch``) and runs it in one call:

    BEGIN IMMEDIATE; per work: SAVEPOINT, the work's statements, RELEASE; COMMIT

Work queued meanwhile forms the next batch: one commit (one WAL append) per batch, and the write lock is
held only while SQLite works, never across a loop turn.

* Per-work isolation: a work that raises is rolled back to its savepoint and its caller gets the error;
  the rest of the batch commits. :class:`Declined` is how a work says "not here" (an A2A task's claim
  needs the hub's in-transaction handlers, which need an ``AsyncConnection``): undone, and its caller
  takes the loop-side path. ``sqlite3.IntegrityError`` in a work is that work's :class:`Conflict`.
* Any other SQLite or OS error (BEGIN IMMEDIATE timed out, disk full, COMMIT failed) rolls the batch back
  and fails each of its works with :class:`StoreUnavailable` (``Conflict`` for a constraint); the writer
  goes on with the next batch.
* Other processes (the CLI, the notify workers, a second server) and this process's loop-side writers
  (``Database.begin``, ``write_returning``, ``sqlite_transaction``) still write the file. BEGIN IMMEDIATE
  waits for them in SQLite's busy handler (``busy_timeout``) in this thread, never on the loop. No
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
* Lazy: the threads and their connections are made by the first batch (the checkpointer's by its first
  checkpoint); :meth:`close` (from ``Database.dispose``) waits for the batch and the checkpoint in
  flight without blocking the loop, closes each connection in its thread and joins the threads.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
BUSY_TIMEOUT_MS = 30_000

# Every connection to the database file runs these first: the pool's (db.py) and the writer's. WAL so
# readers never wait for a writer; a busy timeout so writers queue on the lock instead of failing.
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)


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
        self, path: Path, *, max_batch: int = MAX_BATCH, checkpoint_commits: int = CHECKPOINT_COMMITS
    ) -> None:
        # mode=rw: the writer never creates the file (Database.secure_files creates it 0600).
        self._uri = f"{path.absolute().as_uri()}?mode=rw"
        self.max_batch = max_batch
        self.checkpoint_commits = checkpoint_commits
        self.commits = 0
        self.works = 0
        self.checkpoints = 0
        self._checkpoint_mark = 0  # self.commits when the last checkpoint started
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None  # the checkpointer thread's only
        self._pending: deque[tuple[Work[Any], asyncio.Future[Any]]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append((work, future))
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain(), name="sqlite-writer")
        return await future

    async def close(self) -> None:
        """Finish what is queued, close the connection in its thread, and join the thread."""
        self._closed = True
        while self._drainer is not None:
            await asyncio.wait([self._drainer])
        while self._checkpointing is not None:
            await asyncio.wait([self._checkpointing])
        loop = asyncio.get_running_loop()
        executor, self._executor = self._executor, None
        if executor is not None:
            await loop.run_in_executor(executor, self._disconnect)
            await asyncio.to_thread(executor.shutdown, True)
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await loop.run_in_executor(checkpointer, self._disconnect_checkpointer)
            await asyncio.to_thread(checkpointer.shutdown, True)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch: list[tuple[Work[Any], asyncio.Future[Any]]] = []
                while self._pending and len(batch) < self.max_batch:
                    work, future = self._pending.popleft()
                    if not future.done():  # its caller was cancelled while it waited
                        batch.append((work, future))
                if not batch:
                    continue
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
                try:
                    outcomes = await loop.run_in_executor(self._executor, self._commit, [w for w, _ in batch])
                except Exception as exc:  # the batch's own: BEGIN, COMMIT, a broken connection
                    for _, future in batch:
                        if not future.done():
                            store = isinstance(exc, (sqlite3.Error, OSError))
                            future.set_exception(_store_error(exc) if store else exc)
                    continue
                except BaseException:  # the drainer was cancelled (the loop is closing)
                    for _, future in batch:
                        future.cancel()
                    raise
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if outcome.error is not None:
                        future.set_exception(outcome.error)
                    else:
                        future.set_result(outcome.value)
                self._maybe_checkpoint(loop)
        finally:
            self._drainer = None

    def _maybe_checkpoint(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a checkpoint on the checkpointer thread once ``checkpoint_commits`` commits have
        gone by since the last one started, unless one is still running."""
        if self._checkpointing is not None or self.commits - self._checkpoint_mark < self.checkpoint_commits:
            return
        self._checkpoint_mark = self.commits
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-checkpoint")
        future = loop.run_in_executor(self._checkpointer, self._checkpoint)
        self._checkpointing = future
        future.add_done_callback(self._checkpointed)

    def _checkpointed(self, future: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.checkpoints += 1
        else:  # the next one retries; meanwhile the other connections' auto-checkpoint bounds the WAL
            log.warning("sqlite checkpoint failed", error=type(error).__name__)

    # -- the writer thread ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self._uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
            )  # autocommit: BEGIN IMMEDIATE and COMMIT are sent here
            try:
                for pragma in PRAGMAS:
                    conn.execute(pragma)
                conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread's job
                for setup in self._on_connect:
                    setup(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _commit(self, works: list[Work[Any]]) -> list[_Outcome[Any]]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
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
        writer append meanwhile. A failure closes the connection (the next checkpoint opens another)."""
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(
                    self._uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
                )
            self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except BaseException:
            self._disconnect_checkpointer()
            raise

    def _disconnect_checkpointer(self) -> None:
        conn, self._checkpoint_conn = self._checkpoint_conn, None
        if conn is not None:
            conn.close()
