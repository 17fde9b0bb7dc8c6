"""The channel doorbell (SPEC-0011): tell an endpoint's live MCP sessions that work is ready.

A ring is ``notifications/resources/updated`` for ``switchboard://endpoints/<slug>/todos``. It is only a
doorbell (ADR-0013): the todo stays pending and claimable whether or not anyone hears it, so every send
is best-effort and nothing here retries.

Two protocol eras, three paths (docs/mcp.md, "Which host uses which path"):

* modern (2026-07-28) clients listen with ``subscriptions/listen``; we publish ``ResourceUpdated`` on the
  ``SubscriptionBus`` this surface owns, for the endpoint-wide URI and each touched queue's URI. The
  SDK's listen stream carries the URI only.
* legacy (handshake) sessions that used ``resources/subscribe`` (resources.py) get one notification per
  subscribed URI the ring touches, on their GET stream, with ``_meta["switchboard/doorbell"]``;
* legacy sessions that never subscribed get the endpoint-wide URI, the channel as it always was.

What rings: a push-eligible transition into pending (``Transition.pushable``) for an endpoint that is
``in`` and holds the queue in its scope; a digest when the endpoint comes back ``in`` (decided once by
the conditional ``presence_seen`` update); a reconnect digest when a legacy session's GET stream opens;
and the heartbeat, which re-rings while push-eligible todos stay pending. None of these fire hooks. Ready
rings are never coalesced: one per todo, in the order the todos became ready, each with its own
``_meta``; only the endpoint read behind them is shared by a batch of transitions (one statement).
Sessions are per process, so each instance rings the sessions connected to it; on PostgreSQL a todo
made ready by another instance reaches this one's hub through the cluster relay (store/relay.py, within
milliseconds) and rings here too; the heartbeat is the safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from typing import Any

from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp_types import ResourceUpdatedNotification, ResourceUpdatedNotificationParams

from switchboard.core.clock import ms
from switchboard.core.text import summary
from switchboard.mcp.sessions import LegacySessions
from switchboard.obs.logs import get_logger
from switchboard.process.tasks import cancel_and_wait
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.presence import PresenceReturn
from switchboard.store.transitions import Transition, is_pushable

log = get_logger("switchboard.mcp.doorbell")

META_KEY = "switchboard/doorbell"
SEND_TIMEOUT = 5.0  # a client that stops reading its GET stream must not stall the doorbell
PING_TIMEOUT = 10.0


def doorbell_uri(slug: str) -> str:
    """The endpoint-wide resource: every queue in its scope. The legacy channel rings this URI."""
    return f"switchboard://endpoints/{slug}/todos"


def queue_uri(slug: str, queue: str) -> str:
    """One queue's resource. Queue names are ``[a-z0-9._-]``, safe in a URI path as they are."""
    return f"switchboard://endpoints/{slug}/queues/{queue}"


def queue_template(slug: str) -> str:
    """RFC 6570 template for :func:`queue_uri` (``resources/templates/list``)."""
    return f"switchboard://endpoints/{slug}/queues/{{queue}}"


def resolve(endpoint: Endpoint, uri: str) -> tuple[str, ...] | None:
    """The scope queues a resource URI of this endpoint stands for, or None: not one of its resources
    (another endpoint's, a queue outside its scope, or no such URI)."""
    if uri == doorbell_uri(endpoint.slug):
        return endpoint.queues
    prefix = queue_uri(endpoint.slug, "")
    if uri.startswith(prefix) and uri[len(prefix) :] in endpoint.queues:
        return (uri[len(prefix) :],)
    return None


def touched_uris(slug: str, queues: Iterable[str]) -> list[str]:
    """The resources a ring on ``queues`` updates: the endpoint-wide one and each queue's."""
    return [doorbell_uri(slug), *(queue_uri(slug, q) for q in queues)]


