"""The notify-hook dispatcher: a transition subscriber feeding a bounded queue and a worker pool.

Shape, and why:

* Matching happens in the hub's subscriber task, after commit, so ingest and MCP never wait on it. The
  dispatcher subscribes for batches: whatever the hub has queued for it (up to 256 transitions) is
  matched with one read of the endpoints involved and their enabled hooks, then each transition, in
  order, goes through the same rules as alone. Nothing read for one batch is kept for the next.
* One bounded queue per instance (REQ-7). Full: the notification is dropped and counted, and a warning
  names the hook (never the URL); sustained overflow coalesces warnings per reason per window.
* Workers never sleep: a retry is a timer that re-enqueues, so a dead receiver holds a worker only for
  the attempt itself. At most ``per_owner_inflight`` attempts run at once for one owning human, across
  all their endpoints and hooks (a tenant may hold several endpoints of 5 hooks each); the rest wait in
  that owner's bounded backlog, and the rest of the pool keeps serving other tenants.
* Pending attempts live only in memory (REQ-7): a restart loses them, and the todo stays claimable.
  A stop that abandons notifications (retries not yet due, queued or parked past the drain timeout)
  counts and logs each as dropped (reason ``shutdown``): every notification ends with one outcome.
* The per-hook limit is a ceiling (``switchboard.ratelimit.WindowLimiter``): no 60 s window admits
  more than ``rate_per_minute`` notifications of one hook; the rest are dropped and counted.
* Every drop reaches a ``notification dropped`` warning (:mod:`switchboard.notify.droplog`).
* At most ``MAX_ATTEMPTS`` attempts per notification, checked right before each one starts, whatever
  handed the notification to the worker; a worker survives any exception of one notification (it is
  logged without its message, counted as failed, and the worker takes the next one), and a worker task
  that ends anyway is started again, so the pool keeps its size (REQ-12).
* Health is coalesced per hook and written within ``health_flush_interval``: every final outcome
  (delivered, or failed after its last attempt) is folded, in order, into the hook's pending
  :class:`HealthFold`, and a flush writes each hook's fold with one statement (not one transaction per
  notification, which under a dead receiver competed with ingest for SQLite's write lock). Flushes run
  one at a time under one lock, so a hook's writes land in the order of its outcomes; the fold's
  statement disables the hook at the 10th failed delivery in a row (REQ-8).
* A disabled hook is never called (REQ-8), including between its 10th failure and the flush that
  writes it: before each attempt, the stored streak (read with the hook by ``sendable``) plus what this
  instance has not written yet is checked; if that would disable the hook, its fold is written at once
  and the hook read again, which then finds it disabled. A failure that may disable a hook also cuts
  the flush wait short.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import traceback
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchboard.clock import Clock, ms
from switchboard.notify import body as bodies
from switchboard.notify.deliveries import Attempt, DeliveryBuffer, DeliveryLog, DeliveryRecord
from switchboard.notify.droplog import DropLog
from switchboard.notify.store import HealthFold, HealthOutcome, HookStore, SendableHook
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
from switchboard.ratelimit import WindowLimiter
from switchboard.store.accounts import AccountStore, Endpoint
from switchboard.store.presence import PresenceReturn
from switchboard.store.todos import TodoStore
from switchboard.store.transitions import Transition
from switchboard.verbs import NOTIFY_HOOKS

log = get_logger("switchboard.notify")

MAX_ATTEMPTS = 3
RATE_WINDOW = 60.0  # SPEC-0024: "120 notifications per minute" per hook, as a ceiling
SENDABLE_READS = 4  # at most this many reads of one hook before one attempt (see _sendable)


@dataclass
class Notification:
    id: str
    type: str  # todo.ready | todos.backlog
    hook_id: str
    endpoint_id: str
    owner_id: str
    todo_id: str | None
    body: bytes
    url: str = field(repr=False)  # the hook's URL as read at match time; never logged (REQ-11)
    attempts: int = 0
    started: float = field(default_factory=time.monotonic)
    outcome: str | None = None  # delivered | failed | dropped, once it has one (counted once)
    stage: str = "queued"  # where a worker is with it, for the REQ-12 log line of an unexpected error
    reason: str | None = None  # the body's reason (created, requeued, clock_in, test, ...)
    test: bool = False  # a test send from the endpoint card
    tried: list[Attempt] = field(default_factory=list)  # for the delivery log, once it has an outcome
    detail: str | None = None  # why it was dropped, or its last error class, once it has an outcome


Signer = Callable[[Sequence[str], str, int, bytes], dict[str, str]]
"""Builds one attempt's signed headers: ``switchboard.push.standard_headers`` (a seam for tests)."""


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


