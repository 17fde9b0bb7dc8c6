"""The server's side of the notify worker process (``SWITCHBOARD_NOTIFY_PROCESS``).

Why a process: on one interpreter, delivery and ingest share one core, so a burst of notifications or
a crowd of dead receivers slows ingest however the work is scheduled (docs/benchmarks.md). With this
setting the server keeps ingest, MCP and the web UI, and a child (``python -m
switchboard.notify.worker``) runs the dispatcher: matching, the bounded queue, attempts, health writes.

The contract of REQ-7 holds across the pipe:

* The hub's subscriber only writes one line per batch to the child's stdin and never waits for it. When
  the child has not read what was written before (more than ``max_buffer`` bytes wait) or is not
  running, the batch's transitions are dropped, logged (coalesced) and counted as dropped, exactly like
  a full hub queue; the todos are unaffected.
* The child's own queue, workers, retries and health writes are the in-process dispatcher's.
* The child's counters reach this process's ``/metrics`` (:mod:`switchboard.notify.wire`).
* A child that dies is started again, after 1 s, doubling up to 30 s while it keeps dying early; what
  it had in memory is lost, as a restart loses it (REQ-7).
* Stopping closes the child's stdin: it stops taking work, drains within the dispatcher's drain
  timeout, writes pending health and exits; it is killed if it has not exited some seconds later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence

from switchboard.notify.dispatcher import _DropLog
from switchboard.notify.wire import apply_metrics, line, presence_line, transitions_line
from switchboard.obs.logs import get_logger
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


class WorkerUnavailable(RuntimeError):
    pass


class RemoteDispatcher:
    """Stands where :class:`~switchboard.notify.dispatcher.Dispatcher` stands in the notify component
    (the same hub, presence and lifecycle methods), and hands the work to the child process."""

    def __init__(
        self,
        services: Services,
        *,
        retry_delays: Sequence[float],
        command: Sequence[str] = WORKER_COMMAND,
        max_buffer: int = MAX_BUFFER,
        drain_timeout: float = 5.0,
    ) -> None:
        if services.settings.in_memory_database():
            raise ValueError(
                "SWITCHBOARD_NOTIFY_PROCESS needs a database both processes can open, not :memory:"
            )
        self.services = services
        self.metrics = services.metrics
        self.command = list(command)
        self.retry_delays = list(retry_delays)
        self.max_buffer = max_buffer
        self.drain_timeout = drain_timeout
        self.accepting = False
        self.starts = 0  # children started so far (tests wait for a restart with running())
        self._proc: asyncio.subprocess.Process | None = None
        self.restart_delays: Sequence[float] = RESTART_DELAYS
        self._running = asyncio.Event()
        self._down = asyncio.Event()
        self._down.set()
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._idle_waits: dict[int, asyncio.Future[None]] = {}
        self._idle_seq = 0
        self._drops = _DropLog()

    # -- what the hub and presence call --------------------------------------------------------

    async def on_transitions(self, batch: Sequence[Transition]) -> None:
        if not self.accepting:
            return
        wanted = [t for t in batch if t.pushable]
        if not wanted:
            return
        if not self._send(transitions_line(wanted)):
            for t in wanted:
                self._dropped("worker_unavailable", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        if self.accepting and not self._send(presence_line(event)):
            self._dropped(
                "worker_unavailable", endpoint_id=event.endpoint_id, todo_id=None, kind="todos.backlog"
            )

    def on_unmatched_drop(self, t: Transition) -> None:
        """The hub's queue was full: dropped before any hook was matched (as the in-process dispatcher)."""
        if t.pushable:
            self._dropped("queue_full_unmatched", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    def _dropped(
        self, reason: str, *, endpoint_id: str | None, todo_id: str | None, kind: str = "todo.ready"
    ) -> None:
        self.metrics.notify_notifications.labels(kind, "dropped").inc()
        self._drops.drop(reason, endpoint_id=endpoint_id, todo_id=todo_id)

    def _send(self, data: bytes) -> bool:
        """Hand a line to the child without waiting; False when it cannot take it now."""
        proc = self._proc
        stdin = proc.stdin if proc is not None else None
        if stdin is None or stdin.is_closing() or proc is None or proc.returncode is not None:
            return False
        if stdin.transport.get_write_buffer_size() > self.max_buffer:
            return False
        stdin.write(data)
        return True

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the child and return once it runs, so the first transitions are not dropped."""
        self.accepting = True
        self._supervisor = asyncio.create_task(self._supervise(), name="notify-worker-supervisor")
        await self.running()

    async def running(self) -> None:
        """Wait until a child is running (after a start or a restart)."""
        waiter = asyncio.ensure_future(self._running.wait())
        assert self._supervisor is not None
        done, _ = await asyncio.wait({waiter, self._supervisor}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            self._supervisor.result()  # raises what stopped the supervisor
            raise WorkerUnavailable("the notify worker supervisor stopped")

    async def down(self) -> None:
        """Wait until no child is running (tests: after killing one)."""
        await self._down.wait()

    async def stop(self) -> None:
        self.accepting = False
        self._stopping = True
        self._stop_requested.set()
        proc = self._proc
        if proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()  # EOF: the child drains and exits
        if proc is not None:
            try:
                async with asyncio.timeout(self.drain_timeout + STOP_GRACE):
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
        """Wait until the child has matched everything sent so far and finished every notification,
        and its counters are in this process's registry (tests await this)."""
        proc = self._proc
        if proc is None:
            return
        self._idle_seq += 1
        seq = self._idle_seq
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waits[seq] = waiter
        if not self._send(line({"idle": seq})):
            del self._idle_waits[seq]
            return
        await waiter

    # -- the child -----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            try:
                proc = await self._spawn()
            except OSError:
                log.error("notify worker failed to start", exc_info=True)
            else:
                self._proc = proc
                self.starts += 1
                self._down.clear()
                self._running.set()
                try:
                    await self._read(proc)
                finally:
                    returncode = await proc.wait()
                    self._running.clear()
                    self._proc = None
                    self._down.set()
                    for waiter in self._idle_waits.values():
                        if not waiter.done():
                            waiter.set_result(None)
                    self._idle_waits.clear()
                if self._stopping:
                    if returncode != 0:
                        log.error("notify worker exited", returncode=returncode)
                    return
                log.error("notify worker exited; starting it again", returncode=returncode, pid=proc.pid)
            if time.monotonic() - started >= HEALTHY_AFTER:
                failures = 0
            delay = self.restart_delays[min(failures, len(self.restart_delays) - 1)]
            failures += 1
            with contextlib.suppress(TimeoutError):  # a stop ends the wait at once
                async with asyncio.timeout(delay):
                    await self._stop_requested.wait()

    async def _spawn(self) -> asyncio.subprocess.Process:
        settings = self.services.settings.model_copy(update={"instance_id": self.services.instance_id})
        proc = await asyncio.create_subprocess_exec(
            *self.command,
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
                        "retry_delays": self.retry_delays,
                        "drain_timeout": self.drain_timeout,
                    }
                }
            )
        )
        log.info("notify worker started", pid=proc.pid)
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
                    apply_metrics(self.metrics, message["m"])
                if "idle" in message:
                    waiter = self._idle_waits.pop(int(message["idle"]), None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
            except Exception:
                log.error("notify worker sent a line this server cannot read; ignored", exc_info=True)
