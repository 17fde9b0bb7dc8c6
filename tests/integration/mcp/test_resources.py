"""Queues as MCP resources, honest capabilities, typed tools, JSON answers and resumable SSE streams, over
real streamable HTTP.

(The same doorbell heard by stranger clients against ``switchboard serve`` is test_resource_doorbell.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, TextResourceContents

from switchboard.core.verbs import ALL_VERBS, DEFAULT_GRANT, NOTIFY_HOOKS, required_grant
from switchboard.mcp.doorbell import queue_uri
from tests.integration.mcp.helpers import Bell, add_todo, call, connect, vend
from tests.support.server import Instance

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CALL_WHOAMI = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "whoami", "arguments": {}},
}


@contextmanager
def handshake_era() -> Iterator[None]:
    """resources/subscribe is a 2025-11-25 method; the SDK warns that 2026-07-28 replaced it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


async def test_each_endpoint_lists_its_own_queues_and_a_template(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["reviews", "inbox"])
    await vend(inst, "agent-b", queues=["secret"])
    async with connect(inst, a.token, mode="legacy") as client:
        listed = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
    assert [str(r.uri) for r in listed] == [
        "switchboard://endpoints/agent-a/todos",
        "switchboard://endpoints/agent-a/queues/inbox",
        "switchboard://endpoints/agent-a/queues/reviews",
    ]
    assert {r.mime_type for r in listed} == {"application/json"}
    assert [t.uri_template for t in templates] == ["switchboard://endpoints/agent-a/queues/{queue}"]


