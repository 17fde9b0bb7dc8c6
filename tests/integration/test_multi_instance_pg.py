"""Two server instances on one real PostgreSQL: claims never collide, sweeps move each row once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from switchboard.queue.sweeper import Sweeper
from switchboard.store.todos import NewTodo
from switchboard.store.transitions import Transition
from tests.support.server import Instance, make_settings, run_instance

pytestmark = pytest.mark.postgres

N = 2000


async def _seed(a: Instance) -> tuple[str, list[str]]:
    accounts = a.services.accounts
    hid = await accounts.create_human("ops@example.com", "correct horse battery")
    ep, _ = await accounts.vend_endpoint(hid, "worker", ["inbox"], ["claim_next"])
    ids: list[str] = []
    for start in range(0, N, 500):
        batch = [
            NewTodo(endpoint_id=ep.id, queue="inbox", title=f"t{i}", payload={"i": i}, verified=True)
            for i in range(start, start + 500)
        ]
        ids.extend((await a.services.todos.create(batch)).created)
    return ep.id, ids


async def _drain(inst: Instance, endpoint_id: str, out: list[str], lease: float) -> None:
    while True:
        row = await inst.services.todos.claim_next(endpoint_id, ["inbox"], lease)
        if row is None:
            return
        out.append(row.id)


async def test_two_instances_claim_2000_without_double_claims(tmp_path: Path, pg_url: str) -> None:
    clock = ManualClock()
    async with (
        run_instance(make_settings(tmp_path / "a", pg_url), clock=clock) as a,
        run_instance(make_settings(tmp_path / "b", pg_url), clock=clock) as b,
    ):
        endpoint_id, ids = await _seed(a)
        claimed_a: list[str] = []
        claimed_b: list[str] = []
        workers = [_drain(a, endpoint_id, claimed_a, 600) for _ in range(8)]
        workers += [_drain(b, endpoint_id, claimed_b, 600) for _ in range(8)]
        await asyncio.gather(*workers)

        everything = claimed_a + claimed_b
        dupes = [tid for tid, n in Counter(everything).items() if n > 1]
        assert dupes == []
        assert sorted(everything) == sorted(ids)
        # Both instances really took part.
        assert claimed_a and claimed_b

        # Every lease expires; both reapers sweep at the same moment.
        seen_a: list[Transition] = []
        seen_b: list[Transition] = []

        async def rec_a(t: Transition) -> None:
            seen_a.append(t)

        async def rec_b(t: Transition) -> None:
            seen_b.append(t)

        a.services.hub.subscribe("rec", rec_a)
        b.services.hub.subscribe("rec", rec_b)
        clock.advance(601)
        sweeps = [a.services.parts.need(Sweeper).sweep_once() for _ in range(3)]
        sweeps += [b.services.parts.need(Sweeper).sweep_once() for _ in range(3)]
        moved = await asyncio.gather(*sweeps)
        assert sum(moved) == N
        await a.services.hub.idle()
        await b.services.hub.idle()
        requeued = [t.todo_id for t in seen_a + seen_b if t.transition == "requeued"]
        assert len(requeued) == N and set(requeued) == set(ids)
        assert all(t.instance_id == a.services.instance_id for t in seen_a)
        assert all(t.instance_id == b.services.instance_id for t in seen_b)
        # And every todo is claimable again, exactly once.
        again: list[str] = []
        await asyncio.gather(*(_drain(x, endpoint_id, again, 600) for x in (a, b, a, b)))
        assert sorted(again) == sorted(ids)
