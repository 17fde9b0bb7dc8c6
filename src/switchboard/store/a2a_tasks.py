"""The ``a2a_tasks`` home (with ``a2a_task_events``): the task row written with its todo, the
per-task sequence counter, the stream's event log, and the owner-scoped reads.

Every read is scoped by the owner (the endpoint that sent the message), so another endpoint's task id
reads exactly like an unknown one. A task is its ``a2a_tasks`` row joined to its todo (status, result,
times): read and locked in one statement here, a read of ``todos`` outside the todos home
(tests/unit/test_sql_homes.py, ``READ_ALLOW``). The a2a package (``switchboard.a2a.tasks``) keeps what
a task means: which todos are tasks, what a SendMessage writes, and the ``TaskStore`` its faces call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, case, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store import todo_queries
from switchboard.store.db import Database
from switchboard.store.leases import Holding, verdict
from switchboard.store.schema import todos
from switchboard.store.schema_a2a import a2a_task_events, a2a_tasks


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as the store reads it: the todo row joined with its ``a2a_tasks`` row."""

    id: str
    context_id: str
    owner_endpoint_id: str
    endpoint_id: str | None  # the worker the todo is for
    queue: str
    status: str
    message: str  # A2A JSON of the sent message
    result: str | None
    last_error: str | None
    last_seq: int
    created_at: int
    updated_at: int
    followups: str | None = None  # JSON list of later Messages: the sender's follow-ups, the worker's asks
    input_required_at: int | None = None  # the worker asked (MCP ``ask``) and no answer came yet

    @property
    def input_required(self) -> bool:
        return self.status == "claimed" and self.input_required_at is not None

    @property
    def question(self) -> str | None:
        """The worker's open question (the last agent message), as A2A JSON."""
        if not self.input_required or not self.followups:
            return None
        agent = [m for m in json.loads(self.followups) if m.get("role") == "ROLE_AGENT"]
        return json.dumps(agent[-1]) if agent else None

    def history(self) -> list[str]:
        """The task's messages as A2A JSON, oldest first: the sent one, then the follow-ups."""
        later = json.loads(self.followups) if self.followups else []
        return [self.message, *(json.dumps(m) for m in later)]


_COLUMNS = (
    todos.c.id,
    a2a_tasks.c.context_id,
    a2a_tasks.c.owner_endpoint_id,
    todos.c.endpoint_id,
    todos.c.queue,
    todos.c.status,
    a2a_tasks.c.message,
    todos.c.result,
    todos.c.last_error,
    a2a_tasks.c.last_seq,
    todos.c.created_at,
    todos.c.updated_at,
    a2a_tasks.c.followups,
    a2a_tasks.c.input_required_at,
)


def _record(row: Row[Any]) -> TaskRecord:
    return TaskRecord(
        id=row.id,
        context_id=row.context_id,
        owner_endpoint_id=row.owner_endpoint_id,
        endpoint_id=row.endpoint_id,
        queue=row.queue,
        status=row.status,
        message=row.message,
        result=row.result,
        last_error=row.last_error,
        last_seq=int(row.last_seq),
        created_at=int(row.created_at),
        updated_at=int(row.updated_at),
        followups=row.followups,
        input_required_at=None if row.input_required_at is None else int(row.input_required_at),
    )


def _joined() -> Any:
    return select(*_COLUMNS).select_from(a2a_tasks.join(todos, todos.c.id == a2a_tasks.c.todo_id))


# -- in the transition's transaction -----------------------------------------------------------------


async def insert_task(
    conn: AsyncConnection,
    todo_id: str,
    *,
    owner_endpoint_id: str,
    context_id: str,
    message_json: str,
    message_id: str | None,
    now_ms: int,
) -> None:
    """The task row of a todo just created, in the todo's transaction."""
    await conn.execute(
        insert(a2a_tasks).values(
            todo_id=todo_id,
            owner_endpoint_id=owner_endpoint_id,
            context_id=context_id,
            message=message_json,
            message_id=message_id,
            last_seq=0,
            created_at=now_ms,
        )
    )


