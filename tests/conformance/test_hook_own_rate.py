"""Issue 29 item 6: an endpoint lowers its own hook's per-minute limit below SPEC-0024's 120, against
``switchboard serve`` (SQLite) with a receiver on loopback and the official MCP client. The whole burst
runs inside one minute, so every request the receiver gets lies in one 60-second window."""

from __future__ import annotations

import time

from tests.conformance.harness import Conf, ServerSpec, delta, ip_url, receiver, tenant, wait_until

SERVER = ServerSpec("hook-rate", {"notify_hook_allow_cidrs": "127.0.0.1/32"}, humans=("alice",))
NOTIFIED = "switchboard_notify_hook_notifications_total"


async def test_a_hook_at_10_a_minute_gets_10_of_30_and_each_drop_is_logged(conf: Conf) -> None:
    before = await conf.metrics()
    started = time.monotonic()
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv), rate_per_minute=10)
        assert hook["rate_per_minute"] == 10
        assert (await a.health(hook["hook_id"]))["rate_per_minute"] == 10
        await a.todos(30, "limited")

        async def accounted() -> bool:
            after = await conf.metrics()
            done = sum(
                delta(after, before, NOTIFIED, type="todo.ready", outcome=o)
                for o in ("delivered", "dropped", "failed")
            )
            return done >= 30

        await wait_until(accounted, timeout=30, what="every notification delivered or dropped")
        after = await conf.metrics()

        async def every_drop_logged() -> bool:
            lines = conf.lines("notification dropped", reason="rate_limited")
            return sum(int(line["drops"]) for line in lines) == 20

        await wait_until(every_drop_logged, timeout=30, what="the 20 drops' lines")
    assert time.monotonic() - started < 60
    ids = {r.header("webhook-id") for r in rcv.requests}
    assert len(rcv.requests) == 10 and len(ids) == 10
    assert delta(after, before, NOTIFIED, type="todo.ready", outcome="delivered") == 10
    assert delta(after, before, NOTIFIED, type="todo.ready", outcome="dropped") == 20
    for line in conf.lines("notification dropped", reason="rate_limited"):
        assert line["level"] == "warning"
        assert hook["hook_id"] in (line.get("hook_ids") or [line.get("hook_id")]), line
        assert "127.0.0.1" not in str(line) and "https://" not in str(line), line
        assert not set(line.get("notification_ids") or []) & ids  # a dropped one was never sent


async def test_a_limit_out_of_range_is_refused_and_nothing_is_stored(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        for bad in (0, 121, -5):
            result = await a.agent.call("create_notify_hook", {"url": ip_url(rcv), "rate_per_minute": bad})
            assert not result.ok and result.code == "invalid_argument", result.data
            assert "rate_per_minute" in result.data["message"], result.data
        assert (await a.ok("list_notify_hooks"))["hooks"] == []

        hook = await a.hook(ip_url(rcv))
        assert hook["rate_per_minute"] is None  # the server's limit: SPEC-0024's 120
        for bad in (0, 121):
            result = await a.agent.call(
                "update_notify_hook", {"hook_id": hook["hook_id"], "rate_per_minute": bad}
            )
            assert not result.ok and result.code == "invalid_argument", result.data
        assert (await a.health(hook["hook_id"]))["rate_per_minute"] is None
        lowered = await a.ok("update_notify_hook", {"hook_id": hook["hook_id"], "rate_per_minute": 7})
        assert lowered["rate_per_minute"] == 7
        assert (await a.health(hook["hook_id"]))["rate_per_minute"] == 7
        back = await a.ok("update_notify_hook", {"hook_id": hook["hook_id"], "rate_per_minute": None})
        assert back["rate_per_minute"] is None
        unknown = await a.agent.call("update_notify_hook", {"hook_id": "nh_unknown", "rate_per_minute": 5})
        assert unknown.code == "not_found", unknown.data
