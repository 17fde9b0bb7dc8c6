"""Todos as A2A objects: the state mapping (design.md, SPEC-0018), Task snapshots, and push bodies.

The only module that builds A2A protocol objects from rows, so GetTask, ListTasks, CancelTask and the
webhook bodies cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from a2a.types.a2a_pb2 import (
    Artifact,
    AuthenticationInfo,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from switchboard.a2a.config_types import ConfigView
from switchboard.store.a2a_tasks import TaskRecord as TaskRecord  # re-exported: its home moved

SUBMITTED: Final = TaskState.TASK_STATE_SUBMITTED
WORKING: Final = TaskState.TASK_STATE_WORKING
COMPLETED: Final = TaskState.TASK_STATE_COMPLETED
FAILED: Final = TaskState.TASK_STATE_FAILED
CANCELED: Final = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED: Final = TaskState.TASK_STATE_INPUT_REQUIRED

# Todo status -> task state. A todo waiting for its retry (``failed``) is queued again: submitted.
STATE_OF_STATUS: Final[Mapping[str, int]] = {
    "pending": SUBMITTED,
    "claimed": WORKING,
    "failed": SUBMITTED,
    "done": COMPLETED,
    "dead": FAILED,
    "canceled": CANCELED,
}
# Transition -> the state it leads to.
STATE_OF_TRANSITION: Final[Mapping[str, int]] = {
    "created": SUBMITTED,
    "requeued": SUBMITTED,
    "claimed": WORKING,
    "failed": SUBMITTED,
    "done": COMPLETED,
    "dead": FAILED,
    "canceled": CANCELED,
    # Not todo transitions: the worker's ``ask`` (MCP) and the sender's answer to it (turns.py).
    "input_required": INPUT_REQUIRED,
    "resumed": WORKING,
}
# Task state -> the todo statuses it covers (ListTasks' status filter).
STATUSES_OF_STATE: Final[Mapping[int, tuple[str, ...]]] = {
    SUBMITTED: ("pending", "failed"),
    WORKING: ("claimed",),
    COMPLETED: ("done",),
    FAILED: ("dead",),
    CANCELED: ("canceled",),
}
TERMINAL_STATUSES: Final = frozenset({"done", "dead", "canceled"})
TERMINAL_TRANSITIONS: Final = TERMINAL_STATUSES

RESULT_ARTIFACT_ID: Final = "result"
REDACTED: Final = "[redacted]"


def _timestamp(epoch_ms: int | float) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


def message_from_json(text: str) -> Message:
    message = Message()
    ParseDict(json.loads(text), message, ignore_unknown_fields=True)
    return message


def message_to_json(message: Message) -> str:
    return json.dumps(MessageToDict(message), separators=(",", ":"))


def result_artifact(result_json: str | None) -> Artifact | None:
    """The worker's ack result as the task's one artifact: a text part for a string, a data part for
    any other JSON value, none when the worker acked without a result."""
    if result_json is None:
        return None
    value = json.loads(result_json)
    if value is None:
        return None
    if isinstance(value, str):
        part = Part(text=value, media_type="text/plain")
    else:
        data = Value()
        ParseDict(value, data)
        part = Part(data=data, media_type="application/json")
    return Artifact(artifact_id=RESULT_ARTIFACT_ID, name="result", parts=[part])


def _status(
    state: int,
    at_ms: int | float,
    last_error: str | None,
    task_id: str,
    context_id: str,
    question: str | None = None,
) -> TaskStatus:
    status = TaskStatus(state=state, timestamp=_timestamp(at_ms))  # type: ignore[arg-type]
    if state == INPUT_REQUIRED and question:
        status.message.CopyFrom(message_from_json(question))
    if state == FAILED and last_error:
        status.message.CopyFrom(
            Message(
                message_id=f"{task_id}-error",
                context_id=context_id,
                task_id=task_id,
                role=Role.ROLE_AGENT,
                parts=[Part(text=last_error, media_type="text/plain")],
            )
        )
    return status


def task_view(record: TaskRecord, *, history: int | None = None, artifacts: bool = True) -> Task:
    """GetTask, ListTasks, CancelTask and SendMessage all answer with this."""
    task = Task(id=record.id, context_id=record.context_id)
    asking = record.input_required
    task.status.CopyFrom(
        _status(
            INPUT_REQUIRED if asking else STATE_OF_STATUS.get(record.status, SUBMITTED),
            (record.input_required_at or record.updated_at) if asking else record.updated_at,
            record.last_error,
            record.id,
            record.context_id,
            record.question,
        )
    )
    if artifacts:
        artifact = result_artifact(record.result)
        if artifact is not None:
            task.artifacts.append(artifact)
    messages = record.history()
    if history is not None:  # historyLength: the most recent N messages, 0 for none
        messages = messages[len(messages) - history :] if history > 0 else []
    for text in messages:
        task.history.append(message_from_json(text))
    # The per-task sequence (the one push bodies, SSE event ids and MCP's tasks/get carry): a reader
    # can tell which of two snapshots of the task is the later one.
    task.metadata.update({"queue": record.queue, "sequence": record.last_seq})
    return task


@dataclass(frozen=True, slots=True)
class PushEvent:
    """What one transition tells a webhook. Built inside the transition's transaction."""

    task_id: str
    context_id: str
    queue: str
    transition: str
    reason: str | None
    seq: int
    at: float  # seconds
    result: str | None
    last_error: str | None
    question: str | None = None  # input_required: the worker's message, as A2A JSON


