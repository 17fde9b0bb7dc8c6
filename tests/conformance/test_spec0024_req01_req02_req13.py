"""SPEC-0024 REQ-1 (ownership and scope), REQ-2 (management verbs), REQ-13 (the ceiling under a race),
against ``switchboard serve`` from outside.

"Not called" is shown with a sentinel: a second hook on the same endpoint (or the other tenant's own
hook) that the same todo, or one made right after it, must call. Its arrival proves the transition was
matched; the absent request is then absent, not late.
"""

from __future__ import annotations

import asyncio
import json

from tests.conformance.harness import (
    NOTIFY,
    Conf,
    ip_url,
    next_body,
    receiver,
    tenant,
)
from tests.support.receivers import ListeningSocket

SERVER = NOTIFY
NOTIFY_VERBS = ("create_notify_hook", "list_notify_hooks", "rotate_notify_hook", "delete_notify_hook")


async def test_req01_a_hook_fires_only_for_its_own_endpoints_todos(conf: Conf) -> None:
    async with (
        receiver() as rcv_a,
        receiver() as rcv_b,
        tenant(conf, who="alice") as a,
        tenant(conf, who="bob") as b,
    ):
        await a.hook(ip_url(rcv_a))
        await b.hook(ip_url(rcv_b))  # B's own hook: the sentinel that B's todo was matched
        b_todo = await b.todo("bob-private-title")
        _, sent = await next_body(rcv_b)
        assert sent["todo_id"] == b_todo
        a_todo = await a.todo("alice title")
        _, mine = await next_body(rcv_a)
        assert mine["todo_id"] == a_todo and mine["endpoint"] == a.slug
        for request in rcv_a.requests:
            assert b_todo.encode() not in request.body and b"bob-private-title" not in request.body
            assert b.slug.encode() not in request.body
        assert len(rcv_a.requests) == 1


async def test_req01_a_hook_filtered_to_one_queue(conf: Conf) -> None:
    async with (
        receiver() as reviews_rcv,
        receiver() as inbox_rcv,
        tenant(conf, queues=("inbox", "reviews")) as a,
    ):
        await a.hook(ip_url(reviews_rcv), queues=["reviews"])
        await a.hook(ip_url(inbox_rcv), queues=["inbox"])  # sentinel
        inbox_todo = await a.todo("on inbox", queue="inbox")
        _, sent = await next_body(inbox_rcv)
        assert sent["todo_id"] == inbox_todo
        reviews_todo = await a.todo("on reviews", queue="reviews")
        _, sent = await next_body(reviews_rcv)
        assert sent["todo_id"] == reviews_todo and sent["queue"] == "reviews"
        assert len(reviews_rcv.requests) == 1


async def test_req01_scope_shrink_stops_a_hook_without_editing_it(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf, queues=("inbox", "reviews")) as a:
        created = await a.hook(ip_url(rcv), queues=[])
        # The owning human removes reviews from the scope on the endpoint card; the route stays.
        r = await a.human.post(
            f"/endpoints/{a.slug}/scope",
            {"queues": "inbox", "verbs": list(conf_verbs())},
            csrf_from=f"/endpoints/{a.slug}",
        )
        assert r.status_code == 303, r.text[-300:]
        await a.todo("on reviews after the shrink", queue="reviews")
        sentinel = await a.todo("on inbox", queue="inbox")
        _, sent = await next_body(rcv)
        assert sent["todo_id"] == sentinel
        assert len(rcv.requests) == 1
        hook = await a.health(created["hook_id"])
        assert hook["queues"] == [] and hook["enabled"] is True  # the hook row was not edited


def conf_verbs() -> tuple[str, ...]:
    from tests.conformance.harness import HOOK_VERBS

    return HOOK_VERBS


