"""SendMessage's wait for its task to settle (A2A v1.0 ``returnImmediately`` unset or false).

The spec says such a call returns once the task is terminal or interrupted. Switchboard's tasks are
todos that an agent may hold for hours, so the wait is bounded (``SWITCHBOARD_A2A_SEND_WAIT_SECONDS``)
and the call then answers with the task as it stands.

The wait is awaited on an event set by the transition hook's post-commit stage (component.py), so a
claim and ack on this instance answer the caller at once. A transition committed by **another**
instance sharing PostgreSQL raises no event here (the cluster relay carries ready transitions only,
docs/architecture.md), so on PostgreSQL the wait also re-reads the task every ``fallback_seconds``: a
bounded poll, documented as such in docs/a2a.md, that costs one indexed read per waiting call per
second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from switchboard.a2a.tasks import TaskStore
from switchboard.a2a.views import TERMINAL_STATUSES, TaskRecord


def settled(record: TaskRecord) -> bool:
    """Terminal (completed, failed, canceled) or interrupted: input-required, when the worker holding
    the task asked its sender for more (MCP ``ask``). Switchboard has no auth-required."""
    return record.status in TERMINAL_STATUSES or record.input_required


class TaskWaiter:
    def __init__(self, tasks: TaskStore, *, fallback_seconds: float | None) -> None:
        self.tasks = tasks
        self.fallback_seconds = fallback_seconds
        self._events: dict[str, set[asyncio.Event]] = {}
        self._closed = False

    def notify(self, task_id: str) -> None:
        """A transition of ``task_id`` committed: every waiter on it re-reads the task."""
        for event in self._events.get(task_id, ()):
            event.set()

    def close(self) -> None:
        """Shutdown: every wait returns now, with the task as it stands."""
        self._closed = True
        for events in self._events.values():
            for event in events:
                event.set()

    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[asyncio.Event]:
        """An event set on every committed transition of ``task_id`` (and at shutdown), for a stream
        that re-reads the task's event log each time (handler.py)."""
        event = asyncio.Event()
        if self._closed:
            event.set()
        self._events.setdefault(task_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._events.get(task_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[task_id]

    async def until(self, event: asyncio.Event) -> None:
        """Wait for ``event``, at most ``fallback_seconds`` (transitions of other instances)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), self.fallback_seconds)

    async def wait(self, owner_endpoint_id: str, task_id: str, timeout: float) -> TaskRecord | None:
        """The task once settled, or as it stands after ``timeout`` seconds (or at shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = asyncio.Event()
        self._events.setdefault(task_id, set()).add(event)
        try:
            while True:
                event.clear()  # before the read: a transition after it sets the event again
                record = await self.tasks.get(owner_endpoint_id, task_id)
                left = deadline - loop.time()
                if record is None or settled(record) or left <= 0 or self._closed:
                    return record
                if self.fallback_seconds is not None:
                    left = min(left, self.fallback_seconds)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            waiting = self._events.get(task_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[task_id]
