"""SPEC-0024 REQ-10: the owning human's hook controls on the endpoint card, over the real web UI."""

from __future__ import annotations

from tests.integration.notify.conftest import Env
from tests.integration.web.helpers import Human

PASSWORD = "correct horse battery"


async def signed_in(env: Env, email: str) -> Human:
    person = Human(env.inst, email)
    env.stack.push_async_callback(person.close)
    assert (await person.sign_in(PASSWORD)).status_code == 303
    return person


async def test_human_disables_a_noisy_hook(env: Env) -> None:
    world, a = await env.tenant("noisy", email="owner@example.com")
    hook_id = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
    await env.deliver(world)
    await env.receiver.next_request()
    owner = await signed_in(env, "owner@example.com")
    card = await owner.http.get("/endpoints/noisy")
    assert card.status_code == 200 and hook_id in card.text
    r = await owner.post(f"/endpoints/noisy/hooks/{hook_id}/disable", {}, csrf_from="/endpoints/noisy")
    assert r.status_code == 303 and r.headers["location"].startswith("/endpoints/noisy")  # same-origin card
    await env.deliver(world)  # it stops firing at once
    await env.settle()
    assert len(env.receiver.requests) == 1
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["enabled"] is False and hook["disabled_reason"] == "operator"
    assert env.metric("switchboard_notify_hooks_disabled_total", reason="operator") == 1


async def test_foreign_human(env: Env) -> None:
    world, a = await env.tenant("mine", email="owner@example.com")
    await env.tenant("theirs", email="stranger@example.com")
    hook_id = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
    stranger = await signed_in(env, "stranger@example.com")
    assert (await stranger.http.get("/endpoints/mine")).status_code == 404
    for action in ("disable", "enable", "delete"):
        r = await stranger.post(f"/endpoints/mine/hooks/{hook_id}/{action}", {})
        assert r.status_code == 404
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["hook_id"] == hook_id and hook["enabled"] is True and hook["disabled_reason"] is None
    await env.deliver(world)  # and it still fires
    await env.receiver.next_request()
