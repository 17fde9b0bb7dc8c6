"""What each verb returns, as types: the SDK derives every tool's ``outputSchema`` from these return
annotations and sends the result as ``structuredContent`` (and as JSON text for older hosts).

``typing_extensions.TypedDict`` because pydantic needs it on Python < 3.12. The SDK checks each result
against its type before it leaves (a few microseconds per call); the suite validates every result it
sees against the published JSON schema as well (tests/integration/mcp/schema_check.py).
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import JsonValue, WithJsonSchema
from typing_extensions import TypedDict

from switchboard.mcp.errors import CODES

AnyJson = Annotated[
    JsonValue,
    # pydantic's own schema for JsonValue is ``{}``; hosts that translate tool schemas for a model
    # (function calling) want a ``type``, so say "any JSON value" explicitly.
    WithJsonSchema({"type": ["object", "array", "string", "number", "boolean", "null"]}),
]

Status = Literal["pending", "claimed", "done", "failed", "dead", "canceled"]
Presence = Literal["in", "out"]


class Todo(TypedDict):
    id: str
    queue: str
    kind: str | None
    source: str | None
    title: str
    status: Status
    attempt: int
    lease_expires_at: str | None
    retry_at: str | None
    created_at: str | None
    lease: NotRequired[str]  # claim and heartbeat answers: the claim's handle, for every holder verb
    payload: NotRequired[AnyJson]
    result: NotRequired[AnyJson]
    last_error: NotRequired[str]


class TodoResult(TypedDict):
    todo: Todo


class HeartbeatResult(TypedDict):
    todo: Todo
    # A2A tasks only: the sender's follow-up messages (A2A JSON) that arrived after this claim
    followups: NotRequired[list[AnyJson]]


class AskResult(TypedDict):
    todo: Todo
    task_state: Literal["TASK_STATE_INPUT_REQUIRED"]
    message_id: str


class AckError(TypedDict):
    code: str
    message: str


class AckOutcome(TypedDict):
    todo_id: str
    ok: bool
    error: NotRequired[AckError]  # present when ok is false


class MaybeTodoResult(TypedDict):
    todo: Todo | None
    acked: NotRequired[AckOutcome]  # claim_next with ack: what became of the todo it finished first


class TodoBatch(TypedDict):
    todos: list[Todo]


class AckManyResult(TypedDict):
    results: list[AckOutcome]


class TodoPage(TypedDict):
    todos: list[Todo]
    next_before: str | None


class PresenceResult(TypedDict):
    presence: Presence
    clocked: Presence
    override: Presence | None


class WhoAmI(TypedDict):
    endpoint: str
    endpoint_id: str
    via: Literal["endpoint_credential", "oauth"]
    verbs: list[str]
    endpoint_verbs: list[str]
    queues: list[str]
    presence: Presence
    clocked: Presence
    override: Presence | None
    doorbell_uri: str
    resources: list[str]


class DoorbellHow(TypedDict):
    uri: str
    era: Literal["legacy", "modern"]
    how: str
    then: str


# The error object every failed verb carries (``isError: true``), as its text and in
# ``_meta["switchboard/error"]``: documented (docs/mcp.md), not an outputSchema, which is for results.
ERROR_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"code": {"enum": sorted(CODES)}, "message": {"type": "string"}},
    "required": ["code", "message"],
    "additionalProperties": False,
}
