"""SPEC-0024 REQ-7 "Queue overflow", REQ-11's dropped counter, and the Rate Limiting section's 120
notifications per minute per hook, against ``switchboard serve``.

Overflow: a server whose delivery queue holds 2 notifications and whose worker processes run 1 attempt at
a time (``SWITCHBOARD_NOTIFY_QUEUE_SIZE``, ``SWITCHBOARD_NOTIFY_WORKERS``), with receivers that hang to
the 5 s deadline. Rate: a server with default settings and a receiver that answers at once; the whole
test runs inside one minute, so every request it receives lies in one 60-second window."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from typing import Any

from tests.conformance.harness import (
    Conf,
    ServerSpec,
    delta,
    ip_url,
    receiver,
    tenant,
    wait_until,
)
from tests.support.receivers import HangBeforeHeaders

OVERFLOW = ServerSpec(
    "overflow",
    {"notify_hook_allow_cidrs": "127.0.0.1/32", "notify_queue_size": 2, "notify_workers": 1},
    humans=("alice",),
)
RATE = ServerSpec("rate", {"notify_hook_allow_cidrs": "127.0.0.1/32"}, humans=("alice",))
SERVERS = [OVERFLOW, RATE]
DROPPED = {"type": "todo.ready", "outcome": "dropped"}


def named_ids(line: dict[str, Any]) -> set[str]:
    """The hook ids (or endpoint and todo ids) a drop line names, whatever their field's shape."""
    ids: set[str] = set()
    for key in ("hook_id", "hook_ids", "hooks", "endpoint_id", "endpoint_ids", "todo_id", "todo_ids"):
        value = line.get(key)
        if isinstance(value, str):
            ids.add(value)
        elif isinstance(value, (list | tuple, dict)):
            ids |= {str(v) for v in value}
    return ids


async def test_req07_queue_overflow(confs: dict[str, Conf]) -> None:
    conf = confs[OVERFLOW.name]
    before = await conf.metrics()
    async with AsyncExitStack() as stack:
        rcvs = [await stack.enter_async_context(receiver(HangBeforeHeaders())) for _ in range(3)]
        a = await stack.enter_async_context(tenant(conf))
        hooks = {(await a.hook(ip_url(rcv)))["hook_id"] for rcv in rcvs}
        todos = await a.todos(20, "overflowing")
        await rcvs[0].next_request(timeout=10)

        async def counted() -> float:
            return delta(
                await conf.metrics(), before, "switchboard_notify_hook_notifications_total", **DROPPED
            )

        await wait_until(counted, timeout=15, what="drops counted")
        listed = await a.ok("list_todos")
        states = {t["id"]: t["status"] for t in listed["todos"]}
        assert all(states.get(t) == "pending" for t in todos)  # no todo changed state

        async def every_drop_logged() -> bool:
            dropped = await counted()
            logged = sum(
                int(line.get("drops", line.get("count", 1))) for line in conf.lines("notification dropped")
            )
            return dropped > 0 and logged == dropped

        # Lines are coalesced per reason per short window and flushed by a timer, not by the next drop.
        await wait_until(every_drop_logged, timeout=30, what="the drop lines' counts sum to the counter")
        for line in conf.lines("notification dropped"):
            assert line["level"] == "warning"
            assert named_ids(line) & (hooks | set(todos)), line
            assert "127.0.0.1" not in str(line) and "https://" not in str(line), line
        for rcv in rcvs:
            rcv.behaviour = __import__("tests.support.receivers", fromlist=["Respond"]).Respond(204)


async def test_rate_limiting_no_60_second_window_holds_more_than_120_per_hook(confs: dict[str, Conf]) -> None:
    conf = confs[RATE.name]
    before = await conf.metrics()
    started = time.monotonic()
    async with receiver() as rcv, tenant(conf) as a:
        await a.hook(ip_url(rcv))
        first = await a.todos(130, "burst one")
        await asyncio.sleep(max(0.0, 12 - (time.monotonic() - started)))  # a token bucket refills meanwhile
        second = await a.todos(30, "burst two")
        produced = len(first) + len(second)

        async def accounted() -> bool:
            after = await conf.metrics()
            done = delta(
                after,
                before,
                "switchboard_notify_hook_notifications_total",
                type="todo.ready",
                outcome="delivered",
            )
            dropped = delta(after, before, "switchboard_notify_hook_notifications_total", **DROPPED)
            return done + dropped >= produced

        await wait_until(accounted, timeout=30, what="every notification delivered or dropped")
        elapsed = time.monotonic() - started
        assert elapsed < 60  # so every request below lies in one 60-second window
        after = await conf.metrics()
        dropped = delta(after, before, "switchboard_notify_hook_notifications_total", **DROPPED)
        assert len(rcv.requests) <= 120, f"{len(rcv.requests)} POSTs to one hook within {elapsed:.0f} s"
        assert dropped == produced - len(rcv.requests)
