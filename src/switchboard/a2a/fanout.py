"""The A2A stage of the transition hook, run inside each transition's own transaction.

The design (decision 1) hangs A2A push off the one todo-transition hook. The hook has two stages
(store/transitions.py): ``in_transaction`` handlers run before commit, ``subscribe``\\ d ones after. Push
uses the first for everything that must commit or roll back with the transition, so a crash can lose
nothing (decision 3):

* the ``a2a_tasks`` row of a new task (and the inline push config of its SendMessage): written by
  :func:`writes_task`, the step SendMessage hands ``TodoStore.create``, before this stage runs,
* the task's next sequence number (the UPDATE holds the task row until commit: strictly increasing),
* the task's event log row (``a2a_task_events``: what SSE streams send and replay),
* one outbox row per push config, carrying the exact body that will be sent.

The post-commit stage only wakes the delivery workers (component.py).

Outbox rows are written on **every** instance, whether or not it delivers (``SWITCHBOARD_A2A_PUSH_ENABLED``):
a config exists only because some instance accepted it, and in a mixed cluster the instance that
handles a task's claim or ack may not be one that delivers. Delivery runs wherever push is enabled.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.a2a import outbox, tasks
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.views import TERMINAL_TRANSITIONS, PushEvent, push_body
from switchboard.core.clock import ms
from switchboard.store import todo_queries
from switchboard.store.transitions import InTxHandler, Transition


def writes_task(configs: ConfigStore, intent: tasks.SendIntent) -> InTxHandler:
    """The in-transaction step SendMessage passes to ``TodoStore.create``: the new todo's task row and
    its inline push config, in the todo's own transaction, before the transition stage reads them."""

    async def write(conn: AsyncConnection, created: Sequence[Transition]) -> None:
        for t in created:
            await tasks.insert_task(conn, t.todo_id, intent, ms(t.at))
            if intent.inline_config is not None:
                await configs.insert_in(conn, intent.owner_endpoint_id, t.todo_id, intent.inline_config)

    return write


class Fanout:
    def __init__(self, configs: ConfigStore) -> None:
        self.configs = configs

    async def __call__(self, conn: AsyncConnection, transitions: Sequence[Transition]) -> None:
        for t in transitions:
            if tasks.may_be_task(t):  # a prefilter that saves every other todo a query
                await self._one(conn, t)

    async def _one(self, conn: AsyncConnection, t: Transition) -> None:
        now_ms = ms(t.at)
        bumped = await tasks.next_seq(
            conn, t.todo_id, terminal=t.transition in TERMINAL_TRANSITIONS, now_ms=now_ms
        )
        if bumped is None:
            return  # no task row: not an A2A task (a webhook source that happens to be called "a2a")
        if t.transition == "claimed":
            await tasks.mark_claim(conn, t.todo_id)
        targets = await self.configs.targets_in(conn, t.todo_id)
        result, last_error = await todo_queries.outcome_of(conn, t.todo_id)
        body = push_body(
            PushEvent(
                task_id=t.todo_id,
                context_id=bumped.context_id,
                queue=t.queue,
                transition=t.transition,
                reason=t.reason,
                seq=bumped.seq,
                at=t.at,
                result=result,
                last_error=last_error,
            )
        )
        await tasks.record_event(conn, t.todo_id, bumped.seq, body, now_ms)
        if not targets:
            return
        await outbox.enqueue(
            conn, task_id=t.todo_id, seq=bumped.seq, body=body, targets=targets, now_ms=now_ms
        )
