"""The reaper and the retry scheduler. Both run in every instance; the conditional UPDATEs in
``TodoStore`` make each row move exactly once however many instances sweep at the same moment."""

from __future__ import annotations

import asyncio

from switchboard.obs.logs import get_logger
from switchboard.process.tasks import cancel_and_wait
from switchboard.queue.periodic import every
from switchboard.store.todos import TodoStore

log = get_logger("switchboard.sweeper")


class Sweeper:
    def __init__(self, todos: TodoStore, interval: float) -> None:
        self.todos, self.interval = todos, interval
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def sweep_once(self) -> int:
        """One pass of both sweeps; returns how many rows moved. Tests call this directly."""
        moved = 0
        while True:  # drain in batches so a backlog clears in one pass
            batch = len(await self.todos.requeue_expired_leases())
            batch += len(await self.todos.requeue_due_retries())
            moved += batch
            if batch == 0:
                return moved

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sweeper")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        await every(self.interval, self.sweep_once, what="sweep", log=log, wake=self._wake)
