"""The attempt runner: one attempt of a notification, from the hook read to its outcome.

Here a ``switchboard.push`` result becomes an outcome: delivered (2xx), a retry (the decision is the
shared :class:`~switchboard.delivery.retry.RetryPolicy`'s: at most ``MAX_ATTEMPTS``, about 1 s then
about 5 s, jittered; REQ-7), or failed, which is folded into the hook's health (REQ-8). Every attempt
is logged with the hook id, notification id, attempt number, result and duration (REQ-11).

* At most ``MAX_ATTEMPTS`` attempts per notification, checked right before each one starts, whatever
  handed the notification to the worker.
* A disabled hook is never called (REQ-8), including between its 10th failure and the flush that
  writes it: before each attempt, the stored streak (read with the hook) plus what this instance has
  not written yet is checked; if that would disable the hook, its fold is written at once and the hook
  read again, which then finds it disabled.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from switchboard.core.clock import Clock, ms
from switchboard.delivery.backoff import Backoff
from switchboard.delivery.retry import RetryPolicy
from switchboard.notify.flow import Flow
from switchboard.notify.health import HealthRecorder
from switchboard.notify.notification import Notification, Signer
from switchboard.notify.outcomes import Outcomes
from switchboard.notify.reads import HookReads
from switchboard.notify.store import SendableHook
from switchboard.notify.timers import RetryTimers
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    PermanentClientError,
    PushError,
    RedirectRefused,
    RetryableStatus,
    Sender,
    StatusError,
    TargetRejected,
    TLSFailure,
)

log = get_logger("switchboard.notify")

MAX_ATTEMPTS = 3
JITTER = 0.2  # each retry waits its delay +-20%, so a burst of failures does not retry in lockstep
SENDABLE_READS = 4  # at most this many reads of one hook before one attempt (see AttemptRunner.sendable)


def retry_policy(delays: Sequence[float]) -> RetryPolicy:
    """Notify's retries (REQ-7): ``delays`` after the first and second failed attempt, jittered."""
    return RetryPolicy(Backoff(max_attempts=MAX_ATTEMPTS, steps=tuple(delays), jitter=JITTER))


def classify(err: PushError) -> str:
    """REQ-8 last_error: a short classified reason, never response text."""
    if isinstance(err, TargetRejected):
        return "rejected_ssrf"
    if isinstance(err, RedirectRefused):
        return "redirect"
    if isinstance(err, AttemptTimeout):
        return "timeout"
    if isinstance(err, TLSFailure):
        return "tls"
    if isinstance(err, NetworkFailure):
        return "network"
    if isinstance(err, RetryableStatus):
        return "throttled" if err.status in (408, 429) else "server_error"
    if isinstance(err, PermanentClientError):
        return "client_error" if 400 <= err.status < 500 else "unexpected_status"
    return "failed"


def attempt_result(err: PushError) -> str:
    """The REQ-11 label, exactly the push taxonomy's (docs/push.md): a status outside 2xx-5xx (a 699)
    is ``other``, never folded into ``4xx`` or ``5xx``."""
    return err.result


def where(exc: BaseException | None) -> str | None:
    """Where an error was raised, as ``file:line function``: enough to find it, nothing it carried."""
    if exc is None or exc.__traceback__ is None:
        return None
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


