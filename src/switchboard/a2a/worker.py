"""The push delivery worker pool: claims due outbox rows and sends them through ``switchboard.push``.

Why it is shaped like this:

* It runs beside request handling, never inside it: a transition only writes outbox rows, and the
  post-commit hook merely wakes this loop.
* Every attempt is its own task, at most ``workers`` at a time and ``host_inflight`` per pinned IP, so
  a receiver that takes its full timeout holds one slot and no one else waits on it.
* Rate and in-flight limits are keyed by the addresses the SSRF guard validated for the attempt, not by
  the host name (limits.py). A host over its rate is left out of the claim (its rows wait in the outbox,
  never dropped); a row claimed just as its address ran dry is given back uncounted.
* Timeouts: an attempt has ``timeout`` (5 s). One that timed out *after the whole request was sent*,
  while awaiting the response, probably reached a receiver that is merely slow: it is retried like any
  timeout (at-least-once), but that delivery's next attempt, and every attempt to that config on this
  instance for the next hour, waits ``slow_timeout`` (30 s). A receiver that takes 7 s therefore gets
  a delivery at most twice, not once per attempt up to the cap.
* TLS failures (certificate or handshake) are retried up to the cap like network errors: a certificate
  can be mid-renewal, or one load-balancer node bad.
* Retries follow ADR-0007's shape: base x 2^(attempt-1), capped, up to an attempt cap. Each is a
  ``due_at`` in the database, so a restart resumes them. Nothing sleeps.
* The clock is injected and :meth:`poll_once` / :meth:`drain` exist, so tests drive 30 s backoffs
  without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from switchboard.a2a.config_types import SIGNING_SCHEME, SendableConfig
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.limits import HostLimits
from switchboard.a2a.outbox import Claimed, OutboxStore
from switchboard.clock import Clock, ms
from switchboard.notify.deliveries import Attempt, DeliveryBuffer, DeliveryLog, DeliveryRecord
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.push import (
    AttemptTimeout,
    PushError,
    RetryableStatus,
    Sender,
    StatusError,
    TLSFailure,
    Validator,
    standard_headers,
)

log = get_logger("switchboard.a2a.push")

A2A_VERSION = "1.0"
SEQUENCE_HEADER = "x-switchboard-sequence"
TASK_HEADER = "x-switchboard-task-id"
TOKEN_HEADER = "x-a2a-notification-token"
RESPONSE_TIMEOUT = "response_timeout"  # outbox last_error: timed out awaiting the response
SCOPE_REVOKED = "revoked"  # outbox last_error and outcome: the endpoint lost a2a_push_config
SLOW_MEMORY_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Policy:
    """Operator settings of delivery (docs/configuration.md, "A2A")."""

    workers: int = 8
    max_attempts: int = 10
    retry_base: float = 30.0
    retry_cap: float = 3600.0
    poll_seconds: float = 2.0
    retention_seconds: float = 24 * 3600.0
    lease_seconds: float = 60.0  # > the slow timeout + a lookup: a live claim never expires mid-attempt
    cleanup_seconds: float = 300.0
    drain_timeout: float = 6.0
    timeout: float = 5.0
    slow_timeout: float = 30.0
    order_wait_seconds: float = 60.0

    def delay(self, attempt: int) -> float:
        """Seconds before the next attempt, after ``attempt`` attempts failed."""
        return float(min(self.retry_cap, self.retry_base * 2 ** max(0, attempt - 1)))


def retryable(err: PushError) -> bool:
    """A2A's own retry decision: the shared classification, plus every TLS failure (docs/a2a.md)."""
    return err.retryable or isinstance(err, TLSFailure)


