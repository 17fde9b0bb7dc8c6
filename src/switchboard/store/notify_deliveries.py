"""The delivery log (issue 19): what happened to each notification, for the endpoint card.

Why it is shaped like this:

* One row per *finished* notification (delivered, failed after its last attempt, or dropped), with its
  attempts as a small JSON list. Pending attempts are never written (REQ-7): a record, not a queue.
* Rows carry ids, classified error names, statuses, times and durations only: no body, no secret, no
  URL (so no query string).
* The delivery workers buffer records in memory (:class:`DeliveryBuffer`) and write them with the
  health flush that already exists, one ``INSERT`` per flush, from the worker process: ingest and
  claim never touch this table, so they never wait on it.
* Bounded by count and age (``SWITCHBOARD_DELIVERY_LOG_MAX_ROWS``, ``..._MAX_AGE_HOURS``), pruned in the
  background by the server; the buffer itself is bounded too (a flood of drops cannot grow memory).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select

from switchboard.store.db import Database
from switchboard.store.schema import notify_deliveries

BUFFER_MAX = 5000  # records waiting for a flush; beyond this the oldest are let go (counted in `lost`)
PER_STATEMENT = 500  # rows of one INSERT (SQLite's bound-parameter limit stays far away)
SHOWN = 20  # deliveries an endpoint card shows per hook

_D = notify_deliveries.c
# The columns a record writes (``seq`` is the table's own), and SQLite's INSERTs of them.
_APPENDED = tuple(c.name for c in notify_deliveries.c if c.name != "seq")
#: Rows per INSERT on SQLite. A flush's records go as one statement of the smallest size that holds
#: them (256 at most per statement), its unused rows NULL and filtered out, so each connection prepares
#: at most these few statements and a flush takes the write lock once (per 256 records).
APPEND_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@functools.cache
def _append_sql(rows: int) -> str:
    one = f"({', '.join('?' for _ in _APPENDED)})"
    return (
        f"INSERT INTO {notify_deliveries.name} ({', '.join(_APPENDED)}) "
        f"SELECT * FROM (VALUES {', '.join([one] * rows)}) WHERE column1 IS NOT NULL"  # column1: id
    )


def _appends(rows: list[dict[str, Any]]) -> Iterator[tuple[str, list[Any]]]:
    """The INSERTs of ``rows``, in order: one per ``APPEND_SIZES[-1]`` rows, each one step."""
    width = len(_APPENDED)
    for start in range(0, len(rows), APPEND_SIZES[-1]):
        chunk = rows[start : start + APPEND_SIZES[-1]]
        size = next(n for n in APPEND_SIZES if n >= len(chunk))
        args = [row[name] for row in chunk for name in _APPENDED]
        yield _append_sql(size), args + [None] * (width * (size - len(chunk)))


@dataclass(slots=True)
class Attempt:
    n: int
    at: int  # epoch ms when it ended
    status: int | None
    error: str | None  # the classified reason (timeout, server_error, ...), never response text
    ms: float

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "at": self.at, "status": self.status, "error": self.error, "ms": self.ms}


@dataclass(slots=True)
class DeliveryRecord:
    id: str
    kind: str  # notify | a2a
    target_id: str
    endpoint_id: str | None
    subject_id: str | None
    type: str
    reason: str | None
    outcome: str
    detail: str | None
    finished_at: int
    attempts: list[Attempt] = field(default_factory=list)
    test: bool = False
    event_seq: int | None = None  # an A2A push's task sequence number: what its replay sends again

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target_id": self.target_id,
            "endpoint_id": self.endpoint_id,
            "subject_id": self.subject_id,
            "type": self.type,
            "reason": self.reason,
            "outcome": self.outcome,
            "detail": self.detail,
            "attempts": json.dumps([a.as_json() for a in self.attempts], separators=(",", ":")),
            "test": self.test,
            "finished_at": self.finished_at,
            "event_seq": self.event_seq,
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """One row as the card shows it."""

    id: str
    subject_id: str | None
    type: str
    reason: str | None
    outcome: str
    detail: str | None
    test: bool
    finished_at: int
    attempts: tuple[dict[str, Any], ...]
    target_id: str = ""  # the hook or the push config row
    event_seq: int | None = None  # an A2A push's sequence number (NULL before migration 0018)


class DeliveryLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def write(self, records: Sequence[DeliveryRecord]) -> None:
        """PostgreSQL: one INSERT per ``PER_STATEMENT`` records (one per flush in practice), in one
        transaction.

        On SQLite the rows go as multi-row INSERTs, each its own autocommit transaction
        (``Database.sqlite_autocommit``): the write lock is taken and released inside one SQLite call.
        In one transaction through ``Database.begin`` it was held across three trips between the event
        loop and the driver's thread: in a busy notify worker (a dead receiver's failures are records
        too) milliseconds, tens under load, while the server's ingest waited for the lock in SQLite's
        busy handler (SPEC-0024 REQ-7, scenario 1 of docs/benchmarks.md). The records are independent
        rows; a failure part way leaves the earlier statements' rows, and is logged by the caller."""
        if not records:
            return
        if self.db.is_sqlite:
            await self.db.sqlite_autocommit(list(_appends([r.row() for r in records])))
            return
        async with self.db.begin() as conn:
            for start in range(0, len(records), PER_STATEMENT):
                await conn.execute(
                    insert(notify_deliveries), [r.row() for r in records[start : start + PER_STATEMENT]]
                )

    async def recent(self, endpoint_id: str, target_id: str, limit: int = SHOWN) -> list[Delivery]:
        """The newest deliveries of one hook or config, only if it belongs to ``endpoint_id`` (REQ-10)."""
        return await self._shown(_D.target_id == target_id, _D.endpoint_id == endpoint_id, limit=limit)

    async def recent_pushes(self, endpoint_id: str, limit: int = SHOWN) -> list[Delivery]:
        """The newest A2A push deliveries of the endpoint's tasks (rows logged since migration 0018 name
        the owning endpoint; older ones name none and are not shown)."""
        return await self._shown(_D.kind == "a2a", _D.endpoint_id == endpoint_id, limit=limit)

    async def _shown(self, *where: Any, limit: int) -> list[Delivery]:
        stmt = select(notify_deliveries).where(*where).order_by(_D.seq.desc()).limit(limit)
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            Delivery(
                id=r.id,
                subject_id=r.subject_id,
                type=r.type,
                reason=r.reason,
                outcome=r.outcome,
                detail=r.detail,
                test=bool(r.test),
                finished_at=r.finished_at,
                attempts=tuple(json.loads(r.attempts)),
                target_id=r.target_id,
                event_seq=r.event_seq,
            )
            for r in rows
        ]

    async def prune(self, *, max_rows: int, older_than_ms: int) -> int:
        """Keep at most ``max_rows`` rows, none finished before ``older_than_ms``; returns rows deleted."""
        gone = 0
        async with self.db.begin() as conn:
            gone += (
                await conn.execute(delete(notify_deliveries).where(_D.finished_at < older_than_ms))
            ).rowcount
            # the newest max_rows rows stay; everything below the oldest of them goes
            cut = (
                select(_D.seq).order_by(_D.seq.desc()).offset(max(0, max_rows - 1)).limit(1).scalar_subquery()
            )
            if max_rows <= 0:
                gone += (await conn.execute(delete(notify_deliveries))).rowcount
            else:
                gone += (await conn.execute(delete(notify_deliveries).where(_D.seq < cut))).rowcount
        return gone

    async def count(self) -> int:
        async with self.db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(notify_deliveries))).scalar_one())

    async def logged(self, endpoint_id: str, delivery_id: str) -> dict[str, Any] | None:
        """The newest notify row of ``delivery_id``, only if it belongs to ``endpoint_id`` (REQ-10):
        what a replay is rebuilt from (notify/replay.py)."""
        stmt = (
            select(_D.id, _D.kind, _D.target_id, _D.subject_id, _D.type, _D.reason, _D.outcome, _D.test)
            .where(_D.id == delivery_id, _D.endpoint_id == endpoint_id)
            .order_by(_D.seq.desc())
            .limit(1)
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def logged_push(self, delivery_id: str) -> dict[str, Any] | None:
        """The newest A2A row of ``delivery_id`` (the push's webhook-id), whoever owns it: the caller
        checks the owner through the task (a2a/replay.py), as rows before migration 0018 name none."""
        stmt = (
            select(_D.id, _D.target_id, _D.endpoint_id, _D.subject_id, _D.outcome, _D.event_seq)
            .where(_D.id == delivery_id, _D.kind == "a2a")
            .order_by(_D.seq.desc())
            .limit(1)
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def failed_since(
        self,
        endpoint_id: str | None,
        hook_id: str,
        since_ms: int,
        *,
        types: Sequence[str],
        limit: int,
        kind: str = "notify",
    ) -> list[dict[str, Any]]:
        """The hook's (or push config's) notifications of ``types`` whose newest row since ``since_ms``
        is failed or dropped, oldest first, at most ``limit`` (one a later replay delivered is not sent
        again). ``endpoint_id`` None: the caller already owns the target (an A2A config; rows logged
        before migration 0018 name no endpoint)."""
        where = [_D.target_id == hook_id, _D.kind == kind, _D.finished_at >= since_ms]
        if endpoint_id is not None:
            where.append(_D.endpoint_id == endpoint_id)
        stmt = (
            select(_D.seq, _D.id, _D.subject_id, _D.type, _D.reason, _D.outcome, _D.test, _D.event_seq)
            .where(*where)
            .order_by(_D.seq)
        )
        async with self.db.read() as conn:
            rows = [dict(r._mapping) for r in (await conn.execute(stmt)).all()]
        newest: dict[str, dict[str, Any]] = {}
        first: dict[str, int] = {}
        for r in rows:
            first.setdefault(r["id"], r["seq"])
            newest[r["id"]] = r
        wanted = [
            r
            for r in newest.values()
            if r["outcome"] in ("failed", "dropped") and not r["test"] and r["type"] in types
        ]
        wanted.sort(key=lambda r: first[r["id"]])
        return wanted[:limit]


class DeliveryBuffer:
    """Records waiting for the next flush of their worker; bounded."""

    def __init__(self, log: DeliveryLog | None) -> None:
        self.log = log
        self._records: list[DeliveryRecord] = []
        self.lost = 0

    def add(self, record: DeliveryRecord) -> None:
        if self.log is None:
            return
        self._records.append(record)
        if len(self._records) > BUFFER_MAX:
            del self._records[0]
            self.lost += 1

    def __bool__(self) -> bool:
        return bool(self._records)

    def take(self) -> list[DeliveryRecord]:
        taken, self._records = self._records, []
        return taken
