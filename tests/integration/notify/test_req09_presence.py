"""SPEC-0024 REQ-9: hooks respect presence; one todos.backlog at clock-in."""

from __future__ import annotations

import json

from tests.integration.notify.conftest import Env


async def test_clocked_out_endpoint_holds_its_hook(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    await a.ok("clock_out")
    for i in range(3):
        await env.deliver(world, title=f"t{i}")
    await env.settle()
    assert env.receiver.requests == []
    env.clock.advance(90)
    await a.ok("clock_in")
    backlog = json.loads((await env.receiver.next_request()).body)
    assert backlog == {
        "type": "todos.backlog",
        "reason": "clock_in",
        "endpoint": "ep-a",
        "pending": 3,
        "queues": ["inbox"],
        "oldest_pending_seconds": 90,
        "created_at": backlog["created_at"],
    }
    # A second clock_in is no transition: no second backlog.
    await a.ok("clock_in")
    await env.settle()
    assert len(env.receiver.requests) == 1


async def test_an_on_demand_dispatcher_ignores_presence(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url(), "ignore_presence": True})
    await a.ok("clock_out")
    (todo_id,) = await env.deliver(world)
    ready = json.loads((await env.receiver.next_request()).body)
    assert ready["type"] == "todo.ready" and ready["todo_id"] == todo_id
    await a.ok("clock_in")
    await env.settle()
    assert len(env.receiver.requests) == 1  # no todos.backlog for an ignore_presence hook


async def test_operator_override_back_in_sends_backlog_with_operator_reason(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    await env.services.presence.override(world.endpoint.id, "out")
    await env.deliver(world)
    await env.settle()
    assert env.receiver.requests == []
    await env.services.presence.override(world.endpoint.id, "in")
    backlog = json.loads((await env.receiver.next_request()).body)
    assert backlog["reason"] == "operator" and backlog["pending"] == 1
    assert "todo_id" not in backlog and "summary" not in backlog
