"""Design decision 3: the outbox is durable. A restart loses no delivery, and several instances on one
PostgreSQL share the outbox without sending anything twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import trustme
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState

from switchboard.a2a.worker import Policy
from switchboard.core.clock import ManualClock
from tests.integration.a2a.conftest import Env, a2a_env, decode, message, push_config, send
from tests.support.receivers import HangBeforeHeaders, HTTPSReceiver, Respond, StaticResolver


def fast_stop(_: object) -> Policy:
    """Shutdown waits this long for attempts in flight before handing their rows back."""
    return Policy(drain_timeout=0.2)


async def test_a_restart_with_deliveries_pending_loses_nothing(tmp_path: Path) -> None:
    ca = trustme.CA()
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    async with HTTPSReceiver(ca=ca, cert_hostnames=("hooks.test",), behaviour=Respond(503)) as receiver:
        first_env: Env
        async with a2a_env(tmp_path, ca=ca, resolver=resolver, policy=fast_stop) as env:
            first_env = env
            _, token = await env.endpoint("client")
            worker = await env.worker()
            client = await env.client(token)
            url = receiver.url("/hook", hostname="hooks.test")
            task = await send(client, message(), push=push_config(url))
            await env.settle()  # seq 1 failed once (503) and waits for its retry
            lease = (await worker.ok("claim_next"))["todo"]["lease"]
            await worker.ok("ack", {"todo_id": task.id, "lease": lease, "result": "ok"})
            await env.settle()  # seqs 2 and 3 queue behind seq 1
            receiver.behaviour = HangBeforeHeaders()
            env.clock.advance(30)
            env.a2a.worker.wake()
            await receiver.next_request()  # seq 1's second attempt is on the wire as the server stops
            human_id = env.human_id
        assert [decode(r).seq for r in receiver.requests] == [1, 1]

        receiver.behaviour = Respond(204)
        clock = ManualClock(first_env.clock.now())
        async with a2a_env(tmp_path, ca=ca, resolver=resolver, clock=clock, human_id=human_id) as env:
            await env.settle()  # the attempt cut off by the stop was handed back: due at once
            await env.advance(3600)
            client = await env.client(token)
            assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == (
                TaskState.TASK_STATE_COMPLETED
            )
            assert await env.outbox_statuses() == [(1, "delivered"), (2, "delivered"), (3, "delivered")]

    seqs = [decode(r).seq for r in receiver.requests]
    assert seqs == [1, 1, 1, 2, 3]  # at least once, in order; the receiver drops the repeated 1s
    first_seen: dict[int, str] = {}
    for request in receiver.requests:
        push = decode(request)
        first_seen.setdefault(push.seq, push.state)
    assert first_seen == {1: "TASK_STATE_SUBMITTED", 2: "TASK_STATE_WORKING", 3: "TASK_STATE_COMPLETED"}


async def test_two_instances_on_postgresql_drain_one_outbox_once(tmp_path: Path, pg_url: str) -> None:
    ca = trustme.CA()
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    clock = ManualClock()
    # The per-address burst holds all 36 pushes: the clock stands still here, so a push one instance
    # deferred past its burst (20 by default) would wait for ever. When one instance did more than 20 of
    # the 36 (the suite's load decides the split), one task's last two pushes never went.
    limits = {"a2a_push_workers": 2, "a2a_push_host_burst": 64}
    async with (
        HTTPSReceiver(ca=ca, cert_hostnames=("hooks.test",)) as receiver,
        a2a_env(tmp_path / "a", database_url=pg_url, ca=ca, resolver=resolver, clock=clock, **limits) as one,
        a2a_env(
            tmp_path / "b",
            database_url=pg_url,
            ca=ca,
            resolver=resolver,
            clock=clock,
            human_id=one.human_id,
            **limits,
        ) as two,
    ):
        _, token = await one.endpoint("client")
        worker = await one.worker()
        clients = [await one.client(token), await two.client(token)]
        url = receiver.url("/hook", hostname="hooks.test")
        tasks = [await send(clients[n % 2], message(f"job {n}"), push=push_config(url)) for n in range(12)]
        for _ in tasks:
            claimed = (await worker.ok("claim_next"))["todo"]
            await worker.ok(
                "ack", {"todo_id": claimed["id"], "lease": claimed["lease"], "result": claimed["id"]}
            )
        expected = {(t.id, seq) for t in tasks for seq in (1, 2, 3)}

        def sent() -> list[tuple[str, int]]:
            return [(decode(r).task_id, decode(r).seq) for r in receiver.requests]

        # Both instances poll the one outbox at the same time. A task's pushes go out in order, one at a
        # time, so a row held by the other instance's attempt is next round's: a bounded number of rounds
        # (three sufficed on an idle machine, not under the parallel suite's load).
        for _ in range(20):
            await asyncio.gather(one.settle(), two.settle())
            if set(sent()) == expected:
                break
        deferred = [env.metric("switchboard_a2a_push_deferred_total") for env in (one, two)]
        assert set(sent()) == expected, f"deferred by the rate limit: {deferred}"
        sent_pairs = sent()
        assert [pair for pair, n in Counter(sent_pairs).items() if n > 1] == []  # none sent twice
        for t in tasks:
            assert [seq for task_id, seq in sent_pairs if task_id == t.id] == [1, 2, 3]
        delivered = [
            env.metric("switchboard_a2a_push_deliveries_total", outcome="delivered") for env in (one, two)
        ]
        assert sum(delivered) == len(expected)
        assert all(n > 0 for n in delivered), delivered  # both instances did part of the work
