"""Input-required and back: the worker asks its sender (MCP ``ask``), the sender answers (a follow-up).

Neither is a todo transition (the todo stays ``claimed`` throughout), so the transition hook does not
see them; this module gives them what a transition gets, in the same transaction as the change: the
task's next sequence number, an event in the task's log (what streams send and replay), and an outbox
row per push config (the same body). After the commit it wakes the waiting ``SendMessage`` calls, the
streams and the delivery worker, as the transition hook's post-commit stage does for todo transitions.

The push/stream body is a ``statusUpdate`` whose ``metadata.transition`` is ``input_required`` (with
the worker's question as ``status.message``) or ``resumed`` (back to ``TASK_STATE_WORKING``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.a2a import outbox, tasks
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.views import PushEvent, TaskRecord, push_body
from switchboard.a2a.waiter import TaskWaiter
from switchboard.core.clock import Clock, ms
from switchboard.store import todo_queries

InTx = Callable[[AsyncConnection], Awaitable[None]]


class Turns:
    def __init__(
        self,
        task_store: tasks.TaskStore,
        configs: ConfigStore,
        waiter: TaskWaiter,
        clock: Clock,
        wake: Callable[[], None] | None,
    ) -> None:
        self.tasks = task_store
        self.configs = configs
        self.waiter = waiter
        self.clock = clock
        self.wake = wake  # the delivery worker's, where push is enabled

    async def ask(self, worker_endpoint_id: str, task_id: str, lease: str, question: str) -> tuple[str, str]:
        """The worker holding ``task_id`` under ``lease`` asks its sender: (outcome, the question's messageId); see
        :meth:`TaskStore.ask` for the outcomes."""
        message: dict[str, Any] = {
            "messageId": f"ask-{uuid.uuid4().hex}",
            "role": "ROLE_AGENT",
            "parts": [{"text": question, "mediaType": "text/plain"}],
        }
        at = self.clock.now()
        outcome = await self.tasks.ask(
            worker_endpoint_id, task_id, lease, message, ms(at), self._emit(task_id, "input_required", at)
        )
        if outcome == "asked":
            self.committed(task_id)
        return outcome, message["messageId"]

    def answered(self, task_id: str) -> InTx:
        """For :meth:`TaskStore.append_followup`: the sender answered, the task is working again."""
        return self._emit(task_id, "resumed", self.clock.now())

    def committed(self, task_id: str) -> None:
        """After the commit: waiting SendMessage calls and streams re-read, the worker looks."""
        self.waiter.notify(task_id)
        if self.wake is not None:
            self.wake()

    def _emit(self, task_id: str, transition: str, at: float) -> InTx:
        async def emit(conn: AsyncConnection) -> None:
            now_ms = ms(at)
            bumped = await tasks.next_seq(conn, task_id, terminal=False, now_ms=now_ms, todo_moved=False)
            if bumped is None:
                return
            queue = await todo_queries.queue_of(conn, task_id)
            question = None
            if transition == "input_required":
                record = await self._record(conn, task_id)
                question = record.question if record is not None else None
            body = push_body(
                PushEvent(
                    task_id=task_id,
                    context_id=bumped.context_id,
                    queue=queue,
                    transition=transition,
                    reason=None,
                    seq=bumped.seq,
                    at=at,
                    result=None,
                    last_error=None,
                    question=question,
                )
            )
            await tasks.record_event(conn, task_id, bumped.seq, body, now_ms)
            targets = await self.configs.targets_in(conn, task_id)
            if targets:
                await outbox.enqueue(
                    conn, task_id=task_id, seq=bumped.seq, body=body, targets=targets, now_ms=now_ms
                )

        return emit

    @staticmethod
    async def _record(conn: AsyncConnection, task_id: str) -> TaskRecord | None:
        return await tasks.record_in(conn, task_id)
