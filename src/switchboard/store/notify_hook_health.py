"""The health half of the ``notify_hooks`` home: the folded write of what deliveries report (REQ-8).

Health updates are single parameterized statements on the hook row alone: ingest and claim never
touch ``notify_hooks``, so nothing on those paths waits on them (REQ-13). The dispatcher folds the
ordered outcomes of one hook's deliveries since its last write (:class:`HealthFold`) and writes them
with one statement per flush for all hooks (:meth:`HookHealth.record_many`), which also disables a
hook at its 10th failure in a row (REQ-8). The fold statement is built once per size and store (kept as
SQL text alone on SQLite) with bound parameters: per flush it is only executed, never rebuilt and
cache-keyed again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    String,
    and_,
    bindparam,
    case,
    cast,
    or_,
    select,
    union_all,
    update,
)

from switchboard.core.clock import Clock
from switchboard.store.db import Database
from switchboard.store.direct_writes import PreparedWrite
from switchboard.store.notify_hook_types import DISABLE_AFTER, HealthFold, HealthOutcome
from switchboard.store.schema import notify_hooks

_H = notify_hooks.c

FOLDS_PER_STATEMENT = 100  # rows of one health statement (SQLite caps a compound SELECT at 500 terms)
#: The row counts a health statement is built for. A flush of n folds uses the smallest that holds them,
#: its unused rows left NULL (a NULL hook id matches no row), so at most this many statements are ever
#: compiled: one per flush size cost more CPU than the rest of the flush.
FOLD_STATEMENT_SIZES = (1, 2, 4, 8, 16, 32, 64, FOLDS_PER_STATEMENT)


_FOLD_COLUMNS = (
    ("hook_id", String()),
    ("lead", Integer()),
    ("run", Integer()),
    ("reset", Boolean()),
    ("peak_trips", Boolean()),
    ("at", BigInteger()),
    ("status", Integer()),
    ("error", String()),
    ("disabled_at", BigInteger()),
)


def _folds_statement(rows: int) -> Any:
    """The health folds of ``rows`` hooks in one ``UPDATE ... FROM`` statement (SQLite 3.33+,
    PostgreSQL); row ``i``'s values are the parameters ``<column>_<i>``. Built once per row count and
    store (:meth:`HookHealth._folds`), so it is compiled once per count too. Rows whose parameters are
    not given are NULL and match no hook.

    Why one statement: a write holds SQLite's lock from ``BEGIN IMMEDIATE`` to ``COMMIT``, and every
    statement in between is a round trip through the event loop. With one transaction per hook, a busy
    dispatcher held the lock for most of each flush, and ingest's inserts waited behind it in SQLite's
    sleeping busy handler. Per row: the streak is ``run`` after a delivered outcome and the stored
    streak plus ``lead`` otherwise, and an enabled hook is disabled when the streak reached 10 at any
    point of its fold."""
    terms = [
        select(
            *(
                cast(bindparam(f"{name}_{i}", required=False), kind).label(name)
                for name, kind in _FOLD_COLUMNS
            )
        )
        for i in range(rows)
    ]
    f = (terms[0] if len(terms) == 1 else union_all(*terms)).cte("folds")
    added = _H.consecutive_failures + f.c.lead
    trips = and_(_H.enabled.is_(True), or_(f.c.peak_trips, added >= DISABLE_AFTER))
    return (
        update(notify_hooks)
        .where(_H.id == f.c.hook_id)
        .values(
            last_attempt_at=f.c.at,
            last_status=f.c.status,
            last_error=f.c.error,
            consecutive_failures=case((f.c.reset, f.c.run), else_=added),
            disabled_reason=case((trips, "consecutive_failures"), else_=_H.disabled_reason),
            disabled_at=case((trips, f.c.disabled_at), else_=_H.disabled_at),
            enabled=case((trips, False), else_=_H.enabled),
        )
        .returning(_H.id, _H.consecutive_failures, _H.enabled, _H.disabled_reason, _H.disabled_at)
    )


class HookHealth:
    """The hook row's health writes (REQ-8): what deliveries report, apart from the reads and the
    endpoint's own changes (:class:`switchboard.store.notify_hooks.HookRows`, and the notify package's
    ``HookStore`` on top of it)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock
        self._fold_writes: dict[int, PreparedWrite] = {}

    def _folds(self, rows: int) -> PreparedWrite:
        """The ``rows``-row health statement, prepared once: on SQLite only its text is kept, not the
        statement (the eight sizes' trees held about 4.5 MiB per notify worker process)."""
        found = self._fold_writes.get(rows)
        if found is None:
            found = self._fold_writes[rows] = self.db.prepare_write(_folds_statement(rows))
        return found

    async def prepare(self) -> None:
        """Compile every health statement now, one at a time, instead of when a flush first needs its
        size: compiling them all takes about half a second of CPU (the 100-row one 170 ms), and under
        load each first use stalled the worker's event loop, every attempt in flight with it. Each is
        executed with no rows (a NULL hook id matches none): nothing is written."""
        for size in FOLD_STATEMENT_SIZES:
            await self.db.write_returning(self._folds(size), {})
            await asyncio.sleep(0)  # the loop's other work runs between two compiles

    async def record_many(
        self, folds: Sequence[tuple[str, HealthFold, int]]
    ) -> dict[str, HealthOutcome | None]:
        """Apply each hook's ``fold`` to its row, with one statement per 100 hooks:
        streak, last status, error and attempt time, and at the 10th failure in a row on an enabled hook,
        the disable (REQ-8). ``None`` for a hook that no longer exists.

        Each entry's stamp is what a disable writes, and how this call knows it was the one that
        disabled: the caller passes a value no earlier disable of this hook that it has seen carries
        (the dispatcher keeps them), so ``disabled_now`` is true once per disable even when the clock
        stands still."""
        if any(fold.outcomes == 0 for _, fold, _ in folds):
            raise ValueError("an empty fold writes nothing")
        if len({hook_id for hook_id, _, _ in folds}) != len(folds):
            raise ValueError("one fold per hook")
        rows = [
            {
                "hook_id": hook_id,
                "lead": fold.lead,
                "run": fold.run,
                "reset": fold.reset,
                "peak_trips": fold.peak >= DISABLE_AFTER,
                "at": fold.at,
                "status": fold.status,
                "error": fold.error,
                "disabled_at": stamp,
            }
            for hook_id, fold, stamp in folds
        ]
        # hook id -> (streak, enabled, disabled_reason, disabled_at) as stored after the write
        stored: dict[str, tuple[Any, ...]] = {}
        for start in range(0, len(rows), FOLDS_PER_STATEMENT):
            # each statement its own short transaction: the rows are independent (Database.write_returning)
            chunk = rows[start : start + FOLDS_PER_STATEMENT]
            params = {f"{name}_{i}": row[name] for i, row in enumerate(chunk) for name, _ in _FOLD_COLUMNS}
            size = next(n for n in FOLD_STATEMENT_SIZES if n >= len(chunk))
            for hook_id, *state in await self.db.write_returning(self._folds(size), params):
                stored[hook_id] = tuple(state)
        out: dict[str, HealthOutcome | None] = {}
        for hook_id, fold, stamp in folds:
            found = stored.get(hook_id)
            if found is None:
                out[hook_id] = None
                continue
            streak, enabled, reason, disabled_at = int(found[0]), bool(found[1]), found[2], found[3]
            disabled_now = (
                fold.failures > 0
                and not enabled
                and reason == "consecutive_failures"
                and disabled_at == stamp
                # without a success in the fold, the streak before it is known: it must have been below 10
                and (fold.reset or streak - fold.lead < DISABLE_AFTER)
            )
            out[hook_id] = HealthOutcome(streak, disabled_now, disabled_at)
        return out
