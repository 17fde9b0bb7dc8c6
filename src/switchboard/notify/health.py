"""Hook health (REQ-8): final outcomes folded per hook and written within ``flush_interval``.

Every final outcome (delivered, or failed after its last attempt) is folded, in order, into the hook's
pending :class:`HealthFold`, and a flush writes each hook's fold with one statement (not one
transaction per notification, which under a dead receiver competed with ingest for SQLite's write
lock). Flushes run one at a time under one lock, so a hook's writes land in the order of its outcomes;
the fold's statement disables the hook at the 10th failed delivery in a row. A failure that may
disable a hook cuts the flush wait short. The delivery log's records of a flush are written after its
health statement (issue 19). A failed write is logged with the ids and the dispatcher carries on
(REQ-12).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

from switchboard.notify.flow import Flow
from switchboard.notify.store import HealthFold, HealthOutcome, HookStore
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.operator.sink import NullSink, OperatorSink
from switchboard.store.notify_deliveries import DeliveryBuffer, DeliveryLog, DeliveryRecord

log = get_logger("switchboard.notify")


class HealthRecorder:
    def __init__(
        self,
        *,
        hooks: HookStore,
        metrics: Metrics,
        flow: Flow,
        flush_interval: float,
        deliveries: DeliveryLog | None,
        operator: OperatorSink | None = None,
    ) -> None:
        self.hooks, self.metrics, self.flow = hooks, metrics, flow
        self.operator = operator or NullSink()  # told of each disable this instance's write made
        self.flush_interval = flush_interval
        self.records = DeliveryBuffer(deliveries)  # the delivery log, written with the health flush
        self._pending: dict[str, HealthFold] = {}  # hook -> outcomes not yet being written
        self._writing: dict[str, HealthFold] = {}  # hook -> outcomes the current flush is writing
        self._written: defaultdict[str, int] = defaultdict(int)  # hook -> flushes of failures written
        self._disabled_at: dict[str, int] = {}  # hook -> the last disable time this instance saw
        self._due = asyncio.Event()
        self._urgent = asyncio.Event()
        self._lock = asyncio.Lock()
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None
        flow.holds_nothing_when(lambda: not self._pending and not self.records and not self._flushing)

    # -- recording ---------------------------------------------------------------------------------

    def delivered(self, hook_id: str, status: int, at: int, notification_id: str) -> None:
        self._fold(hook_id).delivered(status, at, notification_id)
        self._due.set()

    def failed(self, hook_id: str, status: int | None, reason: str, at: int, notification_id: str) -> None:
        self._fold(hook_id).failed(status, reason, at, notification_id)
        self._due.set()

    def urge(self) -> None:
        """An outcome may have disabled its hook: flush now rather than after the interval."""
        self._urgent.set()

    def add_record(self, record: DeliveryRecord) -> None:
        self.records.add(record)
        self._due.set()

    def would_disable(self, hook_id: str, streak: int) -> bool:
        """Would the outcomes not yet written (being written first) disable a hook stored at ``streak``?"""
        for fold in (self._writing.get(hook_id), self._pending.get(hook_id)):
            if fold is None:
                continue
            if fold.trips(streak):
                return True
            streak = fold.after(streak)
        return False

    def failures_written(self, hook_id: str) -> int:
        """How many flushes wrote failures of ``hook_id`` (a read racing one of them is read again)."""
        return self._written.get(hook_id, 0)

    def _fold(self, hook_id: str) -> HealthFold:
        fold = self._pending.get(hook_id)
        if fold is None:
            fold = self._pending[hook_id] = HealthFold()
        return fold

    # -- flushing ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop(), name="notify-health-flush")

    async def stop(self) -> None:
        """Stop the periodic flush (never in the middle of a write), then write what is pending."""
        if self._flusher is not None:
            async with self._lock:
                self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush()  # what is pending is written, not lost

    async def _flush_loop(self) -> None:
        while True:
            await self._due.wait()
            # let concurrent outcomes coalesce, unless one may have disabled its hook
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.flush_interval):
                    await self._urgent.wait()
            await self.flush()
            self.flow.settle()

    async def flush(self, only: str | None = None) -> None:
        """Write the pending folds (or only one hook's), one statement per hook, one flush at a time."""
        async with self._lock:
            if only is None:
                batch, self._pending = self._pending, {}
                self._due.clear()
                self._urgent.clear()
            else:
                fold = self._pending.pop(only, None)
                batch = {only: fold} if fold is not None else {}
            records = self.records.take() if only is None else []
            if not batch and not records:
                return
            self._flushing = True
            self._writing.update(batch)  # still counted by would_disable until written
            try:
                if batch:
                    await self._write_health(batch)
                await self._write_records(records)
            finally:
                for hook_id, fold in batch.items():
                    if fold.failures:
                        self._written[hook_id] += 1
                self._writing.clear()
                self._flushing = False

    async def _write_health(self, batch: dict[str, HealthFold]) -> None:
        """Every hook's fold in one transaction and one statement (``HookStore.record_many``)."""
        folds: list[tuple[str, HealthFold, int]] = []
        for hook_id, fold in batch.items():
            # A disable writes a time this instance has not seen on an earlier disable of this hook, so
            # the statement's result says whether it was this write that disabled it (a clock can stand
            # still).
            seen = self._disabled_at.get(hook_id)
            folds.append((hook_id, fold, fold.at if seen is None or fold.at > seen else seen + 1))
        try:
            outcomes = await self.hooks.record_many(folds)
        except Exception:  # REQ-12: logged with the ids, and the dispatcher carries on
            for hook_id, fold in batch.items():
                log.error(
                    "hook health update failed",
                    hook_id=hook_id,
                    notification_id=fold.notification_ids[-1],
                    notification_ids=fold.notification_ids,
                    outcomes=fold.outcomes,
                    stage="health",
                    exc_info=True,
                )
            return
        for hook_id, outcome in outcomes.items():
            self._written_one(hook_id, outcome)

    async def _write_records(self, records: list[DeliveryRecord]) -> None:
        """The delivery log's rows of this flush: one INSERT, after the health statement (issue 19)."""
        if not records or self.records.log is None:
            return
        try:
            await self.records.log.write(records)
        except Exception:  # REQ-12: a lost history line never stops delivery
            log.error(
                "delivery log write failed",
                rows=len(records),
                notification_id=records[-1].id,
                stage="delivery_log",
                exc_info=True,
            )

    def _written_one(self, hook_id: str, outcome: HealthOutcome | None) -> None:
        seen = self._disabled_at.get(hook_id)
        if outcome is None:  # deleted meanwhile
            self._disabled_at.pop(hook_id, None)
            return
        if outcome.disabled_at is not None:
            self._disabled_at[hook_id] = max(outcome.disabled_at, seen or outcome.disabled_at)
        if outcome.disabled_now:
            self.metrics.notify_disabled.labels("consecutive_failures").inc()
            log.warning(
                "notify hook disabled",
                hook_id=hook_id,
                reason="consecutive_failures",
                consecutive_failures=outcome.consecutive_failures,
            )
            self.operator.hook_disabled(
                hook_id, reason="consecutive_failures", consecutive_failures=outcome.consecutive_failures
            )
