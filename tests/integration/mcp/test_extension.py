"""The seam other modules use to add verbs: registrars get the shared helpers, and the gate applies
the same grants, error shape and metrics to their verbs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError
from mcp.server import MCPServer
from mcp_types import INVALID_PARAMS
from starlette.routing import BaseRoute

from switchboard.app import Component
from switchboard.core.clock import ManualClock
from switchboard.mcp.errors import INTERNAL_MESSAGE
from switchboard.mcp.tools import ToolContext, ToolRegistrar, VerbError, current_endpoint
from switchboard.services import Services
from switchboard.store.errors import StoreUnavailable
from tests.integration.mcp.helpers import call, connect, refuse, sample, vend
from tests.support.server import Instance, make_settings, run_instance


def register(_server: MCPServer[Any], tc: ToolContext) -> None:
    async def a2a_get_task(task_id: str) -> dict[str, Any]:
        endpoint = current_endpoint()
        if task_id != f"task-of-{endpoint.slug}":
            raise VerbError("not_found", "task not found")
        return {"task_id": task_id, "endpoint": endpoint.slug}

    async def a2a_list_tasks() -> dict[str, Any]:
        raise RuntimeError("internals: /var/lib/switchboard sbt_this_must_not_leak")

    async def a2a_push_config() -> dict[str, Any]:
        raise StoreUnavailable("database unavailable")

    async def server_time() -> dict[str, Any]:
        return {"now": tc.services.clock.now()}

    tc.add_tool(a2a_get_task, name="a2a_get_task")
    tc.add_tool(a2a_list_tasks, name="a2a_list_tasks")
    tc.add_tool(a2a_push_config, name="a2a_push_config")
    tc.add_tool(server_time, name="server_time", grant_required=False)


class Extension:
    """A component that adds only MCP verbs, as a feature module would (``Component.mcp_tools``)."""

    def routes(self) -> Sequence[BaseRoute]:
        return ()

    def mcp_tools(self) -> Sequence[ToolRegistrar]:
        return (register,)

    def lifespan(self) -> AbstractAsyncContextManager[None]:
        return nullcontext()


def with_registrar(_services: Services) -> Sequence[Component]:
    return [Extension()]


@pytest.fixture
async def ext(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Instance]:
    settings = make_settings(tmp_path, doorbell_heartbeat_seconds=3600)
    async with run_instance(settings, clock=clock, components=with_registrar) as instance:
        yield instance


A2A = ["a2a_get_task", "a2a_list_tasks", "a2a_push_config", "a2a_cancel_task"]


async def test_registered_verbs_follow_the_gate(ext: Instance, clock: ManualClock) -> None:
    a = await vend(ext, "agent-a", verbs=A2A)
    b = await vend(ext, "agent-b")
    async with connect(ext, a.token) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {
            "a2a_get_task",
            "a2a_list_tasks",
            "a2a_push_config",
            "whoami",
            "subscribe_doorbell",
            "server_time",
        }
        assert await call(client, "a2a_get_task", task_id="task-of-agent-a") == {
            "task_id": "task-of-agent-a",
            "endpoint": "agent-a",
        }
        assert await refuse(client, "a2a_get_task", task_id="task-of-agent-b") == (
            "not_found",
            "task not found",
        )
        assert await refuse(client, "a2a_list_tasks") == ("internal", INTERNAL_MESSAGE)
        assert (await refuse(client, "a2a_push_config"))[0] == "unavailable"
        with pytest.raises(MCPError) as unknown:  # granted, but no module offers it: -32602
            await client.call_tool("a2a_cancel_task", {})
        assert unknown.value.error.code == INVALID_PARAMS
        assert await call(client, "server_time") == {"now": clock.now()}
        assert (await refuse(client, "a2a_get_task"))[0] == "invalid_argument"
    async with connect(ext, b.token) as client:
        assert (await refuse(client, "a2a_get_task", task_id="task-of-agent-b"))[0] == "forbidden"
        assert "a2a_get_task" not in {t.name for t in (await client.list_tools()).tools}
        assert await call(client, "server_time") == {"now": clock.now()}
    assert sample(ext, "switchboard_mcp_calls_total", verb="a2a_list_tasks", code="internal") == 1
    assert sample(ext, "switchboard_mcp_calls_total", verb="server_time", code="ok") == 2
    assert sample(ext, "switchboard_mcp_calls_total", verb="a2a_get_task", code="forbidden") == 1
