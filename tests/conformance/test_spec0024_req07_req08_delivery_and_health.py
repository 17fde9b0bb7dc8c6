"""SPEC-0024 REQ-7 (best-effort delivery, the attempt cap, retries) and REQ-8 (hook health and
auto-disable) against ``switchboard serve`` with its default retry schedule (about 1 s, then 5 s) and its
5 s attempt deadline: these tests take real seconds, and the ones that wait run their receivers side by
side so the module stays short.

Per-notification facts come from the receivers (POSTs per ``webhook-id``) and from the one
``notify attempt`` log line per attempt; labels from ``/metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trustme

from tests.conformance.harness import (
    NOTIFY,
    Conf,
    Tenant,
    body_for,
    delta,
    ip_url,
    next_body,
    receiver,
    tenant,
    wait_until,
)
from tests.support.receivers import (
    CloseWithoutResponse,
    HTTPSReceiver,
    RawResponse,
    Respond,
)

SERVER = NOTIFY
ATTEMPTS = "switchboard_notify_hook_attempts_total"
NOTIFICATIONS = "switchboard_notify_hook_notifications_total"
DISABLED = "switchboard_notify_hooks_disabled_total"
FINISH = 25.0  # a notification's three attempts take about 6 s, 16 s when each one times out


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def finished(a: Tenant, hook_id: str, failures: int = 1) -> dict[str, Any]:
    """The hook's health once ``failures`` deliveries have failed in a row (health is written once per
    delivery, after its final attempt: this is when the notification has ended)."""

    async def check() -> dict[str, Any] | None:
        health = await a.health(hook_id)
        return health if health["consecutive_failures"] >= failures else None

    result: dict[str, Any] = await wait_until(check, timeout=FINISH, what=f"{failures} failed deliveries")
    return result


def per_id(rcv: HTTPSReceiver) -> Counter[str]:
    return Counter(r.header("webhook-id") or "" for r in rcv.requests)


async def test_req07_unreachable_receiver(conf: Conf) -> None:
    async with tenant(conf) as quiet, tenant(conf) as a:
        async with conf.http() as http:  # the ingest time of a tenant with no hook, for comparison
            started = time.monotonic()
            await http.post(quiet.inbound["inbox"], json={"title": "baseline"})
            baseline = time.monotonic() - started
        hook = await a.hook(f"https://127.0.0.1:{closed_port()}/sb")
        async with conf.http() as http:
            started = time.monotonic()
            r = await http.post(a.inbound["inbox"], json={"title": "to nowhere"})
            took = time.monotonic() - started
        assert r.status_code == 202 and took < max(1.0, 3 * baseline)
        (todo_id,) = r.json()["todos"]
        health = await finished(a, hook["hook_id"])
        assert health["last_status"] is None and health["last_error"] == "network"
        lines = conf.lines("notify attempt", hook_id=hook["hook_id"])
        assert [line["attempt"] for line in lines] == [1, 2, 3]
        assert {line["result"] for line in lines} == {"network"}
        assert len({line["notification_id"] for line in lines}) == 1
        claimed = await a.ok("claim_next")  # the todo was pending all along
        assert claimed["todo"]["id"] == todo_id


async def test_req07_permanent_client_error_is_not_retried(conf: Conf) -> None:
    async with receiver(Respond(401)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todo("refused")
        health = await finished(a, hook["hook_id"])
        assert health["last_status"] == 401 and health["last_error"] == "client_error"
        assert len(rcv.requests) == 1
        (line,) = conf.lines("notify attempt", hook_id=hook["hook_id"])
        assert line["result"] == "4xx" and line["status"] == 401


async def test_req07_server_errors_are_retried_three_times(conf: Conf) -> None:
    async with receiver(Respond(503)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todo("unavailable")
        health = await finished(a, hook["hook_id"])
        assert health["last_status"] == 503 and health["last_error"] == "server_error"
        assert list(per_id(rcv).values()) == [3]
        lines = conf.lines("notify attempt", hook_id=hook["hook_id"])
        assert [(line["attempt"], line["result"]) for line in lines] == [(1, "5xx"), (2, "5xx"), (3, "5xx")]


async def test_req07_a_699_ends_the_notification_and_is_counted_as_other(conf: Conf) -> None:
    """docs/push.md: a status outside 100-599 is ``other``; only 408, 429 and 5xx are retried."""
    before = await conf.metrics()
    raw = RawResponse(b"HTTP/1.1 699 Odd\r\ncontent-length: 0\r\n\r\n")
    async with receiver(raw) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todo("odd status")
        await finished(a, hook["hook_id"])
        assert len(rcv.requests) == 1
        # This hook's own attempt line says `other`; the shared server's counters may still be taking in
        # an earlier test's 5xx from a worker process, so the label is checked on the line and the
        # counter is only required to have counted this one.
        (line,) = conf.lines("notify attempt", hook_id=hook["hook_id"])
        assert line["result"] == "other" and line["status"] == 699

    async def counted_as_other() -> bool:
        return delta(await conf.metrics(), before, ATTEMPTS, result="other") >= 1

    await wait_until(counted_as_other, what="the 699 counted as other")


async def test_req07_tls_failures_are_retried_up_to_three_prompt_attempts(conf: Conf) -> None:
    """A certificate that does not verify (another CA) may be a renewal in progress: retried like a
    network error, each attempt failing at the handshake, not at the deadline."""
    async with HTTPSReceiver(ca=trustme.CA(), cert_hostnames=("127.0.0.1",)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todo("untrusted certificate")
        health = await finished(a, hook["hook_id"])
        assert health["last_error"] == "tls" and health["last_status"] is None
        lines = conf.lines("notify attempt", hook_id=hook["hook_id"])
        assert [line["result"] for line in lines] == ["tls", "tls", "tls"]
        assert all(line["duration_ms"] < 2000 for line in lines)
        assert rcv.connections == 3 and rcv.requests == []


# Every status and error class: how many POSTs one notification may cost (REQ-7).
CLASSES: dict[str, tuple[Any, int]] = {
    "200": (Respond(200), 1),
    "204": (Respond(204), 1),
    "301": (Respond(301, headers=[("location", "https://127.0.0.1:1/")]), 1),
    "400": (Respond(400), 1),
    "401": (Respond(401), 1),
    "404": (Respond(404), 1),
    "410": (Respond(410), 1),
    "408": (Respond(408), 3),
    "429": (Respond(429), 3),
    "500": (Respond(500), 3),
    "503": (Respond(503), 3),
    "599": (RawResponse(b"HTTP/1.1 599 Odd\r\ncontent-length: 0\r\n\r\n"), 3),
    "699": (RawResponse(b"HTTP/1.1 699 Odd\r\ncontent-length: 0\r\n\r\n"), 1),
    "close": (CloseWithoutResponse(), 3),
    "garbage": (RawResponse(b"this is not http\r\n\r\n"), 3),
}


@asynccontextmanager
async def receivers_for(classes: dict[str, tuple[Any, int]]) -> AsyncIterator[dict[str, HTTPSReceiver]]:
    async with AsyncExitStack() as stack:
        yield {name: await stack.enter_async_context(receiver(b)) for name, (b, _) in classes.items()}


async def test_req07_at_most_three_posts_per_webhook_id_for_every_status_and_error_class(conf: Conf) -> None:
    names = list(CLASSES)
    groups = [names[i : i + 5] for i in range(0, len(names), 5)]  # five hooks per endpoint (the ceiling)
    async with receivers_for(CLASSES) as rcvs, AsyncExitStack() as stack:
        tenants = [await stack.enter_async_context(tenant(conf)) for _ in groups]
        hook_of: dict[str, str] = {}
        for a, group in zip(tenants, groups, strict=True):
            for name in group:
                hook_of[name] = (await a.hook(ip_url(rcvs[name])))["hook_id"]
        await asyncio.gather(*(a.todo("one notification per hook") for a in tenants))

        async def all_done() -> bool:
            done = {line["hook_id"] for line in conf.lines("notify attempt")} & set(hook_of.values())
            if len(done) < len(hook_of):
                return False
            return all(
                len(conf.lines("notify attempt", hook_id=h)) >= CLASSES[n][1] for n, h in hook_of.items()
            )

        await wait_until(all_done, timeout=FINISH, what="every class finished")
        # Absence has no event to await: wait out more than the longest backoff, so a fourth attempt
        # (or a second one for a final status) would have shown by now.
        await asyncio.sleep(6.5)
        problems = []
        for name, rcv in rcvs.items():
            want = CLASSES[name][1]
            attempts = len(conf.lines("notify attempt", hook_id=hook_of[name]))
            posts = max(per_id(rcv).values(), default=0)
            if attempts != want or (rcv.requests and posts != want):
                problems.append(f"{name}: {attempts} attempts, {posts} POSTs for one webhook-id, want {want}")
        assert not problems, problems


async def test_req08_dead_receiver_is_disabled(conf: Conf) -> None:
    before = await conf.metrics()
    async with receiver(Respond(401)) as dead, receiver() as alive, tenant(conf) as a:
        hook = await a.hook(ip_url(dead))
        await a.hook(ip_url(alive))
        await a.todos(10, "down")
        await finished(a, hook["hook_id"], failures=10)
        health = await a.health(hook["hook_id"])
        assert health["enabled"] is False and health["disabled_reason"] == "consecutive_failures"
        assert len(dead.requests) == 10
        for _ in range(10):
            await next_body(alive)
        sentinel = await a.todo("the 11th")
        _, sent = await next_body(alive)
        assert sent["todo_id"] == sentinel and len(dead.requests) == 10
        (warning,) = conf.lines("notify hook disabled", hook_id=hook["hook_id"])
        assert warning["level"] == "warning" and warning["reason"] == "consecutive_failures"
    await conf.counted(before, DISABLED, 1, reason="consecutive_failures")


async def test_req08_recovery_resets_the_count(conf: Conf) -> None:
    async with receiver(Respond(401)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todos(7, "down")
        await finished(a, hook["hook_id"], failures=7)
        assert (await a.health(hook["hook_id"]))["consecutive_failures"] == 7
        rcv.behaviour = Respond(204)
        await a.todo("back")

        async def reset() -> dict[str, Any] | None:
            health = await a.health(hook["hook_id"])
            return health if health["consecutive_failures"] == 0 else None

        health = await wait_until(reset, what="streak reset")
        assert health["last_status"] == 204 and health["enabled"] is True


async def test_req08_rotate_re_enables_an_auto_disabled_hook(conf: Conf) -> None:
    async with receiver(Respond(401)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.todos(10, "down")
        await finished(a, hook["hook_id"], failures=10)
        assert (await a.health(hook["hook_id"]))["enabled"] is False
        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]})
        assert rotated["enabled"] is True
        health = await a.health(hook["hook_id"])
        assert health["enabled"] is True and health["disabled_reason"] is None
        rcv.behaviour = Respond(204)
        todo = await a.todo("after the rotate")
        assert (await body_for(rcv, todo))["reason"] == "created"


async def test_req08_a_hook_disabled_by_its_human_stays_disabled_through_a_rotate(conf: Conf) -> None:
    async with receiver() as rcv, receiver() as sentinel_rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await a.hook(ip_url(sentinel_rcv))
        r = await a.human.hook_action(a.slug, hook["hook_id"], "disable")
        assert r.status_code == 303
        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]})
        assert rotated["signing_secret"].startswith("whsec_")
        health = await a.health(hook["hook_id"])
        assert health["enabled"] is False and health["disabled_reason"] == "operator"
        sentinel = await a.todo("after the endpoint's rotate")
        _, sent = await next_body(sentinel_rcv)
        assert sent["todo_id"] == sentinel and rcv.requests == []
        assert (await a.human.hook_action(a.slug, hook["hook_id"], "enable")).status_code == 303
        assert (await a.health(hook["hook_id"]))["enabled"] is True  # the human undoes their own disable


async def test_req07_ingest_and_mcp_never_wait_for_delivery(conf: Conf) -> None:
    """Five hooks whose receivers hang to the deadline: ingest and an MCP verb still answer at once."""
    from tests.support.receivers import HangBeforeHeaders

    async with AsyncExitStack() as stack:
        rcvs = [await stack.enter_async_context(receiver(HangBeforeHeaders())) for _ in range(5)]
        a = await stack.enter_async_context(tenant(conf))
        for rcv in rcvs:
            await a.hook(ip_url(rcv))
        await a.todos(5, "hung")
        await rcvs[0].next_request(timeout=10)  # attempts are hanging now
        started = time.monotonic()
        await a.todo("while deliveries hang")
        await a.ok("list_notify_hooks")
        assert time.monotonic() - started < 2.0
        with contextlib.suppress(Exception):
            for rcv in rcvs:
                rcv.behaviour = Respond(204)
