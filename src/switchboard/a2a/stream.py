"""A2A streaming (``SendStreamingMessage``, ``SubscribeToTask``): a task's events, in order, from its
event log (``a2a_task_events``, written in each transition's transaction by fanout.py).

A stream opens with the task as it stands (the ``Task`` event), then sends every later transition in
sequence order and ends after the terminal one. Each SSE event carries the transition's sequence number
as its ``id``, so a client whose connection dropped resubscribes with ``Last-Event-ID`` and gets
exactly the transitions after it, replayed from the log (docs/a2a.md, "Streaming").

The SDK's JSON-RPC route writes the SSE response but sets no ids; the handler therefore hands each
event's id to the gate through :class:`EventIds` (carried in the ASGI scope and the call context), and
the gate adds it to the event the SDK renders (gate.py).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Final

from a2a.server.events.event_queue import Event
from a2a.types.a2a_pb2 import Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from google.protobuf.json_format import ParseDict

SCOPE_KEY: Final = "switchboard.sse_ids"
TERMINAL_STATES: Final = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)


class EventIds:
    """The SSE id of each event the handler yields, in yield order (None: no id of its own)."""

    def __init__(self) -> None:
        self.pending: deque[int | None] = deque()

    def add(self, seq: int | None) -> None:
        self.pending.append(seq)

    def take(self) -> int | None:
        return self.pending.popleft() if self.pending else None


def last_event_id(headers: Any) -> int | None:
    """The sequence a resuming client saw last (``Last-Event-ID``), or None."""
    if not isinstance(headers, dict):
        return None
    value = headers.get("last-event-id")
    if not isinstance(value, str) or not value.strip().isdigit() or len(value.strip()) > 18:
        return None
    return int(value.strip())


def _meta(wire: dict[str, Any]) -> dict[str, Any]:
    meta = wire.pop("metadata", None)
    return meta if isinstance(meta, dict) else {}


def events_of(body: str) -> list[Event]:
    """The stream events of one logged transition. A terminal transition's ``task`` becomes the
    result artifact (if any) and the terminal status update, as a stream reports them."""
    wire = json.loads(body)
    if "statusUpdate" in wire:
        update = wire["statusUpdate"]
        _meta(update)
        return [ParseDict(update, TaskStatusUpdateEvent(), ignore_unknown_fields=True)]
    task_wire = wire["task"]
    _meta(task_wire)
    task = ParseDict(task_wire, Task(), ignore_unknown_fields=True)
    out: list[Event] = []
    for artifact in task.artifacts:
        event = TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, last_chunk=True)
        event.artifact.CopyFrom(artifact)
        out.append(event)
    status = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id)
    status.status.CopyFrom(task.status)
    out.append(status)
    return out


def is_terminal(event: Event) -> bool:
    return isinstance(event, TaskStatusUpdateEvent) and event.status.state in TERMINAL_STATES
