"""The retention sweep's loop: in every instance, every SWITCHBOARD_RETENTION_INTERVAL_SECONDS, delete
terminal todos older than SWITCHBOARD_RETENTION_HOURS in batches (store/todo_retention.py), pausing
between batches so ingest and claims keep the database most of the time (docs/reliability.md).

Two paces (:class:`Pace`): a backlog (retention switched on over years of history, a restore) drains
gently, at most a tenth of the time in batches; but the sweep always keeps up with the rate todos are
finishing now, measured from the database, or the history would grow for ever under a steady load
(the soak, bench/soak.py, measured exactly that at 1,500 todos/s on SQLite)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from switchboard.core.clock import Clock, ms
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.process.tasks import cancel_and_wait
from switchboard.queue.periodic import every
from switchboard.store.todo_retention import Pruned, TodoRetention

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
HEADROOM = 1.5  # the sweep deletes at least this many rows per row finishing now
MAX_BATCH_FACTOR = 8  # a batch grows to at most this many times SWITCHBOARD_RETENTION_BATCH (and 5,000)
# PostgreSQL: a batch locks only the terminal rows it deletes, which nobody else waits for, so a sweep
# that trails may grow further. At 8 (800 rows) the two-instance soak at 1,500 todos/s deleted about
# 1,000 rows/s on a saturated box (each batch's eight round trips waited on a busy event loop) and fell
# a minute behind its cutoff; SQLite keeps 8, since its batch holds the one write lock.
PG_MAX_BATCH_FACTOR = 40
RATE_WINDOW = (10.0, 60.0)  # seconds of finished todos the rate is measured over (the interval, clamped)
LAG_BOOST = 2.0  # a sweep behind the cutoff asks for at most this many times the finishing rate more
MAX_PASS = 60.0  # seconds: a longer pass ends (its log line, space returned, gauge) and the next begins
REMEASURE = 5.0  # seconds: a long pass measures the rate again this often
VACUUM_STEPS = 2048  # incremental_vacuum steps per sweep at most (of store.todo_retention.VACUUM_PAGES)
# Seconds of a pass spent giving pages back, pauses included. On a busy loop each step and its 9x pause
# ran long, and the soak's passes spent 30 s of every minute there while nothing was deleted.
VACUUM_SECONDS = 2.0
# PostgreSQL: while a pass deletes, a VACUUM of the swept tables is asked for at most this often (and at
# its end), run beside the batches, one at a time, once the rows deleted since the last one reach
# VACUUM_SHARE of the todos kept: a VACUUM only at the end of a 60 s pass at the soak's 1,500 todos/s left
# a minute of dead rows and the indexes grew by steps; but a VACUUM every 10 s of a gentle drain through
# a million kept rows (s6) cost ingest and claims 1.5x their p99, for space that is a sliver of the table
# and that autovacuum reclaims anyway.
VACUUM_EVERY = 10.0
VACUUM_SHARE = 0.1


@dataclass(frozen=True)
class RetentionPolicy:
    retention_seconds: float  # 0: keep for ever (the sweep never runs)
    interval_seconds: float
    batch: int


@dataclass
class Pace:
    """How big the next batch is and how long to wait after one. The gentle pause is ``PAUSE_RATIO``
    times the batch's time; when that would delete fewer rows per second than ``HEADROOM`` times the
    rate todos finish (``need``, rows/s), the pause shrinks to what keeps up, down to ``PAUSE_MIN``, and
    then the batch doubles (fewer statements per row), up to ``most``. A pause that is more than enough
    halves a grown batch again."""

    base: int
    need: float = 0.0
    factor: int = MAX_BATCH_FACTOR
    batch: int = field(init=False)

    def __post_init__(self) -> None:
        self.batch = self.base

    @property
    def most(self) -> int:
        return max(self.base, min(5000, self.base * self.factor))

    def after(self, rows: int, took: float, achieved: float | None = None) -> float:
        """The pause after a batch of ``rows`` that took ``took`` seconds; adjusts the next batch.

        ``achieved`` is the rows per second the last whole cycle (batch and pause) really deleted. On a
        busy event loop a pause and a batch's hand-off each take longer than asked, so a pace judged on
        ``took`` alone believes it keeps up while it trails (the soak at 600 todos/s on SQLite: a 45 ms
        pause, about 500 rows/s deleted); then the batch grows, so each wake-up deletes more."""
        gentle = max(PAUSE_MIN, took * PAUSE_RATIO)
        if self.need <= 0:
            self.batch = self.base
            return gentle
        target = self.need * HEADROOM
        keeps_up = rows / target - took  # the longest pause that still keeps up
        trailing = achieved is not None and achieved < target
        if (keeps_up < PAUSE_MIN or trailing) and self.batch < self.most:
            self.batch = min(self.most, self.batch * 2)
        elif keeps_up > gentle and self.batch > self.base and not trailing:
            self.batch = max(self.base, math.ceil(self.batch / 2))
        return max(PAUSE_MIN, min(gentle, keeps_up))


class RetentionSweeper:
    def __init__(self, store: TodoRetention, metrics: Metrics, clock: Clock, policy: RetentionPolicy) -> None:
        self.store, self.metrics, self.clock, self.policy = store, metrics, clock, policy
        self._task: asyncio.Task[None] | None = None
        self._counters = {t: metrics.retention_pruned.labels(table=t) for t in Pruned().by_table()}
        self.pace = Pace(policy.batch, factor=PG_MAX_BATCH_FACTOR if store.can_vacuum else MAX_BATCH_FACTOR)
        self._vacuum_task: asyncio.Task[None] | None = None
        self._vacuum_wanted = False
        self.vacuums = 0  # VACUUMs run (PostgreSQL), for the log and the tests
        # Todos deleted since the last VACUUM was asked for, across passes: a steady load's passes each
        # delete less than VACUUM_SHARE of the table, and a count reset per pass never asked for one.
        self._unvacuumed = 0
        self._asked_at = -math.inf

    async def sweep_once(self) -> dict[str, int]:
        """Passes until one catches up: each deletes batches until one is not full (or another
        instance holds the batch lock, or ``MAX_PASS`` seconds have gone), then gives the free pages
        back to a SQLite file and sets the oldest-kept gauge. Returns the rows deleted per table."""
        totals = dict.fromkeys(self._counters, 0)
        while True:
            caught_up = await self._pass(totals)
            if caught_up:
                return totals

    async def _pass(self, totals: dict[str, int]) -> bool:
        """One pass; False when it ended on ``MAX_PASS`` with more due (the next starts at once)."""
        started = time.monotonic()
        deleted = dict.fromkeys(self._counters, 0)
        measured = -math.inf
        caught_up = False
        last: tuple[int, float] | None = None  # the previous batch: rows, when it began
        vacuums = self.vacuums
        worth = math.inf  # rows deleted that make a VACUUM worth its cost (measured below)
        while True:
            if time.monotonic() - measured >= REMEASURE:
                # The cutoff moves with the clock: rows that came due while the pass ran are its own,
                # else each pass would end with a pass's worth of history due and wait an interval.
                cutoff = ms(self.clock.now() - self.policy.retention_seconds)
                self.pace.need = await self.need(cutoff)
                if self.store.can_vacuum:
                    worth = max(1.0, VACUUM_SHARE * await self.store.kept_estimate())
                measured = time.monotonic()
            t0 = time.monotonic()
            achieved = None if last is None else last[0] / max(t0 - last[1], 1e-6)
            batch = self.pace.batch
            pruned = await self.store.prune_batch(cutoff, batch)
            took = time.monotonic() - t0  # the batch alone: the pause is judged on it, not on a VACUUM
            if pruned is None:
                caught_up = True  # another instance is sweeping: leave the rest to it
                break
            for table, n in pruned.by_table().items():
                if n:
                    deleted[table] += n
                    totals[table] += n
                    self._counters[table].inc(n)
            self._unvacuumed += pruned.todos
            since_ask = time.monotonic() - max(self._asked_at, started)  # the pass's end asks anyway
            if self._unvacuumed >= worth and since_ask >= VACUUM_EVERY:
                self._ask_vacuum()
            if pruned.todos < batch:
                caught_up = True
                break
            if time.monotonic() - started >= MAX_PASS:
                break
            last = (pruned.todos, t0)
            await asyncio.sleep(self.pace.after(pruned.todos, took, achieved))
        freed = await self._return_space()  # every pass: one capped at VACUUM_STEPS left some
        if self._unvacuumed >= worth:
            self._ask_vacuum()  # what was deleted since the last ask, in this pass and before
        oldest = await self.store.oldest_terminal_ms()
        age = 0.0 if oldest is None else max(0.0, self.clock.now() - oldest / 1000)
        self.metrics.retention_oldest_terminal.set(age)
        self.metrics.retention_sweeps.inc()
        if deleted["todos"]:
            log.info(
                "retention sweep",
                **deleted,
                batch=self.pace.batch,
                finishing_per_second=round(self.pace.need, 1),
                pages_freed=freed,
                vacuums=self.vacuums - vacuums,
                oldest_kept_seconds=round(age, 1),
                took_ms=round((time.monotonic() - started) * 1000),
                caught_up=caught_up,
            )
        return caught_up

    async def need(self, cutoff_ms: int) -> float:
        """Rows per second this pass must delete: the rate todos finish now, and more while the sweep
        is behind. ``lag`` is how far the oldest terminal todo kept lies past the cutoff; the rows in it
        (about the rate times the lag) should be gone within one interval, or a sweep that merely
        matched the finishing rate would keep a backlog for ever (the 1M soak on SQLite did: each pass
        deleted what finished during it and the kept history grew). The boost is a multiple of the
        finishing rate, at most ``LAG_BOOST``: an old backlog under a light load still drains gently."""
        rate = await self._finishing_rate()
        oldest = await self.store.oldest_terminal_ms()
        lag = 0.0 if oldest is None else max(0, cutoff_ms - oldest) / 1000
        return rate * (1 + min(lag / max(self.policy.interval_seconds, 1.0), LAG_BOOST))

    async def _finishing_rate(self) -> float:
        """Todos finished per second over the last window, on every instance of the database."""
        window = min(max(self.policy.interval_seconds, RATE_WINDOW[0]), RATE_WINDOW[1])
        since = ms(self.clock.now() - window)
        return await self.store.finished_since(since) / window

    def _ask_vacuum(self) -> None:
        """PostgreSQL: a VACUUM of the swept tables soon, beside the batches (never awaited by them: a
        throttled VACUUM of a large table takes a while, and the sweep must keep deleting). One runs at
        a time; asked for while one runs, another follows it."""
        if not self.store.can_vacuum:
            return
        self._unvacuumed, self._asked_at = 0, time.monotonic()
        self._vacuum_wanted = True
        if self._vacuum_task is None or self._vacuum_task.done():
            self._vacuum_task = asyncio.create_task(self._vacuum(), name="retention-vacuum")

    async def _vacuum(self) -> None:
        while self._vacuum_wanted:
            self._vacuum_wanted = False
            started = time.monotonic()
            try:
                await self.store.vacuum()
            except Exception as exc:  # the next pass asks again
                log.warning("retention vacuum failed", error=type(exc).__name__)
                return
            self.vacuums += 1
            log.debug("retention vacuum", took_ms=round((time.monotonic() - started) * 1000))

    async def settled(self) -> None:
        """Wait for the VACUUM running or asked for (the tests: nothing in the server awaits it)."""
        while (task := self._vacuum_task) is not None and not task.done():
            await asyncio.wait([task])

    async def _pause(self, since: float) -> None:
        await asyncio.sleep(max(PAUSE_MIN, (time.monotonic() - since) * PAUSE_RATIO))

    async def _return_space(self) -> int:
        """SQLite: the free pages back to the file, a short step at a time, paused like the batches;
        at most ``VACUUM_STEPS`` steps and ``VACUUM_SECONDS`` per pass (the next pass goes on)."""
        freed = 0
        started = time.monotonic()
        for _ in range(VACUUM_STEPS):
            t0 = time.monotonic()
            step = await self.store.return_space()
            if not step:
                break
            freed += step
            if time.monotonic() - started >= VACUUM_SECONDS:
                break  # the next pass goes on: deleting comes first (the file reuses free pages anyway)
            await self._pause(t0)
        return freed

    def start(self) -> None:
        if self.policy.retention_seconds > 0:
            self._task = asyncio.create_task(self._run(), name="retention")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await cancel_and_wait(self._vacuum_task)
        self._task = self._vacuum_task = None

    async def _run(self) -> None:
        await every(self.policy.interval_seconds, self.sweep_once, what="retention sweep", log=log)