def push_body(event: PushEvent) -> bytes:
    """A v1.0 ``StreamResponse`` with exactly one member, as compact JSON bytes (these exact bytes are
    sent and signed).

    The first delivery (``created``) and the terminal ones carry the whole ``task`` (the terminal one
    with the result artifact), the ones in between a ``statusUpdate``. No body carries the message
    history: GetTask has it. ``metadata.sequence`` is the per-task sequence number receivers dedup on.
    """
    state = STATE_OF_TRANSITION[event.transition]
    status = _status(
        state, event.at * 1000, event.last_error, event.task_id, event.context_id, event.question
    )
    metadata: dict[str, Any] = {
        "sequence": event.seq,
        "transition": event.transition,
        "queue": event.queue,
    }
    if event.reason:
        metadata["reason"] = event.reason
    if event.transition == "created" or event.transition in TERMINAL_TRANSITIONS:
        task = Task(id=event.task_id, context_id=event.context_id)
        task.status.CopyFrom(status)
        artifact = result_artifact(event.result) if event.transition == "done" else None
        if artifact is not None:
            task.artifacts.append(artifact)
        wire = MessageToDict(StreamResponse(task=task))
        wire["task"]["metadata"] = metadata
    else:
        update = TaskStatusUpdateEvent(task_id=event.task_id, context_id=event.context_id)
        update.status.CopyFrom(status)
        wire = MessageToDict(StreamResponse(status_update=update))
        wire["statusUpdate"]["metadata"] = metadata
    # Metadata is set on the dict, not the proto: a protobuf Struct would render the sequence as 3.0.
    return json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()


def state_name(status: str) -> str:
    """``TASK_STATE_COMPLETED`` and friends, for error messages."""
    return str(TaskState.Name(STATE_OF_STATUS.get(status, SUBMITTED)))  # type: ignore[arg-type]


def config_view(view: ConfigView, *, reveal: str | None = None) -> TaskPushNotificationConfig:
    """A config as the API returns it: the URL's query, the token and the credentials redacted; a
    signing secret minted by create is the one thing shown, once."""
    out = TaskPushNotificationConfig(id=view.config_id, task_id=view.task_id, url=view.url_display)
    if view.has_token:
        out.token = REDACTED
    if view.scheme is not None:
        out.authentication.CopyFrom(AuthenticationInfo(scheme=view.scheme, credentials=reveal or REDACTED))
    return out
