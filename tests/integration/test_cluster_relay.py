"""The cluster relay (store/relay.py) between two instances on one real PostgreSQL: a ready transition
committed on one reaches the other's opted-in subscribers, a rolled-back one never does, and the
listener comes back after its connection is cut, catching up once through the hub's gap handlers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from switchboard.store.relay import ClusterRelay, send_in_transaction
from switchboard.store.todos import NewTodo
from switchboard.store.transitions import Transition
from tests.support.server import Instance, make_settings, run_instance

pytestmark = pytest.mark.postgres


@asynccontextmanager
async def pair(tmp_path: Path, pg_url: str) -> AsyncIterator[tuple[Instance, Instance]]:
    async with (
        run_instance(make_settings(tmp_path / "one", pg_url)) as one,
        run_instance(make_settings(tmp_path / "two", pg_url)) as two,
    ):
        for inst in (one, two):
            await asyncio.wait_for(inst.services.parts.need(ClusterRelay).connected.wait(), 10)
        yield one, two


def heard(inst: Instance, *, remote: bool) -> asyncio.Queue[Transition]:
    got: asyncio.Queue[Transition] = asyncio.Queue()

    async def probe(t: Transition) -> None:
        got.put_nowait(t)

    inst.services.hub.subscribe(f"probe-{remote}", probe, remote=remote)
    return got


async def endpoint(inst: Instance) -> str:
    hid = await inst.services.accounts.create_human("ops@example.com", "correct horse battery")
    ep, _ = await inst.services.accounts.vend_endpoint(hid, "worker", ["inbox"], ["claim_next"])
    return ep.id


def todo(ep: str, title: str) -> NewTodo:
    return NewTodo(endpoint_id=ep, queue="inbox", title=title, payload={}, verified=True)


async def test_a_committed_ready_transition_reaches_only_opted_in_subscribers_elsewhere(
    tmp_path: Path, pg_url: str
) -> None:
    async with pair(tmp_path, pg_url) as (one, two):
        remote, local = heard(two, remote=True), heard(two, remote=False)
        ep = await endpoint(one)
        (made,) = (await one.services.todos.create([todo(ep, "from one")])).created
        t = await asyncio.wait_for(remote.get(), 5)
        assert (t.todo_id, t.endpoint_id, t.transition, t.title) == (made, ep, "created", "from one")
        assert t.instance_id == one.services.instance_id
        # claimed and acked on one: not carried (no NOTIFY on the claim path)
        row = await one.services.todos.claim_next(ep, ["inbox"], 60)
        assert row is not None and row.id == made
        (control,) = (await one.services.todos.create([todo(ep, "control")])).created
        assert (await asyncio.wait_for(remote.get(), 5)).todo_id == control
        assert local.empty()  # a subscriber that did not opt in hears nothing of one's transitions


async def test_a_rolled_back_transaction_sends_nothing(tmp_path: Path, pg_url: str) -> None:
    async with pair(tmp_path, pg_url) as (one, two):
        remote = heard(two, remote=True)
        ep = await endpoint(one)
        ghost = Transition(
            "td_ghost", ep, "inbox", None, None, "ghost", 0, "created", None, True, False, 0.0, "x"
        )

        async def rolled_back() -> None:
            async with one.services.db.begin() as conn:
                await send_in_transaction(conn, [ghost])
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            await rolled_back()
        (control,) = (await one.services.todos.create([todo(ep, "control")])).created
        assert (await asyncio.wait_for(remote.get(), 5)).todo_id == control


async def test_the_listener_reconnects_after_its_connection_is_cut_and_catches_up_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with pair(tmp_path, pg_url) as (one, two):
        remote = heard(two, remote=True)
        gaps: list[int] = []

        async def on_gap() -> None:
            gaps.append(1)

        two.services.hub.on_remote_gap(on_gap)
        relay = two.services.parts.need(ClusterRelay)
        ep = await endpoint(one)
        async with one.services.db.begin() as conn:  # cut every other connection to the database
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        deadline = asyncio.get_running_loop().time() + 15
        while relay.connects < 2 or not relay.connected.is_set():
            assert asyncio.get_running_loop().time() < deadline, "the relay did not reconnect"
            await asyncio.sleep(0.05)
        assert gaps == [1]
        metrics = two.services.metrics.registry.get_sample_value
        assert metrics("switchboard_cluster_relay_reconnects_total", {}) == 1.0
        assert metrics("switchboard_cluster_relay_connected", {}) == 1.0
        for attempt in range(2):  # one's own pool may hold a cut connection: a write fails once
            try:
                (made,) = (await one.services.todos.create([todo(ep, "after the cut")])).created
                break
            except Exception:
                if attempt:
                    raise
        assert (await asyncio.wait_for(remote.get(), 5)).todo_id == made
