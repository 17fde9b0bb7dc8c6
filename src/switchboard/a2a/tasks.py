"""What an A2A task is to the a2a package: which todos are tasks, what a SendMessage writes with its
todo, and the ``TaskStore`` the faces call. The statements are in ``store/a2a_tasks.py``.

The task row must commit with its todo, but the todo id is minted inside ``TodoStore.create``. The send
path therefore hands ``create`` an in-transaction step (``fanout.writes_task``) that writes the row
(:func:`insert_task`) with the new id, in the same transaction, before the transition stage reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.a2a.config_types import ConfigInput
from switchboard.store import a2a_tasks
from switchboard.store.a2a_tasks import (
    Bumped,
    TaskRecord,
    TaskRows,
    lock_owned,
    mark_claim,
    next_seq,
    record_event,
    record_in,
)
from switchboard.store.transitions import Transition

__all__ = [
    "A2A_KIND",
    "A2A_SOURCE",
    "Bumped",
    "SendIntent",
    "TaskRecord",
    "TaskStore",
    "insert_task",
    "lock_owned",
    "mark_claim",
    "may_be_task",
    "next_seq",
    "record_event",
    "record_in",
]

A2A_SOURCE = "a2a"  # todos.source of every task (send.py writes it; may_be_task reads it)
A2A_KIND = "a2a.message"


def may_be_task(t: Transition) -> bool:
    """Whether a transition can be an A2A task's, read from the moved row itself: the a2a package
    marks the todos it creates (``source``) and only it reads the mark back, so other todos cost no
    query. A cheap prefilter, not the decision: a webhook source may also be called ``a2a``, and
    the task row (:func:`next_seq`) is what makes a todo a task."""
    return t.source == A2A_SOURCE


@dataclass(frozen=True, slots=True)
class SendIntent:
    """What a SendMessage knows of the task it creates, for the task row written with its todo."""

    owner_endpoint_id: str
    context_id: str
    message_json: str
    inline_config: ConfigInput | None = None  # SendMessage's configuration.taskPushNotificationConfig
    message_id: str | None = None  # the dedup key (owner, messageId)


async def insert_task(conn: AsyncConnection, todo_id: str, intent: SendIntent, now_ms: int) -> None:
    """The task row of the todo a SendMessage just created, in the todo's transaction."""
    await a2a_tasks.insert_task(
        conn,
        todo_id,
        owner_endpoint_id=intent.owner_endpoint_id,
        context_id=intent.context_id,
        message_json=intent.message_json,
        message_id=intent.message_id,
        now_ms=now_ms,
    )


class TaskStore(TaskRows):
    """The tasks the A2A and MCP faces read and update (get, by_message_id, events_after,
    append_followup, ask, followups_since_claim, page): their statements are the store's."""