async def test_req01_ceiling_reached(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        for i in range(5):
            await a.hook(ip_url(rcv, f"/h{i}"))
        refused = await a.agent.call("create_notify_hook", {"url": ip_url(rcv, "/sixth")})
        assert not refused.ok and refused.code == "ceiling_exceeded"
        assert "signing_secret" not in refused.data
        listed = await a.ok("list_notify_hooks")
        assert listed["ceiling"] == {"max": 5, "used": 5}
        assert all("/sixth" not in h["url"] for h in listed["hooks"]) and len(listed["hooks"]) == 5


async def test_req02_create_reveals_the_secret_once(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        created = await a.hook(ip_url(rcv))
        secret = created["signing_secret"]
        assert secret.startswith("whsec_")
        assert set(created) >= {"hook_id", "url", "queues", "ignore_presence", "enabled", "signing_secret"}
        listed = await a.ok("list_notify_hooks")
        text = json.dumps(listed)
        assert secret not in text and secret.removeprefix("whsec_") not in text
        assert all("signing_secret" not in h and "secret" not in h for h in listed["hooks"])


async def test_req02_endpoint_without_the_verb(conf: Conf) -> None:
    from switchboard.core.verbs import DEFAULT_GRANT

    async with ListeningSocket() as sock, tenant(conf, verbs=DEFAULT_GRANT) as a:
        for verb, args in (
            ("create_notify_hook", {"url": f"https://127.0.0.1:{sock.port}/hook"}),
            ("list_notify_hooks", {}),
            ("rotate_notify_hook", {"hook_id": "nh_x"}),
            ("delete_notify_hook", {"hook_id": "nh_x"}),
        ):
            result = await a.agent.call(verb, args)
            assert not result.ok and result.code == "forbidden", (verb, result.data)
        await a.todo("a todo for an endpoint that holds no hook verb")
        await sock.assert_untouched()


async def test_req02_another_endpoints_hook_id(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf, who="alice") as a, tenant(conf, who="alice") as b:
        hook = await a.hook(ip_url(rcv))
        for verb in ("delete_notify_hook", "rotate_notify_hook"):
            foreign = await b.agent.call(verb, {"hook_id": hook["hook_id"]})
            unknown = await b.agent.call(verb, {"hook_id": "nh_01JZZZZZZZZZZZZZZZZZZZZZZZ"})
            assert not foreign.ok and foreign.code == "not_found"
            assert foreign.data.get("message") == unknown.data.get("message")
        assert (await b.ok("list_notify_hooks"))["hooks"] == []
        still = await a.health(hook["hook_id"])
        assert still["enabled"] is True
        todo = await a.todo("still fires")
        _, sent = await next_body(rcv)
        assert sent["todo_id"] == todo


async def test_req02_not_in_the_default_grant(conf: Conf) -> None:
    async with conf.human("alice") as person:
        r = await person.post("/vend/quick", {"slug": "quick-one", "queues": "inbox"})
        assert r.status_code == 200, r.text[-300:]
    listed = await asyncio.to_thread(conf.cli, "endpoint", "list", "--human", "alice@example.com")
    (quick,) = [e for e in listed["endpoints"] if e["slug"] == "quick-one"]
    assert not set(NOTIFY_VERBS) & set(quick["verbs"])
    assert set(quick["verbs"]) == {
        "ack",
        "ask",
        "claim",
        "claim_next",
        "clock_in",
        "clock_out",
        "fail",
        "heartbeat",
        "list_todos",
        "self_test",
    }


async def test_req02_the_verbs_are_listed_grouped_as_outbound_http(conf: Conf) -> None:
    """The vend wizard and the quick-vend grant list name the four verbs in a group labelled as granting
    outbound HTTP calls, unchecked in the wizard."""
    async with conf.human("alice") as person:
        wizard = (await person.http.get("/vend")).text
        quick = (await person.http.get("/endpoints")).text
    group = wizard[wizard.index('data-group="notify_hooks"') :]
    group = group[: group.index("</fieldset>")]
    assert "outbound HTTP" in group
    for verb in NOTIFY_VERBS:
        assert f'value="{verb}">' in group  # offered, and not pre-checked
        assert verb in quick
    assert "outbound HTTP" in quick


async def test_req02_no_attempt_starts_after_delete(conf: Conf) -> None:
    async with receiver() as deleted_rcv, receiver() as kept_rcv, tenant(conf) as a:
        doomed = await a.hook(ip_url(deleted_rcv))
        await a.hook(ip_url(kept_rcv))
        assert (await a.ok("delete_notify_hook", {"hook_id": doomed["hook_id"]}))["deleted"] is True
        todo = await a.todo("after the delete")
        _, sent = await next_body(kept_rcv)
        assert sent["todo_id"] == todo
        assert deleted_rcv.requests == []
        gone = await a.agent.call("rotate_notify_hook", {"hook_id": doomed["hook_id"]})
        assert gone.code == "not_found"


async def test_req13_concurrent_creates_at_the_ceiling(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        for i in range(4):
            await a.hook(ip_url(rcv, f"/h{i}"))
        from tests.support.mcp_client import agent

        async with agent(conf.mcp_url, a.token) as second:
            one, two = await asyncio.gather(
                a.agent.call("create_notify_hook", {"url": ip_url(rcv, "/race-1")}),
                second.call("create_notify_hook", {"url": ip_url(rcv, "/race-2")}),
            )
        assert sorted([one.ok, two.ok]) == [False, True]
        loser = one if not one.ok else two
        assert loser.code == "ceiling_exceeded"
        assert (await a.ok("list_notify_hooks"))["ceiling"] == {"max": 5, "used": 5}
