"""Retention against the server as shipped (issue 28): ``switchboard serve`` as a child process with a
retention of a few seconds and a short sweep interval, on SQLite and PostgreSQL. A done and a dead todo
(each an A2A task) are gone with their history within two sweeps of passing retention, their tasks
answer not-found (GetTask) and leave ListTasks; pending, claimed and failed todos older than retention
are never touched, however many sweeps pass."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from a2a.client import Client
from a2a.types.a2a_pb2 import GetTaskRequest, ListTasksRequest
from a2a.utils.errors import TaskNotFoundError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard.store.schema import todos
from switchboard.store.schema_a2a import a2a_tasks
from switchboard.store.schema_console import todo_events
from tests.integration.a2a.conftest import message
from tests.integration.a2a.test_served import _first, _request, metric, served, until
from tests.support.mcp_client import Agent

RETENTION_SECONDS = 3.0
INTERVAL = 0.5
SLACK = 10.0  # a loaded 2-core box: the bound on the wait, never the expected time

ENGINES = ["sqlite", pytest.param("postgresql", marks=[pytest.mark.postgres])]


async def rows(db_url: str) -> dict[str, tuple[str, int, bool]]:
    """todo id -> (status, timeline rows, has an a2a_tasks row), as the database holds them."""
    engine = create_async_engine(db_url)
    try:
        async with engine.connect() as conn:
            events: dict[str, int] = dict(
                (
                    await conn.execute(
                        select(todo_events.c.todo_id, func.count()).group_by(todo_events.c.todo_id)
                    )
                ).all()
            )
            tasks = set((await conn.execute(select(a2a_tasks.c.todo_id))).scalars().all())
            found = (await conn.execute(select(todos.c.id, todos.c.status))).all()
    finally:
        await engine.dispose()
    return {tid: (status, int(events.get(tid, 0)), tid in tasks) for tid, status in found}


async def task(client: Client, text: str) -> str:
    return str((await _first(client.send_message(_request(message(text), immediately=True)))).id)


async def claim(worker: Agent, expected: str, **args: Any) -> str:
    """Claims the expected todo; answers the claim's lease."""
    todo = (await worker.ok("claim_next", args))["todo"]
    assert todo is not None and todo["id"] == expected, todo
    return str(todo["lease"])


@pytest.mark.parametrize("engine", ENGINES)
async def test_terminal_todos_are_pruned_live_ones_never(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "sb"
    db_url = (
        request.getfixturevalue("pg_url")
        if engine == "postgresql"
        else f"sqlite+aiosqlite:///{(data / 'switchboard.db').resolve()}"
    )
    async with served(
        tmp_path,
        database_url=db_url if engine == "postgresql" else None,
        retention_hours=RETENTION_SECONDS / 3600,
        retention_interval_seconds=INTERVAL,
        retry_base_seconds=3600,  # a failed todo stays failed for the whole test
    ) as sb:
        client, worker = await sb.client(), await sb.worker()
        done = await task(client, "done")
        lease = await claim(worker, done)
        await worker.ok("ack", {"todo_id": done, "lease": lease, "result": "ok"})
        dead = await task(client, "dead")
        lease = await claim(worker, dead)
        await worker.ok("fail", {"todo_id": dead, "lease": lease, "error": "no", "retry": False})
        failed = await task(client, "failed")
        lease = await claim(worker, failed)
        await worker.ok("fail", {"todo_id": failed, "lease": lease, "error": "later", "retry": True})
        claimed = await task(client, "claimed")
        await claim(worker, claimed, lease_seconds=3600)
        pending = await task(client, "pending")
        loop = asyncio.get_running_loop()
        finished_at = loop.time()

        before = await rows(db_url)
        assert {t: before[t][0] for t in (done, dead, failed, claimed, pending)} == {
            done: "done",
            dead: "dead",
            failed: "failed",
            claimed: "claimed",
            pending: "pending",
        }
        assert all(before[t][1] >= 2 and before[t][2] for t in (done, dead))

        async def pruned() -> bool:
            now = await rows(db_url)
            return done not in now and dead not in now

        # Retention passes, then at most two sweeps (each interval jittered up to 1.2x).
        await until(pruned, RETENTION_SECONDS + 2 * 1.2 * INTERVAL + SLACK, "the terminal todos pruned")
        took = loop.time() - finished_at
        after = await rows(db_url)
        assert done not in after and dead not in after

        for gone in (done, dead):
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=gone))
        listed = {t.id for t in (await client.list_tasks(ListTasksRequest())).tasks}
        assert listed == {failed, claimed, pending}, listed

        # Two more sweeps pass: the live todos, all older than retention, are exactly as they were.
        sweeps = await metric(sb.server, "switchboard_retention_sweeps_total")

        async def two_more() -> bool:
            return await metric(sb.server, "switchboard_retention_sweeps_total") >= sweeps + 2

        await until(two_more, 2 * 1.2 * INTERVAL + SLACK, "two more sweeps")
        final = await rows(db_url)
        for live in (failed, claimed, pending):
            assert final[live] == before[live], (live, final[live], before[live])
        assert await metric(sb.server, "switchboard_retention_pruned_total", table="todos") == 2
        assert await metric(sb.server, "switchboard_retention_pruned_total", table="a2a_tasks") == 2
        assert await metric(sb.server, "switchboard_retention_pruned_total", table="todo_events") == (
            before[done][1] + before[dead][1]
        )
        oldest = await metric(sb.server, "switchboard_retention_oldest_terminal_seconds")
        assert oldest == 0  # no terminal todo is left
        log = sb.server.log_path.read_text()
        assert "retention sweep" in log, log[-2000:]  # one structured line per sweep that deleted
        print(f"\n[{engine}] pruned {took:.1f} s after the todos finished (retention {RETENTION_SECONDS} s)")