@dataclass(frozen=True, slots=True)
class Bumped:
    seq: int
    context_id: str


async def next_seq(
    conn: AsyncConnection, todo_id: str, *, terminal: bool, now_ms: int, todo_moved: bool = True
) -> Bumped | None:
    """Allocate the transition's sequence number: the UPDATE locks the task row until commit, so
    concurrent transitions of one task get strictly increasing numbers. ``None``: not an A2A task.

    A todo transition (``todo_moved``: claim, requeue, ack, ...) also ends an open question: the
    worker that asked no longer holds the task, or has finished it."""
    extra: dict[str, Any] = {"input_required_at": None} if todo_moved else {}
    stmt = (
        update(a2a_tasks)
        .where(a2a_tasks.c.todo_id == todo_id)
        .values(
            **extra,
            last_seq=a2a_tasks.c.last_seq + 1,
            terminal_at=case((a2a_tasks.c.terminal_at.is_(None), now_ms), else_=a2a_tasks.c.terminal_at)
            if terminal
            else a2a_tasks.c.terminal_at,
        )
        .returning(a2a_tasks.c.last_seq, a2a_tasks.c.context_id)
    )
    row = (await conn.execute(stmt)).first()
    return None if row is None else Bumped(int(row.last_seq), row.context_id)


async def mark_claim(conn: AsyncConnection, todo_id: str) -> None:
    """On a claim: the follow-ups so far are in the payload the worker receives; heartbeat returns
    only the ones after (:meth:`TaskStore.followups_since_claim`)."""
    row = (await conn.execute(select(a2a_tasks.c.followups).where(a2a_tasks.c.todo_id == todo_id))).first()
    count = len(json.loads(row.followups)) if row is not None and row.followups else 0
    await conn.execute(update(a2a_tasks).where(a2a_tasks.c.todo_id == todo_id).values(claim_followups=count))


async def record_in(conn: AsyncConnection, task_id: str) -> TaskRecord | None:
    """The task as this transaction sees it (no owner check: the caller has already decided)."""
    row = (await conn.execute(_joined().where(a2a_tasks.c.todo_id == task_id))).first()
    return None if row is None else _record(row)


async def record_event(conn: AsyncConnection, task_id: str, seq: int, body: bytes, now_ms: int) -> None:
    """Append the transition's StreamResponse to the task's event log (what SSE streams replay)."""
    await conn.execute(
        insert(a2a_task_events).values(task_id=task_id, seq=seq, body=body.decode(), created_at=now_ms)
    )


async def lock_owned(conn: AsyncConnection, owner_endpoint_id: str, task_id: str) -> bool:
    """Lock the caller's task row (serialises config writes per task); False if it is not theirs."""
    stmt = (
        select(a2a_tasks.c.todo_id)
        .where(a2a_tasks.c.todo_id == task_id, a2a_tasks.c.owner_endpoint_id == owner_endpoint_id)
        .with_for_update()
    )
    return (await conn.execute(stmt)).first() is not None


# -- reads -------------------------------------------------------------------------------------------


def finished_before(before_ms: int) -> Select[tuple[str]]:
    """The ids of tasks that reached a terminal state before ``before_ms``: a sub-select for the
    retention of what hangs off a task (its push configs)."""
    return select(a2a_tasks.c.todo_id).where(
        a2a_tasks.c.terminal_at.is_not(None), a2a_tasks.c.terminal_at <= before_ms
    )


async def purge_events_in(conn: AsyncConnection, before_ms: int) -> None:
    """The event log of tasks finished before ``before_ms``, in the caller's transaction (the push
    configs' retention: the streams' log is kept as long as they are, docs/a2a.md "Streaming")."""
    await conn.execute(
        delete(a2a_task_events).where(a2a_task_events.c.task_id.in_(finished_before(before_ms)))
    )


