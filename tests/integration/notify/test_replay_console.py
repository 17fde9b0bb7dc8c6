"""Issue 29 from the console: the owner resends a delivered and a failed notification from the delivery
log's rows and recovers a hook's failures, over the real web UI (POST with CSRF); each is an audit line
and a delivery-log row; another owner's hook answers not found."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from standardwebhooks import Webhook

from tests.integration.notify.conftest import notify_env
from tests.integration.notify.test_replay import drain, flushed
from tests.integration.notify.test_req10_operator_web_ui import signed_in
from tests.support.receivers import Respond


async def test_console_resend_and_recover(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        world, a = await env.tenant("web-a", email="owner@example.com")
        await env.tenant("web-b", email="other@example.com")
        created = await a.ok("create_notify_hook", {"url": env.hook_url()})
        hook, secret = created["hook_id"], created["signing_secret"]
        owner = await signed_in(env, "owner@example.com")
        card = "/endpoints/web-a"

        await env.deliver(world, title="delivered")
        delivered = (await env.receiver.next_request()).header("webhook-id")
        env.receiver.behaviour = Respond(500)
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await env.deliver(world, title="fails", number=7)
        log = await flushed(env, hook, 2)
        failed = log[1].id
        assert [r.outcome for r in log] == ["delivered", "failed"] and await drain(env) == 3

        env.receiver.behaviour = Respond(204)
        page = (await owner.http.get(card)).text
        assert page.count('data-testid="resend"') == 2  # a button on each row
        for nid in (delivered, failed):
            r = await owner.post(f"{card}/hooks/{hook}/resend", {"notification": nid}, csrf_from=card)
            assert r.status_code == 200 and 'data-queued="yes"' in r.text
            request = await env.receiver.next_request()
            assert request.header("webhook-id") == nid
            Webhook(secret).verify(request.body, request.header_map)
        log = await flushed(env, hook, 4)
        assert [(r.id, r.reason, r.outcome) for r in log[2:]] == [
            (delivered, "replay", "delivered"),
            (failed, "replay", "delivered"),
        ]
        audits = [e for e in env.logs.events("audit") if e.get("action") == "hook.resend"]
        assert [e["notification_id"] for e in audits] == [delivered, failed]
        assert {e["actor"] for e in audits} == {"owner@example.com"}

        # recover: the failed one's newest row is now delivered, so nothing is found
        r = await owner.post(f"{card}/hooks/{hook}/recover", {"since": since}, csrf_from=card)
        assert r.status_code == 200 and 'data-found="0"' in r.text
        r = await owner.post(f"{card}/hooks/{hook}/recover", {"since": "yesterday"}, csrf_from=card)
        assert r.status_code == 400

        # another owner: not found, for the hook and for the notification alike
        other = await signed_in(env, "other@example.com")
        theirs = "/endpoints/web-b"
        r = await other.post(f"{theirs}/hooks/{hook}/recover", {"since": since}, csrf_from=theirs)
        assert r.status_code == 404
        r = await other.post(f"{theirs}/hooks/{hook}/resend", {"notification": failed}, csrf_from=theirs)
        assert r.status_code == 404
        page = (await owner.http.get(card)).text
        assert page.count('<span class="chip">replay</span>') == 2
