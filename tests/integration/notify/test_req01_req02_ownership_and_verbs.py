"""SPEC-0024 REQ-1 (ownership and scope) and REQ-2 (management verbs), one test per scenario."""

from __future__ import annotations

from sqlalchemy import func, select

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.store.schema import notify_hooks
from tests.integration.notify.conftest import Env
from tests.support.mcp_client import agent
from tests.support.world import make_world


async def hook_rows(env: Env) -> int:
    async with env.services.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(notify_hooks))).scalar_one())


async def test_a_hook_fires_only_for_its_own_endpoints_todos(env: Env) -> None:
    a, agent_a = await env.tenant("ep-a", email="a@example.com")
    b, _ = await env.tenant("ep-b", email="b@example.com")
    await agent_a.ok("create_notify_hook", {"url": env.hook_url()})
    (b_todo,) = await env.deliver(b, title="B's private work")
    await env.settle()
    assert env.receiver.requests == []
    (a_todo,) = await env.deliver(a)
    request = await env.receiver.next_request()
    assert b_todo.encode() not in request.body and b"private" not in request.body
    assert a_todo.encode() in request.body


async def test_a_hook_filtered_to_one_queue(env: Env) -> None:
    a, agent_a = await env.tenant("ep-a", queues=("inbox", "reviews"))
    await agent_a.ok("create_notify_hook", {"url": env.hook_url(), "queues": ["reviews"]})
    await env.deliver(a)  # lands on inbox
    await env.settle()
    assert env.receiver.requests == []
    await env.services.sources.add_route(a.source.slug, "reviews", a.endpoint.slug, "pull_request")
    await env.deliver(a)  # now also lands on reviews
    request = await env.receiver.next_request()
    assert b'"queue":"reviews"' in request.body


async def test_scope_shrink_stops_a_hook_without_editing_it(env: Env) -> None:
    a, agent_a = await env.tenant("ep-a", queues=("inbox", "reviews"), route_queue="reviews")
    created = await agent_a.ok("create_notify_hook", {"url": env.hook_url()})
    assert created["queues"] == []
    await env.services.accounts.set_scope(a.endpoint.id, queues=["inbox"])
    await env.deliver(a)  # the route still targets reviews
    await env.settle()
    assert env.receiver.requests == []
    listed = await agent_a.ok("list_notify_hooks")
    assert listed["hooks"][0]["queues"] == [] and listed["hooks"][0]["enabled"] is True  # row unchanged


async def test_ceiling_reached(env: Env) -> None:
    _, agent_a = await env.tenant("ep-a")
    for i in range(5):
        await agent_a.ok("create_notify_hook", {"url": env.hook_url(f"/h{i}")})
    result = await agent_a.call("create_notify_hook", {"url": env.hook_url("/sixth?token=abc")})
    assert result.code == "ceiling_exceeded"
    assert await hook_rows(env) == 5
    listed = await agent_a.ok("list_notify_hooks")
    assert listed["ceiling"] == {"max": 5, "used": 5}
    assert all("/sixth" not in h["url"] for h in listed["hooks"])


async def test_create_reveals_the_secret_once(env: Env) -> None:
    env.resolver.answers["dispatch.example.com"] = ["93.184.215.14"]
    _, agent_a = await env.tenant("ep-a")
    created = await agent_a.ok("create_notify_hook", {"url": "https://dispatch.example.com/sb"})
    assert created["signing_secret"].startswith("whsec_")
    assert created["url"] == "https://dispatch.example.com/sb"
    # REQ-2's fields, plus the hook's own per-minute limit (issue 29; null: the server's)
    assert set(created) == {
        "hook_id",
        "url",
        "queues",
        "ignore_presence",
        "enabled",
        "signing_secret",
        "rate_per_minute",
    }
    listed = await agent_a.ok("list_notify_hooks")
    (hook,) = listed["hooks"]
    assert hook["hook_id"] == created["hook_id"]
    assert not any("secret" in key and key != "previous_secret_valid_until" for key in hook)
    assert created["signing_secret"] not in str(listed)


async def test_endpoint_without_the_verb(env: Env) -> None:
    _, plain = await env.tenant("ep-a", verbs=DEFAULT_GRANT)
    result = await plain.call("create_notify_hook", {"url": env.hook_url()})
    assert result.code == "forbidden"
    assert await hook_rows(env) == 0
    assert env.resolver.calls == []  # nothing was even resolved, let alone dialled
    assert env.receiver.connections == 0


async def test_another_endpoints_hook_id(env: Env) -> None:
    a, agent_a = await env.tenant("ep-a")
    created = await agent_a.ok("create_notify_hook", {"url": env.hook_url()})
    world_b = await make_world(
        env.inst,
        slug="ep-b",
        human_id=a.human_id,
        source_slug="b-src",
        verbs=[*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs],
    )
    async with agent(env.inst.mcp_url, world_b.token) as agent_b:
        foreign = await agent_b.call("delete_notify_hook", {"hook_id": created["hook_id"]})
        unknown = await agent_b.call("delete_notify_hook", {"hook_id": "nh_01JZZZZZZZZZZZZZZZZZZZZZZZ"})
        rotate = await agent_b.call("rotate_notify_hook", {"hook_id": created["hook_id"]})
    assert foreign.code == unknown.code == rotate.code == "not_found"
    assert foreign.data["message"] == unknown.data["message"]
    listed = await agent_a.ok("list_notify_hooks")
    assert [h["hook_id"] for h in listed["hooks"]] == [created["hook_id"]]


async def test_not_in_the_default_grant(env: Env) -> None:
    assert not set(NOTIFY_HOOKS.verbs) & set(DEFAULT_GRANT)
    world, plain = await env.tenant("ep-a", verbs=DEFAULT_GRANT)
    assert not set(NOTIFY_HOOKS.verbs) & set(world.endpoint.verbs)
    tools = {t.name for t in (await plain.client.list_tools()).tools}
    assert not set(NOTIFY_HOOKS.verbs) & tools