def headers_for(config: SendableConfig, item: Claimed, now: float) -> dict[str, str]:
    """The headers of one attempt (docs/a2a.md, "Receiver guide").

    ``Authorization`` carries the config's ``authentication`` when it is an HTTP scheme; otherwise (no
    ``authentication``, or ``StandardWebhooks`` signing) it carries the ``token`` as a Bearer
    credential, which is where A2A v1.0 puts it (A2A PR #1793). The token is also sent as
    ``X-A2A-Notification-Token``, the header a2a-sdk's sender uses and SDK-built receivers check."""
    headers = {
        "content-type": "application/json",
        "a2a-version": A2A_VERSION,
        SEQUENCE_HEADER: str(item.seq),
        TASK_HEADER: item.task_id,
    }
    if config.token:
        headers[TOKEN_HEADER] = config.token
    if config.scheme == SIGNING_SCHEME and config.credentials:
        headers.update(standard_headers([config.credentials], item.msg_id, int(now), item.body))
    elif config.scheme and config.credentials:
        headers["authorization"] = f"{config.scheme} {config.credentials}"
    if config.token and "authorization" not in headers:
        headers["authorization"] = f"Bearer {config.token}"
    return headers


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
        self.outbox, self.configs, self.sender = outbox, configs, sender
        # the delivery log (issue 19): finished pushes, written in one INSERT per housekeeping round
        self._records = DeliveryBuffer(deliveries)
        self._tried: dict[str, list[Attempt]] = {}  # outbox row -> this instance's attempts so far
        self.validator = validator
        self.slow_sender = slow_sender or sender
        self._slow: dict[str, float] = {}  # config row id -> until (clock): it answers slowly
        self.limits, self.metrics, self.clock, self.policy = limits, metrics, clock, policy
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
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
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
            soonest = self.limits.next_token_in()
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
            await self._attempt(item)
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

    def _is_slow(self, item: Claimed) -> bool:
        if item.last_error == RESPONSE_TIMEOUT:
            return True
        until = self._slow.get(item.config_id)
        if until is not None and until <= self.clock.now():
            del self._slow[item.config_id]
            return False
        return until is not None

    def _mark_slow(self, item: Claimed) -> None:
        self._slow[item.config_id] = self.clock.now() + SLOW_MEMORY_SECONDS
        if len(self._slow) > 10_000:
            self._slow.pop(next(iter(self._slow)))

    async def _attempt(self, item: Claimed) -> None:
        config = await self.configs.sendable(item.config_id)
        if config is None:
            return  # deleted since: its outbox rows went with it, and no attempt may start
        if not config.granted:
            # The owner took a2a_push_config away from the sending endpoint: no call goes out, and the
            # delivery ends now rather than waiting for a grant that may never come (docs/a2a.md).
            self.metrics.a2a_push_deliveries.labels(SCOPE_REVOKED).inc()
            self._log(item, item.attempts, "none", status=None, outcome=SCOPE_REVOKED)
            await self.outbox.failed(item, status=None, error=SCOPE_REVOKED, now_ms=ms(self.clock.now()))
            return
        attempt = item.attempts + 1
        ips: tuple[str, ...] = (item.host,)
        if self.validator is not None:
            # The addresses this attempt may dial key its limits. The Sender validates again (the
            # guard runs right before the dial); a refusal or a lookup failure here is the attempt's.
            try:
                ips = (await self.validator.check_attempt(config.url)).ips
            except PushError as err:
                await self._failed(item, attempt, err)
                return
            self.limits.learn(item.host, ips)
        if self.limits.at_inflight_cap(ips):
            await self.outbox.release(item, due_ms=ms(self.clock.now()))
            return
        wait = self.limits.take(ips)
        if wait > 0:
            self.metrics.a2a_push_deferred.inc()
            await self.outbox.release(item, due_ms=ms(self.clock.now() + wait))
            return
        sender = self.slow_sender if self._is_slow(item) else self.sender
        started = time.monotonic()
        self.limits.started(ips)
        try:
            result = await sender.send(
                config.url, body=item.body, headers=headers_for(config, item, self.clock.now())
            )
        except PushError as err:
            await self._failed(item, attempt, err)
            return
        finally:
            self.limits.finished(ips)
        self.metrics.a2a_push_attempts.labels("2xx").inc()
        self.metrics.a2a_push_deliveries.labels("delivered").inc()
        self._log(item, attempt, "2xx", status=result.status, duration=time.monotonic() - started)
        now_ms = ms(self.clock.now())
        self.metrics.a2a_delivery_seconds.observe(max(0, now_ms - item.created_ms) / 1000)
        await self.outbox.delivered(item, status=result.status, now_ms=now_ms)

    async def _failed(self, item: Claimed, attempt: int, err: PushError) -> None:
        status = err.status if isinstance(err, StatusError) else None
        self.metrics.a2a_push_attempts.labels(err.result).inc()
        now = self.clock.now()
        error = err.reason[:40]
        if isinstance(err, AttemptTimeout) and err.stage == "response":
            # The request was sent whole; the receiver is slow, not unreachable (module docstring).
            error = RESPONSE_TIMEOUT
            self._mark_slow(item)
        again = retryable(err)
        if again and attempt < self.policy.max_attempts:
            delay = self.policy.delay(attempt)
            if isinstance(err, RetryableStatus) and err.retry_after is not None:
                delay = min(self.policy.retry_cap, max(delay, err.retry_after))
            self._log(item, attempt, err.result, status=status, err=err, retry_in=delay)
            await self.outbox.retry(item, status=status, error=error, due_ms=ms(now + delay))
            return
        outcome = "exhausted" if again else "failed"
        self.metrics.a2a_push_deliveries.labels(outcome).inc()
        self._log(item, attempt, err.result, status=status, err=err, outcome=outcome)
        await self.outbox.failed(item, status=status, error=error, now_ms=ms(now))

    def _log(
        self,
        item: Claimed,
        attempt: int,
        result: str,
        *,
        status: int | None,
        err: PushError | None = None,
        duration: float | None = None,
        retry_in: float | None = None,
        outcome: str | None = None,
    ) -> None:
        """One line per attempt: ids, host, result and reason; never the URL, token, credentials or
        anything the receiver sent back."""
        if duration is None and err is not None:
            duration = err.duration
        log.info(
            "a2a push attempt",
            task_id=item.task_id,
            config=item.config_id,
            delivery=item.id,
            seq=item.seq,
            host=item.host,
            attempt=attempt,
            result=result,
            status=status,
            error=None if err is None else err.reason,
            stage=None if err is None else err.stage,
            duration_ms=None if duration is None else round(duration * 1000, 1),
            retry_in_s=retry_in,
            outcome=outcome or ("delivered" if err is None else None),
        )
        self._note(item, attempt, status, err, duration, outcome or ("delivered" if err is None else None))

    def _note(
        self,
        item: Claimed,
        attempt: int,
        status: int | None,
        err: PushError | None,
        duration: float | None,
        outcome: str | None,
    ) -> None:
        """Keep the attempt; at the push's outcome, its delivery-log record (attempts this instance made)."""
        now = ms(self.clock.now())
        tried = self._tried.setdefault(item.id, [])
        tried.append(
            Attempt(
                attempt,
                now,
                status,
                None if err is None else err.reason[:40],
                round((duration or 0) * 1000, 1),
            )
        )
        if len(self._tried) > 10_000:
            self._tried.pop(next(iter(self._tried)))
        if outcome is None:
            return
        self._tried.pop(item.id, None)
        self._records.add(
            DeliveryRecord(
                id=item.msg_id,
                kind="a2a",
                target_id=item.config_id,
                endpoint_id=None,
                subject_id=item.task_id,
                type="a2a.push",
                reason=None,
                outcome="delivered" if outcome == "delivered" else "failed",
                detail=None if err is None else err.reason[:40],
                finished_at=now,
                attempts=tried,
            )
        )