ATTEMPT_RESULTS = frozenset(
    {"2xx", "3xx", "4xx", "5xx", "timeout", "network", "tls", "rejected_ssrf", "other"}
)


def attempt_result(err: PushError) -> str:
    """The REQ-11 label, exactly the push taxonomy's (docs/push.md): a status outside 2xx-5xx (a 699)
    is ``other``, never folded into ``4xx`` or ``5xx``."""
    return err.result


def hooks_granted(endpoint: Endpoint) -> bool:
    """Fire-time scope governs (REQ-1): an endpoint's hooks fire only while its scope holds at least one
    notify-hook verb. The owner cutting them all pauses its hooks (docs/notify-hooks.md, "Scope cut")."""
    return not NOTIFY_HOOKS_VERBS.isdisjoint(endpoint.verbs)


NOTIFY_HOOKS_VERBS = frozenset(NOTIFY_HOOKS.verbs)


def jittered(delay: float) -> float:
    """About ``delay`` (+-20%), so a burst of failures does not retry in lockstep."""
    return delay * random.uniform(0.8, 1.2)


class _Reads:
    """The workers' reads of their hooks before an attempt, batched: the ids asked for while a read
    runs go out together in the next one, each answer still read after it was asked for (REQ-2,
    REQ-8). One read per attempt cost a fifth of a worker process's CPU in a burst."""

    def __init__(self, hooks: HookStore) -> None:
        self._hooks = hooks
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def sendable(self, hook_id: str) -> SendableHook | None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(hook_id, []).append(future)
        if self._task is None:
            self._task = asyncio.create_task(self._read(), name="notify-hook-reads")
        row = await future
        return None if row is None else self._hooks.open_sendable(hook_id, row)

    async def _read(self) -> None:
        batch: dict[str, list[asyncio.Future[Any]]] = {}
        try:
            await asyncio.sleep(0)  # the other workers asking in this turn of the loop join the first read
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                try:
                    rows = await self._hooks.sendable_rows(batch)
                except Exception as exc:  # every waiter logs it with its own ids
                    for futures in batch.values():
                        for f in futures:
                            if not f.done():
                                f.set_exception(exc)
                    continue
                for hook_id, futures in batch.items():
                    for f in futures:
                        if not f.done():
                            f.set_result(rows.get(hook_id))
        finally:
            self._task = None
            for futures in [*batch.values(), *self._waiting.values()]:  # only if this task was cancelled
                for f in futures:
                    if not f.done():
                        f.set_exception(RuntimeError("the hook read was abandoned"))
            self._waiting = {}


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
        sign: Signer = standard_headers,
        drop_log: DropLog | None = None,
        deliveries: DeliveryLog | None = None,
    ) -> None:
        self.hooks, self.accounts, self.todos = hooks, accounts, todos
        self.sender, self.metrics, self.clock = sender, metrics, clock
        self.queue: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue_size)
        self.worker_count = workers
        self.per_owner_inflight = per_owner_inflight
        self.per_owner_backlog = per_owner_backlog
        self.limiter = WindowLimiter(clock, max(1, int(rate_per_minute)), RATE_WINDOW)
        self.sign = sign
        self.retry_delays = tuple(retry_delays)
        self.drain_timeout = drain_timeout
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._parked: defaultdict[str, deque[Notification]] = defaultdict(deque)
        self._timers: dict[asyncio.TimerHandle, Notification] = {}  # retries waiting for their time
        self._workers: list[asyncio.Task[None]] = []
        self._in_hand: dict[str, Notification] = {}  # notification id -> taken by a worker, not done
        self._drops = drop_log or DropLog()
        self._records = DeliveryBuffer(deliveries)  # the delivery log, written with the health flush
        self._busy = 0
        self.health_flush_interval = health_flush_interval
        self._pending: dict[str, HealthFold] = {}  # hook -> outcomes not yet being written
        self._writing: dict[str, HealthFold] = {}  # hook -> outcomes the current flush is writing
        self._written: defaultdict[str, int] = defaultdict(int)  # hook -> flushes of failures written
        self._disabled_at: dict[str, int] = {}  # hook -> the last disable time this instance saw
        self._health_due = asyncio.Event()
        self._health_urgent = asyncio.Event()
        self._health_lock = asyncio.Lock()
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._reads = _Reads(hooks)
        self.accepting = False
        self._stopping = False  # stop() is cancelling the workers: their ends are not restarted

    # -- producing ---------------------------------------------------------------------------------

    async def on_transition(self, t: Transition) -> None:
        """One transition: exactly :meth:`on_transitions` with a batch of one."""
        await self.on_transitions([t])

    async def on_transitions(self, batch: Sequence[Transition]) -> None:
        """Hub batch subscriber: match the transitions, in order, against their endpoints' hooks (REQ-1,
        REQ-6, REQ-9), with one read for the whole batch, made after all of them committed."""
        if not self.accepting:
            return
        wanted = [t for t in batch if t.pushable and t.endpoint_id is not None]
        if not wanted:
            return
        found = await self.hooks.enabled_with_endpoints({t.endpoint_id for t in wanted if t.endpoint_id})
        if not found:
            return
        queues: dict[str, frozenset[str]] = {}  # hook -> effective queue set, for this batch only
        urls: dict[str, str | None] = {}  # hook -> URL, opened once per batch, on its first match
        for t in wanted:
            match = found.get(t.endpoint_id or "")
            if match is None or not hooks_granted(match.endpoint):
                continue
            endpoint = match.endpoint
            now = self.clock.now()
            body: bytes | None = None
            for m in match.hooks:
                hook = m.hook
                effective = queues.get(hook.id)
                if effective is None:
                    effective = queues[hook.id] = frozenset(hook.effective_queues(endpoint.queues))
                if t.queue not in effective:
                    continue
                if not hook.ignore_presence and endpoint.effective_presence == "out":
                    continue
                if hook.id not in urls:
                    urls[hook.id] = self._open_url(hook.id, m.url_sealed, t.todo_id)
                url = urls[hook.id]
                if url is None:
                    self.metrics.notify_notifications.labels("todo.ready", "failed").inc()
                    continue
                body = body or bodies.todo_ready(t, endpoint.slug, now)
                self._offer(
                    Notification(
                        id=new_message_id(),
                        type="todo.ready",
                        hook_id=hook.id,
                        endpoint_id=endpoint.id,
                        owner_id=endpoint.human_id,
                        todo_id=t.todo_id,
                        body=body,
                        url=url,
                        reason="created" if t.transition == "created" else "requeued",
                    )
                )

    def _open_url(self, hook_id: str, sealed: bytes, todo_id: str | None) -> str | None:
        try:
            return self.hooks.open_url(hook_id, sealed)
        except Exception:  # REQ-12: this hook's notifications fail; the batch's others go on
            log.error("hook read failed", hook_id=hook_id, todo_id=todo_id, stage="store", exc_info=True)
            return None

    def on_unmatched_drop(self, t: Transition) -> None:
        """The hub's queue was full: dropped before any hook was matched, so log endpoint and todo ids."""
        if t.pushable:
            self.metrics.notify_notifications.labels("todo.ready", "dropped").inc()
            self._drops.drop("queue_full_unmatched", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        """REQ-9: one todos.backlog per presence-respecting hook, decided by the presence_seen update."""
        if not self.accepting:
            return
        reason = (
            event.reason if event.reason in ("clock_in", "operator", "shift_start", "override_end") else None
        )
        if reason is None:
            return
        found = (await self.hooks.enabled_with_endpoints([event.endpoint_id])).get(event.endpoint_id)
        if found is None or not hooks_granted(found.endpoint):
            return
        endpoint = found.endpoint
        now = self.clock.now()
        for m in found.hooks:
            hook = m.hook
            if hook.ignore_presence:
                continue
            pending, queues, oldest = await self.todos.pending_summary(
                endpoint.id, hook.effective_queues(endpoint.queues)
            )
            if pending == 0 or oldest is None:
                continue
            age = max(0, int(now - oldest / 1000))
            url = self._open_url(hook.id, m.url_sealed, None)
            if url is None:
                self.metrics.notify_notifications.labels("todos.backlog", "failed").inc()
                continue
            body = bodies.todos_backlog(endpoint.slug, reason, pending, queues, age, now)
            self._offer(
                Notification(
                    id=new_message_id(),
                    type="todos.backlog",
                    hook_id=hook.id,
                    endpoint_id=endpoint.id,
                    owner_id=endpoint.human_id,
                    todo_id=None,
                    body=body,
                    url=url,
                    reason=reason,
                )
            )

    async def send_test(self, hook_id: str, endpoint_id: str, endpoint_slug: str) -> dict[str, Any]:
        """The endpoint card's "send test" (issue 19): one signed ``todo.ready`` marked as a test, through
        this hook's limiter, the SSRF guard and the signer of every notification; one attempt, no retry,
        and its result is the answer. It is logged like any delivery but does not change the hook's
        health (a probe must neither disable a hook nor hide a failing streak)."""
        n = Notification(
            id=new_message_id(),
            type="todo.ready",
            hook_id=hook_id,
            endpoint_id=endpoint_id,
            owner_id="",
            todo_id=None,
            body=bodies.test_ready(endpoint_slug, self.clock.now()),
            url="",
            reason="test",
            test=True,
        )
        hook = await self._reads.sendable(hook_id)
        if hook is None:
            self._end(n, "dropped", "hook_disabled")
            return _test_result(n)
        if not self.limiter.allow(hook_id):
            self._end(n, "dropped", "rate_limited")
            return _test_result(n)
        n.attempts = 1
        headers = self.sign(hook.secrets, n.id, int(self.clock.now()), n.body)
        started = time.monotonic()
        try:
            result = await self.sender.send(hook.url, body=n.body, headers=headers)
        except PushError as err:
            self._tried(
                n,
                err.status if isinstance(err, StatusError) else None,
                classify(err),
                time.monotonic() - started,
            )
            self._end(n, "failed")
        else:
            self._tried(n, result.status, None, time.monotonic() - started)
            self._end(n, "delivered")
        log.info("notify test sent", hook_id=hook_id, notification_id=n.id, outcome=n.outcome)
        return _test_result(n)

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

    def _end(self, n: Notification, outcome: str, detail: str | None = None) -> bool:
        """Count ``n``'s one outcome (REQ-11) and keep its delivery-log record for the next flush; False
        if it already had one (then nothing is counted)."""
        if n.outcome is not None:
            return False
        n.outcome = outcome
        if not n.test:
            self.metrics.notify_notifications.labels(n.type, outcome).inc()
        if detail is None and outcome == "failed" and n.tried:
            detail = n.tried[-1].error
        n.detail = detail
        self._records.add(
            DeliveryRecord(
                id=n.id,
                kind="notify",
                target_id=n.hook_id,
                endpoint_id=n.endpoint_id,
                subject_id=n.todo_id,
                type=n.type,
                reason=n.reason,
                outcome=outcome,
                detail=detail,
                finished_at=ms(self.clock.now()),
                attempts=list(n.tried),
                test=n.test,
            )
        )
        self._health_due.set()
        self._idle.clear()
        return True

    def _tried(self, n: Notification, status: int | None, error: str | None, duration: float) -> None:
        n.tried.append(Attempt(n.attempts, ms(self.clock.now()), status, error, round(duration * 1000, 1)))

    def _dropped(self, n: Notification, reason: str) -> None:
        if self._end(n, "dropped", reason):
            self._drops.drop(reason, hook_id=n.hook_id, notification_id=n.id, todo_id=n.todo_id)
        self._check_idle()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self.accepting = True
        self._stopping = False
        self._workers = [self._spawn(i) for i in range(self.worker_count)]
        self._flusher = asyncio.create_task(self._flush_loop(), name="notify-health-flush")

    def _spawn(self, index: int) -> asyncio.Task[None]:
        task = asyncio.create_task(self._work(), name=f"notify-worker-{index}")
        task.add_done_callback(lambda t: self._worker_ended(index, t))
        return task

    def _worker_ended(self, index: int, task: asyncio.Task[None]) -> None:
        """REQ-12: the pool keeps its size. ``_work`` survives every ``Exception`` of a notification;
        should a worker end anyway (outside ``stop``), it is logged and started again."""
        if self._stopping or index >= len(self._workers) or self._workers[index] is not task:
            return
        exc = None if task.cancelled() else task.exception()
        log.error(
            "notify worker ended unexpectedly; starting it again",
            worker=index,
            error_type=type(exc).__name__ if exc else None,
            where=_where(exc),
        )
        self._workers[index] = self._spawn(index)

    @property
    def workers_running(self) -> int:
        """Worker tasks alive now: ``worker_count`` from start to stop (REQ-12)."""
        return sum(1 for task in self._workers if not task.done())

    async def stop(self) -> None:
        """Stop taking notifications, let in-flight work finish within ``drain_timeout``, then abandon.
        What is abandoned (retries not yet due, queued, parked or cut off mid-attempt) is dropped with
        reason ``shutdown``: counted, and logged before this returns."""
        self.accepting = False
        for timer, n in list(self._timers.items()):
            timer.cancel()
            self._dropped(n, "shutdown")
        self._timers.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.drain_timeout):
                await self.queue.join()
        self._stopping = True
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        abandoned = [*self._in_hand.values()]
        self._in_hand.clear()
        while not self.queue.empty():
            abandoned.append(self.queue.get_nowait())
            self.queue.task_done()
        for parked in self._parked.values():
            abandoned.extend(parked)
        self._parked.clear()
        for n in abandoned:
            self._dropped(n, "shutdown")
        self.metrics.notify_queue_depth.set(0)
        if self._flusher is not None:
            async with self._health_lock:  # never cancel the flusher in the middle of a write
                self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self._flush_health()  # what is pending is written, not lost
        self._drops.close()  # every drop's line is written before the process may exit
        self._check_idle()

    async def idle(self) -> None:
        """Wait until nothing is queued, in flight or waiting to retry (tests await this)."""
        await self._idle.wait()

    def _check_idle(self) -> None:
        if (
            self.queue.empty()
            and self._busy == 0
            and not self._timers
            and not any(self._parked.values())
            and not self._pending
            and not self._records
            and not self._flushing
        ):
            self._idle.set()

    # -- attempts ----------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            n = await self.queue.get()
            try:
                self.metrics.notify_queue_depth.set(self.queue.qsize())
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
                self._in_hand[n.id] = n
                cut_off = False
                try:
                    await self._attempt(n)
                except asyncio.CancelledError:
                    cut_off = True  # stop() abandons it: it stays in _in_hand to be counted as dropped
                    raise
                except Exception as exc:  # REQ-12: one notification's error never ends a worker
                    self._internal_error(n, exc)
                finally:
                    if not cut_off:
                        self._in_hand.pop(n.id, None)
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

    def _internal_error(self, n: Notification, exc: Exception) -> None:
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
            where=_where(exc),
        )
        if self._end(n, "failed", "internal_error") and n.stage in ("sign", "send"):
            self._fold(n.hook_id).failed(None, "internal_error", ms(self.clock.now()), n.id)
            self._health_due.set()
            self._health_urgent.set()  # it may be the 10th: write it now, as for any possible disable

    def _may_attempt(self, n: Notification) -> bool:
        """REQ-7's cap, checked right before an attempt starts, whatever handed ``n`` to this worker (a
        retry timer, the owner backlog, a bug that enqueued it twice): never a fourth attempt."""
        if n.attempts < MAX_ATTEMPTS and n.outcome is None:
            return True
        log.error(
            "notify attempt refused: the notification has had its attempts",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempts=n.attempts,
            outcome=n.outcome,
        )
        return False

    async def _attempt(self, n: Notification) -> None:
        if not self._may_attempt(n):
            return
        n.stage = "fast_fail"
        fast = self.sender.fast_failure(n.url) if n.attempts + 1 < MAX_ATTEMPTS else None
        if fast is not None:
            # An attempt before the last, to an origin that refused a connection moments ago: it fails as
            # send() would fail it, without the hook read and without a dial. The last attempt always
            # reads the hook (so a deleted or disabled one is dropped and the health write sees its streak).
            n.attempts += 1
            self._failed_attempt(n, None, fast, 0.0)
            return
        n.stage = "read"
        try:
            hook = await self._sendable(n.hook_id)
        except Exception:
            log.error(
                "hook read failed", hook_id=n.hook_id, notification_id=n.id, stage="store", exc_info=True
            )
            self._end(n, "failed")
            return
        if hook is None:  # deleted or disabled since it was matched: no attempt may start
            self._dropped(n, "hook_gone")
            return
        if not self._may_attempt(n):  # checked again after the read's await, then no await until counted
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
            self._failed_attempt(n, hook, err, time.monotonic() - started)
            return
        n.stage = "outcome"
        duration = time.monotonic() - started
        self.metrics.notify_attempts.labels("2xx").inc()
        self._tried(n, result.status, None, duration)
        self._end(n, "delivered")
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
        self._fold(n.hook_id).delivered(result.status, ms(self.clock.now()), n.id)
        self._health_due.set()

    async def _sendable(self, hook_id: str) -> SendableHook | None:
        """The fresh read before an attempt (REQ-2, REQ-8), with this instance's unwritten outcomes added.

        ``sendable`` returns the hook only while its row is enabled, with the streak as stored. When the
        outcomes this instance has not written yet would take it to 10, they are written now (the
        statement disables the hook) and the row is read again, so the attempt never starts. If a write
        of this hook's failures finished while the row was being read, the read may or may not include
        it: it is read again. The row stays the authority: after ``SENDABLE_READS`` reads, its answer
        stands."""
        hook: SendableHook | None = None
        for _ in range(SENDABLE_READS):
            written = self._written.get(hook_id, 0)
            hook = await self._reads.sendable(hook_id)
            if hook is None:
                return None
            if self._written.get(hook_id, 0) != written:
                continue
            if not self._would_disable(hook_id, hook.consecutive_failures):
                return hook
            await self._flush_health(only=hook_id)
        return hook

    def _would_disable(self, hook_id: str, streak: int) -> bool:
        """Would the outcomes not yet written (being written first) disable a hook stored at ``streak``?"""
        for fold in (self._writing.get(hook_id), self._pending.get(hook_id)):
            if fold is None:
                continue
            if fold.trips(streak):
                return True
            streak = fold.after(streak)
        return False

    def _fold(self, hook_id: str) -> HealthFold:
        fold = self._pending.get(hook_id)
        if fold is None:
            fold = self._pending[hook_id] = HealthFold()
        return fold

    def _failed_attempt(
        self, n: Notification, hook: SendableHook | None, err: PushError, duration: float
    ) -> None:
        status = err.status if isinstance(err, StatusError) else None
        reason = classify(err)
        result = attempt_result(err)
        self.metrics.notify_attempts.labels(result).inc()
        self._tried(n, status, reason, duration)
        log.info(
            "notify attempt",
            hook_id=n.hook_id,
            notification_id=n.id,
            attempt=n.attempts,
            result=result,
            status=status,
            error=reason,
            stage=err.stage,
            fast_fail=err.fast_fail or None,
            duration_ms=round(duration * 1000, 1),
        )
        if err.retryable and n.attempts < MAX_ATTEMPTS and self.accepting:
            # Health is written once per delivery, with its final attempt: a failing receiver must not
            # turn into three writes per notification competing with ingest for the database.
            self._retry_later(n, jittered(self.retry_delays[min(n.attempts, len(self.retry_delays)) - 1]))
            return
        self._end(n, "failed")
        self._fold(n.hook_id).failed(status, reason, ms(self.clock.now()), n.id)
        self._health_due.set()
        if hook is None or self._would_disable(n.hook_id, hook.consecutive_failures):
            self._health_urgent.set()  # write the disable now rather than after the flush interval

    async def _flush_loop(self) -> None:
        while True:
            await self._health_due.wait()
            # let concurrent outcomes coalesce, unless one may have disabled its hook
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.health_flush_interval):
                    await self._health_urgent.wait()
            await self._flush_health()
            self._check_idle()

    async def _flush_health(self, only: str | None = None) -> None:
        """Write the pending folds (or only one hook's), one statement per hook, one flush at a time."""
        async with self._health_lock:
            if only is None:
                batch, self._pending = self._pending, {}
                self._health_due.clear()
                self._health_urgent.clear()
            else:
                fold = self._pending.pop(only, None)
                batch = {only: fold} if fold is not None else {}
            records = self._records.take() if only is None else []
            if not batch and not records:
                return
            self._flushing = True
            self._writing.update(batch)  # still counted by _would_disable until written
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
            self._health_written(hook_id, outcome)

    async def _write_records(self, records: list[DeliveryRecord]) -> None:
        """The delivery log's rows of this flush: one INSERT, after the health statement (issue 19)."""
        if not records or self._records.log is None:
            return
        try:
            await self._records.log.write(records)
        except Exception:  # REQ-12: a lost history line never stops delivery
            log.error(
                "delivery log write failed",
                rows=len(records),
                notification_id=records[-1].id,
                stage="delivery_log",
                exc_info=True,
            )

    def _health_written(self, hook_id: str, outcome: HealthOutcome | None) -> None:
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

    def _retry_later(self, n: Notification, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            assert handle is not None
            self._timers.pop(handle, None)
            if self.accepting:
                self._put(n)
            else:
                self._dropped(n, "shutdown")
            self._check_idle()

        handle = loop.call_later(delay, fire)
        self._timers[handle] = n


def _test_result(n: Notification) -> dict[str, Any]:
    last = n.tried[-1] if n.tried else None
    return {
        "notification_id": n.id,
        "outcome": n.outcome,
        "status": last.status if last else None,
        "error": last.error if last else None,
        "detail": n.detail,
        "ms": last.ms if last else None,
    }


def _where(exc: BaseException | None) -> str | None:
    """Where an error was raised, as ``file:line function``: enough to find it, nothing it carried."""
    if exc is None or exc.__traceback__ is None:
        return None
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"
