"""SPEC-0024 REQ-7 (best-effort delivery off the ingest path) and REQ-8 (health and auto-disable)."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time
from pathlib import Path

from sqlalchemy import select

from switchboard.priority import InboundPriority
from switchboard.store.schema import todos
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import HangBeforeHeaders, Respond, StaticResolver
from tests.support.world import gitea_delivery, pr_payload


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_receiver(tmp_path: Path) -> None:
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"], "dead.test": ["127.0.0.1"]})
    async with notify_env(tmp_path, resolver=resolver) as env:
        dead_world, dead = await env.tenant("dead")
        live_world, _ = await env.tenant("nohook")
        await dead.ok("create_notify_hook", {"url": f"https://dead.test:{closed_port()}/hook"})
        for w in (dead_world, live_world):  # warm both paths
            await env.deliver(w)
        with_hook: list[float] = []
        without: list[float] = []
        async with env.inst.client() as http:
            for i in range(40):  # interleaved, so drift hits both series alike
                for world, series in ((dead_world, with_hook), (live_world, without)):
                    body, headers = gitea_delivery(world.secret, pr_payload(number=i))
                    t0 = time.perf_counter()
                    r = await http.post(world.inbound_path, content=body, headers=headers)
                    series.append(time.perf_counter() - t0)
                    assert r.status_code == 202
        med_with, med_without = statistics.median(with_hook), statistics.median(without)
        assert med_with <= med_without * 1.25 + 0.002, (med_with, med_without)
        await env.settle()
        # every todo is pending and claimable; the hook recorded failed deliveries after 3 attempts each
        async with env.services.db.read() as conn:
            statuses = {r.status for r in (await conn.execute(select(todos.c.status))).all()}
        assert statuses == {"pending"}
        assert (await dead.ok("claim_next"))["todo"] is not None
        (hook,) = (await dead.ok("list_notify_hooks"))["hooks"]
        assert hook["last_error"] == "network" and hook["last_status"] is None
        assert hook["enabled"] is False and hook["disabled_reason"] == "consecutive_failures"
        attempts = env.metric("switchboard_notify_hook_attempts_total", result="network")
        failed = env.metric(
            "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed"
        )
        dropped = env.metric(
            "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
        )
        # 10 failed deliveries (3 attempts each) disable the hook; notifications already in flight then
        # find it disabled before their next attempt and end as dropped, never as another attempt sequence
        assert 10 <= failed <= 13
        assert 3 * failed <= attempts <= 3 * (failed + dropped)


async def test_permanent_client_error_is_not_retried(env: Env) -> None:
    env.receiver.behaviour = Respond(401)
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    await env.deliver(world)
    await env.receiver.next_request()
    await env.settle()
    assert len(env.receiver.requests) == 1
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["last_status"] == 401 and hook["last_error"] == "client_error"
    assert hook["consecutive_failures"] == 1
    assert env.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed") == 1


async def test_server_errors_are_retried_three_times(env: Env) -> None:
    env.receiver.behaviour = Respond(503)
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    await env.deliver(world)
    ids = {(await env.receiver.next_request()).header("webhook-id") for _ in range(3)}
    await env.settle()
    assert len(ids) == 1 and len(env.receiver.requests) == 3
    assert env.metric("switchboard_notify_hook_attempts_total", result="5xx") == 3


async def test_queue_overflow(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_queue_size=1, notify_workers=1) as env:
        env.receiver.behaviour = HangBeforeHeaders()
        world, a = await env.tenant("ep-a")
        await a.ok("create_notify_hook", {"url": env.hook_url("/hook?key=QUERYCANARY")})
        created = []
        for i in range(6):
            created += await env.deliver(world, title=f"t{i}")
        await env.receiver.next_request()
        await env.services.hub.idle()
        dropped = env.metric(
            "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
        )
        assert dropped >= 1
        warnings = env.logs.events("notification dropped")
        assert warnings and all(w.get("hook_id") or w.get("todo_id") for w in warnings)
        assert sum(w["drops"] for w in warnings) <= dropped
        assert not any("QUERYCANARY" in line or "hooks.test" in line for line in env.logs.lines)
        # no todo changed state: all pending, all claimable
        got = [(await a.ok("claim_next"))["todo"]["id"] for _ in created]
        assert sorted(got) == sorted(created)


async def test_dead_receiver_is_disabled(env: Env) -> None:
    env.receiver.behaviour = Respond(500)
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    for i in range(10):
        await env.deliver(world, title=f"t{i}")
        await env.settle()
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["enabled"] is False and hook["disabled_reason"] == "consecutive_failures"
    assert hook["consecutive_failures"] == 10 and hook["disabled_at"] is not None
    assert env.metric("switchboard_notify_hooks_disabled_total", reason="consecutive_failures") == 1
    assert env.logs.events("notify hook disabled")
    seen = len(env.receiver.requests)
    await env.deliver(world, title="the 11th")
    await env.settle()
    assert len(env.receiver.requests) == seen  # a disabled hook is not called
    # rotate re-enables it
    rotated = await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]})
    assert rotated["enabled"] is True


async def test_recovery_resets_the_count(env: Env) -> None:
    env.receiver.behaviour = Respond(500)
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    for i in range(7):
        await env.deliver(world, title=f"t{i}")
        await env.settle()
    assert (await a.ok("list_notify_hooks"))["hooks"][0]["consecutive_failures"] == 7
    env.receiver.behaviour = Respond(204)
    await env.deliver(world)
    await env.settle()
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["consecutive_failures"] == 0 and hook["last_status"] == 204 and hook["last_error"] is None
    body = json.loads(env.receiver.requests[-1].body)
    assert body["type"] == "todo.ready"


async def test_queue_overflow_before_matching_is_counted_as_dropped(tmp_path: Path) -> None:
    """The hub's queue for the notify subscriber is the first bound: what it drops never reached a hook,
    and REQ-11's dropped counter must still count it (with endpoint and todo ids in the warning)."""
    async with notify_env(tmp_path, notify_queue_size=1, notify_workers=1) as env:
        env.receiver.behaviour = HangBeforeHeaders()
        world, a = await env.tenant("ep-a")
        await a.ok("create_notify_hook", {"url": env.hook_url()})
        from switchboard.store.todos import NewTodo

        # One transaction, 30 ready todos: published together, faster than the subscriber can match.
        await env.services.todos.create(
            [
                NewTodo(
                    endpoint_id=world.endpoint.id, queue="inbox", title=f"t{i}", payload={}, verified=True
                )
                for i in range(30)
            ]
        )
        await env.services.hub.idle()
        overflow = env.services.metrics.registry.get_sample_value(
            "switchboard_transition_subscriber_errors_total",
            {"subscriber": "notify_hooks", "error": "overflow"},
        )
        dropped = env.metric(
            "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
        )
        assert overflow and overflow >= 1
        assert dropped >= overflow
        unmatched = [
            w for w in env.logs.events("notification dropped") if w["reason"] == "queue_full_unmatched"
        ]
        assert unmatched and unmatched[0]["endpoint_id"] == world.endpoint.id and unmatched[0]["todo_id"]


