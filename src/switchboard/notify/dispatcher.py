"""The notify-hook dispatcher: a transition subscriber feeding a bounded queue and a worker pool.

Shape, and why:

* Matching happens in the hub's subscriber task, after commit, so ingest and MCP never wait on it.
* One bounded queue per instance (REQ-7). Full: the notification is dropped and counted, and a warning
  names the hook (never the URL); sustained overflow coalesces warnings per reason per window.
* Workers never sleep: a retry is a timer that re-enqueues, so a dead receiver holds a worker only for
  the attempt itself. At most ``per_owner_inflight`` attempts run at once for one owning human, across
  all their endpoints and hooks (a tenant may hold several endpoints of 5 hooks each); the rest wait in
  that owner's bounded backlog, and the rest of the pool keeps serving other tenants.
* Pending attempts live only in memory (REQ-7): a restart loses them, and the todo stays claimable.
* Successful deliveries' health is coalesced per hook and written within ``health_flush_interval``
  (one statement per hook per flush, not one transaction per notification); a failure of that hook
  first writes what is pending for it, under one lock, so the order of health writes is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from switchboard.clock import Clock, ms
from switchboard.notify import body as bodies
from switchboard.notify.store import HookStore
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
    new_message_id,
    standard_headers,
)
from switchboard.ratelimit import RateLimiter
from switchboard.store.accounts import AccountStore
from switchboard.store.presence import PresenceReturn
from switchboard.store.todos import TodoStore
from switchboard.store.transitions import Transition

log = get_logger("switchboard.notify")

MAX_ATTEMPTS = 3
T = TypeVar("T")
DROP_LOG_WINDOW = 10.0


@dataclass
class Notification:
    id: str
    type: str  # todo.ready | todos.backlog
    hook_id: str
    endpoint_id: str
    owner_id: str
    todo_id: str | None
    body: bytes
    attempts: int = 0
    started: float = field(default_factory=time.monotonic)


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
        return "client_error"
    return "failed"


ATTEMPT_RESULTS = frozenset({"2xx", "3xx", "4xx", "5xx", "timeout", "network", "tls", "rejected_ssrf"})


def attempt_result(err: PushError) -> str:
    """The REQ-11 label: the push taxonomy's result, with odd statuses (1xx, 6xx+) folded into 4xx/5xx."""
    if err.result in ATTEMPT_RESULTS:
        return err.result
    status = err.status if isinstance(err, StatusError) else 0
    return "5xx" if status >= 500 else "4xx"


def jittered(delay: float) -> float:
    """About ``delay`` (+-20%), so a burst of failures does not retry in lockstep."""
    return delay * random.uniform(0.8, 1.2)


