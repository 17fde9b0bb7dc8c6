"""Delivery of operator events to ``SWITCHBOARD_OPERATOR_WEBHOOK_URL``: Standard Webhooks signed, through
the notify hooks' SSRF guard and Sender (same allowlist, 5 s timeout, 64 KiB response cap, no redirects).

One event at a time, oldest first, from a bounded in-memory queue: a few attempts with backoff (retried
as notify hooks are: network errors, timeouts, 408, 429, 5xx, and TLS failures too), then the event is
given up and logged. An event's body and ``webhook-id`` are fixed before its first attempt; each attempt
signs it afresh with its own timestamp. A full queue refuses the newest event (counted and logged). None
of this shares a worker, queue or lock with notify hooks or A2A push: a dead operator receiver costs
those nothing. Nothing is persisted: a restart loses what was queued (as REQ-7 loses pending
notifications).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from switchboard.delivery.backoff import Backoff
from switchboard.delivery.retry import RetryPolicy
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.push import PushError, Sender, StatusError, standard_headers

log = get_logger("switchboard.operator")

MAX_QUEUE = 100
RETRY = RetryPolicy(Backoff(steps=(1.0, 5.0, 30.0), max_attempts=4, jitter=0.2), retry_tls=True)

Build = Callable[["Queued"], Awaitable[bytes]]  # the event's body, built once before its first attempt


@dataclass
class Queued:
    msg_id: str
    type: str
    data: dict[str, Any]
    body: bytes | None = None


class OperatorWebhook:
    def __init__(
        self,
        url: str,
        secret: str,
        *,
        sender: Sender,
        metrics: Metrics,
        build: Build,
        retry: RetryPolicy = RETRY,
        clock: Callable[[], float] = time.time,
        max_queue: int = MAX_QUEUE,
    ) -> None:
        self._url, self._secrets = url, [secret]
        self.sender, self.metrics, self.build, self.retry = sender, metrics, build, retry
        self._clock, self.max_queue = clock, max_queue
        self._queue: deque[Queued] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def put(self, item: Queued) -> None:
        if len(self._queue) >= self.max_queue:
            self.metrics.operator_events.labels(item.type, "dropped").inc()
            log.warning("operator event dropped: queue full", type=item.type, event_id=item.msg_id)
            return
        self._queue.append(item)
        self._idle.clear()
        self._ready.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="operator-webhook")

    async def stop(self, drain: float = 2.0) -> None:
        """Give what is queued ``drain`` seconds, then stop; what is left is logged as not sent."""
        if self._task is None:
            return
        try:
            async with asyncio.timeout(drain):
                await self._idle.wait()
        except TimeoutError:
            pass
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        if self._queue:
            log.warning("operator events not sent at shutdown", events=len(self._queue))

    async def idle(self) -> None:
        """Until every queued event is delivered or given up (tests)."""
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            while self._queue:
                item = self._queue[0]
                try:
                    await self._deliver(item)
                except Exception:  # one bad event never stops the next
                    log.error(
                        "operator event could not be sent",
                        type=item.type,
                        event_id=item.msg_id,
                        exc_info=True,
                    )
                self._queue.popleft()
            self._ready.clear()
            self._idle.set()

    async def _deliver(self, item: Queued) -> None:
        if item.body is None:
            item.body = await self.build(item)
        attempt = 0
        while True:
            attempt += 1
            headers = standard_headers(self._secrets, item.msg_id, int(self._clock()), item.body)
            try:
                result = await self.sender.send(self._url, body=item.body, headers=headers)
            except PushError as err:
                delay = self.retry.next_delay(err, attempt)
                log.warning(
                    "operator event attempt failed",
                    type=item.type,
                    event_id=item.msg_id,
                    attempt=attempt,
                    result=err.result,
                    status=err.status if isinstance(err, StatusError) else None,
                    error=err.reason,
                    retry_in_s=None if delay is None else round(delay, 1),
                )
                if delay is None:
                    self.metrics.operator_events.labels(item.type, "failed").inc()
                    log.error(
                        "operator event given up", type=item.type, event_id=item.msg_id, attempts=attempt
                    )
                    return
                await asyncio.sleep(delay)  # the backoff: this task's own wait, nobody else's
                continue
            self.metrics.operator_events.labels(item.type, "delivered").inc()
            log.info(
                "operator event sent",
                type=item.type,
                event_id=item.msg_id,
                attempt=attempt,
                status=result.status,
            )
            return
