"""The push delivery worker pool: claims due outbox rows and runs an attempt for each
(:mod:`switchboard.a2a.push_attempts` turns its result into an outcome).

Why it is shaped like this:

* It runs beside request handling, never inside it: a transition only writes outbox rows, and the
  post-commit hook merely wakes this loop.
* Every attempt is its own task, at most ``workers`` at a time and ``host_inflight`` per pinned IP, so
  a receiver that takes its full timeout holds one slot and no one else waits on it.
* Rate and in-flight limits are keyed by the addresses the SSRF guard validated for the attempt, not by
  the host name (limits.py). A host over its rate is left out of the claim (its rows wait in the outbox,
  never dropped); a row claimed just as its address ran dry is given back uncounted.
* Retries are a ``due_at`` in the database, so a restart resumes them. Nothing sleeps.
* The clock is injected and :meth:`poll_once` / :meth:`drain` exist, so tests drive 30 s backoffs
  without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.limits import HostLimits
from switchboard.a2a.outbox import Claimed, OutboxStore
from switchboard.a2a.push_attempts import Policy, PushAttempts
from switchboard.core.clock import Clock, ms
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.process.tasks import cancel_and_wait
from switchboard.push import Sender, Validator
from switchboard.store.notify_deliveries import DeliveryBuffer, DeliveryLog

log = get_logger("switchboard.a2a.push")

__all__ = ["DeliveryWorker", "Policy"]


class DeliveryWorker:
    def __init__(
        self,
        *,
        outbox: OutboxStore,
        configs: ConfigStore,
        sender: Sender,
        limits: HostLimits,
        validator: Validator | None = None,
        slow_sender: Sender | None = None,
        metrics: Metrics,
        clock: Clock,
        policy: Policy,
        deliveries: DeliveryLog | None = None,
    ) -> None:
        self.outbox, self.configs = outbox, configs
        # the delivery log (issue 19): finished pushes, written in one INSERT per housekeeping round
        self._records = DeliveryBuffer(deliveries)
        self.limits, self.metrics, self.clock, self.policy = limits, metrics, clock, policy
        self.attempts = PushAttempts(
            outbox=outbox,
            configs=configs,
            sender=sender,
            slow_sender=slow_sender or sender,
            validator=validator,
            limits=limits,
            records=self._records,
            metrics=metrics,
            clock=clock,
            policy=policy,
        )
        self._inflight: set[asyncio.Task[None]] = set()
        self._claim_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._gauged_at = 0.0
        self._next_cleanup = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="a2a-push-worker")

    async def stop(self) -> None:
        """Stop claiming; let attempts in flight finish (each is bounded by the Sender's timeout), then
        cancel the rest, which hand their rows back for the next instance or restart."""
        await cancel_and_wait(self._loop)
        self._loop = None
        if self._inflight:
            _, late = await asyncio.wait(set(self._inflight), timeout=self.policy.drain_timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._write_records()

    def wake(self) -> None:
        """Something may be due now (a transition committed, an attempt finished)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.poll_once()
                await self._housekeeping()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.error("push outbox poll failed", exc_info=True)
            timeout = self.policy.poll_seconds
            soonest = self.limits.next_room_in()
            if soonest is not None:
                timeout = min(timeout, max(soonest, 0.05))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _housekeeping(self) -> None:
        if time.monotonic() - self._gauged_at >= 1.0:
            self._gauged_at = time.monotonic()
            await self.update_gauges()
        if self.clock.now() >= self._next_cleanup:
            self._next_cleanup = self.clock.now() + self.policy.cleanup_seconds
            await self.cleanup_once()
        await self._write_records()

    async def _write_records(self) -> None:
        if self._records and self._records.log is not None:
            try:
                await self._records.log.write(self._records.take())
            except Exception:
                log.error("delivery log write failed", stage="delivery_log", exc_info=True)

    # -- explicit steps (the loop uses them; tests call them) -------------------------------------

    async def poll_once(self) -> int:
        """Claim what is due, up to the free capacity, and start an attempt for each. Returns how
        many rows were claimed; the attempts run on."""
        claimed, _ = await self._poll()
        return claimed

    async def _poll(self) -> tuple[int, int]:
        """(rows claimed, attempts that were already in flight), decided under one lock."""
        async with self._claim_lock:
            busy = len(self._inflight)
            free = self.policy.workers - busy
            if free <= 0:
                return 0, busy
            claimed = await self.outbox.claim(
                now_ms=ms(self.clock.now()),
                lease_ms=ms(self.policy.lease_seconds),
                limit=free,
                exclude_hosts=self.limits.blocked_hosts(),
                order_wait_ms=ms(self.policy.order_wait_seconds),
            )
            for item in claimed:
                if self.limits.host_blocked(item.host):
                    # One claim can take several rows of one host: past its cap, give them back.
                    await self.outbox.release(item, due_ms=ms(self.clock.now()))
                else:
                    self._launch(item)
            return len(claimed), busy

    async def idle(self) -> None:
        """Wait until no attempt is in flight."""
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    async def drain(self, max_rounds: int = 10_000) -> int:
        """Poll and wait until nothing is claimable at the clock's current time and nothing is in
        flight (an attempt that finishes can make the next sequence claimable). Returns rows claimed."""
        total = 0
        for _ in range(max_rounds):
            claimed, busy = await self._poll()
            await self.idle()
            total += claimed
            if claimed == 0 and busy == 0:
                break
        await self._write_records()  # what finished is in the delivery log when this returns
        return total

    async def update_gauges(self) -> None:
        backlog = await self.outbox.backlog()
        self.metrics.a2a_push_outbox_depth.set(backlog.pending)
        age = 0.0
        if backlog.oldest_created_ms is not None:
            age = max(0.0, self.clock.now() - backlog.oldest_created_ms / 1000)
        self.metrics.a2a_push_oldest_undelivered_seconds.set(age)

    async def cleanup_once(self) -> tuple[int, int]:
        """Config lifecycle: configs of tasks terminal for longer than the retention, once their final
        delivery is done (or given up), go; so do old finished outbox rows."""
        before = ms(self.clock.now() - self.policy.retention_seconds)
        configs = await self.configs.purge_finished(before)
        rows = await self.outbox.purge_finished(before)
        if configs or rows:
            log.info("a2a push retention sweep", configs_deleted=configs, outbox_rows_deleted=rows)
        return configs, rows

    # -- attempts ----------------------------------------------------------------------------------

    def _launch(self, item: Claimed) -> None:
        task = asyncio.create_task(self._deliver(item), name=f"a2a-push-{item.id}")
        self._inflight.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._inflight.discard(t)
            self._wake.set()

        task.add_done_callback(done)

    async def _deliver(self, item: Claimed) -> None:
        try:
            await self.attempts.attempt(item)
        except asyncio.CancelledError:
            # Shutdown: hand the row back now rather than at lease expiry. If the request was already
            # on the wire the receiver sees it twice, which the sequence number lets it discard.
            with contextlib.suppress(Exception):
                await self.outbox.release(item, due_ms=ms(self.clock.now()))
            raise
        except Exception:
            # The row stays claimed; its lease runs out and it is tried again (at-least-once).
            log.error(
                "a2a push attempt crashed",
                task_id=item.task_id,
                config=item.config_id,
                seq=item.seq,
                exc_info=True,
            )
