"""The ``a2a_push_outbox`` home: A2A push deliveries waiting, claimed and finished.

Row life: ``pending`` (``due_at`` = when it may next be claimed) -> ``delivered`` or ``failed``.

* **Claim** is one conditional UPDATE whose sub-select takes due rows ``FOR UPDATE SKIP LOCKED`` on
  PostgreSQL (SQLite serialises writers with ``BEGIN IMMEDIATE``), so several instances share the outbox
  and each row is claimed once. A claim pushes ``due_at`` one lease into the future and stamps a
  ``claim_token``: if the instance dies mid-attempt the row simply comes due again (at-least-once).
* **Order, bounded**: a row waits while an earlier-sequence row of the same config (configs belong to
  one task) is still pending, so one receiver sees a task's transitions in sequence order; but it waits
  at most ``order_wait_ms`` from its own creation. A delivery being retried for hours then holds the
  later events of its task back for that long only, and they overtake it (receivers keep the highest
  sequence, docs/a2a.md).
* Every finishing statement is conditional on the claim token: a claim that outlived its lease cannot
  overwrite the row another instance has since claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from switchboard.core.ids import new_id
from switchboard.store.db import Database
from switchboard.store.schema_a2a import a2a_push_outbox

box = a2a_push_outbox


@dataclass(frozen=True, slots=True)
class Claimed:
    id: str
    config_id: str
    task_id: str
    seq: int
    msg_id: str
    body: bytes
    host: str
    attempts: int  # attempts made before this one
    claim_token: str
    last_error: str | None = None  # the reason the previous attempt failed
    created_ms: int = 0  # when the transition's push was enqueued (its commit): delivery latency's start
    reason: str | None = None  # "replay": a resend or recover queued it (a2a/replay.py)
    endpoint_id: str | None = None  # the config's owner, set by the attempt that read the config

    @classmethod
    def from_row(cls, row: Row[Any], token: str) -> Claimed:
        return cls(
            row.id,
            row.config_id,
            row.task_id,
            int(row.seq),
            row.msg_id,
            row.body.encode(),
            row.host,
            int(row.attempts),
            token,
            row.last_error,
            int(row.created_at),
            row.reason,
        )


@dataclass(frozen=True, slots=True)
class Backlog:
    pending: int
    oldest_created_ms: int | None


async def enqueue(
    conn: AsyncConnection,
    *,
    task_id: str,
    seq: int,
    body: bytes,
    targets: Sequence[tuple[str, str, str]],
    now_ms: int,
) -> None:
    """One pending row per (config row id, host, message id) of this transition, in the transition's
    own transaction."""
    text = body.decode()
    await conn.execute(
        insert(box),
        [
            {
                "id": new_id("pd"),
                "config_id": config_row_id,
                "task_id": task_id,
                "seq": seq,
                "msg_id": msg_id,
                "body": text,
                "host": host,
                "status": "pending",
                "attempts": 0,
                "due_at": now_ms,
                "created_at": now_ms,
            }
            for config_row_id, host, msg_id in targets
        ],
    )


async def replay(
    db: Database,
    *,
    config_row_id: str,
    task_id: str,
    seq: int,
    msg_id: str,
    body: str,
    host: str,
    now_ms: int,
) -> bool:
    """Queue one finished push again (issue 29): the config's row of that sequence back to ``pending``
    with a new attempt cycle (or a new row once the finished one was purged), the same ``msg_id``,
    reason ``replay``. False when it is still pending (a replay in flight): nothing changes."""
    fresh = {
        "msg_id": msg_id,
        "body": body,
        "host": host,
        "status": "pending",
        "attempts": 0,
        "due_at": now_ms,
        "claim_token": None,
        "last_status": None,
        "last_error": None,
        "created_at": now_ms,
        "finished_at": None,
        "reason": "replay",
    }
    mine = and_(box.c.config_id == config_row_id, box.c.seq == seq)
    try:
        async with db.begin() as conn:
            done = await conn.execute(update(box).where(mine, box.c.status != "pending").values(**fresh))
            if done.rowcount:
                return True
            if (await conn.execute(select(box.c.id).where(mine))).first() is not None:
                return False
            await conn.execute(
                insert(box).values(
                    id=new_id("pd"), config_id=config_row_id, task_id=task_id, seq=seq, **fresh
                )
            )
    except IntegrityError:  # a concurrent replay of the same push inserted it first
        return False
    return True


def pending_for(config_row_id: Any) -> Any:
    """An EXISTS clause: a delivery of this config (a column or value) is still pending. For the
    configs' retention, which keeps a config until its last delivery finishes."""
    return exists().where(and_(box.c.config_id == config_row_id, box.c.status == "pending"))


class OutboxStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(
        self,
        *,
        now_ms: int,
        lease_ms: int,
        limit: int,
        exclude_hosts: Sequence[str] = (),
        order_wait_ms: int | None = None,
    ) -> list[Claimed]:
        if limit <= 0:
            return []
        due = and_(box.c.status == "pending", box.c.due_at <= now_ms)
        if not await self.db.fetch(select(box.c.id).where(due).limit(1)):
            # Nothing due: no write transaction. Every instance polls every 2 s, and on SQLite an empty
            # claim still took the one write lock for 25-190 ms on a busy loop, while the claim path's
            # writer waited (issue 18). A row that falls due after this read is the next poll's.
            return []
        earlier = aliased(box)
        blocked = exists().where(
            and_(
                earlier.c.config_id == box.c.config_id,
                earlier.c.status == "pending",
                earlier.c.seq < box.c.seq,
            )
        )
        in_order = (
            ~blocked if order_wait_ms is None else or_(~blocked, box.c.created_at <= now_ms - order_wait_ms)
        )
        pick = select(box.c.id).where(due, in_order)
        if exclude_hosts:
            pick = pick.where(box.c.host.not_in(list(exclude_hosts)))
        pick = pick.order_by(box.c.due_at, box.c.id).limit(limit).with_for_update(skip_locked=True)
        token = new_id("cl")
        stmt = (
            update(box)
            .where(box.c.id.in_(pick.scalar_subquery()), due)
            .values(due_at=now_ms + lease_ms, claim_token=token)
            .returning(
                box.c.id,
                box.c.config_id,
                box.c.task_id,
                box.c.seq,
                box.c.msg_id,
                box.c.body,
                box.c.host,
                box.c.attempts,
                box.c.last_error,
                box.c.created_at,
                box.c.reason,
            )
        )
        async with self.db.begin() as conn:
            rows = (await conn.execute(stmt)).all()
        return sorted((Claimed.from_row(r, token) for r in rows), key=lambda c: (c.task_id, c.seq))

    def _mine(self, item: Claimed) -> Any:
        return and_(box.c.id == item.id, box.c.claim_token == item.claim_token, box.c.status == "pending")

    async def delivered(self, item: Claimed, *, status: int, now_ms: int) -> bool:
        return await self._finish(
            item,
            status="delivered",
            attempts=box.c.attempts + 1,
            last_status=status,
            last_error=None,
            finished_at=now_ms,
            claim_token=None,
        )

    async def failed(self, item: Claimed, *, status: int | None, error: str, now_ms: int) -> bool:
        return await self._finish(
            item,
            status="failed",
            attempts=box.c.attempts + 1,
            last_status=status,
            last_error=error,
            finished_at=now_ms,
            claim_token=None,
        )

    async def retry(self, item: Claimed, *, status: int | None, error: str, due_ms: int) -> bool:
        return await self._finish(
            item,
            attempts=box.c.attempts + 1,
            last_status=status,
            last_error=error,
            due_at=due_ms,
            claim_token=None,
        )

    async def release(self, item: Claimed, *, due_ms: int) -> bool:
        """Give a claim back without an attempt (rate limit, shutdown): it is not counted."""
        return await self._finish(item, due_at=due_ms, claim_token=None)

    async def _finish(self, item: Claimed, **values: Any) -> bool:
        async with self.db.begin() as conn:
            result = await conn.execute(update(box).where(self._mine(item)).values(**values))
        return bool(result.rowcount)

    async def backlog(self) -> Backlog:
        stmt = select(func.count(), func.min(box.c.created_at)).where(box.c.status == "pending")
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).one()
        return Backlog(int(row[0]), None if row[1] is None else int(row[1]))

    async def purge_finished(self, before_ms: int) -> int:
        """Delivered and failed rows older than the retention (long-running tasks keep few)."""
        stmt = delete(box).where(box.c.status != "pending", box.c.finished_at <= before_ms)
        async with self.db.begin() as conn:
            return int((await conn.execute(stmt)).rowcount or 0)
