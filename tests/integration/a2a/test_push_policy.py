"""Delivery policy (docs/a2a.md, "Delivery"): a merely slow receiver is not delivered once per attempt;
the wait behind an earlier delivery is bounded; a certificate that does not verify is retried to the
cap; an instance with push disabled still queues the deliveries of tasks it moves."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import h11
import trustme

from switchboard.a2a.worker import Policy
from switchboard.core.clock import ManualClock
from tests.integration.a2a.conftest import WORKER_VERBS as WORKER
from tests.integration.a2a.conftest import a2a_env, decode, message, push_config, send
from tests.support.mcp_client import agent
from tests.support.receivers import HTTPSReceiver, Respond, StaticResolver


@dataclass
class SlowReceiver(HTTPSReceiver):
    """Records each request, then answers 204 after ``delay`` seconds: a receiver that is slow, not
    down (the sleep is the behaviour under test, not a wait for an event)."""

    delay: float = 1.0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(conn, reader)
            if request is None:
                return
            self.requests.append(request)
            self._queue.put_nowait(request)
            await asyncio.sleep(self.delay)
            writer.write(conn.send(h11.Response(status_code=204, headers=[("content-length", "0")])))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()


async def test_a_slow_receiver_is_delivered_twice_at_most_not_once_per_attempt(tmp_path: Path) -> None:
    ca = trustme.CA()
    policy = Policy(timeout=0.4, slow_timeout=5.0, max_attempts=5)
    async with (
        a2a_env(tmp_path, ca=ca, policy=lambda _: policy) as env,
        SlowReceiver(ca=ca, cert_hostnames=("hooks.test",), delay=1.0) as slow,
    ):
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        task = await send(client, message(), push=push_config(slow.url("/s", hostname="hooks.test")))
        await env.settle()
        assert len(slow.requests) == 1  # sent whole, then timed out awaiting the answer
        assert env.metric("switchboard_a2a_push_attempts_total", result="timeout") == 1
        await env.advance(30)  # the retry waits for the slow timeout, and is answered
        assert [decode(r).seq for r in slow.requests] == [1, 1]
        assert await env.outbox_statuses() == [(1, "delivered")]

        # The config is now known to answer slowly: later events go once each.
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await worker.ok("ack", {"todo_id": task.id, "lease": lease})
        await env.settle()
        assert Counter(decode(r).seq for r in slow.requests) == {1: 2, 2: 1, 3: 1}
        assert {status for _, status in await env.outbox_statuses()} == {"delivered"}


async def test_a_later_event_waits_for_an_earlier_one_only_so_long(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_push_order_wait_seconds=60) as env:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        env.receiver.behaviour = Respond(503)
        await send(client, message(), push=push_config(env.url()))
        await worker.ok("claim_next")
        await env.settle()
        await env.advance(30)  # seq 1 retried (503 again: next at +60), seq 2 still waits behind it
        assert [p.seq for p in env.pushes()] == [1, 1]
        env.receiver.behaviour = Respond(204)
        await env.advance(31)  # seq 2 has waited 61 s > 60: it goes, ahead of the retry of seq 1
        assert [p.seq for p in env.pushes()] == [1, 1, 2]
        assert await env.outbox_statuses() == [(1, "pending"), (2, "delivered")]
        await env.advance(30)  # and seq 1 is still delivered, at its own retry time
        assert await env.outbox_statuses() == [(1, "delivered"), (2, "delivered")]


async def test_a_certificate_that_does_not_verify_is_retried_up_to_the_cap(tmp_path: Path) -> None:
    ca = trustme.CA()
    async with (
        a2a_env(tmp_path, ca=ca, a2a_push_max_attempts=3) as env,
        HTTPSReceiver(ca=ca, cert_hostnames=("someone-else.test",)) as wrong,
    ):
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        await send(client, message(), push=push_config(wrong.url("/h", hostname="hooks.test")))
        await env.settle()
        await env.advance(30)
        await env.advance(60)
        await env.advance(3600)
        assert wrong.connections == 3 and wrong.requests == []  # three handshakes, no request sent
        assert env.metric("switchboard_a2a_push_attempts_total", result="tls") == 3
        assert env.metric("switchboard_a2a_push_deliveries_total", outcome="exhausted") == 1
        assert await env.outbox_statuses() == [(1, "failed")]


async def test_an_instance_with_push_disabled_still_queues_deliveries(tmp_path: Path, pg_url: str) -> None:
    """A mixed cluster on PostgreSQL: the config is made on the delivering instance; the agent claims and
    acks through the one with push disabled; every transition is still delivered."""
    ca = trustme.CA()
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    clock = ManualClock()
    async with (
        HTTPSReceiver(ca=ca, cert_hostnames=("hooks.test",)) as receiver,
        a2a_env(tmp_path / "on", database_url=pg_url, ca=ca, resolver=resolver, clock=clock) as on,
        a2a_env(
            tmp_path / "off",
            database_url=pg_url,
            ca=ca,
            resolver=resolver,
            clock=clock,
            human_id=on.human_id,
            a2a_push_enabled=False,
        ) as off,
    ):
        _, token = await on.endpoint("client")
        _, worker_token = await on.endpoint("worker", queues=("inbox",), verbs=WORKER)
        client = await on.client(token)
        task = await send(client, message(), push=push_config(receiver.url("/h", hostname="hooks.test")))
        await on.settle()
        off.agents["worker"] = worker = await off.stack.enter_async_context(
            agent(off.inst.mcp_url, worker_token)
        )
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await worker.ok("ack", {"todo_id": task.id, "lease": lease, "result": "ok"})
        await off.services.hub.idle()
        await on.settle()  # the outbox rows the other instance wrote, sent from here
        states = [decode(r).state for r in receiver.requests]
        assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