async def test_read_gives_counts_and_the_next_claimable_ids_in_claim_order(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    first = await add_todo(inst, a, "first", queue="inbox")
    second = await add_todo(inst, a, "second", queue="inbox")
    other = await add_todo(inst, a, "other queue", queue="reviews")
    async with connect(inst, a.token) as client:
        claimed = (await call(client, "claim_next", queues=["inbox"]))["todo"]["id"]
        assert claimed == first

        async def body(uri: str) -> dict[str, Any]:
            (content,) = (await client.read_resource(uri)).contents
            assert isinstance(content, TextResourceContents) and content.mime_type == "application/json"
            return dict(json.loads(content.text))

        inbox = await body(queue_uri("agent-a", "inbox"))
        everything = await body(a.uri)
    assert inbox["queues"] == ["inbox"] and inbox["next_todo_ids"] == [second]
    assert inbox["counts"] == {"pending": 1, "claimed": 1, "failed": 0, "done": 0, "dead": 0, "canceled": 0}
    assert everything["next_todo_ids"] == [second, other]
    assert everything["by_queue"]["reviews"]["pending"] == 1 and everything["counts"]["pending"] == 2


@pytest.mark.parametrize(
    "uri",
    [
        "switchboard://endpoints/agent-b/todos",
        "switchboard://endpoints/agent-b/queues/inbox",
        "switchboard://endpoints/agent-a/queues/secret",
        "switchboard://endpoints/agent-a/queues/",
        "test://static-text",
    ],
)
async def test_any_other_uri_is_invalid_params_with_one_message(inst: Instance, uri: str) -> None:
    a = await vend(inst, "agent-a", queues=["inbox"])
    await vend(inst, "agent-b", queues=["inbox", "secret"])
    async with connect(inst, a.token, mode="legacy") as client:
        for attempt in (client.read_resource, client.subscribe_resource, client.unsubscribe_resource):
            with pytest.raises(MCPError) as err, handshake_era():
                await attempt(uri)
            assert err.value.error.code == INVALID_PARAMS and err.value.error.message == "Resource not found"


async def test_a_subscribed_session_hears_exactly_its_subscriptions(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    bell, plain = Bell(), Bell()
    async with (
        connect(inst, a.token, mode="legacy", bell=bell) as client,
        connect(inst, a.token, mode="legacy", bell=plain),
    ):
        with handshake_era():
            await client.subscribe_resource(queue_uri("agent-a", "reviews"))
        inbox_todo = await add_todo(inst, a, "inbox work", queue="inbox")
        # A session that never subscribed keeps the channel as it was: the endpoint-wide URI.
        assert (await plain.next())["uri"] == a.uri
        reviews_todo = await add_todo(inst, a, "review work", queue="reviews")
        ring = await bell.next()  # the first thing the subscriber hears is reviews, not inbox
        assert ring["uri"] == queue_uri("agent-a", "reviews") and ring["todo_id"] == reviews_todo
        assert (await plain.next())["todo_id"] == reviews_todo
        with handshake_era():
            await client.subscribe_resource(a.uri)
        await add_todo(inst, a, "both", queue="reviews")
        assert [(await bell.next())["uri"] for _ in range(2)] == [a.uri, queue_uri("agent-a", "reviews")]
        with handshake_era():
            await client.unsubscribe_resource(queue_uri("agent-a", "reviews"))
        await add_todo(inst, a, "only the wide one", queue="reviews")
        await add_todo(inst, a, "control", queue="inbox")
        assert [(await bell.next())["title"] for _ in range(2)] == ["only the wide one", "control"]
        assert bell.rings.empty()
    assert inbox_todo


async def test_a_modern_listener_may_listen_to_one_queue(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    reviews = queue_uri("agent-a", "reviews")
    async with connect(inst, a.token) as client, client.listen(resource_subscriptions=[reviews]) as sub:
        await add_todo(inst, a, "not this one", queue="inbox")
        await add_todo(inst, a, "this one", queue="reviews")
        event = await asyncio.wait_for(anext(aiter(sub)), 5)
    assert event.uri == queue_uri("agent-a", "reviews")  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_capabilities_are_only_what_the_server_has(inst: Instance, mode: Any) -> None:
    a = await vend(inst, "agent-a")
    async with connect(inst, a.token, mode=mode) as client:
        caps = client.server_capabilities
        assert caps is not None and caps.prompts is None and caps.logging is None
        assert caps.resources is not None and caps.resources.subscribe is True
        assert not caps.resources.list_changed  # never sent: a scope change shows on the next list
        assert caps.tools is not None and not caps.tools.list_changed
        with pytest.raises(MCPError) as err:
            await client.list_prompts()
        assert err.value.error.code == METHOD_NOT_FOUND


async def test_every_verb_has_an_output_schema_and_explicit_annotations(inst: Instance) -> None:
    a = await vend(inst, "agent-a", verbs=[*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs])
    async with connect(inst, a.token, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    # on the claim_next, ack and create_notify_hook grants (verbs.required_grant)
    batch = {"claim_many", "ack_many", "update_notify_hook"}
    assert set(tools) == {*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs, *batch, "whoami", "subscribe_doorbell"}
    assert {required_grant(name) for name in set(tools) - {"whoami", "subscribe_doorbell"}} <= ALL_VERBS
    for name, tool in tools.items():
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is not None and hints.open_world_hint is not None, (
            name
        )
        if not hints.read_only_hint:
            assert hints.destructive_hint is not None and hints.idempotent_hint is not None, name
    # What each hint says is a decision (docs/mcp.md); these are the ones a host acts on.
    assert tools["list_todos"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert tools["fail"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert tools["heartbeat"].annotations.idempotent_hint is True  # type: ignore[union-attr]
    assert tools["claim_next"].annotations.open_world_hint is False  # type: ignore[union-attr]
    assert tools["create_notify_hook"].annotations.open_world_hint is True  # type: ignore[union-attr]
    result_schema = tools["ack"].input_schema["properties"]["result"]
    assert set(result_schema["type"]) == {"object", "array", "string", "number", "boolean", "null"}
    assert tools["ack_many"].annotations.destructive_hint is False  # type: ignore[union-attr]


# -- resumable SSE (handshake era) ----------------------------------------------------------------------


def sse_events(text: str) -> list[dict[str, str]]:
    events: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            key, sep, value = line.partition(":")
            if sep:
                fields[key] = value.removeprefix(" ")
        if fields:
            events.append(fields)
    return events


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    r = await http.post(url, json=init, headers=MCP_HEADERS)
    assert r.status_code == 200
    headers = {
        **MCP_HEADERS,
        "mcp-session-id": r.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, json=note, headers=headers)).status_code == 202
    return headers


async def test_a_call_is_answered_with_one_json_body(inst: Instance) -> None:
    """Raw HTTP: a call on a handshake-era session gets ``application/json`` (one JSON-RPC answer, its
    id) however the client's Accept is written; notifications still get 202 (docs/mcp.md, "Answers")."""
    a = await vend(inst, "agent-a")
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.token}"}, timeout=10) as http:
        headers = await open_session(http, inst.mcp_url)
        for accept in ("application/json, text/event-stream", "text/event-stream, application/json"):
            r = await http.post(inst.mcp_url, json=CALL_WHOAMI, headers={**headers, "Accept": accept})
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text
            answer = r.json()
            assert answer["id"] == 7 and answer["result"]["structuredContent"]["endpoint"] == "agent-a"
        # A client that accepts only JSON is served too (the spec lets a server answer either way).
        r = await http.post(inst.mcp_url, json=CALL_WHOAMI, headers={**headers, "Accept": "application/json"})
        assert r.status_code == 200 and r.json()["id"] == 7


async def test_the_sdk_client_reads_json_answers(inst: Instance) -> None:
    """The official client in both eras: every call's answer arrived as JSON, and its result is whole."""
    a = await vend(inst, "agent-a")
    seen: list[tuple[str, str]] = []

    async def record(response: httpx2.Response) -> None:
        seen.append((response.request.method, response.headers.get("content-type", "")))

    for mode in ("legacy", "auto"):
        seen.clear()
        headers = {"Authorization": f"Bearer {a.token}"}
        async with httpx2.AsyncClient(
            headers=headers, timeout=10, event_hooks={"response": [record]}
        ) as http:
            transport = streamable_http_client(inst.mcp_url, http_client=http)
            async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
                result = await client.call_tool("whoami", {})
                assert not result.is_error and result.structured_content is not None
                assert result.structured_content["endpoint"] == "agent-a"
        posts = [ctype for method, ctype in seen if method == "POST" and ctype]
        assert posts and all(c.startswith("application/json") for c in posts), (mode, seen)


async def _read_until(chunks: Any, text: str, done: Any) -> str:
    async with asyncio.timeout(10):
        while not done(sse_events(text)):
            text += await anext(chunks)
    return text


async def test_a_dropped_get_stream_resumes_from_its_last_event_id(inst: Instance) -> None:
    """The doorbell's GET stream is SSE with event ids: a client that lost it after the first ring
    reconnects with Last-Event-ID and gets the second ring replayed, with the same id; another endpoint
    presenting that id gets nothing of it."""
    a = await vend(inst, "agent-a")
    b = await vend(inst, "agent-b")

    def rings(events: list[dict[str, str]]) -> list[dict[str, str]]:
        return [e for e in events if e.get("data")]

    def todo_of(event: dict[str, str]) -> str | None:
        return json.loads(event["data"])["params"]["_meta"]["switchboard/doorbell"].get("todo_id")

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.token}"}, timeout=10) as http:
        headers = await open_session(http, inst.mcp_url)
        async with http.stream("GET", inst.mcp_url, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            chunks = stream.aiter_text()
            await add_todo(inst, a, "one")
            text = await _read_until(chunks, "", lambda events: len(rings(events)) >= 1)
            second = await add_todo(inst, a, "two")
            text = await _read_until(chunks, text, lambda es: any(todo_of(e) == second for e in rings(es)))
        heard = rings(sse_events(text))
        assert all(e.get("id") for e in heard) and len({e["id"] for e in heard}) == len(heard)
        after_first = heard[1:]  # what a client that dropped the stream after the first ring missed
        async with http.stream(
            "GET", inst.mcp_url, headers={**headers, "last-event-id": heard[0]["id"]}
        ) as replay:
            assert replay.status_code == 200
            text = await _read_until(
                replay.aiter_text(), "", lambda events: len(rings(events)) >= len(after_first)
            )
        replayed = rings(sse_events(text))[: len(after_first)]
        assert [e["id"] for e in replayed] == [e["id"] for e in after_first]
        assert todo_of(replayed[-1]) == second
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {b.token}"}, timeout=10) as http:
        headers_b = await open_session(http, inst.mcp_url)
        async with http.stream(
            "GET", inst.mcp_url, headers={**headers_b, "last-event-id": heard[0]["id"]}
        ) as other:
            assert other.status_code == 200
            leaked: list[str] = []

            async def listen() -> None:
                async for chunk in other.aiter_text():
                    leaked.extend(e["data"] for e in rings(sse_events(chunk)))

            with contextlib.suppress(TimeoutError):  # b waits 1 s: nothing of a's may come
                await asyncio.wait_for(listen(), 1)
    assert leaked == []
