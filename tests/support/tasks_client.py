"""The client half of the MCP Tasks extension (``io.modelcontextprotocol/tasks``) on the official SDK's
public API: a ``ClientExtension`` that declares the extension and claims ``resultType: "task"`` on
``tools/call``, and the three methods as ``Request`` types sent with ``ClientSession.send_request``
(which sets ``Mcp-Name`` to the task id, as the extension requires on Streamable HTTP). The SDK has no
Tasks client of its own (its notes: "this SDK does not implement the extension yet")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

TASKS = "io.modelcontextprotocol/tasks"


class Answer(Result):
    """Any result, every wire field kept: the tests read the extension's fields by their wire names."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")
    result_type: str | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class CreateTaskResult(Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskIdParams(RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTask(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def _unresolved(result: CreateTaskResult, _ctx: ClaimContext) -> CallToolResult:
    raise AssertionError(f"tests read task {result.task_id} with allow_claimed=True")


class TasksClient(ClientExtension):
    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=_unresolved),)


async def submit(session: ClientSession, arguments: dict[str, Any]) -> CallToolResult | CreateTaskResult:
    result = await session.call_tool("submit_work", arguments, allow_claimed=True)
    assert isinstance(result, CallToolResult | CreateTaskResult), type(result)
    return result


async def get_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    return (await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), Answer)).wire()


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    params = UpdateParams(task_id=task_id, input_responses=responses)
    return (await session.send_request(UpdateTask(params=params), Answer)).wire()


async def cancel_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    return (await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), Answer)).wire()
