"""The doorbell through the standard resource mechanism, heard by generic MCP clients that know nothing
of Switchboard: list resources, subscribe to one, wait for ``notifications/resources/updated``.

Both clients talk to a real ``switchboard serve`` child; the todos arrive by real inbound webhooks.
"Unsubscribe stops them" is shown with a positive control: after unsubscribing from the queue URI the
session subscribes to the endpoint-wide URI, and two webhooks later the only notifications it has
received are for that URI (a ring sends a session's URIs in order, so a stray queue notification from
the first webhook would arrive before the second webhook's control).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import MCPError
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import INVALID_PARAMS, CallToolResult, ResourceUpdatedNotification, TextResourceContents

from tests.integration.mcp.npm import npm_install
from tests.integration.mcp.real import RealServer
from tests.integration.mcp.schema_check import check_result

RING_WITHIN = 1.0  # seconds from the webhook being sent to the notification arriving
WAIT = 10.0  # bound on any single wait; a pass is far quicker
TS_DIR = Path(__file__).with_name("ts_client")


# -- the Python SDK's ClientSession ---------------------------------------------------------------------


@contextmanager
def handshake_era() -> Iterator[None]:
    """The SDK warns that resources/subscribe is gone in 2026-07-28; hosts on 2025-11-25 still use it,
    and this test is one of them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


