"""SPEC-0024 scenarios that need two server instances on one real PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import trustme

from tests.integration.notify.conftest import HOOK_VERBS, notify_env
from tests.support.mcp_client import agent
from tests.support.receivers import StaticResolver

pytestmark = pytest.mark.postgres


async def test_two_instances_one_notification(tmp_path: Path, pg_url: str) -> None:
    ca = trustme.CA()
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    async with (
        notify_env(tmp_path / "one", database_url=pg_url, ca=ca, resolver=resolver) as one,
        notify_env(tmp_path / "two", database_url=pg_url, ca=ca, resolver=resolver) as two,
    ):
        world, a = await one.tenant("ep-a")
        await a.ok("create_notify_hook", {"url": one.hook_url()})
        await two.stack.enter_async_context(agent(two.inst.mcp_url, world.token))
        (todo_id,) = await one.deliver(world)
        request = await one.receiver.next_request()
        assert todo_id.encode() in request.body
        for env in (one, two):
            await env.settle()
        assert len(one.receiver.requests) == 1 and two.receiver.requests == []
        sent = [
            e.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="delivered")
            for e in (one, two)
        ]
        assert sent == [1.0, 0.0]  # sent by instance 1, whose statement made the transition


async def test_concurrent_creates_at_the_ceiling(tmp_path: Path, pg_url: str) -> None:
    ca = trustme.CA()
    async with (
        notify_env(tmp_path / "one", database_url=pg_url, ca=ca) as one,
        notify_env(tmp_path / "two", database_url=pg_url, ca=ca) as two,
    ):
        for round_ in range(5):
            world, a = await one.tenant(f"ep-{round_}", verbs=HOOK_VERBS)
            b = await two.stack.enter_async_context(agent(two.inst.mcp_url, world.token))
            for i in range(4):
                await a.ok("create_notify_hook", {"url": one.hook_url(f"/h{i}")})
            results = await asyncio.gather(
                a.call("create_notify_hook", {"url": one.hook_url("/race-1")}),
                b.call("create_notify_hook", {"url": one.hook_url("/race-2")}),
            )
            assert sorted(r.code or "ok" for r in results) == ["ceiling_exceeded", "ok"]
            assert (await a.ok("list_notify_hooks"))["ceiling"] == {"max": 5, "used": 5}
