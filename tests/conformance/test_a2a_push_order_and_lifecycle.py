"""A2A push: the bounded head-of-line wait per task, and a config's lifecycle after its task ends
(final delivery, then retention, then clean-up), against ``switchboard serve`` from outside.

The server shortens the settings these rules are about (docs/configuration.md, "A2A"):

* ``SWITCHBOARD_A2A_PUSH_ORDER_WAIT_SECONDS`` = 4: a later event waits at most 4 s behind an earlier
  one of its config that is still being retried;
* ``SWITCHBOARD_A2A_PUSH_RETRY_BASE_SECONDS`` = ``..._RETRY_CAP_SECONDS`` = 12: a failed delivery is
  tried again 12 s later, so a stuck event stays stuck well past the 4 s bound;
* ``SWITCHBOARD_A2A_PUSH_RETENTION_HOURS`` = 0.002 (7.2 s): a finished task's configs go 7.2 s after
  its terminal state once nothing is pending (the sweep then runs every 1.8 s, a quarter of it)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conformance.harness import Conf, ServerSpec, receiver, wait_until
from tests.conformance.test_a2a_push import Pair, Push, ip, pair
from tests.support.receivers import HTTPSReceiver, Respond

ORDER_WAIT = 4.0
RETRY = 12.0
RETENTION = 0.002 * 3600  # 7.2 s
SWEEP = RETENTION / 4

SERVER = ServerSpec(
    "a2a-order-lifecycle",
    {
        "a2a_push_allow_cidrs": "127.0.0.1/32",
        "a2a_push_order_wait_seconds": ORDER_WAIT,
        "a2a_push_retry_base_seconds": RETRY,
        "a2a_push_retry_cap_seconds": RETRY,
        "a2a_push_retention_hours": 0.002,
        "a2a_push_host_rate_per_minute": 6000,
        "a2a_push_host_burst": 200,
    },
    humans=("alice",),
)


def seqs(rcv: HTTPSReceiver) -> list[int]:
    return [Push(r).seq for r in rcv.requests]


async def arrival(rcv: HTTPSReceiver, seq: int, *, after: int = 0, timeout: float = 30) -> float:
    """The monotonic time at which a request with ``seq`` (at index >= ``after``) was first seen."""
    await wait_until(lambda: seq in seqs(rcv)[after:], timeout=timeout, what=f"a push of seq {seq}")
    return time.monotonic()


async def config_state(p: Pair, task_id: str, config_id: str) -> tuple[dict[str, Any], list[Any]]:
    got = await p.rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
    listed = await p.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})
    return got, listed["result"].get("configs", [])


async def test_a2a_push_bounded_head_of_line_wait_per_task(conf: Conf) -> None:
    """Task A's seq 2 fails (503) and is due again only 12 s later. Its seq 3 waits behind it for the
    4 s bound, no less, then goes before seq 2's retry; seq 2 still follows at its own retry time.
    Task B, on another config, finishes meanwhile and is not held at all."""
    async with (
        receiver(Respond(503)) as stuck,
        receiver() as other,
        pair(conf) as a,
        pair(conf) as b,
    ):
        task_a = await a.send("stuck earlier event")
        await a.config(task_a.id, ip(stuck))
        task_b = await b.send("another task")
        await b.config(task_b.id, ip(other))

        claimed = await a.worker.ok("claim", {"todo_id": task_a.id})  # seq 2 -> 503, retried 12 s later
        await arrival(stuck, 2)
        stuck.behaviour = Respond(204)  # only seq 2's retry would have found the receiver well again
        acked = time.monotonic()
        lease = claimed["todo"]["lease"]
        await a.worker.ok(
            "ack", {"todo_id": task_a.id, "lease": lease, "result": "done"}
        )  # seq 3, behind seq 2

        started = time.monotonic()
        await b.finish(task_b.id)
        await wait_until(lambda: seqs(other) == [2, 3], timeout=ORDER_WAIT, what="task B's two pushes")
        b_took = time.monotonic() - started
        assert 3 not in seqs(stuck), "task B's events arrived only after task A's bound"

        a3 = await arrival(stuck, 3, timeout=ORDER_WAIT + RETRY)
        assert a3 - acked >= ORDER_WAIT, f"seq 3 overtook after {a3 - acked:.1f} s, inside the bound"
        assert seqs(stuck) == [2, 3], "seq 3 went only after seq 2's retry: the wait was not bounded"
        await arrival(stuck, 2, after=2, timeout=RETRY + 10)  # the earlier one, at its own retry time
        assert seqs(stuck) == [2, 3, 2]
        assert b_took < ORDER_WAIT


async def test_a2a_push_lifecycle_final_delivery_then_retention_then_clean_up(conf: Conf) -> None:
    """The final delivery arrives; the config is still there (Get, List) within the retention; once
    the task has been terminal for the retention, Get answers not found and List is empty."""
    async with receiver() as rcv, pair(conf) as p:
        task = await p.send("lifecycle")
        created = await p.config(task.id, ip(rcv))
        claimed = await p.worker.ok("claim", {"todo_id": task.id})
        before_terminal = time.monotonic()
        await p.worker.ok("ack", {"todo_id": task.id, "lease": claimed["todo"]["lease"], "result": "done"})
        await arrival(rcv, 3)
        assert Push(rcv.requests[-1]).state == "TASK_STATE_COMPLETED"

        got, listed = await config_state(p, task.id, created.id)
        if time.monotonic() - before_terminal < RETENTION:  # (a very slow box may be past it already)
            assert got["result"]["id"] == created.id and len(listed) == 1

        async def cleaned() -> bool:
            got, listed = await config_state(p, task.id, created.id)
            return "error" in got and not listed

        await wait_until(cleaned, timeout=RETENTION + 4 * SWEEP + 10, what="the clean-up")
        assert time.monotonic() - before_terminal >= RETENTION
        got, _ = await config_state(p, task.id, created.id)
        assert got["error"]["code"] == -32001
        assert len(rcv.requests) == 2  # each transition once: nothing was sent again after it


async def test_a2a_push_lifecycle_a_pending_final_delivery_holds_the_clean_up(conf: Conf) -> None:
    """The final delivery is still being retried when the retention runs out: the config stays (with its
    delivery) until the receiver takes it, and only then goes."""
    async with receiver(Respond(503)) as rcv, pair(conf) as p:
        task = await p.send("final delivery first")
        created = await p.config(task.id, ip(rcv))
        before_terminal = time.monotonic()
        await p.finish(task.id)
        await arrival(rcv, 3, timeout=ORDER_WAIT + RETRY + 10)  # tried, answered 503, pending
        # No event shows a sweep that did not delete: wait out the retention and two sweeps (bounded).
        await asyncio.sleep(max(0.0, before_terminal + RETENTION + 2 * SWEEP - time.monotonic()))
        got, listed = await config_state(p, task.id, created.id)
        assert got["result"]["id"] == created.id and len(listed) == 1, "cleaned up before its final delivery"

        rcv.behaviour = Respond(204)
        flipped = len(rcv.requests)
        await arrival(rcv, 3, after=flipped, timeout=RETRY + 10)

        async def cleaned() -> bool:
            got, listed = await config_state(p, task.id, created.id)
            return "error" in got and not listed

        await wait_until(cleaned, timeout=4 * SWEEP + 10, what="the clean-up after the final delivery")
        got, _ = await config_state(p, task.id, created.id)
        assert got["error"]["code"] == -32001
