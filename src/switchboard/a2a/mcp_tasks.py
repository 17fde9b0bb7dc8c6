"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663), built on the SDK's extension
API: ``MCPServer(extensions=[TasksExtension(...)])`` serves its three methods and advertises it under
``capabilities.extensions``.

One identity across three faces: an MCP task *is* an A2A task *is* a todo (one id, one sequence), so
every method here calls the operation the A2A face calls (handler.py), never a copy:

* ``submit_work`` (a2a/submit.py): SendMessage's ``Sender.send``. When the request declared this
  extension (modern era: the per-request client capabilities), :meth:`intercept_tool_call` answers it
  with a ``CreateTaskResult`` (``resultType: "task"``), after the todo has committed.
* ``tasks/get``: GetTask's read (``Handler.own``, owner-scoped: another endpoint's id is not found).
* ``tasks/update``: the answer to the worker's question is an A2A follow-up turn (``Sender.send`` with
  the task id: ``TaskStore.append_followup``), with the messageId ``answer-<key>``, so a repeated
  update of one key is a duplicate and changes nothing.
* ``tasks/cancel``: CancelTask's ``Handler.cancel``.

The gate (mcp/gate.py) has already authenticated the caller, rate-limited it and checked its
``submit_work`` grant (``core.verbs.METHOD_GRANTS``) before any handler here runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from a2a.utils.errors import (
    A2AError,
    InternalError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from switchboard.a2a.handler import Handler
from switchboard.a2a.mcp_task_view import answer_of, question_of, task_object
from switchboard.a2a.submit import SUBMIT
from switchboard.a2a.views import TaskRecord
from switchboard.core.text import storable
from switchboard.mcp.errors import UNAVAILABLE_MESSAGE
from switchboard.mcp.tools import current_endpoint
from switchboard.store.errors import StoreUnavailable

TASKS: Final = "io.modelcontextprotocol/tasks"
NOT_FOUND: Final = "Failed to retrieve task: Task not found"


class TaskParams(RequestParams):
    task_id: str = Field(min_length=1, max_length=64)


class UpdateParams(TaskParams):
    input_responses: dict[str, Any]


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request may be answered with a task: a modern-era request whose client
    capabilities name the extension (a legacy wire cannot carry ``resultType: "task"``)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS in capabilities.extensions)


class TasksExtension(Extension):
    identifier = TASKS

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name != SUBMIT or not declared(ctx):
            return await call_next(ctx)
        result = await call_next(ctx)
        if not isinstance(result, CallToolResult) or result.is_error:
            return result  # refused: no task was created
        content = result.structured_content
        task_id = content.get("task_id") if isinstance(content, dict) else None
        if not isinstance(task_id, str):
            return result  # pragma: no cover - submit_work always names its task
        try:
            record = await self._own(task_id)
        except MCPError:
            # The todo has committed; only the read for the handle failed (a database blip). The
            # ordinary result is a valid answer to a client that declared the extension too, and it
            # names the task, so the work is neither lost nor sent twice.
            return result
        return {"resultType": "task", **task_object(record, detailed=False)}

    # -- the methods ------------------------------------------------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        require_client_extension(ctx, TASKS)
        return task_object(await self._own(params.task_id))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> HandlerResult:
        """Deliver the answer to the open question; entries for any other key are ignored, as the
        extension asks (never issued, already answered, or superseded)."""
        require_client_extension(ctx, TASKS)
        record = await self._own(params.task_id)
        asked = question_of(record)
        if asked is None or asked[0] not in params.input_responses:
            return {}
        key, _ = asked
        answer = answer_of(params.input_responses[key])
        if answer is None:
            raise MCPError(
                INVALID_PARAMS,
                f"inputResponses.{key[:64]} must accept the form with a string content.answer",
            )
        message = Message(
            message_id=f"answer-{key}",
            task_id=record.id,
            context_id=record.context_id,
            role=Role.ROLE_USER,
            parts=[Part(text=storable(answer), media_type="text/plain")],
        )
        try:
            await self.handler.sender.send(current_endpoint(), SendMessageRequest(message=message))
        except UnsupportedOperationError:
            pass  # the task ended meanwhile: nothing is waiting for the answer any more
        except A2AError as err:
            raise _protocol_error(err) from None
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        """Acknowledged whenever the task is the caller's: cancellation is cooperative, and a task
        that has already ended simply keeps its terminal status."""
        require_client_extension(ctx, TASKS)
        try:
            await self.handler.cancel(current_endpoint(), params.task_id)
        except TaskNotCancelableError:
            pass
        except A2AError as err:
            raise _protocol_error(err) from None
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None
        return {}

    async def _own(self, task_id: str) -> TaskRecord:
        try:
            return await self.handler.own(current_endpoint(), task_id)
        except A2AError as err:
            raise _protocol_error(err) from None
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None


def _protocol_error(err: A2AError) -> MCPError:
    """The extension's JSON-RPC errors: an unknown (or another endpoint's) task id is -32602."""
    if isinstance(err, TaskNotFoundError):
        return MCPError(INVALID_PARAMS, NOT_FOUND)
    return MCPError(INTERNAL_ERROR if isinstance(err, InternalError) else INVALID_PARAMS, err.message)
