"""The MCP verb ``submit_work``: a producer agent puts work on a queue one of its human's endpoints
drains, as an A2A SendMessage would, and follows it as a task.

It is SendMessage's own operation (:meth:`switchboard.a2a.send.Sender.send`), given a message built
from the arguments: the todo, its ``a2a_tasks`` row and the first sequence number commit in one
transaction before the answer leaves, and a resend with the same ``message_id`` finds the first task.
A client that declared the Tasks extension gets the answer as a task handle (``CreateTaskResult``,
a2a/mcp_tasks.py); any other gets this verb's ordinary result.

Its grant (``submit_work``) is not in the default one (core/verbs.py, docs/mcp.md).

No ``from __future__ import annotations``: the SDK reads the argument types from the signature.
"""

import uuid
from typing import Annotated, Any, Final

from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from a2a.utils.errors import A2AError, InternalError, TaskNotFoundError
from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from switchboard.a2a.handler import Handler
from switchboard.a2a.views import TaskRecord
from switchboard.core.text import storable
from switchboard.mcp.tasks_ext_status import mcp_status
from switchboard.mcp.tools import ToolContext, ToolRegistrar, VerbError, current_endpoint

SUBMIT: Final = "submit_work"

Text = Annotated[
    str,
    Field(min_length=1, max_length=16000, description="The work, in words: it becomes the A2A message."),
]
Queue = Annotated[
    str | None,
    Field(
        default=None,
        max_length=64,
        description="The queue to put it on; default: this endpoint's default A2A queue.",
    ),
]
Target = Annotated[
    str | None,
    Field(
        default=None,
        max_length=64,
        description="The slug of the endpoint that should work it, when several of yours drain the queue.",
    ),
]
MessageId = Annotated[
    str | None,
    Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Your id for this submission: sending it again returns the first task, not a new one.",
    ),
]
ContextId = Annotated[
    str | None,
    Field(default=None, max_length=128, description="An A2A contextId, to group related tasks."),
]


class SubmitResult(TypedDict):
    task_id: str
    context_id: str
    queue: str
    status: str  # the Tasks extension's status (working, input_required, completed, failed, cancelled)
    seq: int


def submit_result(record: TaskRecord) -> SubmitResult:
    return {
        "task_id": record.id,
        "context_id": record.context_id,
        "queue": record.queue,
        "status": mcp_status(record.status, record.input_required),
        "seq": record.last_seq,
    }


def verb_error(err: A2AError) -> VerbError:
    """An A2A refusal in the MCP verb vocabulary; the messages are A2A's (they name fields, never
    values)."""
    if isinstance(err, TaskNotFoundError):
        return VerbError("not_found", err.message)
    if isinstance(err, InternalError):
        return VerbError("unavailable", err.message)
    return VerbError("invalid_argument", err.message)


def send_request(
    text: str, queue: str | None, endpoint: str | None, message_id: str | None, context_id: str | None
) -> SendMessageRequest:
    """The SendMessage a submit_work call stands for."""
    metadata: dict[str, Any] = {}
    if queue is not None:
        metadata["queue"] = queue
    if endpoint is not None:
        metadata["endpoint"] = endpoint
    message = Message(
        message_id=message_id or f"mcp-{uuid.uuid4().hex}",
        context_id=context_id or "",
        role=Role.ROLE_USER,
        parts=[Part(text=storable(text), media_type="text/plain")],
    )
    message.metadata.update(metadata)
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = True
    return request


def submit_registrar(handler: Handler) -> ToolRegistrar:
    def register(server: MCPServer[Any], tc: ToolContext) -> None:
        async def submit_work(
            message: Text,
            queue: Queue = None,
            endpoint: Target = None,
            message_id: MessageId = None,
            context_id: ContextId = None,
        ) -> SubmitResult:
            """Put work on a queue another of your endpoints drains; it becomes a todo there and a task
            you follow. With the MCP Tasks extension declared, the answer is a task handle (poll it
            with tasks/get; answer the worker's question with tasks/update; tasks/cancel); otherwise
            this result, whose task_id the same methods and A2A GetTask accept. Errors:
            invalid_argument (no such queue or endpoint of yours, a bad argument), unavailable."""
            caller = current_endpoint()
            try:
                record = await handler.sender.send(
                    caller, send_request(message, queue, endpoint, message_id, context_id)
                )
            except A2AError as err:
                raise verb_error(err) from None
            return submit_result(record)

        tc.add_tool(
            submit_work,
            name=SUBMIT,
            title="Submit work to another of your endpoints",
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
            ),
        )

    return register
