"""The queue's contract (issue 28), against ``switchboard serve`` as shipped, on SQLite and on two
instances sharing one PostgreSQL: fenced leases (a worker whose claim ended changes nothing and is
told ``lease_lost``), cancellation the holder hears on its next heartbeat, and retry-safe claims (one
request key, one claim).

The one setting changed is ``reaper_interval`` (0.3 s instead of 5 s), so a 1 s lease is requeued
within a test's patience; every wait is on an event (a long-polling claim the requeue wakes), never a
sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest

from switchboard.core.verbs import DEFAULT_GRANT
from tests.conformance.conftest import _checked
from tests.conformance.harness import FLEET, Conf, ServerSpec, Tenant, tenant
from tests.conformance.test_a2a_push import pair
from tests.support.mcp_client import Agent, agent
from tests.support.pg import PostgresServer

QUICK_REAPER = {"reaper_interval": 0.3}
SERVER = ServerSpec("queue-contract", QUICK_REAPER, humans=("alice",))
PG_ONE = ServerSpec("queue-pg-one", QUICK_REAPER, humans=("alice",))
PG_TWO = ServerSpec("queue-pg-two", QUICK_REAPER, humans=())


@pytest.fixture(scope="module")
def cluster(pg_server: PostgresServer) -> Iterator[tuple[Conf, Conf]]:
    url = pg_server.create_database(f"queue_{uuid.uuid4().hex[:10]}")
    first = FLEET.prestart(PG_ONE, url)
    assert first.migrated.wait(timeout=120)  # the schema is current before the second instance starts
    FLEET.prestart(PG_TWO, url)
    one, two = FLEET.get(PG_ONE, url), FLEET.get(PG_TWO, url)
    yield one, two
    for conf, spec in ((one, PG_ONE), (two, PG_TWO)):
        _checked(conf)
        FLEET.release(spec)


@pytest.fixture(params=["sqlite", "postgres"])
def servers(request: pytest.FixtureRequest) -> tuple[Conf, Conf]:
    """(A's server, B's server): one SQLite server twice, or the two PostgreSQL instances."""
    if request.param == "sqlite":
        conf: Conf = request.getfixturevalue("conf")
        return conf, conf
    pair_of: tuple[Conf, Conf] = request.getfixturevalue("cluster")
    return pair_of


@asynccontextmanager
async def two_workers(servers: tuple[Conf, Conf]) -> AsyncIterator[tuple[Tenant, Agent, Agent]]:
    """One endpoint, two MCP clients of it: A on the first server, B on the second."""
    first, second = servers
    async with tenant(first, verbs=DEFAULT_GRANT) as t, agent(second.mcp_url, t.token) as b:
        yield t, t.agent, b


async def error_of(worker: Agent, verb: str, args: dict[str, Any]) -> str | None:
    result = await worker.call(verb, args)
    assert not result.ok, f"{verb} was accepted: {result.data}"
    return result.code


async def seen_by(worker: Agent, todo_id: str) -> dict[str, Any]:
    """The todo as its endpoint lists it (no lease in listings)."""
    listed = (await worker.ok("list_todos", {"limit": 200}))["todos"]
    found: dict[str, Any] = next(t for t in listed if t["id"] == todo_id)
    assert "lease" not in found
    return found


async def test_a_stalled_worker_whose_lease_ended_changes_nothing(servers: tuple[Conf, Conf]) -> None:
    async with two_workers(servers) as (t, a, b):
        todo_id = await t.todo("a slow model call")
        mine = (await a.ok("claim_next", {"lease_seconds": 1}))["todo"]
        assert mine["id"] == todo_id and mine["attempt"] == 1 and mine["lease"].startswith("ls_")
        # A stalls; the reaper requeues the todo when its lease runs out, and that wakes B's claim.
        theirs = (await b.ok("claim_next", {"wait_seconds": 20, "lease_seconds": 120}))["todo"]
        assert theirs["id"] == todo_id and theirs["attempt"] == 2
        assert theirs["lease"] != mine["lease"]
        held = await seen_by(b, todo_id)
        assert held["status"] == "claimed" and held["lease_expires_at"] == theirs["lease_expires_at"]

        stale = {"todo_id": todo_id, "lease": mine["lease"]}
        assert await error_of(a, "heartbeat", {**stale, "lease_seconds": 600}) == "lease_lost"
        assert await error_of(a, "fail", {**stale, "error": "A gave up", "retry": False}) == "lease_lost"
        assert await error_of(a, "ask", {**stale, "question": "which branch?"}) == "lease_lost"
        assert await error_of(a, "ack", {**stale, "result": "A's answer"}) == "lease_lost"
        late = await a.ok("ack_many", {"acks": [{**stale, "result": "A's batch"}]})
        assert late["results"][0]["error"]["code"] == "lease_lost"
        combined = await a.ok("claim_next", {"ack": {**stale, "result": "A's loop"}})
        assert combined["acked"]["error"]["code"] == "lease_lost"
        assert combined["todo"] is None  # nothing else pending: the claim half found nothing

        after = await seen_by(b, todo_id)  # none of it moved B's claim
        assert after["status"] == "claimed" and after["attempt"] == 2
        assert after["lease_expires_at"] == theirs["lease_expires_at"] and "last_error" not in after

        done = await b.ok("ack", {"todo_id": todo_id, "lease": theirs["lease"], "result": "B's answer"})
        assert done["todo"]["status"] == "done"
        assert (await seen_by(a, todo_id))["result"] == "B's answer"
        # B's retried ack (its answer lost) is answered again; A's stays refused.
        again = await b.ok("ack", {"todo_id": todo_id, "lease": theirs["lease"], "result": "B's answer"})
        assert again["todo"]["status"] == "done"
        assert await error_of(a, "ack", {**stale, "result": "A's answer"}) == "lease_lost"
        assert (await seen_by(a, todo_id))["result"] == "B's answer"


async def test_a_wrong_lease_on_a_live_claim_changes_nothing(servers: tuple[Conf, Conf]) -> None:
    async with two_workers(servers) as (t, a, b):
        todo_id = await t.todo()
        claimed = (await a.ok("claim_next", {"lease_seconds": 300}))["todo"]
        forged = {"todo_id": todo_id, "lease": "ls_" + "0" * 32}
        assert await error_of(b, "heartbeat", forged) == "lease_lost"
        assert await error_of(b, "ack", forged) == "lease_lost"
        assert await error_of(b, "fail", {**forged, "error": "no"}) == "lease_lost"
        assert (await seen_by(a, todo_id))["status"] == "claimed"
        beat = await a.ok("heartbeat", {"todo_id": todo_id, "lease": claimed["lease"]})
        assert beat["todo"]["lease"] == claimed["lease"]
        other = await error_of(b, "heartbeat", {"todo_id": "td_" + "0" * 26, "lease": claimed["lease"]})
        assert other == "not_found"


async def test_a_todo_canceled_from_the_console_is_heard_on_the_next_heartbeat(
    servers: tuple[Conf, Conf],
) -> None:
    async with two_workers(servers) as (t, a, b):
        todo_id = await t.todo("cancel me")
        claimed = (await b.ok("claim_next", {"lease_seconds": 300}))["todo"]
        assert claimed["id"] == todo_id
        r = await t.human.post(f"/todos/{todo_id}/cancel", {}, csrf_from=f"/todos/{todo_id}")
        assert r.status_code in (200, 303), r.text
        assert (await seen_by(a, todo_id))["status"] == "canceled"
        hold = {"todo_id": todo_id, "lease": claimed["lease"]}
        assert await error_of(b, "heartbeat", hold) == "canceled"
        assert await error_of(b, "ack", {**hold, "result": "too late"}) == "canceled"
        loop = await b.ok("claim_next", {"ack": hold})
        assert loop["acked"]["error"]["code"] == "canceled"
        assert (await seen_by(a, todo_id))["status"] == "canceled"  # the ack moved nothing


async def test_an_a2a_task_canceled_by_its_sender_is_heard_on_the_next_heartbeat(conf: Conf) -> None:
    async with pair(conf) as p:
        task = await p.send("a long job")
        claimed = (await p.worker.ok("claim", {"todo_id": task.id}))["todo"]
        await p.client.cancel_task(CancelTaskRequest(id=task.id))
        hold = {"todo_id": task.id, "lease": claimed["lease"]}
        assert await error_of(p.worker.agent, "heartbeat", hold) == "canceled"
        assert await error_of(p.worker.agent, "ask", {**hold, "question": "still there?"}) == "canceled"


async def test_a_retried_claim_with_the_same_request_key_takes_no_second_todo(
    servers: tuple[Conf, Conf],
) -> None:
    async with two_workers(servers) as (t, a, b):
        first_id, second_id = await t.todo("first"), await t.todo("second")
        key = uuid.uuid4().hex
        one = (await a.ok("claim_next", {"request_key": key}))["todo"]
        again = (await b.ok("claim_next", {"request_key": key}))["todo"]  # the other instance
        assert one["id"] == again["id"] == first_id
        assert one["lease"] == again["lease"] and again["attempt"] == 1
        assert again["payload"] == one["payload"]
        fresh = (await b.ok("claim_next", {"request_key": uuid.uuid4().hex}))["todo"]
        assert fresh["id"] == second_id
        assert (await a.ok("claim_next", {"request_key": key}))["todo"]["id"] == first_id
        assert (await seen_by(a, first_id))["attempt"] == 1


async def test_concurrent_claims_with_one_request_key_claim_once(servers: tuple[Conf, Conf]) -> None:
    async with two_workers(servers) as (t, a, b):
        ids = [await t.todo(f"todo {n}") for n in range(6)]
        key = uuid.uuid4().hex
        answers = await asyncio.gather(
            *(w.ok("claim_many", {"max_todos": 2, "request_key": key}) for w in (a, b, a, b))
        )
        claimed = [[todo["id"] for todo in answer["todos"]] for answer in answers]
        assert all(c == ids[:2] for c in claimed), claimed
        listed = (await a.ok("list_todos", {"status": "claimed", "limit": 200}))["todos"]
        assert sorted(todo["id"] for todo in listed) == sorted(ids[:2])
