"""Issue 29 against the real ``switchboard serve`` (notify worker processes included), over MCP: a
hook's 20 failed notifications recovered after its receiver comes back, each with its own webhook-id
and a new valid signature; one resent again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from standardwebhooks import Webhook

from tests.reliability.notify_served import served
from tests.support.receivers import Respond


async def test_recover_twenty_failed_then_resend_one(tmp_path: Path) -> None:
    async with served(tmp_path, slug="rep") as s:
        a = await s.agent()
        receiver = await s.receiver(behaviour=Respond(500))
        made = await a.ok("create_notify_hook", {"url": receiver.hook_url()})
        hook = made["hook_id"]
        since = datetime.fromtimestamp(time.time() - 1, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await s.deliver(20)

        async def ended() -> bool:
            failed = await s.metric(
                "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed"
            )
            dropped = await s.metric(
                "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
            )
            return failed + dropped >= 20

        await s.until("20 notifications failed or dropped", ended)
        failing = list(dict.fromkeys(receiver.ids()))
        assert len(failing) == 20
        seen = len(receiver.requests)

        receiver.behaviour = Respond(204)
        secret = (await a.ok("rotate_notify_hook", {"hook_id": hook}))["signing_secret"]  # re-enables it
        answer = await a.ok("recover_notify_hook", {"hook_id": hook, "since": since})
        assert answer["found"] == 20 and answer["queued"] == 20, answer
        await s.until("20 replays received", lambda: len(receiver.requests) >= seen + 20)
        replays = receiver.requests[seen:]
        assert sorted(r.header("webhook-id") or "" for r in replays) == sorted(failing)
        for r in replays:
            Webhook(secret).verify(r.body, r.header_map)

        one = await a.ok("resend_notification", {"notification_id": failing[0]})
        assert one["queued"] is True
        await s.until("the resend received", lambda: len(receiver.requests) >= seen + 21)
        last = receiver.requests[-1]
        assert last.header("webhook-id") == failing[0]
        Webhook(secret).verify(last.body, last.header_map)

        unknown = await a.call("recover_notify_hook", {"hook_id": "nh_unknown", "since": since})
        assert (
            unknown.code == "not_found"
        )  # another endpoint's hook: tests/reliability/test_tenant_isolation.py
