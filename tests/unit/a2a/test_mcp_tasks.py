"""The Tasks extension's parts (a2a/mcp_tasks.py): what the SDK advertises for it, when a submit_work
call becomes a task handle, and its JSON-RPC error vocabulary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from a2a.utils.errors import InternalError, TaskNotFoundError
from mcp import Client, MCPError
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
)

from switchboard.a2a.handler import Handler
from switchboard.a2a.mcp_tasks import NOT_FOUND, TASKS, TasksExtension, _protocol_error
from switchboard.a2a.views import TaskRecord
from switchboard.mcp.errors import error_result
from switchboard.mcp.server import SwitchboardServer
from switchboard.mcp.tools import acting_as
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable
from tests.support.tasks_client import get_task
from tests.unit.a2a.test_mcp_task_view import RECORD

PLAIN = CallToolResult(content=[], structured_content={"task_id": RECORD.id})


class FakeHandler:
    """Only the read the extension makes for a handle: the record, or a database outage."""

    def __init__(self, record: TaskRecord | None) -> None:
        self.record = record

    async def own(self, _endpoint: Endpoint, _task_id: str) -> TaskRecord:
        if self.record is None:
            raise StoreUnavailable("down")
        return self.record


def extension(record: TaskRecord | None = RECORD) -> TasksExtension:
    return TasksExtension(cast(Handler, FakeHandler(record)))


def context(version: str = "2026-07-28", declared: bool = True) -> ServerRequestContext[Any, Any]:
    capabilities = ClientCapabilities(extensions={TASKS: {}} if declared else None)
    session = SimpleNamespace(client_capabilities=capabilities)
    return cast(ServerRequestContext[Any, Any], SimpleNamespace(protocol_version=version, session=session))


async def intercept(ext: TasksExtension, name: str, ctx: ServerRequestContext[Any, Any], answer: Any) -> Any:
    async def call_next(_ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
        return cast(HandlerResult, answer)

    with acting_as(cast(Endpoint, SimpleNamespace(id="ep_producer"))):
        return await ext.intercept_tool_call(CallToolRequestParams(name=name), ctx, call_next)


async def test_a_declaring_modern_request_gets_a_task_handle() -> None:
    handle = await intercept(extension(), "submit_work", context(), PLAIN)
    assert handle["resultType"] == "task" and handle["taskId"] == RECORD.id
    assert handle["status"] == "working" and "inputRequests" not in handle


@pytest.mark.parametrize(
    ("name", "ctx"),
    [
        ("submit_work", context(declared=False)),  # the extension's MUST: never to a non-declaring one
        ("submit_work", context(version="2025-11-25")),  # a legacy wire cannot carry resultType task
        ("claim_next", context()),  # no other tool is ever a task
    ],
)
async def test_everything_else_gets_the_ordinary_result(
    name: str, ctx: ServerRequestContext[Any, Any]
) -> None:
    assert await intercept(extension(), name, ctx, PLAIN) is PLAIN


async def test_a_refused_submit_is_no_task_and_a_failed_read_answers_plainly() -> None:
    refused = error_result("invalid_argument", "none of your endpoints drains that queue")
    assert await intercept(extension(), "submit_work", context(), refused) is refused
    assert await intercept(extension(None), "submit_work", context(), PLAIN) is PLAIN


def test_unknown_and_foreign_ids_are_invalid_params_and_outages_internal() -> None:
    missing = _protocol_error(TaskNotFoundError("task not found"))
    assert (missing.error.code, missing.error.message) == (INVALID_PARAMS, NOT_FOUND)
    assert _protocol_error(InternalError("down")).error.code == INTERNAL_ERROR


async def test_the_sdk_advertises_the_extension_and_refuses_undeclared_task_calls() -> None:
    ext = extension()
    assert [m.method for m in ext.methods()] == ["tasks/get", "tasks/update", "tasks/cancel"]
    server = SwitchboardServer("t", extensions=[ext])
    async with Client(server) as client:  # in memory: no gate, so only what precedes any read
        assert client.server_capabilities.extensions == {TASKS: {}}
        with pytest.raises(MCPError) as undeclared:
            await get_task(client.session, RECORD.id)
    assert undeclared.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