def ready_meta(t: Transition) -> dict[str, Any]:
    """A ready ring's ``_meta["switchboard/doorbell"]`` (docs/mcp.md): the todo, its reason and title."""
    return {
        "type": "todo.ready",
        "reason": t.reason or t.transition,
        "todo_id": t.todo_id,
        "queue": t.queue,
        "kind": t.kind,
        "title": summary(t.title),
    }


class Doorbell:
    def __init__(self, services: Services, bus: SubscriptionBus) -> None:
        self.services = services
        self.bus = bus
        self.sessions = LegacySessions(self._on_stream_ready)
        self._listeners: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._pruning: asyncio.Task[None] | None = None
        # remote: other instances' ready todos ring this instance's sessions too (store/relay.py); after
        # the relay's connection came back, one heartbeat catches up on what it missed meanwhile.
        services.hub.subscribe_batch("doorbell", self.on_transitions, remote=True, wants=is_pushable)
        services.hub.on_remote_gap(self._catch_up)
        services.presence.on_return(self.on_presence_return)

    # -- who is listening -----------------------------------------------------------------------

    @contextlib.contextmanager
    def listening(self, endpoint_id: str) -> Iterator[None]:
        """Held by the gate for the life of a modern ``subscriptions/listen`` stream."""
        self._listeners[endpoint_id] += 1
        try:
            yield
        finally:
            self._listeners[endpoint_id] -= 1
            if self._listeners[endpoint_id] <= 0:
                del self._listeners[endpoint_id]

    def live(self, endpoint_id: str) -> bool:
        return self._listeners[endpoint_id] > 0 or self.sessions.has(endpoint_id)

    def live_endpoints(self) -> list[str]:
        return sorted({*self._listeners, *self.sessions.endpoints()})

    # -- triggers -------------------------------------------------------------------------------

    async def on_transitions(self, batch: list[Transition]) -> None:
        """Hub batch subscriber: one ring per push-eligible todo that became ready, in publish order.

        The endpoints of the batch's live transitions are read with one statement, after all of them
        committed, so a burst (a fan-out delivery, a create of several todos) costs one read, not one
        per todo. A ring that raises is logged and counted for its todo alone; the rest still ring."""
        wanted = [t for t in batch if t.pushable and t.endpoint_id is not None and self.live(t.endpoint_id)]
        if not wanted:
            return
        found = await self.services.accounts.endpoints_by_id(t.endpoint_id for t in wanted if t.endpoint_id)
        for t in wanted:
            endpoint = found.get(t.endpoint_id or "")
            if endpoint is None or endpoint.effective_presence != "in" or t.queue not in endpoint.queues:
                continue
            try:
                await self.ring(endpoint, "ready", queues=[t.queue], meta=ready_meta(t))
            except Exception:
                self.services.metrics.hook_subscriber_errors.labels("doorbell", "raised").inc()
                log.error("doorbell ring failed", todo_id=t.todo_id, endpoint_id=endpoint.id, exc_info=True)

    async def on_presence_return(self, event: PresenceReturn) -> None:
        """SPEC-0022: the endpoint is back ``in``; one digest, decided by the presence store."""
        if self.live(event.endpoint_id):
            await self.digest(event.endpoint_id, kind="digest", reason=event.reason)

    def _on_stream_ready(self, endpoint_id: str, sid: str) -> None:
        self._spawn(self.digest(endpoint_id, kind="reconnect", reason="reconnect", only_sid=sid))

    async def _catch_up(self) -> None:
        self._spawn(self.heartbeat_once())

    async def heartbeat_once(self) -> int:
        """Re-ring every live endpoint that still has push-eligible pending todos; returns how many.

        The liveness probes of :meth:`prune` run beside it, not before it: a ping sent while a session's
        GET stream is closed (a legacy client between its first request and its GET, or reconnecting)
        is never answered, and waiting for it held every endpoint's heartbeat for ``PING_TIMEOUT``. A
        ring that reaches an ended session is dropped by the SDK, so nothing is lost by ringing first.
        One prune at a time: a beat while the last one still waits starts none."""
        if self._pruning is None or self._pruning.done():
            self._pruning = asyncio.create_task(self._guarded(self.prune()), name="doorbell-prune")
        rung = 0
        for endpoint_id in self.live_endpoints():
            if await self.digest(endpoint_id, kind="heartbeat", reason="heartbeat"):
                rung += 1
        return rung

    # -- ringing --------------------------------------------------------------------------------

    async def digest(self, endpoint_id: str, *, kind: str, reason: str, only_sid: str | None = None) -> bool:
        """Ring with counts only, if the endpoint is ``in`` and has push-eligible pending todos."""
        endpoint = await self.services.accounts.endpoint(endpoint_id)
        if endpoint is None or endpoint.effective_presence != "in":
            return False
        pending, queues, oldest = await self.services.todos.pending_summary(endpoint.id, endpoint.queues)
        if pending == 0:
            return False
        age = 0 if oldest is None else max(0, (ms(self.services.clock.now()) - oldest) // 1000)
        meta = {
            "type": "todos.pending",
            "reason": reason,
            "pending": pending,
            "queues": queues,
            "oldest_pending_seconds": age,
        }
        return await self.ring(endpoint, kind, queues=queues, meta=meta, only_sid=only_sid)

    async def ring(
        self,
        endpoint: Endpoint,
        kind: str,
        *,
        queues: Iterable[str],
        meta: dict[str, Any],
        only_sid: str | None = None,
    ) -> bool:
        """Notify the endpoint's sessions in both eras (or one legacy session). True if any was reached.

        The ring updates the endpoint-wide URI and the URI of each queue in ``queues``. Modern listeners
        get every one of those on the bus (the SDK delivers only what a stream listens to). A legacy
        session that never called ``resources/subscribe`` gets the endpoint-wide URI (the channel as it
        always was); one that did gets exactly the touched URIs it is subscribed to.
        """
        uris = touched_uris(endpoint.slug, queues)
        reached = 0
        if only_sid is None and self._listeners[endpoint.id] > 0:
            for uri in uris:
                await self.bus.publish(ResourceUpdated(uri=uri))
            reached += 1
        for sid, session in self.sessions.of(endpoint.id):
            if only_sid is not None and sid != only_sid:
                continue
            wanted = self.sessions.subscriptions(sid)
            targets = [uris[0]] if wanted is None else [u for u in uris if u in wanted]
            sent = False
            for uri in targets:
                note = ResourceUpdatedNotification(
                    params=ResourceUpdatedNotificationParams(uri=uri, _meta={META_KEY: meta})
                )
                try:
                    async with asyncio.timeout(SEND_TIMEOUT):
                        await session.send_notification(note)
                except TimeoutError:
                    log.warning("doorbell send timed out", endpoint_id=endpoint.id, kind=kind)
                    break
                sent = True
            reached += sent
        if reached:
            self.services.metrics.doorbells.labels(kind).inc()
        return reached > 0

    async def prune(self) -> None:
        """Forget legacy sessions that have ended. Only those without an open GET stream are in doubt;
        a ping to an ended session fails at once, a live one answers (or times out and is kept)."""

        async def probe(sid: str, session: Any) -> None:
            try:
                async with asyncio.timeout(PING_TIMEOUT):
                    await session.send_ping()
            except TimeoutError:
                return
            except Exception:
                self.sessions.forget(sid)

        async with asyncio.TaskGroup() as group:
            for sid, session in self.sessions.without_stream():
                group.create_task(probe(sid, session))

    # -- lifecycle ------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait for the rings already under way (reconnect digests run in their own tasks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(self._guarded(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except Exception:
            log.error("doorbell ring failed", exc_info=True)

    async def _beat(self) -> None:
        interval = self.services.settings.doorbell_heartbeat_seconds
        while True:
            await asyncio.sleep(interval)
            await self._guarded(self.heartbeat_once())

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        self._heartbeat = asyncio.create_task(self._beat(), name="doorbell-heartbeat")
        try:
            yield
        finally:
            await cancel_and_wait(self._heartbeat, self._pruning, *self._tasks)
            self._heartbeat = self._pruning = None
