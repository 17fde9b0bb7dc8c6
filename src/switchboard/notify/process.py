"""The server's side of the notify worker processes (``SWITCHBOARD_NOTIFY_PROCESS``).

Why a process: on one interpreter, delivery and ingest share one core, so a burst of notifications or
a crowd of dead receivers slows ingest however the work is scheduled (docs/benchmarks.md). With this
setting the server keeps ingest, MCP and the web UI, and children (``python -m
switchboard.notify.worker``) run the dispatcher: matching, the bounded queue, attempts, health writes.

Why several (``SWITCHBOARD_NOTIFY_PROCESSES``, one per core by default, at most 4): one child delivers on
one core at most. Each endpoint's transitions always go to the same child (a hash of its id), so a
hook's health fold and disable (and, on SQLite, its rate limit) live in one process, as with one child;
the per-owner in-flight bound applies per child. The queue bound does not: REQ-7's queue is the
instance's, so ``SWITCHBOARD_NOTIFY_QUEUE_SIZE`` is split between the children (:func:`queue_shares`),
and so is ``SWITCHBOARD_NOTIFY_WORKERS`` (the instance's concurrent attempts: each holds a connection
and its buffers, which is what an overflow's memory is made of); there are never more children than
queue slots or attempts.

The contract of REQ-7 holds across the pipe:

* The hub's subscriber only writes each batch to the child's stdin (in lines of about 64 KiB, which
  the child reads one at a time) and never waits for it. When the child has not read what was written
  before (more than ``max_buffer`` bytes wait) or is not running, the line's transitions are dropped,
  logged (coalesced by :mod:`switchboard.notify.droplog`, flushed by its timer and at stop) and
  counted as dropped, exactly like a full hub queue; the todos are unaffected. Each child coalesces and flushes its own drops the same way; its lines reach this
  process's stderr.
* The child's own queue, workers, retries and health writes are the in-process dispatcher's.
* The child's counters reach this process's ``/metrics`` (:mod:`switchboard.notify.wire`).
* A child that dies is started again (the others carry on), after 1 s, doubling up to 30 s while it keeps dying early; what
  it had in memory is lost, as a restart loses it (REQ-7).
* Stopping closes the child's stdin: it stops taking work, drains within the dispatcher's drain
  timeout, writes pending health and exits; it is killed if it has not exited some seconds later. A
  child that was never handed a line beyond its settings holds nothing to drain and is killed at once
  (a server stopped soon after it started does not wait seconds for its children's imports).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from typing import Any

from switchboard.notify.droplog import DropLog
from switchboard.notify.wire import RELAYED, line, presence_line, transitions_lines
from switchboard.obs.logs import get_logger
from switchboard.operator.sink import replay
from switchboard.services import Services
from switchboard.store.presence import PresenceReturn
from switchboard.store.transitions import Transition

log = get_logger("switchboard.notify")

WORKER_COMMAND = (sys.executable, "-m", "switchboard.notify.worker")
MAX_BUFFER = 4 * 1024 * 1024  # bytes of transitions the child has not read yet: about 10,000 of them
RESTART_DELAYS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
HEALTHY_AFTER = 30.0  # a child that ran this long starts the backoff from the beginning when it dies
STOP_GRACE = 10.0  # beyond the child's own drain timeout
READ_LIMIT = 1024 * 1024
TEST_TIMEOUT = 30.0  # one attempt (its timeout) plus the hook read, with room to spare


class WorkerUnavailable(RuntimeError):
    pass


def queue_shares(size: int, children: int) -> list[int]:
    """Each child's share of the instance's queue bound: they sum to ``size`` exactly, so the instance
    never holds more queued notifications than the setting says, however many children share them."""
    base, extra = divmod(size, children)
    return [base + (1 if index < extra else 0) for index in range(children)]


def child_of(endpoint_id: str, children: int) -> int:
    """Which child delivers for an endpoint: stable across batches and restarts of the server."""
    return zlib.crc32(endpoint_id.encode()) % children


class RemoteDispatcher:
    """Stands where :class:`~switchboard.notify.dispatcher.Dispatcher` stands in the notify component
    (the same hub, presence and lifecycle methods), and hands the work to the child processes."""

    def __init__(
        self,
        services: Services,
        *,
        retry_delays: Sequence[float],
        command: Sequence[str] = WORKER_COMMAND,
        max_buffer: int = MAX_BUFFER,
        drain_timeout: float = 5.0,
        processes: int = 1,
        queue_size: int | None = None,
    ) -> None:
        if services.settings.in_memory_database():
            raise ValueError(
                "SWITCHBOARD_NOTIFY_PROCESS needs a database both processes can open, not :memory:"
            )
        if processes < 1:
            raise ValueError("processes must be at least 1")
        queue_size = services.settings.notify_queue_size if queue_size is None else queue_size
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        workers = services.settings.notify_workers
        # a child with no queue slot could only drop; one with no worker could only queue
        processes = min(processes, queue_size, workers)
        self.services = services
        self.metrics = services.metrics
        self.command = list(command)
        self.retry_delays = list(retry_delays)
        self.max_buffer = max_buffer
        self.drain_timeout = drain_timeout
        self.accepting = False
        self.restart_delays: Sequence[float] = RESTART_DELAYS
        self.workers = [
            WorkerProcess(self, index, queue_size=share, attempts=attempts)
            for index, (share, attempts) in enumerate(
                zip(queue_shares(queue_size, processes), queue_shares(workers, processes), strict=True)
            )
        ]
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._drops = DropLog(operator=services.operator)
        # a relayed gauge (queue depth) is the sum of every child's latest value
        self._gauges: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}

    @property
    def starts(self) -> int:
        """Children started so far, restarts included (tests wait for a restart with running())."""
        return sum(w.starts for w in self.workers)

    # -- what the hub and presence call --------------------------------------------------------

    async def on_transitions(self, batch: Sequence[Transition]) -> None:
        if not self.accepting:
            return
        shares: dict[int, list[Transition]] = {}
        for t in batch:
            if t.pushable and t.endpoint_id is not None:
                shares.setdefault(child_of(t.endpoint_id, len(self.workers)), []).append(t)
        for index, share in shares.items():
            for data, carried in transitions_lines(share):
                if not self.workers[index].send(data):
                    for t in carried:
                        self._dropped("worker_unavailable", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        if not self.accepting:
            return
        worker = self.workers[child_of(event.endpoint_id, len(self.workers))]
        if not worker.send(presence_line(event)):
            self._dropped(
                "worker_unavailable", endpoint_id=event.endpoint_id, todo_id=None, kind="todos.backlog"
            )

    async def send_test(self, hook_id: str, endpoint_id: str, endpoint_slug: str) -> dict[str, Any]:
        """The card's test send, run by the child that owns the endpoint (and so the hook's limiter)."""
        worker = self.workers[child_of(endpoint_id, len(self.workers))]
        return await worker.send_test({"hook_id": hook_id, "endpoint_id": endpoint_id, "slug": endpoint_slug})

    async def replay(self, request: dict[str, Any]) -> dict[str, Any]:
        """A replay (notify/replay.py), offered by the child that owns the endpoint (its hook's limiter)."""
        worker = self.workers[child_of(str(request["endpoint_id"]), len(self.workers))]
        return await worker.send_test(request, kind="replay")

    def on_unmatched_drop(self, t: Transition) -> None:
        """The hub's queue was full: dropped before any hook was matched (as the in-process dispatcher)."""
        if t.pushable:
            self._dropped("queue_full_unmatched", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    def _dropped(
        self, reason: str, *, endpoint_id: str | None, todo_id: str | None, kind: str = "todo.ready"
    ) -> None:
        self.metrics.notify_notifications.labels(kind, "dropped").inc()
        self._drops.drop(reason, endpoint_id=endpoint_id, todo_id=todo_id)

    # -- metrics from the children -------------------------------------------------------------

    def apply_metrics(self, index: int, changes: Sequence[Sequence[Any]]) -> None:
        """Move this process's series by what child ``index`` reported: counters by the increments,
        gauges to the sum over the children (only the relayed series)."""
        for attr, op, labels, value in changes:
            if attr not in RELAYED or op not in ("inc", "set", "merge"):
                continue
            series = getattr(self.metrics, attr)
            if op == "merge":  # a histogram's bucket or sum increment (obs.metrics.MergeableHistogram)
                sample = str(labels.pop("__sample", ""))
                series.merge(sample, labels, float(value))
                continue
            target = series.labels(**labels) if labels else series
            if op == "inc":
                target.inc(float(value))
            else:
                target.set(self._gauge(index, attr, labels, float(value)))

    def _gauge(self, index: int, attr: str, labels: dict[str, str], value: float) -> float:
        values = self._gauges.setdefault((attr, tuple(sorted(labels.items()))), [0.0] * len(self.workers))
        values[index] = value
        return sum(values)

    def _forget_gauges(self, index: int) -> None:
        """A child that exited holds nothing: its share of every gauge is zero."""
        for (attr, labels), values in self._gauges.items():
            values[index] = 0.0
            series = getattr(self.metrics, attr)
            (series.labels(**dict(labels)) if labels else series).set(sum(values))

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the children and return once they run, so the first transitions are not dropped."""
        self.accepting = True
        for worker in self.workers:
            worker.start()
        await self.running()

    async def running(self) -> None:
        """Wait until every child is running (after a start or a restart)."""
        for worker in self.workers:
            await worker.running()

    async def down(self) -> None:
        """Wait until no child is running (tests: after killing them)."""
        for worker in self.workers:
            await worker.down()

    async def stop(self) -> None:
        self.accepting = False
        self._stopping = True
        self._stop_requested.set()
        await asyncio.gather(*(worker.stop() for worker in self.workers))
        self._drops.close()  # the gathered worker_unavailable drops are written, not lost

    async def idle(self) -> None:
        """Wait until every child has matched everything sent so far and finished every notification,
        and their counters are in this process's registry (tests await this)."""
        await asyncio.gather(*(worker.idle() for worker in self.workers))


class WorkerProcess:
    """One child: started, read, restarted when it dies, stopped with the others."""

    def __init__(self, owner: RemoteDispatcher, index: int, *, queue_size: int, attempts: int) -> None:
        self.owner = owner
        self.index = index
        self.queue_size = queue_size  # this child's share of the instance's queue bound
        self.attempts = attempts  # and of its concurrent attempts (SWITCHBOARD_NOTIFY_WORKERS)
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._running = asyncio.Event()
        self._down = asyncio.Event()
        self._down.set()
        self._supervisor: asyncio.Task[None] | None = None
        self._idle_waits: dict[int, asyncio.Future[None]] = {}
        self._idle_seq = 0
        self._tests: dict[int, asyncio.Future[dict[str, Any]]] = {}
        # Whether this child was handed anything beyond its hello. A child that was not holds no work,
        # so stopping need not wait for it to finish starting (its imports take seconds) and drain.
        self._handed_work = False

    def send(self, data: bytes) -> bool:
        """Hand a line to the child without waiting; False when it cannot take it now."""
        proc = self.proc
        stdin = proc.stdin if proc is not None else None
        if stdin is None or stdin.is_closing() or proc is None or proc.returncode is not None:
            return False
        if stdin.transport.get_write_buffer_size() > self.owner.max_buffer:
            return False
        stdin.write(data)
        self._handed_work = True
        return True

    def start(self) -> None:
        self._supervisor = asyncio.create_task(
            self._supervise(), name=f"notify-worker-supervisor-{self.index}"
        )

    async def running(self) -> None:
        waiter = asyncio.ensure_future(self._running.wait())
        assert self._supervisor is not None
        done, _ = await asyncio.wait({waiter, self._supervisor}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            self._supervisor.result()  # raises what stopped the supervisor
            raise WorkerUnavailable("the notify worker supervisor stopped")

    async def down(self) -> None:
        await self._down.wait()

    async def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()  # EOF: the child drains and exits
        if proc is not None and not self._handed_work and proc.returncode is None:
            # Nothing to drain and nothing to lose: end it now, not after its imports (seconds).
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc is not None:
            try:
                async with asyncio.timeout(self.owner.drain_timeout + STOP_GRACE):
                    await proc.wait()
            except TimeoutError:
                log.error("notify worker did not stop in time; killing it", pid=proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        if self._supervisor is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None

    async def idle(self) -> None:
        if self.proc is None:
            return
        self._idle_seq += 1
        seq = self._idle_seq
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waits[seq] = waiter
        if not self.send(line({"idle": seq})):
            del self._idle_waits[seq]
            return
        await waiter

    async def send_test(self, request: dict[str, Any], kind: str = "test") -> dict[str, Any]:
        """One request answered by a ``tested`` line: a test send, or a replay (``kind``)."""
        self._idle_seq += 1
        seq = self._idle_seq
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._tests[seq] = waiter
        try:
            if not self.send(line({kind: {**request, "seq": seq}})):
                raise WorkerUnavailable("the notify worker is not running")
            async with asyncio.timeout(TEST_TIMEOUT):
                return await waiter
        finally:
            self._tests.pop(seq, None)

    async def _supervise(self) -> None:
        owner = self.owner
        failures = 0
        while not owner._stopping:
            started = time.monotonic()
            try:
                proc = await self._spawn()
            except OSError:
                log.error("notify worker failed to start", exc_info=True)
            else:
                self.proc = proc
                self._handed_work = False
                self.starts += 1
                self._down.clear()
                self._running.set()
                try:
                    await self._read(proc)
                finally:
                    returncode = await proc.wait()
                    self._running.clear()
                    self.proc = None
                    owner._forget_gauges(self.index)
                    self._down.set()
                    for waiter in self._idle_waits.values():
                        if not waiter.done():
                            waiter.set_result(None)
                    self._idle_waits.clear()
                    for test in self._tests.values():
                        if not test.done():
                            test.set_exception(WorkerUnavailable("the notify worker exited"))
                if owner._stopping:
                    if returncode != 0 and self._handed_work:
                        log.error("notify worker exited", returncode=returncode)
                    return
                log.error("notify worker exited; starting it again", returncode=returncode, pid=proc.pid)
            if time.monotonic() - started >= HEALTHY_AFTER:
                failures = 0
            delay = owner.restart_delays[min(failures, len(owner.restart_delays) - 1)]
            failures += 1
            with contextlib.suppress(TimeoutError):  # a stop ends the wait at once
                async with asyncio.timeout(delay):
                    await owner._stop_requested.wait()

    async def _spawn(self) -> asyncio.subprocess.Process:
        owner = self.owner
        # The child sends no operator event itself (it hands them to this process), so it never holds
        # the operator webhook's secret.
        settings = owner.services.settings.model_copy(
            update={
                "instance_id": owner.services.instance_id,
                "operator_webhook_url": None,
                "operator_webhook_secret": None,
            }
        )
        proc = await asyncio.create_subprocess_exec(
            *owner.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the child's JSON log lines join this process's stderr
            limit=READ_LIMIT,
        )
        assert proc.stdin is not None
        # Settings travel on the pipe, not in the environment or argv: they hold the credential key.
        proc.stdin.write(
            line(
                {
                    "hello": {
                        "settings": settings.model_dump(mode="json"),
                        "retry_delays": owner.retry_delays,
                        "drain_timeout": owner.drain_timeout,
                        "queue_size": self.queue_size,
                        "workers": self.attempts,
                    }
                }
            )
        )
        log.info(
            "notify worker started",
            pid=proc.pid,
            worker=self.index,
            queue_size=self.queue_size,
            workers=self.attempts,
        )
        return proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                log.error("notify worker sent an over-long line; ignored")
                continue
            if not raw:
                return
            try:
                message = json.loads(raw)
                if "m" in message:
                    self.owner.apply_metrics(self.index, message["m"])
                if "o" in message:  # the child's operator events: sent from this process (one place)
                    replay(self.owner.services.operator, message["o"])
                if "tested" in message:
                    test = self._tests.get(int(message["tested"]))
                    if test is not None and not test.done():
                        test.set_result(dict(message["result"]))
                if "idle" in message:
                    waiter = self._idle_waits.pop(int(message["idle"]), None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
            except Exception:
                log.error("notify worker sent a line this server cannot read; ignored", exc_info=True)
