"""SPEC-0024 REQ-9 (presence) and REQ-10 (the operator web UI) against ``switchboard serve``: presence is
changed with the endpoint's own ``clock_out``/``clock_in`` verbs and the card's presence control, hooks
are disabled, re-enabled and deleted from the endpoint card by a signed-in human with the page's CSRF
token."""

from __future__ import annotations

from tests.conformance.harness import (
    NOTIFY,
    Conf,
    body_for,
    ip_url,
    next_body,
    receiver,
    tenant,
    wait_until,
)

SERVER = NOTIFY
BACKLOG_FIELDS = {"type", "reason", "endpoint", "pending", "queues", "oldest_pending_seconds", "created_at"}


async def test_req09_clocked_out_endpoint_holds_its_hook(conf: Conf) -> None:
    async with receiver() as held, receiver() as on_demand, tenant(conf) as a:
        await a.hook(ip_url(held))
        await a.hook(ip_url(on_demand), ignore_presence=True)  # the sentinel: fires while out
        await a.ok("clock_out")
        ids = await a.todos(3, "while out")
        for todo_id in ids:
            await body_for(on_demand, todo_id)
        assert held.requests == []
        await a.ok("clock_in")
        request, backlog = await next_body(held)
        assert set(backlog) == BACKLOG_FIELDS
        assert backlog["type"] == "todos.backlog" and backlog["reason"] == "clock_in"
        assert backlog["pending"] == 3 and backlog["queues"] == ["inbox"] and backlog["endpoint"] == a.slug
        assert isinstance(backlog["oldest_pending_seconds"], int)
        for todo_id in ids:
            assert todo_id.encode() not in request.body
        assert b"while out" not in request.body


async def test_req09_an_on_demand_dispatcher_ignores_presence(conf: Conf) -> None:
    async with receiver() as on_demand, receiver() as held, tenant(conf) as a:
        await a.hook(ip_url(on_demand), ignore_presence=True)
        await a.hook(ip_url(held))
        await a.ok("clock_out")
        todo_id = await a.todo("while out")
        _, sent = await next_body(on_demand)
        assert sent["type"] == "todo.ready" and sent["todo_id"] == todo_id
        await a.ok("clock_in")
        _, backlog = await next_body(held)  # the held hook's backlog: the clock-in was matched
        assert backlog["type"] == "todos.backlog"
        assert len(on_demand.requests) == 1


async def test_req09_an_operator_override_back_in_sends_the_backlog_with_reason_operator(conf: Conf) -> None:
    async with receiver() as held, receiver() as on_demand, tenant(conf) as a:
        await a.hook(ip_url(held))
        await a.hook(ip_url(on_demand), ignore_presence=True)  # the sentinel: fires while out
        card = f"/endpoints/{a.slug}"
        assert (await a.human.post(f"{card}/presence", {"state": "out"}, csrf_from=card)).status_code == 303
        ids = await a.todos(2, "while overridden out")
        for todo_id in ids:  # both were matched while the override held the hook
            await body_for(on_demand, todo_id)
        assert held.requests == []
        assert (await a.human.post(f"{card}/presence", {"state": "in"}, csrf_from=card)).status_code == 303
        _, backlog = await next_body(held)
        assert (
            backlog["type"] == "todos.backlog" and backlog["reason"] == "operator" and backlog["pending"] == 2
        )
        assert len(held.requests) == 1


async def test_req10_human_disables_a_noisy_hook(conf: Conf) -> None:
    before = await conf.metrics()
    async with receiver() as noisy, receiver() as other, tenant(conf) as a:
        hook = await a.hook(ip_url(noisy))
        await a.hook(ip_url(other))
        r = await a.human.hook_action(a.slug, hook["hook_id"], "disable")
        assert r.status_code == 303 and r.headers["location"].startswith(f"/endpoints/{a.slug}")
        health = await a.health(hook["hook_id"])
        assert health["enabled"] is False and health["disabled_reason"] == "operator"
        todo_id = await a.todo("after the disable")
        await body_for(other, todo_id)
        assert noisy.requests == []
        assert (await a.human.hook_action(a.slug, hook["hook_id"], "enable")).status_code == 303
        again = await a.todo("after the re-enable")
        await body_for(noisy, again)
        assert (await a.human.hook_action(a.slug, hook["hook_id"], "delete")).status_code == 303
        assert hook["hook_id"] not in {h["hook_id"] for h in (await a.ok("list_notify_hooks"))["hooks"]}
    await conf.counted(before, "switchboard_notify_hooks_disabled_total", 1, reason="operator")


async def test_req10_foreign_human(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf, who="alice") as a, conf.human("bob") as bob:
        hook = await a.hook(ip_url(rcv))
        for action in ("disable", "enable", "delete"):
            r = await bob.post(f"/endpoints/{a.slug}/hooks/{hook['hook_id']}/{action}", {})
            assert r.status_code == 404, (action, r.status_code)
        assert (await bob.http.get(f"/endpoints/{a.slug}")).status_code == 404
        health = await a.health(hook["hook_id"])
        assert health["enabled"] is True
        todo_id = await a.todo("still mine")
        await body_for(rcv, todo_id)


async def test_req10_the_card_shows_each_hook_with_its_query_redacted(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv, "/cardpath?key=QUERYCANARY-card"), queues=["inbox"])
        todo_id = await a.todo("one delivery for the health columns")
        await body_for(rcv, todo_id)

        async def written() -> bool:
            return (await a.health(hook["hook_id"]))["last_status"] == 204

        await wait_until(written, what="health written")
        page = (await a.human.http.get(f"/endpoints/{a.slug}")).text
        assert f"https://127.0.0.1:{rcv.port}/cardpath" in page and "[redacted]" in page
        assert "QUERYCANARY" not in page
        assert "inbox" in page and "204" in page


async def test_req10_hook_controls_need_the_csrf_token(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        r = await a.human.http.post(f"/endpoints/{a.slug}/hooks/{hook['hook_id']}/disable", data={})
        assert r.status_code in (400, 403)
        assert (await a.health(hook["hook_id"]))["enabled"] is True
