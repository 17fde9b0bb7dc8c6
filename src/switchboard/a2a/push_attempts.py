"""One A2A push attempt, from the config read to its outcome in the outbox.

Here a ``switchboard.push`` result becomes an outcome: delivered, a retry (a ``due_at`` in the outbox,
so a restart resumes it; the decision is the shared :class:`~switchboard.delivery.retry.RetryPolicy`'s,
ADR-0007's shape with A2A's settings, TLS failures retried too, a longer ``Retry-After`` honoured up to
the cap), or failed/exhausted. Every attempt is logged (ids, host, result, reason; never the URL, token,
credentials or anything the receiver sent back) and kept for the delivery log (issue 19).

Timeouts: an attempt has ``timeout`` (5 s). One that timed out *after the whole request was sent*,
while awaiting the response, probably reached a receiver that is merely slow: it is retried like any
timeout (at-least-once), but that delivery's next attempt, and every attempt to that config on this
instance for the next hour, waits ``slow_timeout`` (30 s). A receiver that takes 7 s therefore gets a
delivery at most twice, not once per attempt up to the cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from switchboard.a2a.config_types import SIGNING_SCHEME, SendableConfig
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.limits import HostLimits
from switchboard.a2a.outbox import Claimed, OutboxStore
from switchboard.core.clock import Clock, ms
from switchboard.delivery.backoff import Backoff
from switchboard.delivery.retry import RetryPolicy
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.operator.sink import NullSink, OperatorSink
from switchboard.push import AttemptTimeout, PushError, Sender, StatusError, Validator, standard_headers
from switchboard.store.notify_deliveries import Attempt, DeliveryBuffer, DeliveryRecord

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

    @property
    def retry(self) -> RetryPolicy:
        """A2A's retries (docs/a2a.md): base x 2^(attempt-1) capped, every TLS failure retried too, a
        longer ``Retry-After`` honoured up to the cap."""
        backoff = Backoff(base=self.retry_base, cap=self.retry_cap, max_attempts=self.max_attempts)
        return RetryPolicy(backoff, retry_tls=True, retry_after_cap=self.retry_cap)


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


class PushAttempts:
    def __init__(
        self,
        *,
        outbox: OutboxStore,
        configs: ConfigStore,
        sender: Sender,
        slow_sender: Sender,
        validator: Validator | None,
        limits: HostLimits,
        records: DeliveryBuffer,
        metrics: Metrics,
        clock: Clock,
        policy: Policy,
    ) -> None:
        self.outbox, self.configs, self.sender, self.slow_sender = outbox, configs, sender, slow_sender
        self.validator, self.limits, self.records = validator, limits, records
        self.metrics, self.clock, self.policy = metrics, clock, policy
        self.retry = policy.retry
        self._slow: dict[str, float] = {}  # config row id -> until (clock): it answers slowly
        self._tried: dict[str, list[Attempt]] = {}  # outbox row -> this instance's attempts so far
        self.operator: OperatorSink = NullSink()  # told of each give-up (set by the A2A component)

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

    async def attempt(self, item: Claimed) -> None:
        config = await self.configs.sendable(item.config_id)
        if config is None:
            return  # deleted since: its outbox rows went with it, and no attempt may start
        item = replace(item, endpoint_id=config.owner_endpoint_id)  # its delivery-log row names the owner
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
        delay = self.retry.next_delay(err, attempt)
        if delay is not None:
            self._log(item, attempt, err.result, status=status, err=err, retry_in=delay)
            await self.outbox.retry(item, status=status, error=error, due_ms=ms(now + delay))
            return
        outcome = "exhausted" if self.retry.retryable(err) else "failed"
        self.metrics.a2a_push_deliveries.labels(outcome).inc()
        self._log(item, attempt, err.result, status=status, err=err, outcome=outcome)
        if await self.outbox.failed(item, status=status, error=error, now_ms=ms(now)):
            # this claim finished the row: one event, however many instances share the outbox
            self.operator.push_gave_up(
                config_row_id=item.config_id,
                task_id=item.task_id,
                outcome=outcome,
                error=error,
                attempts=attempt,
            )

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
        self.records.add(
            DeliveryRecord(
                id=item.msg_id,
                kind="a2a",
                target_id=item.config_id,
                endpoint_id=item.endpoint_id,
                subject_id=item.task_id,
                type="a2a.push",
                reason=item.reason,
                outcome="delivered" if outcome == "delivered" else "failed",
                detail=None if err is None else err.reason[:40],
                finished_at=now,
                attempts=tried,
                event_seq=item.seq,  # what a replay sends again (a2a/replay.py)
            )
        )
