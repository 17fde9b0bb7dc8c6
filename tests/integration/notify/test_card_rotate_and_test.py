"""The endpoint card's rotate and send test over the real web UI (issue 19), next to the MCP verb: the
endpoint's rotate never undoes its human's disable, the human's own rotate does; a test on a disabled
hook starts no attempt."""

from __future__ import annotations

import re

from tests.integration.notify.conftest import Env
from tests.integration.notify.test_req10_operator_web_ui import signed_in


async def test_endpoint_rotate_keeps_the_human_disable_and_the_human_rotate_lifts_it(env: Env) -> None:
    world, a = await env.tenant("rot", email="owner@example.com")
    hook_id = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
    owner = await signed_in(env, "owner@example.com")
    r = await owner.post(f"/endpoints/rot/hooks/{hook_id}/disable", {}, csrf_from="/endpoints/rot")
    assert r.status_code == 303

    card = (await owner.http.get("/endpoints/rot")).text
    assert "disabled by you, the owner" in card
    r = await owner.post(f"/endpoints/rot/hooks/{hook_id}/test", {}, csrf_from="/endpoints/rot")
    assert r.status_code == 200 and 'data-outcome="dropped"' in r.text and "hook_disabled" in r.text
    assert env.receiver.requests == []  # no attempt to a disabled hook

    by_endpoint = await a.ok("rotate_notify_hook", {"hook_id": hook_id})
    assert by_endpoint["enabled"] is False and by_endpoint["disabled_reason"] == "operator"

    r = await owner.post(f"/endpoints/rot/hooks/{hook_id}/rotate", {}, csrf_from="/endpoints/rot")
    assert r.status_code == 200
    shown = re.search(r'data-testid="new-secret">(whsec_[^<]+)<', r.text)
    assert shown is not None and shown.group(1) != by_endpoint["signing_secret"]
    assert "keeps signing alongside it until" in r.text
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["enabled"] is True and hook["disabled_reason"] is None
    assert shown.group(1) not in (await owner.http.get("/endpoints/rot")).text  # shown once

    await env.deliver(world)  # it fires again
    await env.receiver.next_request()
