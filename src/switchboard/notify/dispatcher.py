"""The notify-hook dispatcher: a transition subscriber feeding a bounded queue and a worker pool.

It only assembles its parts, each with one job (docs/architecture.md):

* :mod:`~switchboard.notify.intake`: matching transitions and presence returns to hooks, the per-hook
  limit (a sliding-window ceiling) and the bounded queue (REQ-1, REQ-6, REQ-7, REQ-9).
* :mod:`~switchboard.notify.fairness`: at most ``per_owner_inflight`` attempts at once per owning
  human; the rest wait in that owner's bounded backlog.
* :mod:`~switchboard.notify.pool`: the workers, which survive every error of one notification.
* :mod:`~switchboard.notify.attempts`: one attempt, from the hook read to its outcome; the retry
  decision is the shared :mod:`switchboard.delivery.retry` policy's; :mod:`~switchboard.notify.timers`
  holds the retries waiting for their time.
* :mod:`~switchboard.notify.health`: outcomes folded per hook and written in batches; the 10th failed
  delivery in a row disables the hook (REQ-8).
* :mod:`~switchboard.notify.outcomes`: one outcome per notification, counted once, with its delivery
  log record; every drop reaches :mod:`~switchboard.notify.droplog`.

Pending attempts live only in memory (REQ-7): a restart loses them, and the todo stays claimable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from switchboard.core.clock import Clock
from switchboard.core.ratelimit import SharedWindow
from switchboard.notify import body as bodies
from switchboard.notify import replay as replays
from switchboard.notify.attempts import AttemptRunner, classify, retry_policy
from switchboard.notify.droplog import DropLog
from switchboard.notify.fairness import OwnerFairness
from switchboard.notify.flow import Flow
from switchboard.notify.health import HealthRecorder
from switchboard.notify.intake import Intake, hooks_granted, limit_key
from switchboard.notify.notification import Notification, Signer, probe_result
from switchboard.notify.outcomes import Outcomes
from switchboard.notify.pool import WorkerPool
from switchboard.notify.reads import HookReads
from switchboard.notify.store import HookStore
from switchboard.notify.timers import RetryTimers
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.operator.sink import OperatorSink
from switchboard.push import PushError, Sender, StatusError, new_message_id, standard_headers
from switchboard.store.notify_deliveries import DeliveryLog
from switchboard.store.notify_hook_types import effective_limit
from switchboard.store.presence import PresenceReturn
from switchboard.store.todos import TodoStore
from switchboard.store.transitions import Transition

log = get_logger("switchboard.notify")


class Dispatcher:
    def __init__(
        self,
        *,
        hooks: HookStore,
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
        shared_windows: SharedWindow | None = None,
        operator: OperatorSink | None = None,
    ) -> None:
        self.sender, self.metrics, self.clock, self.sign = sender, metrics, clock, sign
        self.drain_timeout = drain_timeout
        self.flow = Flow()
        self.health = HealthRecorder(
            hooks=hooks,
            metrics=metrics,
            flow=self.flow,
            flush_interval=health_flush_interval,
            deliveries=deliveries,
            operator=operator,
        )
        drops = drop_log or DropLog(operator=operator)
        self.outcomes = Outcomes(
            metrics=metrics, clock=clock, health=self.health, drops=drops, flow=self.flow
        )
        self.intake = Intake(
            hooks=hooks,
            todos=todos,
            metrics=metrics,
            clock=clock,
            outcomes=self.outcomes,
            flow=self.flow,
            queue_size=queue_size,
            rate_per_minute=rate_per_minute,
            shared=shared_windows,
        )
        self.timers = RetryTimers(flow=self.flow, put=self.intake.put, outcomes=self.outcomes)
        self.reads = HookReads(hooks)
        self.runner = AttemptRunner(
            sender=sender,
            sign=sign,
            reads=self.reads,
            health=self.health,
            outcomes=self.outcomes,
            timers=self.timers,
            retry=retry_policy(retry_delays),
            metrics=metrics,
            clock=clock,
            flow=self.flow,
        )
        self.pool = WorkerPool(
            queue=self.intake.queue,
            put=self.intake.put,
            fairness=OwnerFairness(inflight=per_owner_inflight, backlog=per_owner_backlog),
            runner=self.runner,
            outcomes=self.outcomes,
            metrics=metrics,
            flow=self.flow,
            workers=workers,
        )

    @property
    def accepting(self) -> bool:
        return self.flow.accepting

    @accepting.setter
    def accepting(self, value: bool) -> None:
        self.flow.accepting = value

    @property
    def queue(self) -> asyncio.Queue[Notification]:
        return self.intake.queue

    # -- producing (the hub's and the presence store's subscribers) --------------------------------

    async def on_transition(self, t: Transition) -> None:
        """One transition: exactly :meth:`on_transitions` with a batch of one."""
        await self.intake.on_transitions([t])

    async def on_transitions(self, batch: Sequence[Transition]) -> None:
        await self.intake.on_transitions(batch)

    def on_unmatched_drop(self, t: Transition) -> None:
        self.intake.on_unmatched_drop(t)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        await self.intake.on_presence_return(event)

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
        hook = await self.reads.sendable(hook_id)
        if hook is None:
            self.outcomes.end(n, "dropped", "hook_disabled")
            return probe_result(n)
        limit = effective_limit(hook.rate_per_minute, self.intake.rate)
        if not await self.intake.limiter.admit(limit_key(hook_id), limit):
            self.outcomes.end(n, "dropped", "rate_limited")
            return probe_result(n)
        n.attempts = 1
        headers = self.sign(hook.secrets, n.id, int(self.clock.now()), n.body)
        started = time.monotonic()
        try:
            result = await self.sender.send(hook.url, body=n.body, headers=headers)
        except PushError as err:
            status = err.status if isinstance(err, StatusError) else None
            self.outcomes.tried(n, status, classify(err), time.monotonic() - started)
            self.outcomes.end(n, "failed")
        else:
            self.outcomes.tried(n, result.status, None, time.monotonic() - started)
            self.outcomes.end(n, "delivered")
        log.info("notify test sent", hook_id=hook_id, notification_id=n.id, outcome=n.outcome)
        return probe_result(n)

    async def replay(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send a finished notification again (issue 29, notify/replay.py): its body rebuilt from the
        todo and the hook as they are now, offered to the intake like any other notification (the
        per-hook window, the bounded queue, a new attempt cycle, a delivery-log row with reason
        ``replay``). Answers ``queued``, or ``dropped`` with why, or an ``error`` code, nothing sent."""
        nid = str(request["delivery_id"])
        if not self.flow.accepting:
            return {"notification_id": nid, "error": "not_running"}
        endpoint_id, hook_id = str(request["endpoint_id"]), str(request["hook_id"])
        found = (await self.intake.hooks.enabled_with_endpoints([endpoint_id])).get(endpoint_id)
        match = None if found is None else next((m for m in found.hooks if m.hook.id == hook_id), None)
        if found is None or match is None or not hooks_granted(found.endpoint):
            return {"notification_id": nid, "error": "hook_unavailable"}
        endpoint, now = found.endpoint, self.clock.now()
        if request["type"] == "todo.ready":
            todo = await self.intake.todos.get(endpoint_id, str(request.get("todo_id") or ""))
            if todo is None:
                return {"notification_id": nid, "error": "todo_gone"}
            body = replays.ready_body(todo, endpoint.slug, now)
        else:
            pending, queues, oldest = await self.intake.todos.pending_summary(
                endpoint_id, match.hook.effective_queues(endpoint.queues)
            )
            age = 0 if oldest is None else max(0, int(now - oldest / 1000))
            body = bodies.todos_backlog(endpoint.slug, "operator", pending, queues, age, now)
        url = self.intake.open_url(hook_id, match.url_sealed, request.get("todo_id"))
        if url is None:
            return {"notification_id": nid, "error": "hook_unavailable"}
        n = replays.replayed(request, owner_id=endpoint.human_id, url=url, body=body)
        await self.intake.offer(n, match.hook.limit(self.intake.rate))
        log.info("notify replay offered", hook_id=hook_id, notification_id=nid, outcome=n.outcome)
        return {"notification_id": nid, "queued": n.outcome is None, "dropped": n.detail}

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self.flow.accepting = True
        self.pool.start()
        self.health.start()

    async def stop(self) -> None:
        """Stop taking notifications, let in-flight work finish within ``drain_timeout``, then abandon.
        What is abandoned (retries not yet due, queued, parked or cut off mid-attempt) is dropped with
        reason ``shutdown``: counted, and logged before this returns."""
        self.flow.accepting = False
        self.timers.cancel_all()
        await self.pool.stop(self.drain_timeout)
        await self.health.stop()
        self.outcomes.drops.close()  # every drop's line is written before the process may exit
        self.flow.settle()

    async def idle(self) -> None:
        """Wait until nothing is queued, in flight or waiting to retry (tests await this)."""
        await self.flow.idle.wait()