async def test_no_attempt_starts_while_an_inbound_write_is_in_flight(tmp_path: Path) -> None:
    """REQ-7, opt-in: inbound requests go first on the event loop (src/switchboard/priority.py)."""
    async with notify_env(tmp_path, inbound_priority_max_defer_ms=60_000) as env:
        await held_inbound_write_holds_attempts(env)


async def test_inbound_priority_is_off_by_default(env: Env) -> None:
    assert env.services.parts.get(InboundPriority) is None
    assert env.notify.dispatcher.priority is None


async def held_inbound_write_holds_attempts(env: Env) -> None:
    gate = env.services.parts.need(InboundPriority)
    assert isinstance(gate, InboundPriority)
    gate.horizon = 60.0  # only the held request's end may release the worker here
    world, agent = await env.tenant("held")
    await agent.ok("create_notify_hook", {"url": env.hook_url()})
    _, writer = await asyncio.open_connection("127.0.0.1", env.inst.port)
    try:  # a webhook delivery whose body never comes: in flight until the client goes away
        writer.write(b"POST /in/nowhere HTTP/1.1\r\nhost: switchboard.test\r\ncontent-length: 64\r\n\r\n")
        await writer.drain()
        await env.deliver(world)
        await asyncio.wait_for(gate.waiting.wait(), 10)  # matched, queued, and the worker waits
        assert env.receiver.requests == []
        assert gate.active == 1
    finally:
        writer.close()
        await writer.wait_closed()
    first = await env.receiver.next_request(timeout=10)
    assert json.loads(first.body)["type"] == "todo.ready"