class AttemptRunner:
    def __init__(
        self,
        *,
        sender: Sender,
        sign: Signer,
        reads: HookReads,
        health: HealthRecorder,
        outcomes: Outcomes,
        timers: RetryTimers,
        retry: RetryPolicy,
        metrics: Metrics,
        clock: Clock,
        flow: Flow,
    ) -> None:
        self.sender, self.sign, self.reads, self.health = sender, sign, reads, health
        self.outcomes, self.timers, self.retry = outcomes, timers, retry
        self.metrics, self.clock, self.flow = metrics, clock, flow

    def may_attempt(self, n: Notification) -> bool:
        """REQ-7's cap, checked right before an attempt starts, whatever handed ``n`` to this worker (a
        retry timer, the owner backlog, a bug that enqueued it twice): never a fourth attempt."""
        if self.retry.may_attempt(n.attempts) and n.outcome is None:
            return True
        log.error(
            "notify attempt refused: the notification has had its attempts",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempts=n.attempts,
            outcome=n.outcome,
        )
        return False

    async def attempt(self, n: Notification) -> None:
        if not self.may_attempt(n):
            return
        n.stage = "fast_fail"
        last = not self.retry.may_attempt(n.attempts + 1)
        fast = None if last else self.sender.fast_failure(n.url)
        if fast is not None:
            # An attempt before the last, to an origin that refused a connection moments ago: it fails as
            # send() would fail it, without the hook read and without a dial. The last attempt always
            # reads the hook (so a deleted or disabled one is dropped and the health write sees its streak).
            n.attempts += 1
            self.failed(n, None, fast, 0.0)
            return
        n.stage = "read"
        try:
            hook = await self.sendable(n.hook_id)
        except Exception:
            log.error(
                "hook read failed", hook_id=n.hook_id, notification_id=n.id, stage="store", exc_info=True
            )
            self.outcomes.end(n, "failed")
            return
        if hook is None:  # deleted or disabled since it was matched: no attempt may start
            self.outcomes.dropped(n, "hook_gone")
            return
        if not self.may_attempt(n):  # checked again after the read's await, then no await until counted
            return
        n.attempts += 1
        n.stage = "sign"
        headers = self.sign(hook.secrets, n.id, int(self.clock.now()), n.body)
        n.stage = "send"
        started = time.monotonic()
        try:
            result = await self.sender.send(hook.url, body=n.body, headers=headers)
        except PushError as err:
            n.stage = "outcome"
            self.failed(n, hook, err, time.monotonic() - started)
            return
        n.stage = "outcome"
        duration = time.monotonic() - started
        self.metrics.notify_attempts.labels("2xx").inc()
        self.outcomes.tried(n, result.status, None, duration)
        self.outcomes.end(n, "delivered")
        self.metrics.notify_delivery_seconds.observe(time.monotonic() - n.started)
        log.info(
            "notify attempt",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            result="2xx",
            status=result.status,
            duration_ms=round(duration * 1000, 1),
        )
        self.health.delivered(n.hook_id, result.status, ms(self.clock.now()), n.id)

    async def sendable(self, hook_id: str) -> SendableHook | None:
        """The fresh read before an attempt (REQ-2, REQ-8), with this instance's unwritten outcomes added.

        ``sendable`` returns the hook only while its row is enabled, with the streak as stored. When the
        outcomes this instance has not written yet would take it to 10, they are written now (the
        statement disables the hook) and the row is read again, so the attempt never starts. If a write
        of this hook's failures finished while the row was being read, the read may or may not include
        it: it is read again. The row stays the authority: after ``SENDABLE_READS`` reads, its answer
        stands."""
        hook: SendableHook | None = None
        for _ in range(SENDABLE_READS):
            written = self.health.failures_written(hook_id)
            hook = await self.reads.sendable(hook_id)
            if hook is None:
                return None
            if self.health.failures_written(hook_id) != written:
                continue
            if not self.health.would_disable(hook_id, hook.consecutive_failures):
                return hook
            await self.health.flush(only=hook_id)
        return hook

    def failed(self, n: Notification, hook: SendableHook | None, err: PushError, duration: float) -> None:
        """A failed attempt: retried later if the policy says so, else the notification's outcome."""
        status = err.status if isinstance(err, StatusError) else None
        reason = classify(err)
        result = attempt_result(err)
        self.metrics.notify_attempts.labels(result).inc()
        self.outcomes.tried(n, status, reason, duration)
        log.info(
            "notify attempt",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            result=result,
            status=status,
            error=reason,
            stage=err.stage,
            reason=err.reason,  # the push taxonomy's word (docs/push.md): e.g. which TLS or proxy failure
            fast_fail=err.fast_fail or None,
            duration_ms=round(duration * 1000, 1),
        )
        delay = self.retry.next_delay(err, n.attempts)
        if delay is not None and self.flow.accepting:
            # Health is written once per delivery, with its final attempt: a failing receiver must not
            # turn into three writes per notification competing with ingest for the database.
            self.timers.later(n, delay)
            return
        self.outcomes.end(n, "failed")
        self.health.failed(n.hook_id, status, reason, ms(self.clock.now()), n.id)
        if hook is None or self.health.would_disable(n.hook_id, hook.consecutive_failures):
            self.health.urge()  # write the disable now rather than after the flush interval

    def internal_error(self, n: Notification, exc: Exception) -> None:
        """An error outside the per-attempt handler (building or signing an attempt, a bug): logged with
        the ids, the stage, the error's type and where it was raised, never its message (it could
        quote a secret); the notification ends as failed; the worker goes on to the next one.

        An error while building or sending the attempt (``sign``, ``send``) is also a failed delivery of
        that hook (``last_error = "internal_error"``), so the endpoint sees it in list_notify_hooks and a
        hook that can never be signed is disabled at the 10th, like any dead hook."""
        self.metrics.notify_worker_errors.labels(n.stage).inc()
        log.error(
            "notify worker error",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            stage=n.stage,
            error_type=type(exc).__name__,
            where=where(exc),
        )
        if self.outcomes.end(n, "failed", "internal_error") and n.stage in ("sign", "send"):
            self.health.failed(n.hook_id, None, "internal_error", ms(self.clock.now()), n.id)
            self.health.urge()  # it may be the 10th: write it now, as for any possible disable
