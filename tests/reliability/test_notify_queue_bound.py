"""SPEC-0024 REQ-7: "a bounded in-process queue on each instance", shown against ``switchboard serve``
with two notify worker processes (issue 18).

``SWITCHBOARD_NOTIFY_QUEUE_SIZE`` is the instance's bound, split between the children, not each
child's. Two endpoints whose notifications go to different children flood receivers that never answer
(each child runs one attempt at a time, held for the 5 s deadline). Seen from outside only: the queue
depth on ``/metrics`` never exceeds the setting, the excess is counted as dropped and every drop reaches
a ``notification dropped`` line (reason ``queue_full``), the JSON log shows each child's share, and no
todo changed state. With the bound applied per child the two queues would hold twice the setting and
drop that much less.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from switchboard.notify.process import child_of
from tests.reliability.notify_served import HOOK_VERBS, Served, served
from tests.reliability.procs import Tenant, provision
from tests.support.mcp_client import agent
from tests.support.receivers import HangBeforeHeaders

QUEUE = 8  # the instance's bound: 4 per child
CHILDREN = 2
FLOOD = 16  # todos per endpoint, so each child is offered twice its share and the instance 4x its bound
DEPTH = "switchboard_notify_hook_queue_depth"
DROPPED = {"type": "todo.ready", "outcome": "dropped"}
WATCH_AFTER = 6.0  # past the first attempts' 5 s deadline, when their retries are queued again


async def other_childs_tenant(s: Served) -> Tenant:
    """A second tenant whose endpoint's notifications go to the other child (ids are random: 20 tries
    miss with p = 2**-20)."""
    mine = child_of(s.tenant.endpoint_id, CHILDREN)
    for i in range(20):
        tenant = await provision(s.server.env, s.server.data_dir, slug=f"other{i}", verbs=HOOK_VERBS)
        if child_of(tenant.endpoint_id, CHILDREN) != mine:
            return tenant
    raise AssertionError("no endpoint of 20 went to the other child")


async def deliver(s: Served, tenant: Tenant, n: int) -> list[str]:
    """``n`` deliveries on ``tenant``'s source, two at a time (with both tenants', four at once: the hub's
    queue, also QUEUE, never fills)."""
    gate = asyncio.Semaphore(2)
    created: list[str] = []

    async def post(key: str) -> None:
        body = json.dumps({"title": f"flood {key}", "key": key}).encode()
        headers = {"content-type": "application/json", "idempotency-key": key}
        async with gate:
            r = await s.http.post(tenant.inbound_path, content=body, headers=headers)
        assert r.status_code == 202, (r.status_code, r.text)
        created.extend(r.json()["todos"])

    await asyncio.gather(*(post(f"{tenant.endpoint_slug}-{i:03d}") for i in range(n)))
    return created


async def test_the_queue_bound_is_the_instances_not_each_childs(tmp_path: Path) -> None:
    # one attempt in flight per child: SWITCHBOARD_NOTIFY_WORKERS is the instance's and split like the queue
    async with served(
        tmp_path, notify_queue_size=QUEUE, notify_workers=CHILDREN, notify_processes=CHILDREN
    ) as s:
        started = s.log("notify worker started")
        shares = {e["worker"]: e["queue_size"] for e in started}
        assert shares == {0: QUEUE // CHILDREN, 1: QUEUE // CHILDREN}  # the log names each child's share
        assert {e["worker"]: e["workers"] for e in started} == {0: 1, 1: 1}
        other = await other_childs_tenant(s)
        tenants = [s.tenant, other]
        agents = [await s.agent(), await s.stack.enter_async_context(agent(s.server.mcp_url, other.token))]
        receivers = [await s.receiver(behaviour=HangBeforeHeaders()) for _ in tenants]
        hooks = {
            (await a.ok("create_notify_hook", {"url": r.hook_url(f"/h{i}")}))["hook_id"]
            for i, (a, r) in enumerate(zip(agents, receivers, strict=True))
        }

        depths: list[float] = []
        flooding = True

        async def watch() -> None:
            while flooding:
                depths.append(await s.metric(DEPTH))
                await asyncio.sleep(0.05)  # sampling a gauge over the flood: there is no event to await

        watcher = asyncio.create_task(watch())
        try:
            created = await asyncio.gather(*(deliver(s, t, FLOOD) for t in tenants))
            await s.until("both receivers hold an attempt", lambda: all(r.requests for r in receivers))
            await asyncio.sleep(WATCH_AFTER)  # the passing time is the test: the depth is watched meanwhile
        finally:
            flooding = False
            await watcher

        offered = CHILDREN * FLOOD
        overflow = await s.metric(
            "switchboard_transition_subscriber_errors_total", subscriber="notify_hooks", error="overflow"
        )
        assert overflow == 0, "the hub's queue overflowed: not every transition reached a child"
        # Never more queued than the setting, and the queues did fill (each child to its share, or one
        # less while its worker had taken one out).
        assert max(depths) <= QUEUE, max(depths)
        assert max(depths) >= QUEUE - CHILDREN, max(depths)
        # Every notification is queued (at most QUEUE), attempted (its webhook-id reached a receiver; a
        # retry waits in a timer or is queued again), in a worker's hand before its request arrived (one
        # worker per child), or dropped and counted. A per-child bound would hold up to CHILDREN * QUEUE
        # and drop that much less.
        dropped = await s.metric("switchboard_notify_hook_notifications_total", **DROPPED)
        attempted = len({i for r in receivers for i in r.ids()})
        assert dropped >= offered - QUEUE - attempted - CHILDREN, (dropped, attempted)

        async def logged() -> list[dict[str, Any]] | None:
            lines = s.log("notification dropped")
            total = await s.metric("switchboard_notify_hook_notifications_total", **DROPPED)
            return lines if total and sum(line["drops"] for line in lines) == total else None

        lines = await s.until("the drop lines sum to the dropped counter", logged)
        assert {line["reason"] for line in lines} == {"queue_full"}
        assert {h for line in lines for h in line["hook_ids"]} == hooks
        # No todo changed state: every one still pending for its endpoint.
        for a, mine in zip(agents, created, strict=True):
            states = {t["id"]: t["status"] for t in (await a.ok("list_todos"))["todos"]}
            assert {states.get(t) for t in mine} == {"pending"}
