"""SPEC-0024 REQ-3: target validation at create and before every attempt; no redirects."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from switchboard.store.schema import notify_hooks
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import ListeningSocket, StaticResolver, redirect


async def hook_rows(env: Env) -> int:
    async with env.services.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(notify_hooks))).scalar_one())


async def test_private_target_refused_at_create(env: Env) -> None:
    env.resolver.answers["internal.example.com"] = ["10.0.0.5"]
    _, a = await env.tenant("ep-a")
    result = await a.call("create_notify_hook", {"url": "https://internal.example.com/hook"})
    assert result.code == "invalid_argument"
    assert "private" in result.data["message"]
    assert await hook_rows(env) == 0


async def test_same_host_receiver_when_the_operator_opts_in(tmp_path: Path) -> None:
    async with notify_env(tmp_path, allow_cidrs="127.0.0.1/32") as env:
        _, a = await env.tenant("ep-a")
        ok = await a.call("create_notify_hook", {"url": f"https://hooks.test:{env.receiver.port}/sb"})
        own = await a.call("create_notify_hook", {"url": f"https://hooks.test:{env.inst.port}/sb"})
        assert ok.ok
        assert own.code == "invalid_argument" and "self" in own.data["message"]
        assert await hook_rows(env) == 1


@pytest.mark.parametrize("address", ["169.254.169.254", "127.0.0.1"])
async def test_a_broad_entry_does_not_open_loopback_or_metadata(tmp_path: Path, address: str) -> None:
    resolver = StaticResolver({"hooks.test": [address]})
    async with notify_env(tmp_path, allow_cidrs="0.0.0.0/0", resolver=resolver) as env:
        _, a = await env.tenant("ep-a")
        result = await a.call("create_notify_hook", {"url": "https://hooks.test/sb"})
        assert result.code == "invalid_argument"
        assert await hook_rows(env) == 0


async def test_a_covering_range_does_not_open_a_metadata_service(tmp_path: Path) -> None:
    resolver = StaticResolver(
        {"ali.test": ["100.100.100.200"], "aws.test": ["fd00:ec2::254"], "near.test": ["100.100.100.201"]}
    )
    async with notify_env(tmp_path, allow_cidrs="100.64.0.0/10,fc00::/7", resolver=resolver) as env:
        _, a = await env.tenant("ep-a")
        ali = await a.call("create_notify_hook", {"url": "https://ali.test/sb"})
        aws = await a.call("create_notify_hook", {"url": "https://aws.test/sb"})
        near = await a.call("create_notify_hook", {"url": "https://near.test/sb"})
        assert ali.code == aws.code == "invalid_argument"
        assert "metadata" in ali.data["message"] and "metadata" in aws.data["message"]
        assert near.ok
        assert await hook_rows(env) == 1


async def test_dns_rebinding_between_create_and_delivery(tmp_path: Path) -> None:
    resolver = StaticResolver({"rebind.test": ["93.184.215.14"]})
    async with notify_env(tmp_path, allow_cidrs="", resolver=resolver) as env, ListeningSocket() as trap:
        world, a = await env.tenant("ep-a")
        created = await a.ok("create_notify_hook", {"url": f"https://rebind.test:{trap.port}/sb"})
        resolver.answers["rebind.test"] = ["127.0.0.1"]  # the attacker flips DNS before delivery
        await env.deliver(world)
        await env.settle()
        await trap.assert_untouched(timeout=0.2)
        (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
        assert hook["hook_id"] == created["hook_id"]
        assert hook["last_error"] == "rejected_ssrf" and hook["consecutive_failures"] == 1
        assert env.metric("switchboard_notify_hook_attempts_total", result="rejected_ssrf") == 1
        assert env.metric("switchboard_notify_hook_attempts_total", result="network") == 0  # never retried


async def test_redirect_is_a_failure(env: Env) -> None:
    async with ListeningSocket() as metadata_stand_in:
        env.receiver.behaviour = redirect(f"https://hooks.test:{metadata_stand_in.port}/latest/meta-data")
        world, a = await env.tenant("ep-a")
        await a.ok("create_notify_hook", {"url": env.hook_url()})
        await env.deliver(world)
        await env.receiver.next_request()
        await env.settle()
        await metadata_stand_in.assert_untouched(timeout=0.2)
        (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
        assert hook["last_status"] == 302 and hook["last_error"] == "redirect"
        assert len(env.receiver.requests) == 1  # a 3xx is never retried either


async def test_redirect_to_cloud_metadata_literal_is_not_followed(env: Env) -> None:
    env.receiver.behaviour = redirect("http://169.254.169.254/")
    world, a = await env.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": env.hook_url()})
    await env.deliver(world)
    await env.settle()
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["last_status"] == 302 and hook["consecutive_failures"] == 1
    assert ("169.254.169.254", 80) not in env.resolver.calls


async def test_plain_http_without_the_opt_in(env: Env) -> None:
    env.resolver.answers["dispatch.example.com"] = ["93.184.215.14"]
    _, a = await env.tenant("ep-a")
    result = await a.call("create_notify_hook", {"url": "http://dispatch.example.com/sb"})
    assert result.code == "invalid_argument" and "scheme" in result.data["message"]
    assert await hook_rows(env) == 0
