"""The worker pool: ``workers`` tasks taking notifications from the intake queue, through the per-owner
fairness scheduler, to the attempt runner.

* Workers never sleep: a retry is a timer that re-enqueues (:mod:`switchboard.notify.timers`), so a
  dead receiver holds a worker only for the attempt itself.
* A worker survives any exception of one notification (it is logged without its message, counted as
  failed, and the worker takes the next one), and a worker task that ends anyway is started again, so
  the pool keeps its size (REQ-12).
* A stop that abandons notifications (queued, parked, or cut off mid-attempt past the drain timeout)
  counts and logs each as dropped (reason ``shutdown``): every notification ends with one outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from switchboard.notify.attempts import AttemptRunner, where
from switchboard.notify.fairness import OwnerFairness
from switchboard.notify.flow import Flow
from switchboard.notify.notification import Notification
from switchboard.notify.outcomes import Outcomes
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.process.tasks import cancel_and_wait

log = get_logger("switchboard.notify")


class WorkerPool:
    def __init__(
        self,
        *,
        queue: asyncio.Queue[Notification],
        put: Callable[[Notification], None],
        fairness: OwnerFairness,
        runner: AttemptRunner,
        outcomes: Outcomes,
        metrics: Metrics,
        flow: Flow,
        workers: int,
    ) -> None:
        self.queue, self.put, self.fairness, self.runner = queue, put, fairness, runner
        self.outcomes, self.metrics, self.flow = outcomes, metrics, flow
        self.worker_count = workers
        self._workers: list[asyncio.Task[None]] = []
        self._in_hand: dict[str, Notification] = {}  # notification id -> taken by a worker, not done
        self._busy = 0
        self._stopping = False  # stop() is cancelling the workers: their ends are not restarted
        flow.holds_nothing_when(lambda: self._busy == 0 and not self.fairness.any_parked())

    def start(self) -> None:
        self._stopping = False
        self._workers = [self._spawn(i) for i in range(self.worker_count)]

    def _spawn(self, index: int) -> asyncio.Task[None]:
        task = asyncio.create_task(self._work(), name=f"notify-worker-{index}")
        task.add_done_callback(lambda t: self._worker_ended(index, t))
        return task

    def _worker_ended(self, index: int, task: asyncio.Task[None]) -> None:
        """REQ-12: the pool keeps its size. ``_work`` survives every ``Exception`` of a notification;
        should a worker end anyway (outside ``stop``), it is logged and started again."""
        if self._stopping or index >= len(self._workers) or self._workers[index] is not task:
            return
        exc = None if task.cancelled() else task.exception()
        log.error(
            "notify worker ended unexpectedly; starting it again",
            worker=index,
            error_type=type(exc).__name__ if exc else None,
            where=where(exc),
        )
        self._workers[index] = self._spawn(index)

    @property
    def running(self) -> int:
        """Worker tasks alive now: ``worker_count`` from start to stop (REQ-12)."""
        return sum(1 for task in self._workers if not task.done())

    async def stop(self, drain_timeout: float) -> None:
        """Let queued work finish within ``drain_timeout``, then cancel the workers and drop
        (``shutdown``) whatever is queued, parked or was cut off mid-attempt."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_timeout):
                await self.queue.join()
        self._stopping = True
        await cancel_and_wait(*self._workers)
        self._workers = []
        abandoned = [*self._in_hand.values()]
        self._in_hand.clear()
        while not self.queue.empty():
            abandoned.append(self.queue.get_nowait())
            self.queue.task_done()
        abandoned.extend(self.fairness.take_parked())
        for n in abandoned:
            self.outcomes.dropped(n, "shutdown")
        self.metrics.notify_queue_depth.set(0)

    async def _work(self) -> None:
        while True:
            n = await self.queue.get()
            try:
                self.metrics.notify_queue_depth.set(self.queue.qsize())
                owner = n.owner_id
                if self.fairness.at_cap(owner):
                    # Fairness: one tenant never holds more than its share of the pool.
                    if not self.fairness.park(n):
                        self.outcomes.dropped(n, "owner_backlog_full")
                    continue
                self.fairness.started(owner)
                self._busy += 1
                self._in_hand[n.id] = n
                cut_off = False
                try:
                    await self.runner.attempt(n)
                except asyncio.CancelledError:
                    cut_off = True  # stop() abandons it: it stays in _in_hand to be counted as dropped
                    raise
                except Exception as exc:  # REQ-12: one notification's error never ends a worker
                    self.runner.internal_error(n, exc)
                finally:
                    if not cut_off:
                        self._in_hand.pop(n.id, None)
                    self._busy -= 1
                    following = self.fairness.finished(owner)
                    if following is not None:
                        self.put(following)  # the owner's next parked one, queued again
            finally:
                self.queue.task_done()
                self.flow.settle()
