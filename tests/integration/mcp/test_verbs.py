"""Every verb over real streamable HTTP with the real SDK client, and the todo lifecycle it drives."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard.core.clock import ManualClock, ms
from switchboard.mcp.tools import iso
from switchboard.queue.sweeper import Sweeper
from tests.integration.mcp.helpers import add_todo, call, connect, refuse, sample, vend
from tests.support.server import Instance


def at(clock: ManualClock, seconds: float) -> str | None:
    return iso(ms(clock.now() + seconds))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_claim_heartbeat_ack(inst: Instance, clock: ManualClock, mode: Any) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    todo_id = await add_todo(inst, a, "Review PR #7", queue="reviews")
    async with connect(inst, a.token, mode=mode) as client:
        claimed = (await call(client, "claim_next", lease_seconds=60))["todo"]
        assert claimed["id"] == todo_id and claimed["status"] == "claimed" and claimed["attempt"] == 1
        assert claimed["payload"] == {"title": "Review PR #7"} and claimed["queue"] == "reviews"
        assert claimed["lease_expires_at"] == at(clock, 60) and claimed["created_at"] == at(clock, 0)
        assert (await call(client, "claim_next"))["todo"] is None

        clock.advance(30)
        lease = claimed["lease"]
        assert lease.startswith("ls_") and len(lease) == 35
        beat = (await call(client, "heartbeat", todo_id=todo_id, lease=lease, lease_seconds=120))["todo"]
        assert beat["lease_expires_at"] == at(clock, 120) and beat["lease"] == lease

        done = (
            await call(client, "ack", todo_id=todo_id, lease=lease, result={"merged": True, "n": [1, 2]})
        )["todo"]
        assert done["status"] == "done" and done["result"] == {"merged": True, "n": [1, 2]}
        assert done["lease_expires_at"] is None
    assert sample(inst, "switchboard_mcp_calls_total", verb="claim_next", code="ok") == 2
    assert sample(inst, "switchboard_claims_total", result="empty") == 1


async def test_claim_next_defaults_to_scope_queues_and_filters(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    first = await add_todo(inst, a, "first", queue="inbox")
    second = await add_todo(inst, a, "second", queue="reviews")
    async with connect(inst, a.token) as client:
        assert (await call(client, "claim_next", queues=["reviews"]))["todo"]["id"] == second
        assert (await call(client, "claim_next", queues=["reviews"]))["todo"] is None
        assert (await call(client, "claim_next"))["todo"]["id"] == first


async def test_claim_a_specific_todo(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    older = await add_todo(inst, a, "older")
    newer = await add_todo(inst, a, "newer")
    async with connect(inst, a.token) as client:
        got = (await call(client, "claim", todo_id=newer))["todo"]
        assert got["id"] == newer and got["status"] == "claimed" and got["payload"] == {"title": "newer"}
        assert await refuse(client, "claim", todo_id=newer) == (
            "conflict",
            "the todo is claimed, not pending",
        )
        assert (await call(client, "claim_next"))["todo"]["id"] == older


async def test_fail_retry_backoff_then_dead(inst: Instance, clock: ManualClock) -> None:
    """ADR-0007: failed with retry_at = now + 30 s x 2^(attempt-1); the scheduler requeues; dead after 5."""
    a = await vend(inst, "agent-a")
    todo_id = await add_todo(inst, a, "flaky")
    sweeper = inst.services.parts.need(Sweeper)
    async with connect(inst, a.token) as client:
        for attempt in range(1, 5):
            claimed = (await call(client, "claim_next"))["todo"]
            assert claimed["id"] == todo_id and claimed["attempt"] == attempt
            failed = (
                await call(client, "fail", todo_id=todo_id, lease=claimed["lease"], error=f"boom {attempt}")
            )["todo"]
            delay = 30 * 2 ** (attempt - 1)
            assert failed["status"] == "failed" and failed["last_error"] == f"boom {attempt}"
            assert failed["retry_at"] == at(clock, delay)
            assert (await call(client, "claim_next"))["todo"] is None  # not due yet
            clock.advance(delay - 1)
            await sweeper.sweep_once()
            assert (await call(client, "claim_next"))["todo"] is None  # still not due
            clock.advance(1)
            assert await sweeper.sweep_once() == 1
            listed = (await call(client, "list_todos", status="pending"))["todos"]
            assert [t["id"] for t in listed] == [todo_id] and listed[0]["retry_at"] is None
        last = (await call(client, "claim_next"))["todo"]
        assert last["attempt"] == 5
        dead = (await call(client, "fail", todo_id=todo_id, lease=last["lease"], error="last straw"))["todo"]
        assert dead["status"] == "dead" and dead["retry_at"] is None and dead["last_error"] == "last straw"


async def test_fail_without_retry_is_dead_at_once(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    todo_id = await add_todo(inst, a)
    async with connect(inst, a.token) as client:
        lease = (await call(client, "claim_next"))["todo"]["lease"]
        dead = (await call(client, "fail", todo_id=todo_id, lease=lease, error="not for me", retry=False))[
            "todo"
        ]
        assert dead["status"] == "dead" and dead["attempt"] == 1


async def test_expired_lease_returns_to_pending(inst: Instance, clock: ManualClock) -> None:
    a = await vend(inst, "agent-a")
    todo_id = await add_todo(inst, a)
    async with connect(inst, a.token) as client:
        await call(client, "claim_next", lease_seconds=10)
        clock.advance(11)
        assert await inst.services.parts.need(Sweeper).sweep_once() == 1
        again = (await call(client, "claim_next"))["todo"]
        assert again["id"] == todo_id and again["attempt"] == 2


async def test_list_todos_filters_and_pages_without_payloads(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    ids = [await add_todo(inst, a, f"t{i}", queue="inbox" if i % 2 else "reviews") for i in range(5)]
    async with connect(inst, a.token) as client:
        page = await call(client, "list_todos", limit=2)
        assert [t["id"] for t in page["todos"]] == ids[::-1][:2]
        assert all("payload" not in t for t in page["todos"])
        rest = await call(client, "list_todos", limit=2, before=page["next_before"])
        assert [t["id"] for t in rest["todos"]] == ids[::-1][2:4]
        last = await call(client, "list_todos", limit=2, before=rest["next_before"])
        assert [t["id"] for t in last["todos"]] == [ids[0]] and last["next_before"] is None
        reviews = await call(client, "list_todos", queue="reviews")
        assert {t["id"] for t in reviews["todos"]} == {ids[0], ids[2], ids[4]}
        await call(client, "claim", todo_id=ids[3])
        claimed = await call(client, "list_todos", status="claimed")
        assert [t["id"] for t in claimed["todos"]] == [ids[3]]


async def test_self_test_creates_a_verified_synthetic_todo(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    async with connect(inst, a.token) as client:
        made = (await call(client, "self_test"))["todo"]
        assert made["title"] == "self-test" and made["queue"] == "inbox" and made["status"] == "pending"
        on_reviews = (await call(client, "self_test", queue="reviews"))["todo"]
        assert on_reviews["queue"] == "reviews"
        assert (await call(client, "claim_next", queues=["inbox"]))["todo"]["id"] == made["id"]
    row = await inst.services.todos.get(a.id, made["id"])
    assert row is not None and row.self_test and row.verified


async def test_clock_out_and_in(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    async with connect(inst, a.token) as client:
        assert await call(client, "clock_out") == {"presence": "out", "clocked": "out", "override": None}
        assert (await call(client, "whoami"))["presence"] == "out"
        await inst.services.presence.override(a.id, "in")
        assert await call(client, "clock_out") == {"presence": "in", "clocked": "out", "override": "in"}
        await inst.services.presence.override(a.id, None)
        assert await call(client, "clock_in") == {"presence": "in", "clocked": "in", "override": None}


async def test_whoami_needs_no_grant(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"], verbs=["ack"])
    async with connect(inst, a.token) as client:
        me = await call(client, "whoami")
    assert me == {
        "endpoint": "agent-a",
        "endpoint_id": a.id,
        "via": "endpoint_credential",
        "verbs": ["ack"],
        "endpoint_verbs": ["ack"],
        "queues": ["inbox", "reviews"],
        "presence": "in",
        "clocked": "in",
        "override": None,
        "doorbell_uri": "switchboard://endpoints/agent-a/todos",
        "resources": [
            "switchboard://endpoints/agent-a/todos",
            "switchboard://endpoints/agent-a/queues/inbox",
            "switchboard://endpoints/agent-a/queues/reviews",
        ],
    }


@pytest.mark.parametrize(("mode", "era"), [("auto", "modern"), ("legacy", "legacy")])
async def test_subscribe_doorbell_says_how(inst: Instance, mode: Any, era: str) -> None:
    a = await vend(inst, "agent-a", verbs=[])
    async with connect(inst, a.token, mode=mode) as client:
        info = await call(client, "subscribe_doorbell")
    assert info["uri"] == a.uri and info["era"] == era
