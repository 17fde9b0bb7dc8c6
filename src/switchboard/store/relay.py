"""The cluster relay (PostgreSQL): other instances' ready transitions reach this instance's hub.

Several instances share one PostgreSQL database; each one's hub sees only what its own statements
moved. The relay carries ready transitions (created, requeued) between them with LISTEN/NOTIFY on the
same database:

* **Sending** is an in-transaction hub handler: ``pg_notify('switchboard_ready', <payload>)`` in the
  transition's own transaction, so PostgreSQL delivers it only if, and when, the transaction commits.
  Every process that moves todos on PostgreSQL sends (the server, the CLI). A payload is compact JSON
  (ids, queue, kind, source, the title's 200-character summary, flags), packed several transitions to a
  payload and always under :data:`MAX_PAYLOAD` bytes, far below NOTIFY's 8000.
* **Listening** is one dedicated connection per server (:meth:`ClusterRelay.run`), opened only when a
  hub subscriber opted in (``remote=True``). Each payload from another instance is handed to
  :meth:`~switchboard.store.transitions.TransitionHub.publish_remote`: only the opted-in subscribers see
  it (the doorbell), never notify hooks or A2A push, which fire once, on the instance that made the
  transition. A dropped connection is reconnected with backoff; after a reconnect the hub's gap
  handlers run once (the doorbell's heartbeat), since NOTIFYs sent meanwhile are gone. The heartbeat
  stays the safety net either way.
* **Endpoint changes** ride a second channel, ``switchboard_endpoints`` (``store.changes.announce``, sent
  in the writing transaction): each one makes this instance's cached endpoint row stale
  (``EndpointChanges``), so a revoke or a scope shrink made elsewhere applies here at once; after a
  reconnect every cached row is made stale.

SQLite is one instance: nothing here runs there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from switchboard.core.text import summary
from switchboard.delivery.backoff import Backoff
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.process.tasks import cancel_and_wait
from switchboard.store.changes import ENDPOINTS_CHANNEL, EVERY_ENDPOINT, EndpointChanges
from switchboard.store.transitions import Transition, TransitionHub

log = get_logger("switchboard.relay")

CHANNEL = "switchboard_ready"
MAX_PAYLOAD = 7000  # bytes of one NOTIFY payload (PostgreSQL refuses 8000 and more)
TITLE_CHARS = 200  # what a ring shows of a title (the doorbell's summary)
RECONNECT = Backoff(base=0.1, cap=5.0, jitter=0.2)
CHECK_INTERVAL = 10.0  # seconds between liveness checks of the listening connection
CHECK_TIMEOUT = 5.0
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def carried(t: Transition) -> bool:
    """What crosses to other instances: transitions into pending (what rings doorbells and wakes
    waiting claims). Claims, acks and fails stay local: they would add a NOTIFY to the claim path."""
    return t.ready


def _record(t: Transition) -> list[Any]:
    return [
        t.todo_id,
        t.endpoint_id,
        t.queue,
        t.transition,
        t.reason,
        t.kind,
        t.source,
        summary(t.title, TITLE_CHARS),
        t.attempt,
        int(t.push_eligible) | (int(t.push_excluded) << 1),
        t.at,
    ]


def encode(instance_id: str, transitions: Sequence[Transition]) -> list[str]:
    """The payloads for ``transitions`` (those :func:`carried`), each under :data:`MAX_PAYLOAD` bytes."""
    head = json.dumps(instance_id[:100], ensure_ascii=False)
    payloads: list[str] = []
    batch: list[str] = []
    size = 0
    for t in transitions:
        if not carried(t):
            continue
        item = json.dumps(_record(t), ensure_ascii=False, separators=(",", ":"))
        if len(item.encode()) + len(head.encode()) + 16 > MAX_PAYLOAD:  # cannot happen with bounded columns
            continue
        if batch and size + len(item.encode()) + len(head.encode()) + 16 > MAX_PAYLOAD:
            payloads.append(_wrap(head, batch))
            batch, size = [], 0
        batch.append(item)
        size += len(item.encode()) + 1
    if batch:
        payloads.append(_wrap(head, batch))
    return payloads


def _wrap(head: str, items: list[str]) -> str:
    return '{"i":' + head + ',"t":[' + ",".join(items) + "]}"


def decode(payload: str) -> tuple[str, list[Transition]]:
    """(sending instance, its transitions); ValueError for anything malformed."""
    try:
        data = json.loads(payload)
        instance = str(data["i"])
        out = [
            Transition(
                todo_id=str(r[0]),
                endpoint_id=None if r[1] is None else str(r[1]),
                queue=str(r[2]),
                kind=None if r[5] is None else str(r[5]),
                source=None if r[6] is None else str(r[6]),
                title=str(r[7]),
                attempt=int(r[8]),
                transition=str(r[3]),
                reason=None if r[4] is None else str(r[4]),
                push_eligible=bool(int(r[9]) & 1),
                push_excluded=bool(int(r[9]) & 2),
                at=float(r[10]),
                instance_id=instance,
            )
            for r in data["t"]
        ]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError("malformed relay payload") from exc
    return instance, out


async def send_in_transaction(conn: AsyncConnection, transitions: Sequence[Transition]) -> None:
    """The hub's in-transaction handler on PostgreSQL: delivered on commit, never on rollback."""
    if not transitions:
        return
    for payload in encode(transitions[0].instance_id, transitions):
        await conn.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload})