async def test_python_client_session_hears_a_listed_queue_and_unsubscribe_stops_it(
    real_server: RealServer,
) -> None:
    rings: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    stream_open = asyncio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            rings.put_nowait((time.monotonic(), str(message.params.uri)))

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            stream_open.set()

    headers = {"Authorization": f"Bearer {real_server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT, event_hooks={"response": [on_response]}) as http,
        streamable_http_client(real_server.mcp_url, http_client=http) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        init = await session.initialize()
        assert init.capabilities.resources is not None and init.capabilities.resources.subscribe
        assert init.capabilities.prompts is None  # no prompts, so none declared
        listed = [str(r.uri) for r in (await session.list_resources()).resources]
        assert listed == [
            "switchboard://endpoints/agent-a/todos",
            "switchboard://endpoints/agent-a/queues/inbox",
        ]
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["switchboard://endpoints/agent-a/queues/{queue}"]
        queue, everything = listed[1], listed[0]
        with handshake_era():
            await session.subscribe_resource(queue)
        await asyncio.wait_for(stream_open.wait(), WAIT)

        sent, todo_id = await real_server.webhook("first")
        arrived, uri = await asyncio.wait_for(rings.get(), WAIT)
        assert uri == queue
        assert arrived - sent < RING_WITHIN, f"rang {arrived - sent:.3f} s after the webhook"

        read_result = await session.read_resource(queue)
        (content,) = read_result.contents
        assert isinstance(content, TextResourceContents) and content.mime_type == "application/json"
        body = json.loads(content.text)
        assert body["counts"]["pending"] == 1 and body["next_todo_ids"] == [todo_id]

        with handshake_era():
            await session.unsubscribe_resource(queue)
        with handshake_era():
            await session.subscribe_resource(everything)  # the control
        await real_server.webhook("second")
        assert (await asyncio.wait_for(rings.get(), WAIT))[1] == everything
        await real_server.webhook("third")
        assert (await asyncio.wait_for(rings.get(), WAIT))[1] == everything
        assert rings.empty()


async def test_unknown_resource_is_invalid_params(real_server: RealServer) -> None:
    headers = {"Authorization": f"Bearer {real_server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT) as http,
        streamable_http_client(real_server.mcp_url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for uri in (
            "switchboard://endpoints/agent-b/todos",  # another endpoint's: the same answer as none
            "switchboard://endpoints/agent-a/queues/not-in-scope",
            "file:///etc/passwd",
        ):
            with pytest.raises(MCPError) as read_err:
                await session.read_resource(uri)
            assert read_err.value.error.code == INVALID_PARAMS
            with pytest.raises(MCPError) as sub_err, handshake_era():
                await session.subscribe_resource(uri)
            assert sub_err.value.error.code == INVALID_PARAMS


# -- the TypeScript SDK's Client (npm) ----------------------------------------------------------------


def ts_client_dir() -> Path:
    """``@modelcontextprotocol/sdk`` at the version pinned in ts_client/package-lock.json (1.32.2;
    its engines field asks for Node >= 18, and the suite runs it on the machine's Node 20)."""
    return npm_install(TS_DIR, "client.mjs")


class TsClient:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.updates: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.stream_open = asyncio.Event()
        self.ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def pump(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            event = json.loads(raw)
            kind = event["event"]
            if kind == "updated":
                self.updates.put_nowait((time.monotonic(), event["uri"]))
            elif kind == "stream_open":
                self.stream_open.set()
            elif kind == "ready":
                self.ready.set_result(event)
            else:
                self.answers.put_nowait(event)

    async def ask(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(self.answers.get(), WAIT)
        assert answer["op"] == op and "error" not in answer, answer
        return answer


@asynccontextmanager
async def ts_client(real_server: RealServer) -> AsyncIterator[TsClient]:
    where = ts_client_dir()
    env = {**os.environ, "MCP_URL": real_server.mcp_url, "MCP_TOKEN": real_server.token}
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(where / "client.mjs"),
        cwd=where,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    client = TsClient(proc)
    pump = asyncio.create_task(client.pump())
    try:
        await asyncio.wait_for(asyncio.shield(client.ready), WAIT * 3)
        yield client
    finally:
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.write(b'{"op": "exit"}\n')
            try:
                await asyncio.wait_for(proc.wait(), WAIT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        pump.cancel()
        if proc.returncode not in (0, -9):
            assert proc.stderr is not None
            raise AssertionError(
                f"node client exited {proc.returncode}: {(await proc.stderr.read())[-2000:]!r}"
            )


async def test_typescript_sdk_client_hears_a_listed_queue_and_unsubscribe_stops_it(
    real_server: RealServer,
) -> None:
    async with ts_client(real_server) as ts:
        capabilities = (await ts.ready)["capabilities"]
        assert capabilities["resources"]["subscribe"] is True and "prompts" not in capabilities
        listed = (await ts.ask("list"))["uris"]
        assert listed == [
            "switchboard://endpoints/agent-a/todos",
            "switchboard://endpoints/agent-a/queues/inbox",
        ]
        everything, queue = listed
        await ts.ask("subscribe", uri=queue)
        await asyncio.wait_for(ts.stream_open.wait(), WAIT)

        sent, todo_id = await real_server.webhook("first")
        arrived, uri = await asyncio.wait_for(ts.updates.get(), WAIT)
        assert uri == queue
        assert arrived - sent < RING_WITHIN, f"rang {arrived - sent:.3f} s after the webhook"
        (content,) = (await ts.ask("read", uri=queue))["contents"]
        assert json.loads(content["text"])["next_todo_ids"] == [todo_id]

        await ts.ask("unsubscribe", uri=queue)
        await ts.ask("subscribe", uri=everything)  # the control
        await real_server.webhook("second")
        assert (await asyncio.wait_for(ts.updates.get(), WAIT))[1] == everything
        await real_server.webhook("third")
        assert (await asyncio.wait_for(ts.updates.get(), WAIT))[1] == everything
        assert ts.updates.empty()


async def test_typescript_sdk_client_sees_typed_tools_and_validates_their_results(
    real_server: RealServer,
) -> None:
    """The TS client checks structuredContent against the outputSchema itself (ajv); errors must reach
    it as readable results, not as client-side schema failures."""
    async with ts_client(real_server) as ts:
        tools = {t["name"]: t for t in (await ts.ask("tools"))["tools"]}
        assert set(tools) == {
            *("claim_next", "claim_many", "claim", "ack", "ack_many", "list_todos"),
            *("whoami", "subscribe_doorbell"),
        }
        for name, tool in tools.items():
            assert tool["outputSchema"]["type"] == "object", name
            assert set(tool["annotations"]) >= {"readOnlyHint", "openWorldHint"}, name
        _, todo_id = await real_server.webhook("work")
        claimed = (await ts.ask("call", name="claim_next", args={}))["result"]
        assert claimed["structuredContent"]["todo"]["id"] == todo_id
        lease = claimed["structuredContent"]["todo"]["lease"]
        args = {"todo_id": todo_id, "lease": lease, "result": {"ok": True}}
        acked = (await ts.ask("call", name="ack", args=args))["result"]
        assert acked["structuredContent"]["todo"]["status"] == "done"
        stale = {"todo_id": todo_id, "lease": "ls_" + "0" * 32}  # not the claim's handle
        again = (await ts.ask("call", name="ack", args=stale))["result"]
        assert again["isError"] is True and json.loads(again["content"][0]["text"])["code"] == "lease_lost"
        me = (await ts.ask("call", name="whoami", args={}))["result"]
        _, second = await real_server.webhook("more work")
        many = (await ts.ask("call", name="claim_many", args={"max_todos": 5}))["result"]
        assert [t["id"] for t in many["structuredContent"]["todos"]] == [second]
        held = many["structuredContent"]["todos"][0]["lease"]
        items = [
            {"todo_id": second, "lease": held, "result": [1, "two"]},
            {"todo_id": second, "lease": lease},
        ]
        acked_many = (await ts.ask("call", name="ack_many", args={"acks": items}))["result"]
        assert [r["ok"] for r in acked_many["structuredContent"]["results"]] == [True, False]
        checked = [("claim_next", claimed), ("ack", acked), ("ack", again), ("whoami", me)]
        checked += [("claim_many", many), ("ack_many", acked_many)]
        for name, result in checked:
            check_result(name, tools[name]["outputSchema"], CallToolResult.model_validate(result))
