"""The retention sweep's loop: in every instance, every SWITCHBOARD_RETENTION_INTERVAL_SECONDS, delete
terminal todos older than SWITCHBOARD_RETENTION_HOURS in batches (store/todo_retention.py), pausing
between batches so ingest and claims keep the database most of the time (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from switchboard.clock import Clock, ms
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.store.errors import StoreUnavailable
from switchboard.store.todo_retention import Pruned, TodoRetention
from switchboard.tasks import cancel_and_wait

log = get_logger("switchboard.retention")

# Between two batches the sweep waits at least PAUSE_MIN seconds and at least PAUSE_RATIO times what the
# batch took: at most a tenth of the time in batches, whatever the disk's speed.
PAUSE_MIN = 0.02
# SWITCHBOARD_RETENTION_BATCH's defaults (bench scenario s6, 1M rows): on SQLite a batch holds the one
# write lock every claim and ingest needs; on PostgreSQL 500-todo batches took claim p99 to 4.3x (the
# cascades' and index deletes' CPU on a 2-core box), 100 kept it at 1.2x.
SQLITE_BATCH = 100
PG_BATCH = 100
PAUSE_RATIO = 9.0
VACUUM_STEPS = 2048  # incremental_vacuum steps per sweep at most (of store.todo_retention.VACUUM_PAGES)


@dataclass(frozen=True)
class RetentionPolicy:
    retention_seconds: float  # 0: keep for ever (the sweep never runs)
    interval_seconds: float
    batch: int


class RetentionSweeper:
    def __init__(self, store: TodoRetention, metrics: Metrics, clock: Clock, policy: RetentionPolicy) -> None:
        self.store, self.metrics, self.clock, self.policy = store, metrics, clock, policy
        self._task: asyncio.Task[None] | None = None
        self._counters = {t: metrics.retention_pruned.labels(table=t) for t in Pruned().by_table()}

    async def sweep_once(self) -> dict[str, int]:
        """One pass: batches until none is full (or another instance holds the batch lock); then the
        free pages back to a SQLite file, and the oldest-kept gauge. Returns the rows deleted per table."""
        started = time.monotonic()
        cutoff = ms(self.clock.now() - self.policy.retention_seconds)
        totals = dict.fromkeys(self._counters, 0)
        while True:
            t0 = time.monotonic()
            pruned = await self.store.prune_batch(cutoff, self.policy.batch)
            if pruned is None:
                break
            for table, n in pruned.by_table().items():
                if n:
                    totals[table] += n
                    self._counters[table].inc(n)
            if pruned.todos < self.policy.batch:
                break
            await self._pause(t0)
        freed = await self._return_space()  # every sweep: one capped at VACUUM_STEPS left some
        oldest = await self.store.oldest_terminal_ms()
        age = 0.0 if oldest is None else max(0.0, self.clock.now() - oldest / 1000)
        self.metrics.retention_oldest_terminal.set(age)
        self.metrics.retention_sweeps.inc()
        if totals["todos"]:
            log.info(
                "retention sweep",
                **totals,
                pages_freed=freed,
                oldest_kept_seconds=round(age, 1),
                took_ms=round((time.monotonic() - started) * 1000),
            )
        return totals

    async def _pause(self, since: float) -> None:
        await asyncio.sleep(max(PAUSE_MIN, (time.monotonic() - since) * PAUSE_RATIO))

    async def _return_space(self) -> int:
        """SQLite: the free pages back to the file, a short step at a time, paused like the batches;
        at most ``VACUUM_STEPS`` steps per sweep (the next sweep goes on)."""
        freed = 0
        for _ in range(VACUUM_STEPS):
            t0 = time.monotonic()
            step = await self.store.return_space()
            if not step:
                break
            freed += step
            await self._pause(t0)
        return freed

    def start(self) -> None:
        if self.policy.retention_seconds > 0:
            self._task = asyncio.create_task(self._run(), name="retention")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except StoreUnavailable:
                log.warning("retention sweep skipped: database unavailable")
            except Exception:
                log.error("retention sweep failed", exc_info=True)
            # Jitter keeps several instances from sweeping in lockstep.
            await asyncio.sleep(self.policy.interval_seconds * random.uniform(0.8, 1.2))