class ClusterRelay:
    """The listening half, one per server process on PostgreSQL (``app.py`` runs it)."""

    def __init__(
        self, url: str, hub: TransitionHub, metrics: Metrics, changes: EndpointChanges | None = None
    ) -> None:
        self.url = url
        self.hub = hub
        self.metrics = metrics
        self.changes = changes  # endpoint writes other processes committed: their cached rows go stale
        self.connects = 0
        self.connected = asyncio.Event()
        self._lost: asyncio.Event = asyncio.Event()
        self._engine: AsyncEngine | None = None

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            instance, transitions = decode(payload)
        except ValueError:
            self.metrics.relay_events.labels("malformed").inc()
            log.warning("relay payload malformed", bytes=len(payload))
            return
        if instance == self.hub.instance_id:
            return  # ours: the hub published it after our own commit
        self.metrics.relay_events.labels("received").inc(len(transitions))
        self.hub.publish_remote(transitions)

    def _on_endpoint(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        """Another process committed a write to an endpoint row (``store.changes.announce``)."""
        if self.changes is None:
            return
        if payload == EVERY_ENDPOINT:
            self.changes.bump_all()
        elif 0 < len(payload) <= 64:
            self.changes.bump(payload)
        else:
            self.metrics.relay_events.labels("malformed").inc()
            return
        self.metrics.relay_events.labels("endpoint_changed").inc()

    def _on_terminate(self, _conn: Any) -> None:
        self._lost.set()

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Listen for the life of the block (a task of its own), reconnecting until it ends."""
        self._engine = create_async_engine(self.url, poolclass=NullPool)
        task = asyncio.create_task(self._loop(), name="cluster-relay")
        try:
            yield
        finally:
            await cancel_and_wait(task)
            await self._engine.dispose()

    async def _loop(self) -> None:
        failures = 0
        while True:
            connects = self.connects
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # a connection that worked and then dropped starts the backoff from the beginning
                failures = 1 if self.connects > connects else failures + 1
                # The error's type only: a driver message can quote the connection string.
                log.warning("relay connection failed", error=type(exc).__name__, failures=failures)
            self.connected.clear()
            self.metrics.relay_connected.set(0)
            await asyncio.sleep(RECONNECT.delay(max(1, failures)))

    async def _listen_once(self) -> None:
        assert self._engine is not None
        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            pg: Any = raw.driver_connection  # asyncpg's Connection: its public LISTEN API
            self._lost.clear()
            pg.add_termination_listener(self._on_terminate)
            await pg.add_listener(CHANNEL, self._on_notify)
            await pg.add_listener(ENDPOINTS_CHANNEL, self._on_endpoint)
            self.connects += 1
            self.metrics.relay_connected.set(1)
            self.connected.set()
            if self.connects > 1:
                self.metrics.relay_reconnects.inc()
                log.info("relay reconnected", connects=self.connects)
                if self.changes is not None:
                    self.changes.bump_all()  # an endpoint write announced meanwhile was missed
                await self.hub.remote_gap()  # NOTIFYs sent while we were away are gone
            else:
                log.info("relay listening", channel=CHANNEL)
            try:
                while True:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._lost.wait(), CHECK_INTERVAL)
                    if self._lost.is_set():
                        raise ConnectionError("relay connection closed")
                    async with asyncio.timeout(CHECK_TIMEOUT):  # a silent peer (no FIN) is found here
                        await pg.execute("SELECT 1")
            finally:
                with contextlib.suppress(Exception):
                    await pg.remove_listener(CHANNEL, self._on_notify)
                    await pg.remove_listener(ENDPOINTS_CHANNEL, self._on_endpoint)
                self.connected.clear()
