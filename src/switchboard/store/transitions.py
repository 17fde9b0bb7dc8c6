"""store.SetTodoDoorbellHook: the one fan-out of todo transitions.

Two stages:

* ``in_transaction`` handlers run inside the transition's own transaction, before commit. They exist for
  work that must commit or roll back with the transition (the A2A push outbox and its sequence numbers).
  A handler may say which transitions it acts on (``wants``): the SQLite claim path commits the others
  on its writer thread, which has no ``AsyncConnection`` to give a handler (:meth:`TransitionHub.needs_transaction`).
* ``subscribe``\\ d handlers see transitions only after the commit. Each subscriber has its own bounded
  queue and task, so one that raises, blocks or falls behind never touches the transaction or the others.
  A full queue drops the transition for that subscriber, counts it, and logs the todo and endpoint ids.
* ``subscribe_batch`` is the same subscription, except that its handler is given everything queued for it
  (up to ``max_batch``, in publish order) in one call: a subscriber whose cost is per call (a database
  read) pays it once per batch under load, and once per transition when transitions arrive one at a time.
* ``remote=True`` (on PostgreSQL, docs/architecture.md "The cluster relay"): the subscriber also gets the
  ready transitions other instances committed, carried by :mod:`switchboard.store.relay` and handed in
  through :meth:`TransitionHub.publish_remote`. Only subscribers whose effect is per instance opt in (the
  doorbell rings this instance's sessions); notify hooks and A2A push must fire once per transition, on
  the instance that made it, so they never do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Children, Metrics
from switchboard.process.tasks import cancel_and_wait

log = get_logger("switchboard.transitions")

READY = frozenset({"created", "requeued"})


@dataclass(frozen=True, slots=True)
class Transition:
    todo_id: str
    endpoint_id: str | None
    queue: str
    kind: str | None
    source: str | None
    title: str
    attempt: int
    transition: str  # created | requeued | claimed | done | failed | dead | canceled
    reason: str | None  # e.g. lease_expired, retry_due, a fail reason class
    push_eligible: bool  # SPEC-0011 sender gate, evaluated on the row that moved
    push_excluded: bool  # self-test (SPEC-0025) or quarantined (SPEC-0026)
    at: float
    instance_id: str = ""

    @property
    def ready(self) -> bool:
        """A transition into pending: what rings doorbells."""
        return self.transition in READY

    @property
    def pushable(self) -> bool:
        return self.ready and self.endpoint_id is not None and self.push_eligible and not self.push_excluded


def is_ready(t: Transition) -> bool:
    """A subscription filter (``wants``): transitions into pending."""
    return t.ready


def is_pushable(t: Transition) -> bool:
    """A subscription filter (``wants``): what notify hooks and doorbells ring for."""
    return t.pushable


InTxHandler = Callable[[AsyncConnection, Sequence[Transition]], Awaitable[None]]
Subscriber = Callable[[Transition], Awaitable[None]]
BatchSubscriber = Callable[[list[Transition]], Awaitable[None]]

MAX_BATCH = 256


@dataclass
class _Subscription:
    name: str
    handler: BatchSubscriber
    queue: asyncio.Queue[Transition]
    max_batch: int
    on_drop: Callable[[Transition], None] | None = None
    remote: bool = False
    wants: Callable[[Transition], bool] | None = None  # None: every transition
    task: asyncio.Task[None] | None = None
    dropped: int = field(default=0)


def _one_at_a_time(handler: Subscriber) -> BatchSubscriber:
    async def call(batch: list[Transition]) -> None:
        (t,) = batch
        await handler(t)

    return call


class TransitionHub:
    def __init__(self, metrics: Metrics, *, instance_id: str = "") -> None:
        self._metrics = metrics
        self._counted = Children(metrics.transitions)  # a fixed set of transition names
        self.instance_id = instance_id
        self._in_tx: list[InTxHandler] = []
        self._in_tx_wants: list[Callable[[Transition], bool] | None] = []
        self._in_tx_bounds: list[tuple[frozenset[str] | None, frozenset[str] | None]] = []
        self._subs: list[_Subscription] = []
        self._gap: list[Callable[[], Awaitable[None]]] = []
        self._running = False

    def add_in_transaction(
        self,
        handler: InTxHandler,
        *,
        wants: Callable[[Transition], bool] | None = None,
        sources: frozenset[str] | None = None,
        moves: frozenset[str] | None = None,
    ) -> None:
        """``wants``: true for every transition ``handler`` may act on (it is given all of them anyway);
        None: it may act on any. ``sources`` and ``moves`` (when given) bound the same set before any
        row is read, by the todos' ``source`` and the transition's name: ``wants`` must never be true
        outside them. They let a store make other moves without a transaction
        (:meth:`transaction_sources`)."""
        self._in_tx.append(handler)
        self._in_tx_wants.append(wants)
        self._in_tx_bounds.append((sources, moves))

    def transaction_sources(self, move: str) -> frozenset[str] | None:
        """For transitions named ``move``: the todo sources an in-transaction handler may act on (moves
        of todos from these sources need a transaction and :meth:`run_in_transaction`; the others may be
        made by a statement alone). None: a handler may act on a todo from any source."""
        held: set[str] = set()
        for sources, moves in self._in_tx_bounds:
            if moves is not None and move not in moves:
                continue
            if sources is None:
                return None
            held |= sources
        return frozenset(held)

    def needs_transaction(self, transitions: Sequence[Transition]) -> bool:
        """Whether an in-transaction handler may act on one of ``transitions``: then they must be made
        on an ``AsyncConnection`` and :meth:`run_in_transaction` run there. Pure; any thread may ask."""
        if not transitions:
            return False
        return any(wants is None or any(map(wants, transitions)) for wants in self._in_tx_wants)

    def subscribe(
        self,
        name: str,
        handler: Subscriber,
        *,
        queue_size: int = 10_000,
        on_drop: Callable[[Transition], None] | None = None,
        remote: bool = False,
        wants: Callable[[Transition], bool] | None = None,
    ) -> None:
        """``on_drop`` lets a subscriber count what it never saw (SPEC-0024 REQ-7's dropped counter);
        ``remote``: also other instances' ready transitions (see the module docstring). ``wants``: true
        for every transition ``handler`` acts on; the others are never queued for it (no queue slot,
        no wake-up of its task: a claim and an ack each woke every subscriber, most of which look only
        at transitions into pending). None: every transition."""
        self._add(
            _Subscription(
                name, _one_at_a_time(handler), asyncio.Queue(maxsize=queue_size), 1, on_drop, remote, wants
            )
        )

    def subscribe_batch(
        self,
        name: str,
        handler: BatchSubscriber,
        *,
        queue_size: int = 10_000,
        max_batch: int = MAX_BATCH,
        on_drop: Callable[[Transition], None] | None = None,
        remote: bool = False,
        wants: Callable[[Transition], bool] | None = None,
    ) -> None:
        """Like :meth:`subscribe`, but ``handler`` gets a non-empty list: whatever is queued for this
        subscriber when its task wakes, at most ``max_batch``, in publish order. It never waits for more
        to arrive. The queue bound, overflow accounting and ``on_drop`` are per transition, as for
        :meth:`subscribe`; a handler that raises loses its batch, and that is counted and logged once."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._add(
            _Subscription(name, handler, asyncio.Queue(maxsize=queue_size), max_batch, on_drop, remote, wants)
        )

    def _add(self, sub: _Subscription) -> None:
        self._subs.append(sub)
        if self._running:
            sub.task = asyncio.create_task(self._drain(sub), name=f"transitions:{sub.name}")

    async def run_in_transaction(self, conn: AsyncConnection, transitions: Sequence[Transition]) -> None:
        for handler in self._in_tx:
            await handler(conn, transitions)

    @property
    def wants_remote(self) -> bool:
        """True when a subscriber opted in to other instances' transitions (the relay listens only then)."""
        return any(sub.remote for sub in self._subs)

    def on_remote_gap(self, handler: Callable[[], Awaitable[None]]) -> None:
        """``handler`` runs when other instances' transitions may have been missed (the relay's
        connection dropped and came back): a remote subscriber catches up there (the doorbell rings its
        heartbeat once)."""
        self._gap.append(handler)

    async def remote_gap(self) -> None:
        for handler in self._gap:
            try:
                await handler()
            except Exception:
                log.error("remote gap handler raised", exc_info=True)

    def publish(self, transitions: Sequence[Transition]) -> None:
        """Called after commit. Never blocks and never raises."""
        for t in transitions:
            self._counted(t.transition).inc()
        self._deliver(transitions, self._subs)

    def publish_remote(self, transitions: Sequence[Transition]) -> None:
        """Transitions another instance committed (the relay): to the subscribers that opted in only.
        Not counted in the transitions metric, which counts what this instance made."""
        self._deliver(transitions, [sub for sub in self._subs if sub.remote])

    def _deliver(self, transitions: Sequence[Transition], subs: Sequence[_Subscription]) -> None:
        for t in transitions:
            for sub in subs:
                if sub.wants is not None and not sub.wants(t):
                    continue
                try:
                    sub.queue.put_nowait(t)
                except asyncio.QueueFull:
                    sub.dropped += 1
                    self._metrics.hook_subscriber_errors.labels(sub.name, "overflow").inc()
                    if sub.on_drop is not None:
                        sub.on_drop(t)
                    if sub.dropped == 1 or sub.dropped % 1000 == 0:
                        log.warning(
                            "transition dropped: subscriber queue full",
                            subscriber=sub.name,
                            todo_id=t.todo_id,
                            endpoint_id=t.endpoint_id,
                            dropped_total=sub.dropped,
                        )

    async def start(self) -> None:
        self._running = True
        for sub in self._subs:
            if sub.task is None:
                sub.task = asyncio.create_task(self._drain(sub), name=f"transitions:{sub.name}")

    async def stop(self, timeout: float = 5.0) -> None:
        """Let subscribers finish what is queued, within ``timeout``; then cancel them."""
        self._running = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                for sub in self._subs:
                    await sub.queue.join()
        await cancel_and_wait(*(sub.task for sub in self._subs))
        for sub in self._subs:
            sub.task = None

    async def idle(self) -> None:
        """Wait until every subscriber has handled everything published so far (tests await this)."""
        for sub in self._subs:
            await sub.queue.join()

    async def _drain(self, sub: _Subscription) -> None:
        while True:
            batch = [await sub.queue.get()]
            while len(batch) < sub.max_batch and not sub.queue.empty():
                batch.append(sub.queue.get_nowait())
            try:
                await sub.handler(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._metrics.hook_subscriber_errors.labels(sub.name, "raised").inc()
                if len(batch) == 1:
                    log.error(
                        "transition subscriber raised",
                        subscriber=sub.name,
                        todo_id=batch[0].todo_id,
                        exc_info=True,
                    )
                else:
                    log.error(
                        "transition subscriber raised",
                        subscriber=sub.name,
                        todo_id=batch[0].todo_id,
                        todo_ids=[t.todo_id for t in batch],
                        transitions=len(batch),
                        exc_info=True,
                    )
            finally:
                for _ in batch:
                    sub.queue.task_done()