class _DropLog:
    """One warning per reason per window, each saying how many drops it stands for."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._suppressed: defaultdict[str, int] = defaultdict(int)

    def drop(self, reason: str, **ids: str | None) -> None:
        now = time.monotonic()
        if now - self._last.get(reason, -DROP_LOG_WINDOW) >= DROP_LOG_WINDOW:
            count = self._suppressed.pop(reason, 0) + 1
            self._last[reason] = now
            log.warning("notification dropped", reason=reason, drops=count, **ids)
        else:
            self._suppressed[reason] += 1


class Dispatcher:
    def __init__(
        self,
        *,
        hooks: HookStore,
        accounts: AccountStore,
        todos: TodoStore,
        sender: Sender,
        metrics: Metrics,
        clock: Clock,
        queue_size: int = 10_000,
        workers: int = 16,
        per_owner_inflight: int = 4,
        per_owner_backlog: int = 1000,
        rate_per_minute: float = 120,
        retry_delays: Sequence[float] = (1.0, 5.0),
        drain_timeout: float = 5.0,
        health_flush_interval: float = 0.1,
    ) -> None:
        self.hooks, self.accounts, self.todos = hooks, accounts, todos
        self.sender, self.metrics, self.clock = sender, metrics, clock
        self.queue: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue_size)
        self.worker_count = workers
        self.per_owner_inflight = per_owner_inflight
        self.per_owner_backlog = per_owner_backlog
        self.limiter = RateLimiter(clock, rate_per_minute, burst=rate_per_minute)
        self.retry_delays = tuple(retry_delays)
        self.drain_timeout = drain_timeout
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._parked: defaultdict[str, deque[Notification]] = defaultdict(deque)
        self._timers: set[asyncio.TimerHandle] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._drops = _DropLog()
        self._busy = 0
        self.health_flush_interval = health_flush_interval
        self._delivered: dict[str, tuple[int, int, str]] = {}  # hook -> (status, at ms, notification)
        self._health_due = asyncio.Event()
        self._health_lock = asyncio.Lock()
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.accepting = False

    # -- producing ---------------------------------------------------------------------------------

    async def on_transition(self, t: Transition) -> None:
        """Hub subscriber: match the transition against the endpoint's hooks (REQ-1, REQ-6, REQ-9)."""
        if not t.pushable or t.endpoint_id is None or not self.accepting:
            return
        found = await self.hooks.enabled_with_endpoint(t.endpoint_id)
        if found is None:
            return
        endpoint, hooks = found
        now = self.clock.now()
        body: bytes | None = None
        for hook in hooks:
            if t.queue not in hook.effective_queues(endpoint.queues):
                continue
            if not hook.ignore_presence and endpoint.effective_presence == "out":
                continue
            body = body or bodies.todo_ready(t, endpoint.slug, now)
            self._offer(
                Notification(
                    new_message_id(), "todo.ready", hook.id, endpoint.id, endpoint.human_id, t.todo_id, body
                )
            )

    def on_unmatched_drop(self, t: Transition) -> None:
        """The hub's queue was full: dropped before any hook was matched, so log endpoint and todo ids."""
        if t.pushable:
            self.metrics.notify_notifications.labels("todo.ready", "dropped").inc()
            self._drops.drop("queue_full_unmatched", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        """REQ-9: one todos.backlog per presence-respecting hook, decided by the presence_seen update."""
        if not self.accepting:
            return
        endpoint = await self.accounts.endpoint(event.endpoint_id)
        if endpoint is None:
            return
        now = self.clock.now()
        reason = (
            event.reason if event.reason in ("clock_in", "operator", "shift_start", "override_end") else None
        )
        if reason is None:
            return
        for hook in await self.hooks.enabled_for_endpoint(endpoint.id):
            if hook.ignore_presence:
                continue
            pending, queues, oldest = await self.todos.pending_summary(
                endpoint.id, hook.effective_queues(endpoint.queues)
            )
            if pending == 0 or oldest is None:
                continue
            age = max(0, int(now - oldest / 1000))
            body = bodies.todos_backlog(endpoint.slug, reason, pending, queues, age, now)
            self._offer(
                Notification(
                    new_message_id(), "todos.backlog", hook.id, endpoint.id, endpoint.human_id, None, body
                )
            )

    def _offer(self, n: Notification) -> None:
        if not self.limiter.allow(n.hook_id):
            self._dropped(n, "rate_limited")
            return
        self._put(n)

    def _put(self, n: Notification) -> None:
        try:
            self.queue.put_nowait(n)
        except asyncio.QueueFull:
            self._dropped(n, "queue_full")
            return
        self._idle.clear()
        self.metrics.notify_queue_depth.set(self.queue.qsize())

    def _dropped(self, n: Notification, reason: str) -> None:
        self.metrics.notify_notifications.labels(n.type, "dropped").inc()
        self._drops.drop(reason, hook_id=n.hook_id, notification_id=n.id, todo_id=n.todo_id)
        self._check_idle()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self.accepting = True
        self._workers = [
            asyncio.create_task(self._work(), name=f"notify-worker-{i}") for i in range(self.worker_count)
        ]
        self._flusher = asyncio.create_task(self._flush_loop(), name="notify-health-flush")

    async def stop(self) -> None:
        """Stop taking notifications, let in-flight work finish within ``drain_timeout``, then abandon."""
        self.accepting = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.drain_timeout):
                await self.queue.join()
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self._flush_health()

    async def idle(self) -> None:
        """Wait until nothing is queued, in flight or waiting to retry (tests await this)."""
        await self._idle.wait()

    def _check_idle(self) -> None:
        if (
            self.queue.empty()
            and self._busy == 0
            and not self._timers
            and not any(self._parked.values())
            and not self._delivered
            and not self._flushing
        ):
            self._idle.set()

    # -- attempts ----------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            n = await self.queue.get()
            self.metrics.notify_queue_depth.set(self.queue.qsize())
            try:
                owner = n.owner_id
                if self._inflight[owner] >= self.per_owner_inflight:
                    # Fairness: one tenant never holds more than its share of the pool.
                    parked = self._parked[owner]
                    if len(parked) >= self.per_owner_backlog:
                        self._dropped(n, "owner_backlog_full")
                    else:
                        parked.append(n)
                    continue
                self._inflight[owner] += 1
                self._busy += 1
                try:
                    await self._attempt(n)
                finally:
                    self._busy -= 1
                    self._inflight[owner] -= 1
                    if self._inflight[owner] == 0:
                        del self._inflight[owner]
                    waiting = self._parked.get(owner)
                    if waiting:
                        self._put(waiting.popleft())
                        if not waiting:
                            del self._parked[owner]
            finally:
                self.queue.task_done()
                self._check_idle()

    async def _attempt(self, n: Notification) -> None:
        try:
            hook = await self.hooks.sendable(n.hook_id)
        except Exception:
            log.error(
                "hook read failed", hook_id=n.hook_id, notification_id=n.id, stage="store", exc_info=True
            )
            self.metrics.notify_notifications.labels(n.type, "failed").inc()
            return
        if hook is None:  # deleted or disabled since it was matched: no attempt may start
            self._dropped(n, "hook_gone")
            return
        n.attempts += 1
        headers = standard_headers(hook.secrets, n.id, int(self.clock.now()), n.body)
        started = time.monotonic()
        try:
            result = await self.sender.send(hook.url, body=n.body, headers=headers)
        except PushError as err:
            await self._failed_attempt(n, err, time.monotonic() - started)
            return
        duration = time.monotonic() - started
        self.metrics.notify_attempts.labels("2xx").inc()
        self.metrics.notify_notifications.labels(n.type, "delivered").inc()
        log.info(
            "notify attempt",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            result="2xx",
            status=result.status,
            duration_ms=round(duration * 1000, 1),
        )
        self._delivered[n.hook_id] = (result.status, ms(self.clock.now()), n.id)
        self._health_due.set()

    async def _failed_attempt(self, n: Notification, err: PushError, duration: float) -> None:
        status = err.status if isinstance(err, StatusError) else None
        reason = classify(err)
        result = attempt_result(err)
        self.metrics.notify_attempts.labels(result).inc()
        log.info(
            "notify attempt",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            result=result,
            status=status,
            error=reason,
            stage=err.stage,
            duration_ms=round(duration * 1000, 1),
        )
        if err.retryable and n.attempts < MAX_ATTEMPTS and self.accepting:
            # Health is written once per delivery, with its final attempt: a failing receiver must not
            # turn into three writes per notification competing with ingest for the database.
            self._retry_later(n, jittered(self.retry_delays[min(n.attempts, len(self.retry_delays)) - 1]))
            return
        self.metrics.notify_notifications.labels(n.type, "failed").inc()
        async with self._health_lock:
            pending = self._delivered.pop(n.hook_id, None)
            if pending is not None:  # an earlier success of this hook is written first
                await self._write_delivered(n.hook_id, pending)
            outcome = await self._health(n, self.hooks.record_failed(n.hook_id, status, reason))
        if outcome is not None and outcome.disabled_now:
            self.metrics.notify_disabled.labels("consecutive_failures").inc()
            log.warning(
                "notify hook disabled",
                hook_id=n.hook_id,
                reason="consecutive_failures",
                consecutive_failures=outcome.consecutive_failures,
            )

    async def _flush_loop(self) -> None:
        while True:
            await self._health_due.wait()
            await asyncio.sleep(self.health_flush_interval)  # let concurrent deliveries coalesce
            await self._flush_health()
            self._check_idle()

    async def _flush_health(self) -> None:
        async with self._health_lock:
            self._flushing = True
            try:
                pending, self._delivered = self._delivered, {}
                self._health_due.clear()
                for hook_id, entry in pending.items():
                    await self._write_delivered(hook_id, entry)
            finally:
                self._flushing = False

    async def _write_delivered(self, hook_id: str, entry: tuple[int, int, str]) -> None:
        status, at_ms, notification_id = entry
        try:
            await self.hooks.record_delivered(hook_id, status, at_ms)
        except Exception:
            log.error(
                "hook health update failed",
                hook_id=hook_id,
                notification_id=notification_id,
                stage="health",
                exc_info=True,
            )

    async def _health(self, n: Notification, update: Awaitable[T]) -> T | None:
        """REQ-12: a health-write failure is logged with both ids and the worker carries on."""
        try:
            return await update
        except Exception:
            log.error(
                "hook health update failed",
                hook_id=n.hook_id,
                notification_id=n.id,
                stage="health",
                exc_info=True,
            )
            return None

    def _retry_later(self, n: Notification, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            assert handle is not None
            self._timers.discard(handle)
            if self.accepting:
                self._put(n)
            self._check_idle()

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)