class TaskRows:
    """The owner-scoped reads and the in-place updates of a task (follow-ups, the worker's ask)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, owner_endpoint_id: str, task_id: str) -> TaskRecord | None:
        stmt = _joined().where(
            a2a_tasks.c.todo_id == task_id, a2a_tasks.c.owner_endpoint_id == owner_endpoint_id
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else _record(row)

    async def by_message_id(self, owner_endpoint_id: str, message_id: str) -> TaskRecord | None:
        """The task an earlier SendMessage with this messageId created (dedup)."""
        stmt = _joined().where(
            a2a_tasks.c.owner_endpoint_id == owner_endpoint_id, a2a_tasks.c.message_id == message_id
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else _record(row)

    async def events_after(self, task_id: str, after_seq: int, limit: int = 100) -> list[tuple[int, str]]:
        """(seq, StreamResponse JSON) of the task's transitions after ``after_seq``, in order."""
        stmt = (
            select(a2a_task_events.c.seq, a2a_task_events.c.body)
            .where(a2a_task_events.c.task_id == task_id, a2a_task_events.c.seq > after_seq)
            .order_by(a2a_task_events.c.seq)
            .limit(limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [(int(r.seq), r.body) for r in rows]

    async def append_followup(
        self,
        owner_endpoint_id: str,
        task_id: str,
        message: dict[str, Any],
        terminal: frozenset[str],
        on_answer: Callable[[AsyncConnection], Awaitable[None]] | None = None,
    ) -> str:
        """Append a follow-up message to the caller's task, in its history and in the todo's payload
        (``payload.a2a.followups``, which the worker reads when it claims). Returns "appended",
        "duplicate" (a resend of a messageId the task already has), "terminal" or "missing".

        When the task was waiting for input (the worker's ``ask``), the follow-up is the answer: the
        question is closed and ``on_answer`` runs in the same transaction (turns.py logs the task's
        return to working)."""
        lock = (
            select(
                a2a_tasks.c.message,
                a2a_tasks.c.followups,
                a2a_tasks.c.input_required_at,
                todos.c.status,
                todos.c.payload,
            )
            .select_from(a2a_tasks.join(todos, todos.c.id == a2a_tasks.c.todo_id))
            .where(a2a_tasks.c.todo_id == task_id, a2a_tasks.c.owner_endpoint_id == owner_endpoint_id)
            .with_for_update()
        )
        async with self.db.begin() as conn:
            row = (await conn.execute(lock)).first()
            if row is None:
                return "missing"
            later: list[dict[str, Any]] = json.loads(row.followups) if row.followups else []
            seen = {json.loads(row.message).get("messageId"), *(m.get("messageId") for m in later)}
            if message.get("messageId") and message["messageId"] in seen:
                return "duplicate"
            if row.status in terminal:
                return "terminal"
            later.append(message)
            await _store_followups(conn, task_id, row.payload, later, input_required_at=None)
            if row.input_required_at is not None and row.status == "claimed" and on_answer is not None:
                await on_answer(conn)
        return "appended"

    async def ask(
        self,
        worker_endpoint_id: str,
        task_id: str,
        lease: str,
        message: dict[str, Any],
        now_ms: int,
        on_asked: Callable[[AsyncConnection], Awaitable[None]],
    ) -> str:
        """The worker holding the task under ``lease`` (its claim's handle) asks its sender for input:
        the message joins the history (and the payload's ``followups``) and the task is input-required
        until the sender answers. ``on_asked`` runs in the same transaction (turns.py). Returns
        "asked", "not_a2a" (the worker's todo, not a task), "missing", or why the caller does not hold
        it (:func:`switchboard.store.leases.verdict`: "lease_lost", "canceled", "done")."""
        lock = (
            select(
                todos.c.status,
                todos.c.lease_id,
                todos.c.lease_expires_at,
                todos.c.payload,
                a2a_tasks.c.todo_id,
                a2a_tasks.c.followups,
                a2a_tasks.c.context_id,
            )
            .select_from(todos.outerjoin(a2a_tasks, todos.c.id == a2a_tasks.c.todo_id))
            .where(todos.c.id == task_id, todos.c.endpoint_id == worker_endpoint_id)
            .with_for_update(of=todos)  # PostgreSQL locks no nullable side of an outer join
        )
        async with self.db.begin() as conn:
            row = (await conn.execute(lock)).first()
            if row is None:
                return "missing"
            # The lease first: a call from an ended claim is lease_lost whatever the todo is.
            why = verdict(Holding(row.status, row.lease_id, row.lease_expires_at), lease, now_ms)
            if why != "held":
                return why
            if row.todo_id is None:
                return "not_a2a"
            later: list[dict[str, Any]] = json.loads(row.followups) if row.followups else []
            later.append({**message, "contextId": row.context_id, "taskId": task_id})
            await _store_followups(conn, task_id, row.payload, later, input_required_at=now_ms)
            await on_asked(conn)
        return "asked"

    async def followups_since_claim(self, worker_endpoint_id: str, todo_id: str) -> list[Any] | None:
        """The sender's messages that arrived after the worker's claim (``None``: not an A2A task)."""
        stmt = (
            select(a2a_tasks.c.followups, a2a_tasks.c.claim_followups)
            .select_from(a2a_tasks.join(todos, todos.c.id == a2a_tasks.c.todo_id))
            .where(a2a_tasks.c.todo_id == todo_id, todos.c.endpoint_id == worker_endpoint_id)
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        later: list[Any] = json.loads(row.followups) if row.followups else []
        return [m for m in later[int(row.claim_followups) :] if m.get("role") != "ROLE_AGENT"]

    async def page(
        self,
        owner_endpoint_id: str,
        *,
        context_id: str | None,
        statuses: Sequence[str] | None,
        updated_after_ms: int | None,
        before: str | None,
        limit: int,
        input_required: bool | None = None,
    ) -> tuple[list[TaskRecord], int]:
        """Newest first, paged by task id; also the total that matches the filters. ``input_required``
        tells a held task that waits for its sender (True) from one being worked (False)."""
        conds = [a2a_tasks.c.owner_endpoint_id == owner_endpoint_id]
        if input_required is not None:
            asking = a2a_tasks.c.input_required_at
            conds.append(asking.is_not(None) if input_required else asking.is_(None))
        if context_id is not None:
            conds.append(a2a_tasks.c.context_id == context_id)
        if statuses is not None:
            conds.append(todos.c.status.in_(statuses))
        if updated_after_ms is not None:
            conds.append(todos.c.updated_at > updated_after_ms)
        page = _joined().where(*conds)
        if before is not None:
            page = page.where(a2a_tasks.c.todo_id < before)
        page = page.order_by(a2a_tasks.c.todo_id.desc()).limit(limit)
        total = (
            select(func.count())
            .select_from(a2a_tasks.join(todos, todos.c.id == a2a_tasks.c.todo_id))
            .where(*conds)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(page)).all()
            count = int((await conn.execute(total)).scalar_one())
        return [_record(r) for r in rows], count


async def _store_followups(
    conn: AsyncConnection,
    task_id: str,
    payload_text: str,
    later: list[dict[str, Any]],
    *,
    input_required_at: int | None,
) -> None:
    """A task's follow-up messages, in its row and in its todo's payload (``a2a.followups``, what the
    worker reads), with the task's input-required mark set (a question) or cleared (an answer)."""
    payload = json.loads(payload_text)
    if isinstance(payload, dict) and isinstance(payload.get("a2a"), dict):
        payload["a2a"]["followups"] = later
    await conn.execute(
        update(a2a_tasks)
        .where(a2a_tasks.c.todo_id == task_id)
        .values(followups=json.dumps(later), input_required_at=input_required_at)
    )
    await todo_queries.set_payload(conn, task_id, json.dumps(payload))
