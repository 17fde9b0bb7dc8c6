"""Rows the A2A homes' contract tests stand on: an owner and a worker endpoint, a task's todo and its
``a2a_tasks`` row, and push configs, written the way the product writes them where it can."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import insert

from switchboard.core.clock import ManualClock
from switchboard.core.ids import new_id
from switchboard.store import a2a_tasks
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.schema_a2a import push_notification_configs
from switchboard.store.todos import NewTodo, RetryPolicy, TodoStore
from switchboard.store.transitions import TransitionHub


@dataclass
class World:
    owner: str  # the endpoint that sends (owns the tasks)
    worker: str  # the endpoint the todos are for
    todos: TodoStore


async def world(database: Database, hub: TransitionHub, clock: ManualClock) -> World:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    owner, _ = await accounts.vend_endpoint(hid, "sender", ["inbox"], ["claim_next"])
    worker, _ = await accounts.vend_endpoint(hid, "worker", ["inbox"], ["claim_next"])
    store = TodoStore(database, hub, clock, RetryPolicy(base=30, cap=3600, max_attempts=3))
    return World(owner.id, worker.id, store)


async def task(
    database: Database, w: World, *, message_id: str | None = None, context_id: str = "ctx-1", now_ms: int = 1
) -> str:
    """A todo for the worker with its task row, as the send path writes it (one transaction)."""
    todo = NewTodo(endpoint_id=w.worker, queue="inbox", title="a task", payload={"a2a": {}}, source="a2a")
    (todo_id,) = (await w.todos.create([todo])).created
    async with database.begin() as conn:
        await a2a_tasks.insert_task(
            conn,
            todo_id,
            owner_endpoint_id=w.owner,
            context_id=context_id,
            message_json=json.dumps({"role": "ROLE_USER", "messageId": message_id or f"m-{todo_id}"}),
            message_id=message_id,
            now_ms=now_ms,
        )
    return todo_id


async def config(database: Database, w: World, task_id: str, config_id: str, host: str = "h.test") -> str:
    """A push config row (what ConfigStore writes, with placeholder ciphertext); its row id."""
    row_id = new_id("pc")
    async with database.begin() as conn:
        await conn.execute(
            insert(push_notification_configs).values(
                id=row_id,
                task_id=task_id,
                config_id=config_id,
                owner_endpoint_id=w.owner,
                url_enc=b"x",
                url_display=f"https://{host}/",
                host=host,
                created_at=1,
                updated_at=1,
            )
        )
    return row_id
