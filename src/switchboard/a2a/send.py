"""Sending a message: the task it creates (a todo on a queue the sender names), or the one a resend
of the same messageId or a follow-up turn finds (docs/a2a.md, "Sending"). Split from handler.py, which
authorizes and answers; this part decides what is stored."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

from a2a.types.a2a_pb2 import Message, SendMessageRequest
from google.protobuf.json_format import MessageToDict

from switchboard.a2a import errors
from switchboard.a2a.config_calls import ConfigCalls
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.fanout import writes_task
from switchboard.a2a.settings import default_queue
from switchboard.a2a.tasks import A2A_KIND, A2A_SOURCE, SendIntent, TaskStore
from switchboard.a2a.turns import Turns
from switchboard.a2a.views import TERMINAL_STATUSES, TaskRecord, message_to_json, state_name
from switchboard.core.ids import new_id
from switchboard.core.text import storable, summary
from switchboard.services import Services
from switchboard.store.accounts import QUEUE, SLUG, Endpoint
from switchboard.store.errors import Conflict
from switchboard.store.todos import NewTodo

_CONTEXT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_MESSAGE_ID: Final = 255


class Sender:
    def __init__(
        self,
        services: Services,
        *,
        tasks: TaskStore,
        configs: ConfigStore,
        calls: ConfigCalls,
        own: Callable[[Endpoint, str], Awaitable[TaskRecord]],
    ) -> None:
        self.services, self.tasks, self.configs, self.calls, self.own = services, tasks, configs, calls, own
        self.turns: Turns | None = None  # set by the component, through Handler.turns

    async def send(self, endpoint: Endpoint, params: SendMessageRequest) -> TaskRecord:
        """Create the message's task, or find the one a resend of the same messageId created."""
        message = params.message
        history_length(params.configuration.history_length, params.configuration.HasField("history_length"))
        if not message.parts:
            raise errors.invalid("message.parts must not be empty")
        if len(message.message_id) > MAX_MESSAGE_ID:
            raise errors.invalid(f"message.messageId must be at most {MAX_MESSAGE_ID} characters")
        if message.task_id:
            return await self._follow_up(endpoint, message)
        first = await self._resent(endpoint, message.message_id)
        if first is not None:  # a resend (a retry after a timeout, say): the first task, not a new one
            return first
        meta = {**MessageToDict(params.metadata), **MessageToDict(message.metadata)}
        queue, target = await self._target(endpoint, meta)
        inline = await self.calls.inline(params)
        context_id = message.context_id or new_id("ctx")
        if not _CONTEXT_ID.fullmatch(context_id):
            raise errors.invalid("message.contextId must be 1-128 letters, digits, '.', '_', ':' or '-'")
        stored = Message()
        stored.CopyFrom(message)
        stored.context_id = context_id
        stored_json = storable(message_to_json(stored))
        intent = SendIntent(endpoint.id, context_id, stored_json, inline, message.message_id or None)
        todo = NewTodo(
            endpoint_id=target.id,
            queue=queue,
            title=title(message, endpoint.slug),
            payload={
                "a2a": {
                    "from": endpoint.slug,
                    "context_id": context_id,
                    "message": json.loads(stored_json),
                }
            },
            kind=A2A_KIND,
            source=A2A_SOURCE,
            verified=True,  # an authenticated endpoint sent it: the worker's doorbell may ring
        )
        try:
            created = await self.services.todos.create(
                [todo], in_transaction=writes_task(self.configs, intent)
            )
        except Conflict:
            # The same messageId sent twice at once: the other call's task committed first (the
            # unique (owner, messageId) index refused this one; nothing of it is stored).
            again = await self._resent(endpoint, message.message_id)
            if again is None:
                raise
            return again
        return await self.own(endpoint, created.created[0])

    async def _follow_up(self, endpoint: Endpoint, message: Message) -> TaskRecord:
        """A follow-up turn: appended to the caller's task (history and the todo's payload)."""
        record = await self.own(endpoint, message.task_id)
        if message.context_id and message.context_id != record.context_id:
            raise errors.invalid("message.contextId must be the task's contextId")
        stored = Message()
        stored.CopyFrom(message)
        stored.context_id = record.context_id
        outcome = await self.tasks.append_followup(
            endpoint.id,
            record.id,
            json.loads(storable(message_to_json(stored))),
            TERMINAL_STATUSES,
            on_answer=self.turns.answered(record.id) if self.turns is not None else None,
        )
        if outcome == "appended" and self.turns is not None:
            self.turns.committed(record.id)
        if outcome == "missing":
            raise errors.task_not_found()
        if outcome == "terminal":
            raise errors.unsupported(
                f"the task is {state_name(record.status)} and accepts no more messages: send a new "
                "message (with the same contextId to continue the conversation)"
            )
        return await self.own(endpoint, record.id)

    async def _resent(self, endpoint: Endpoint, message_id: str) -> TaskRecord | None:
        return await self.tasks.by_message_id(endpoint.id, message_id) if message_id else None

    async def _target(self, sender: Endpoint, meta: dict[str, Any]) -> tuple[str, Endpoint]:
        """The queue the message names and the endpoint that will work it (docs/a2a.md, "Sending")."""
        queue = meta.get("queue")
        if queue is None:  # a generic A2A client: the sender's default A2A queue (settings.py)
            queue = await default_queue(self.services, sender)
            if queue is None:
                raise errors.invalid(
                    "message.metadata.queue is missing and this endpoint has no default A2A queue"
                )
        if not isinstance(queue, str) or not QUEUE.fullmatch(queue):
            raise errors.invalid(
                "message.metadata.queue must name a queue (lower-case letters, digits, '.', '_' or '-')"
            )
        slug = meta.get("endpoint")
        if slug is not None:
            if not isinstance(slug, str) or not SLUG.fullmatch(slug):
                raise errors.invalid("message.metadata.endpoint must be an endpoint slug")
            target = await self.services.accounts.endpoint_by_slug(slug)
            if target is None or target.human_id != sender.human_id:
                raise errors.invalid("no endpoint of yours by that name")
            if queue not in target.queues:
                raise errors.invalid("that endpoint does not drain that queue")
            return queue, target
        drains = [
            e for e in await self.services.accounts.list_endpoints(sender.human_id) if queue in e.queues
        ]
        if not drains:
            raise errors.invalid("none of your endpoints drains that queue")
        if len(drains) > 1:
            raise errors.invalid(
                "several of your endpoints drain that queue: name one in message.metadata.endpoint"
            )
        return queue, drains[0]


def history_length(length: int, present: bool) -> int | None:
    """``historyLength``: the most recent N messages (0: none); unset: all."""
    if present and length < 0:
        raise errors.invalid("historyLength must not be negative")
    return length if present else None


def title(message: Message, sender_slug: str) -> str:
    text = " ".join(part.text for part in message.parts if part.text)
    title = summary(text) if text else ""
    return title or f"A2A message from {sender_slug}"
