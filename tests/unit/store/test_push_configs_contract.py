"""The ``push_notification_configs`` home's contract, run against SQLite and a real PostgreSQL."""

from __future__ import annotations

from typing import Any

from switchboard.core.clock import ManualClock
from switchboard.store import a2a_tasks, push_configs, push_outbox
from switchboard.store.db import Database
from switchboard.store.push_configs import ConfigView
from switchboard.store.push_outbox import OutboxStore
from switchboard.store.transitions import TransitionHub
from tests.unit.store.a2a_rows import World, task, world


def _columns(host: str, token: bytes | None = None) -> dict[str, Any]:
    return {
        "url_enc": b"sealed-url",
        "url_display": f"https://{host}/hook",
        "host": host,
        "token_enc": token,
        "auth_scheme": None,
        "credentials_enc": None,
    }


async def _add(database: Database, w: World, task_id: str, config_id: str, row_id: str, now: int) -> None:
    async with database.begin() as conn:
        await push_configs.insert_in(
            conn,
            row_id=row_id,
            task_id=task_id,
            config_id=config_id,
            owner_endpoint_id=w.owner,
            now_ms=now,
            columns=_columns(f"{config_id}.test"),
        )


async def test_writes_reads_and_the_owners_scope(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    await _add(database, w, tid, "c1", "pc_1", 10)
    await _add(database, w, tid, "c2", "pc_2", 20)
    async with database.begin() as conn:
        assert await push_configs.count_in(conn, tid) == 2
        stored = await push_configs.stored_in(conn, tid, "c1")
        assert stored == push_configs.Stored("pc_1", "https://c1.test/hook", None, None, None)
        assert await push_configs.stored_in(conn, tid, "nope") is None
        await push_configs.update_in(conn, "pc_1", 30, {"token_enc": b"sealed-token"})  # url kept
        assert await push_configs.view_in(conn, tid, "c1") == ConfigView(
            "c1", tid, "https://c1.test/hook", True, None
        )
        assert await push_configs.targets_in(conn, tid) == [("pc_1", "c1.test"), ("pc_2", "c2.test")]
    assert [v.config_id for v in await push_configs.list_for_task(database, w.owner, tid)] == ["c1", "c2"]
    assert [v.config_id for v in await push_configs.list_for_endpoint(database, w.owner, 10)] == ["c2", "c1"]
    assert [v.config_id for v in await push_configs.list_for_endpoint(database, w.owner, 1)] == ["c2"]
    assert await push_configs.get(database, w.worker, tid, "c1") is None  # not the worker's config
    assert await push_configs.list_for_task(database, w.worker, tid) == []
    assert not await push_configs.delete_owned(database, w.worker, tid, "c1")
    assert await push_configs.delete_owned(database, w.owner, tid, "c1")
    assert not await push_configs.delete_owned(database, w.owner, tid, "c1")  # idempotent
    assert await push_configs.get(database, w.owner, tid, "c1") is None


async def test_a_delivery_reads_it_sealed_with_the_owners_verbs(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    await _add(database, w, tid, "c1", "pc_1", 10)
    row = await push_configs.sealed(database, "pc_1")
    assert row is not None
    assert (row.url_enc, row.token_enc, row.verbs) == (b"sealed-url", None, frozenset({"claim_next"}))
    assert "sealed-url" not in repr(row)
    assert await push_configs.sealed(database, "pc_gone") is None
    owner = await push_configs.owner_of(database, "pc_1")
    assert owner == ("c1", w.owner, "sender")
    assert await push_configs.owner_of(database, "pc_gone") is None


async def test_retention_keeps_a_config_with_a_delivery_pending(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    await _add(database, w, tid, "idle", "pc_1", 10)
    await _add(database, w, tid, "busy", "pc_2", 10)
    async with database.begin() as conn:
        await a2a_tasks.next_seq(conn, tid, terminal=True, now_ms=100)
        await a2a_tasks.record_event(conn, tid, 1, b"{}", 100)
        await push_outbox.enqueue(
            conn, task_id=tid, seq=1, body=b"{}", targets=[("pc_2", "busy.test", "msg_1")], now_ms=100
        )
    assert await push_configs.purge_finished(database, 99) == 0  # the task ended after the cut
    assert await push_configs.purge_finished(database, 100) == 1
    assert [v.config_id for v in await push_configs.list_for_task(database, w.owner, tid)] == ["busy"]
    assert await a2a_tasks.TaskRows(database).events_after(tid, 0) == []  # the stream's log went too
    box = OutboxStore(database)
    (item,) = await box.claim(now_ms=100, lease_ms=10, limit=1)
    assert await box.delivered(item, status=200, now_ms=101)
    assert await push_configs.purge_finished(database, 100) == 1
    assert await push_configs.list_for_task(database, w.owner, tid) == []
