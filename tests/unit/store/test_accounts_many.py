"""``AccountStore.endpoints_by_id``: a batch's endpoints with one statement (the doorbell's read, issue 18)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from switchboard.core.clock import ManualClock
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database


async def test_several_endpoints_are_read_with_one_statement(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", "correct-horse-battery")
    a, _ = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    b, _ = await accounts.vend_endpoint(human, "agent-b", ["inbox", "reviews"], ["claim"])
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(database.engine.sync_engine, "before_cursor_execute", seen)
    try:
        found = await accounts.endpoints_by_id([b.id, a.id, "ep_missing", a.id])
        none = await accounts.endpoints_by_id([])
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", seen)
    assert found == {a.id: await accounts.endpoint(a.id), b.id: await accounts.endpoint(b.id)}
    assert found[b.id].queues == ("inbox", "reviews")  # an unknown id is simply absent
    assert none == {}
    assert len(statements) == 1, statements  # both endpoints in one statement; nothing for no ids
