"""notify_hooks SQL, in one place.

* The ceiling is enforced in the transaction that inserts: the endpoint row is locked first
  (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises writers), then counted.
* Health updates are single parameterized statements on the hook row alone: ingest and claim never
  touch ``notify_hooks``, so nothing on those paths waits on them (REQ-13). The dispatcher folds the
  ordered outcomes of one hook's deliveries since its last write (:class:`HealthFold`) and writes them
  with one statement per flush for all hooks (:meth:`HookStore.record_many`), which also disables a
  hook at its 10th failure in a row (REQ-8).
* The dispatch path's statements (matching, ``sendable``, the health fold) are built once (at import;
  the health fold's once per size and store, kept as SQL text alone on SQLite) with bound parameters:
  per call they are only executed, never rebuilt and cache-keyed again.

The values it reads and writes (:class:`Hook`, :class:`HealthFold`, ...) live in
:mod:`switchboard.notify.hook_model` and are importable from here too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from types import SimpleNamespace
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
    delete,
    false,
    func,
    insert,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import looks_like, new_id
from switchboard.cred import Envelope
from switchboard.notify.errors import CeilingExceeded, HookNotFound
from switchboard.notify.hook_model import (
    AUTOMATIC_DISABLES,
    DISABLE_AFTER,
    HUMAN_DISABLE,
    NOTIFICATION_IDS_LOGGED,
    EndpointHooks,
    HealthFold,
    HealthOutcome,
    Hook,
    MatchedHook,
    SendableHook,
)
from switchboard.notify.store_sqlite import MATCH_SQL, SENDABLE_SQL, MatchRow, SendableRow, ids_param
from switchboard.push import mint_secret, redact_url
from switchboard.store.accounts import Endpoint, lock_endpoint
from switchboard.store.db import Database
from switchboard.store.direct_writes import PreparedWrite
from switchboard.store.schema import endpoints, notify_hooks

__all__ = [
    "AUTOMATIC_DISABLES",
    "DISABLE_AFTER",
    "FOLDS_PER_STATEMENT",
    "FOLD_STATEMENT_SIZES",
    "HUMAN_DISABLE",
    "NOTIFICATION_IDS_LOGGED",
    "EndpointHooks",
    "HealthFold",
    "HealthOutcome",
    "Hook",
    "HookHealth",
    "HookStore",
    "MatchedHook",
    "SendableHook",
]


def _aad(hook_id: str, field: str) -> str:
    return f"notify_hooks:{hook_id}:{field}"


_H = notify_hooks.c

# Matching: the endpoints of a batch of transitions with their enabled hooks, one statement. The
# secrets are not read here (``sendable`` reads them right before an attempt).
_MATCH = (
    select(
        *(c for c in notify_hooks.c if c.name not in ("secret_enc", "prev_secret_enc")),
        *(c.label(f"ep_{c.name}") for c in endpoints.c),
    )
    .join_from(notify_hooks, endpoints, endpoints.c.id == _H.endpoint_id)
    .where(_H.endpoint_id.in_(bindparam("p_endpoint_ids", expanding=True)), _H.enabled.is_(True))
    .order_by(_H.endpoint_id, _H.id)
)

_SENDABLE_MANY = select(
    _H.id,
    _H.url_enc,
    _H.secret_enc,
    _H.prev_secret_enc,
    _H.prev_secret_expires_at,
    _H.consecutive_failures,
    _H.rate_per_minute,
).where(_H.id.in_(bindparam("p_hook_ids", expanding=True)), _H.enabled.is_(True))


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
    endpoint's own changes (:class:`HookStore`)."""

    def __init__(self, db: Database, envelope: Envelope, clock: Clock, *, grace_seconds: float) -> None:
        self.db, self.envelope, self.clock = db, envelope, clock
        self.grace_seconds = grace_seconds
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


