"""Intake: transitions and presence returns matched to notifications, the per-hook limit, and the
bounded queue the workers take from.

* Matching happens in the hub's subscriber task, after commit, so ingest and MCP never wait on it. The
  dispatcher subscribes for batches: whatever the hub has queued for it (up to 256 transitions) is
  matched with one read of the endpoints involved and their enabled hooks, then each transition, in
  order, goes through the same rules as alone (REQ-1, REQ-6, REQ-9). Nothing read for one batch is kept
  for the next.
* The per-hook limit is a ceiling (``switchboard.core.ratelimit.WindowLimiter``): no 60 s window admits
  more than ``rate_per_minute`` notifications of one hook (the hook's own limit when its endpoint set a
  lower one, issue 29); the rest are dropped and counted. On
  PostgreSQL the window is held in the database, so it is one window for the whole cluster.
* One bounded queue per instance (REQ-7). Full: the notification is dropped and counted, and a warning
  names the hook (never the URL); sustained overflow coalesces warnings per reason per window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from switchboard.core.clock import Clock
from switchboard.core.ratelimit import SharedWindow, WindowLimiter
from switchboard.core.verbs import NOTIFY_HOOKS
from switchboard.notify import body as bodies
from switchboard.notify.flow import Flow
from switchboard.notify.notification import Notification
from switchboard.notify.outcomes import Outcomes
from switchboard.notify.store import HookStore
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.push import new_message_id
from switchboard.store.accounts import Endpoint
from switchboard.store.presence import PresenceReturn
from switchboard.store.todos import TodoStore
from switchboard.store.transitions import Transition

log = get_logger("switchboard.notify")

RATE_WINDOW = 60.0  # SPEC-0024: "120 notifications per minute" per hook, as a ceiling
NOTIFY_HOOKS_VERBS = frozenset(NOTIFY_HOOKS.verbs)


def limit_key(hook_id: str) -> str:
    """The hook's key in its rate window (shared windows hold other limits' keys too)."""
    return f"hook:{hook_id}"


def hooks_granted(endpoint: Endpoint) -> bool:
    """Fire-time scope governs (REQ-1): an endpoint's hooks fire only while its scope holds at least one
    notify-hook verb. The owner cutting them all pauses its hooks (docs/notify-hooks.md, "Scope cut")."""
    return not NOTIFY_HOOKS_VERBS.isdisjoint(endpoint.verbs)


class Intake:
    def __init__(
        self,
        *,
        hooks: HookStore,
        todos: TodoStore,
        metrics: Metrics,
        clock: Clock,
        outcomes: Outcomes,
        flow: Flow,
        queue_size: int,
        rate_per_minute: float,
        shared: SharedWindow | None = None,
    ) -> None:
        self.hooks, self.todos, self.metrics, self.clock = hooks, todos, metrics, clock
        self.outcomes, self.flow = outcomes, flow
        self.queue: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue_size)
        # On PostgreSQL the window is shared (store/windows.py): it holds for every instance and process.
        self.rate = max(1, int(rate_per_minute))  # the server's; a hook's own is lower (Hook.limit)
        self.limiter = WindowLimiter(clock, self.rate, RATE_WINDOW, shared=shared)
        flow.holds_nothing_when(self.queue.empty)

    async def on_transitions(self, batch: Sequence[Transition]) -> None:
        """Hub batch subscriber: match the transitions, in order, against their endpoints' hooks (REQ-1,
        REQ-6, REQ-9), with one read for the whole batch, made after all of them committed."""
        if not self.flow.accepting:
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
                await self.offer(
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
                    ),
                    hook.limit(self.rate),
                )

    def _open_url(self, hook_id: str, sealed: bytes, todo_id: str | None) -> str | None:
        try:
            return self.hooks.open_url(hook_id, sealed)
        except Exception:  # REQ-12: this hook's notifications fail; the batch's others go on
            log.error("hook read failed", hook_id=hook_id, todo_id=todo_id, stage="store", exc_info=True)
            return None

    open_url = _open_url  # a replay opens its hook's URL as matching does (notify/replay.py)

    def on_unmatched_drop(self, t: Transition) -> None:
        """The hub's queue was full: dropped before any hook was matched, so log endpoint and todo ids."""
        if t.pushable:
            self.metrics.notify_notifications.labels("todo.ready", "dropped").inc()
            self.outcomes.drops.drop("queue_full_unmatched", endpoint_id=t.endpoint_id, todo_id=t.todo_id)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        """REQ-9: one todos.backlog per presence-respecting hook, decided by the presence_seen update."""
        if not self.flow.accepting:
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
            await self.offer(
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
                ),
                hook.limit(self.rate),
            )

    async def offer(self, n: Notification, limit: int) -> None:
        """Admit ``n`` through its hook's window at ``limit`` (the hook's own, as read with it), then
        queue it; a refusal is a ``rate_limited`` drop."""
        if not await self.limiter.admit(limit_key(n.hook_id), limit):
            self.outcomes.dropped(n, "rate_limited")
            return
        self.put(n)

    def put(self, n: Notification) -> None:
        try:
            self.queue.put_nowait(n)
        except asyncio.QueueFull:
            self.outcomes.dropped(n, "queue_full")
            return
        self.flow.busy()
        self.metrics.notify_queue_depth.set(self.queue.qsize())
