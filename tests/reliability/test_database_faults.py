"""Issue 8, database faults: PostgreSQL goes away under a running server and comes back."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.queue.sweeper import Sweeper
from switchboard.store.schema import todos
from tests.support.pg import PostgresServer
from tests.support.server import make_settings, run_instance
from tests.support.world import make_world

pytestmark = pytest.mark.postgres


async def test_ingest_answers_503_while_the_database_is_down_and_recovers_by_itself(
    tmp_path: Path, pg_server: PostgresServer, pg_url: str
) -> None:
    async with run_instance(make_settings(tmp_path, pg_url), clock=ManualClock()) as inst:
        world = await make_world(inst, trust="token", kind="generic")
        accepted: list[str] = []
        async with inst.client() as http:
            r = await http.post(world.inbound_path, json={"title": "before"})
            accepted += r.json()["todos"]
            pg_server.kill()
            try:
                for i in range(3):
                    down = await http.post(world.inbound_path, json={"title": f"during {i}"})
                    assert down.status_code == 503
                    assert down.json() == {
                        "error": "unavailable",
                        "message": "the database is unavailable; retry later",
                    }
                health = await http.get("/healthz")
                assert health.status_code == 200  # the process itself is fine
            finally:
                pg_server.start()
            for i in range(3):  # the pool reconnects on its own; no restart
                up = await http.post(world.inbound_path, json={"title": f"after {i}"})
                assert up.status_code == 202, up.text
                accepted += up.json()["todos"]
        async with inst.services.db.read() as conn:
            stored = {r.id for r in (await conn.execute(select(todos.c.id))).all()}
            titles = [r.title for r in (await conn.execute(select(todos.c.title))).all()]
        assert stored == set(accepted)  # nothing half-written, nothing from the outage
        assert not any(t.startswith("during") for t in titles)


async def test_sweeps_skip_quietly_while_down_and_resume(
    tmp_path: Path, pg_server: PostgresServer, pg_url: str
) -> None:
    clock = ManualClock()
    async with run_instance(make_settings(tmp_path, pg_url), clock=clock) as inst:
        world = await make_world(inst)
        from switchboard.store.todos import NewTodo

        (tid,) = (
            await inst.services.todos.create(
                [NewTodo(endpoint_id=world.endpoint.id, queue="inbox", title="t", payload={}, verified=True)]
            )
        ).created
        await inst.services.todos.claim_next(world.endpoint.id, ["inbox"], 10)
        clock.advance(11)
        sweeper = inst.services.parts.need(Sweeper)
        pg_server.kill()
        try:
            from switchboard.store.errors import StoreUnavailable

            with pytest.raises(StoreUnavailable):
                await sweeper.sweep_once()
        finally:
            pg_server.start()
        assert await sweeper.sweep_once() == 1
        async with inst.services.db.read() as conn:
            count = (
                await conn.execute(select(func.count()).select_from(todos).where(todos.c.status == "pending"))
            ).scalar_one()
        assert count == 1 and tid