class HookStore(HookHealth):
    """Everything else on ``notify_hooks``: the endpoint's create, rotate and delete, the owner's
    disable, and the dispatcher's reads (matching, ``sendable``)."""

    async def create(
        self,
        endpoint_id: str,
        url: str,
        queues: Sequence[str],
        ignore_presence: bool,
        ceiling: int,
        rate_per_minute: int | None = None,
    ) -> tuple[Hook, str]:
        """Insert a hook and mint its secret; returns the secret (its one reveal)."""
        hook_id = new_id("nh")
        secret = mint_secret()
        now = ms(self.clock.now())
        async with self.db.begin() as conn:
            # Serialise creates per endpoint so two racing calls cannot both pass the count.
            await lock_endpoint(conn, endpoint_id)
            used = (
                await conn.execute(
                    select(func.count())
                    .select_from(notify_hooks)
                    .where(notify_hooks.c.endpoint_id == endpoint_id)
                )
            ).scalar_one()
            if used >= ceiling:
                raise CeilingExceeded(f"this endpoint has {used} of at most {ceiling} notify hooks")
            await conn.execute(
                insert(notify_hooks).values(
                    id=hook_id,
                    endpoint_id=endpoint_id,
                    url_enc=self.envelope.seal(url, _aad(hook_id, "url")),
                    url_display=redact_url(url),
                    queues=json.dumps(sorted(set(queues))),
                    ignore_presence=ignore_presence,
                    enabled=True,
                    secret_enc=self.envelope.seal(secret, _aad(hook_id, "secret")),
                    consecutive_failures=0,
                    rate_per_minute=rate_per_minute,
                    created_at=now,
                    updated_at=now,
                )
            )
            row = (await conn.execute(select(notify_hooks).where(notify_hooks.c.id == hook_id))).one()
        return Hook.from_row(row), secret

    async def count(self, endpoint_id: str) -> int:
        async with self.db.read() as conn:
            stmt = (
                select(func.count())
                .select_from(notify_hooks)
                .where(notify_hooks.c.endpoint_id == endpoint_id)
            )
            return int((await conn.execute(stmt)).scalar_one())

    async def list_for_endpoint(self, endpoint_id: str) -> list[Hook]:
        stmt = (
            select(notify_hooks).where(notify_hooks.c.endpoint_id == endpoint_id).order_by(notify_hooks.c.id)
        )
        async with self.db.read() as conn:
            return [Hook.from_row(r) for r in (await conn.execute(stmt)).all()]

    async def get(self, endpoint_id: str, hook_id: str) -> Hook:
        """The caller's own hook; any other id (another endpoint's included) is not_found alike."""
        if not looks_like("nh", hook_id):
            raise HookNotFound("no such notify hook")
        stmt = select(notify_hooks).where(
            notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            raise HookNotFound("no such notify hook")
        return Hook.from_row(row)

    async def rotate(self, endpoint_id: str, hook_id: str, *, by_owner: bool = False) -> tuple[Hook, str]:
        """Mint a new secret, keep the current one for the grace period, and re-enable the hook if it was
        disabled automatically (REQ-8). A hook its human disabled stays disabled: the decision is made
        by the UPDATE itself, on the row as it is then, so a disable that commits meanwhile holds."""
        await self.get(endpoint_id, hook_id)
        secret = mint_secret()
        now = self.clock.now()
        async with self.db.begin() as conn:
            row = (
                await conn.execute(
                    select(notify_hooks.c.secret_enc).where(
                        notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id
                    )
                )
            ).first()
            if row is None:
                raise HookNotFound("no such notify hook")
            current = self.envelope.open(row.secret_enc, _aad(hook_id, "secret"))
            # an owner's disable outlives the endpoint's rotation; the owner's own rotate lifts it
            held = false() if by_owner else _H.disabled_reason == HUMAN_DISABLE
            await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id)
                .values(
                    secret_enc=self.envelope.seal(secret, _aad(hook_id, "secret")),
                    prev_secret_enc=self.envelope.seal(current, _aad(hook_id, "prev_secret")),
                    prev_secret_expires_at=ms(now + self.grace_seconds),
                    enabled=case((held, _H.enabled), else_=True),
                    disabled_reason=case((held, _H.disabled_reason), else_=None),
                    disabled_at=case((held, _H.disabled_at), else_=None),
                    consecutive_failures=case((held, _H.consecutive_failures), else_=0),
                    updated_at=ms(now),
                )
            )
            fresh = (await conn.execute(select(notify_hooks).where(notify_hooks.c.id == hook_id))).one()
        return Hook.from_row(fresh), secret

    async def delete(self, endpoint_id: str, hook_id: str) -> None:
        if not looks_like("nh", hook_id):
            raise HookNotFound("no such notify hook")
        async with self.db.begin() as conn:
            gone = await conn.execute(
                delete(notify_hooks).where(
                    notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id
                )
            )
        if gone.rowcount != 1:
            raise HookNotFound("no such notify hook")

    async def set_enabled_by_owner(self, endpoint_id: str, hook_id: str, enabled: bool) -> bool:
        """The owning human's disable / re-enable from the endpoint card (REQ-10). A re-enable lifts any
        disable. A disable takes an enabled hook, or takes over an automatic disable (the human now
        holds it: a rotate by the endpoint no longer re-enables it); True when the row changed."""
        now = ms(self.clock.now())
        values: dict[str, Any] = (
            {"enabled": True, "disabled_reason": None, "disabled_at": None, "consecutive_failures": 0}
            if enabled
            else {"enabled": False, "disabled_reason": HUMAN_DISABLE, "disabled_at": now}
        )
        cond = and_(notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id)
        if not enabled:
            cond = and_(
                cond,
                or_(
                    notify_hooks.c.enabled.is_(True),
                    notify_hooks.c.disabled_reason.is_(None),
                    notify_hooks.c.disabled_reason != HUMAN_DISABLE,
                ),
            )
        async with self.db.begin() as conn:
            moved = await conn.execute(update(notify_hooks).where(cond).values(**values, updated_at=now))
        return moved.rowcount == 1

    # -- dispatch ----------------------------------------------------------------------------------

    async def enabled_with_endpoints(self, endpoint_ids: Iterable[str]) -> dict[str, EndpointHooks]:
        """Matching's one query for a whole batch: each endpoint (scope, presence, owner) with its enabled
        hooks, keyed by endpoint id. An endpoint with no enabled hook is absent."""
        ids = sorted(set(endpoint_ids))
        if not ids:
            return {}
        # One statement outside any transaction (Database.fetch): a BEGIN and ROLLBACK around it were
        # two more trips to the database per batch, in the worker that matches a thousand todos a second.
        rows: Sequence[Any]
        if self.db.is_sqlite:  # one trip to the driver's thread (store_sqlite)
            rows = [MatchRow(*r) for r in await self.db.sqlite_fetch(MATCH_SQL, ids_param(ids))]
        else:
            rows = await self.db.fetch(_MATCH, {"p_endpoint_ids": ids})
        found: dict[str, EndpointHooks] = {}
        grouped: dict[str, list[MatchedHook]] = {}
        for row in rows:
            hooks = grouped.get(row.endpoint_id)
            if hooks is None:
                ns = SimpleNamespace(**{c.name: getattr(row, f"ep_{c.name}") for c in endpoints.c})
                hooks = grouped[row.endpoint_id] = []
                found[row.endpoint_id] = EndpointHooks(Endpoint.from_row(ns), ())  # type: ignore[arg-type]
            hooks.append(MatchedHook(Hook.from_row(row), row.url_enc))
        return {eid: EndpointHooks(e.endpoint, tuple(grouped[eid])) for eid, e in found.items()}

    def open_url(self, hook_id: str, sealed: bytes) -> str:
        """A matched hook's URL (``MatchedHook.url_sealed``); raises ``EnvelopeError`` when it does not open."""
        return self.envelope.open(sealed, _aad(hook_id, "url"))

    async def sendable_rows(self, hook_ids: Iterable[str]) -> dict[str, Any]:
        """The rows :meth:`sendable` reads, for several hooks with one statement (the dispatcher batches the
        reads its workers ask for at the same moment), still sealed: ``None`` for a hook that is gone
        or disabled. :meth:`open_sendable` opens one, so a row that does not open fails its own hook."""
        ids = sorted(set(hook_ids))
        if not ids:
            return {}
        rows: Sequence[Any]
        if self.db.is_sqlite:  # one trip to the driver's thread (store_sqlite)
            rows = [SendableRow(*r) for r in await self.db.sqlite_fetch(SENDABLE_SQL, ids_param(ids))]
        else:
            rows = await self.db.fetch(_SENDABLE_MANY, {"p_hook_ids": ids})  # no transaction: one statement
        found: dict[str, Any] = dict.fromkeys(ids)
        for row in rows:
            found[row.id] = row
        return found

    def open_sendable(self, hook_id: str, row: Any) -> SendableHook:
        """A row of :meth:`sendable_rows`, opened; raises ``EnvelopeError`` when it does not open."""
        secrets = [self.envelope.open(row.secret_enc, _aad(hook_id, "secret"))]
        if row.prev_secret_enc is not None and (row.prev_secret_expires_at or 0) > ms(self.clock.now()):
            secrets.append(self.envelope.open(row.prev_secret_enc, _aad(hook_id, "prev_secret")))
        return SendableHook(
            hook_id,
            self.envelope.open(row.url_enc, _aad(hook_id, "url")),
            tuple(secrets),
            int(row.consecutive_failures),
            row.rate_per_minute,
        )

    async def destroy_expired_secrets(self) -> int:
        """REQ-4: when the grace period ends, the previous secret is destroyed."""
        async with self.db.begin() as conn:
            result = await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.prev_secret_expires_at <= ms(self.clock.now()))
                .values(prev_secret_enc=None, prev_secret_expires_at=None)
            )
        return int(result.rowcount or 0)


# -- counts other parts show (the hooks home: tests/unit/test_sql_homes.py) ---------------------------


async def count_hooks(conn: AsyncConnection, *, disabled: bool = False) -> int:
    """Every hook of the instance (``disabled``: only the disabled ones)."""
    stmt = select(func.count()).select_from(notify_hooks)
    return int((await conn.execute(stmt.where(_H.enabled.is_(False)) if disabled else stmt)).scalar_one())


async def hook_counts(conn: AsyncConnection, endpoint_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``{endpoint_id: (hooks, disabled hooks)}`` of the given endpoints."""
    if not endpoint_ids:
        return {}
    off = func.sum(case((_H.enabled.is_(False), 1), else_=0))
    stmt = (
        select(_H.endpoint_id, func.count(), off)
        .where(_H.endpoint_id.in_(endpoint_ids))
        .group_by(_H.endpoint_id)
    )
    return {r[0]: (int(r[1]), int(r[2] or 0)) for r in (await conn.execute(stmt)).all()}
