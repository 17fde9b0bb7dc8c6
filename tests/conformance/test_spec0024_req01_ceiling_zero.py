"""SPEC-0024 REQ-1: "A ceiling of 0 MUST also stop dispatch to every existing hook, and Switchboard MUST
log one startup line saying notify hooks are disabled." A hook is made and delivers under the default
ceiling; the same server is then restarted on the same data with ``SWITCHBOARD_NOTIFY_HOOK_CEILING=0``."""

from __future__ import annotations

import asyncio

from tests.conformance.harness import Conf, ServerSpec, body_for, delta, ip_url, receiver, tenant
from tests.support.mcp_client import agent

SERVER = ServerSpec("ceiling0", {"notify_hook_allow_cidrs": "127.0.0.1/32"}, humans=("alice",))
QUIET = 3.0  # there is no event for "nothing was sent": the wait is bounded and generous


async def test_req01_a_ceiling_of_zero_stops_every_existing_hook(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await body_for(rcv, await a.todo("under the default ceiling"))
        token, path = a.token, a.inbound["inbox"]
    await asyncio.to_thread(conf.restart, notify_hook_ceiling=0)
    startup = conf.lines("notify hooks are disabled: SWITCHBOARD_NOTIFY_HOOK_CEILING is 0")
    assert len(startup) == 1 and startup[0]["level"] == "warning"
    before = await conf.metrics()
    async with receiver() as rcv2, agent(conf.mcp_url, token) as again:
        refused = await again.call("create_notify_hook", {"url": ip_url(rcv2)})
        assert not refused.ok and refused.code == "ceiling_exceeded"
        async with conf.http() as http:
            r = await http.post(path, json={"title": "with the ceiling at 0"})
        assert r.status_code == 202
        await asyncio.sleep(QUIET)
        after = await conf.metrics()
        assert len(rcv.requests) == 1 and rcv2.requests == []
        for result in ("2xx", "network", "tls", "timeout"):
            assert delta(after, before, "switchboard_notify_hook_attempts_total", result=result) == 0
        listed = await again.ok("list_notify_hooks")
        assert hook["hook_id"] in {h["hook_id"] for h in listed["hooks"]}  # kept, just not called
