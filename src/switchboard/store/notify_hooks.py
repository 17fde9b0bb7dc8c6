"""The ``notify_hooks`` home: a hook's rows, written and read (SPEC-0024).

* The ceiling is enforced in the transaction that inserts: the endpoint row is locked first
  (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises writers), then counted.
* The dispatch path's statements (matching, ``sendable``) are built once, at import, with bound
  parameters: per call they are only executed, never rebuilt and cache-keyed again. On SQLite the two
  run as text (:mod:`switchboard.store.notify_hooks_sqlite`), one trip to the driver's thread each. The
  health fold is :mod:`switchboard.store.notify_hook_health`'s.

What a hook means stays in the notify package (``switchboard.notify.store.HookStore``, built on
:class:`HookRows`): minting its secret, redacting its URL, sealing and opening with the envelope, and
the errors callers see. This module takes and returns sealed bytes and says "not found" with ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, false, func, insert, or_, select, update

from switchboard.core.clock import Clock, ms
from switchboard.store.accounts import Endpoint, lock_endpoint
from switchboard.store.db import Database
from switchboard.store.notify_hook_health import HookHealth
from switchboard.store.notify_hook_types import HUMAN_DISABLE, EndpointHooks, Hook, MatchedHook
from switchboard.store.notify_hooks_sqlite import MATCH_SQL, SENDABLE_SQL, MatchRow, SendableRow, ids_param
from switchboard.store.schema import endpoints, notify_hooks

_H = notify_hooks.c

# Matching: the endpoints of a batch of transitions with their enabled hooks, one statement. The
# secrets are not read here (``sendable`` reads them right before an attempt).
MATCH = (
    select(
        *(c for c in notify_hooks.c if c.name not in ("secret_enc", "prev_secret_enc")),
        *(c.label(f"ep_{c.name}") for c in endpoints.c),
    )
    .join_from(notify_hooks, endpoints, endpoints.c.id == _H.endpoint_id)
    .where(_H.endpoint_id.in_(bindparam("p_endpoint_ids", expanding=True)), _H.enabled.is_(True))
    .order_by(_H.endpoint_id, _H.id)
)

SENDABLE_MANY = select(
    _H.id,
    _H.url_enc,
    _H.secret_enc,
    _H.prev_secret_enc,
    _H.prev_secret_expires_at,
    _H.consecutive_failures,
    _H.rate_per_minute,
).where(_H.id.in_(bindparam("p_hook_ids", expanding=True)), _H.enabled.is_(True))

#: Reseals a rotation: the current ``secret_enc`` in, the new ``(secret_enc, prev_secret_enc)`` out.
Reseal = Callable[[bytes], tuple[bytes, bytes]]


def _mine(endpoint_id: str, hook_id: str) -> Any:
    return and_(_H.id == hook_id, _H.endpoint_id == endpoint_id)


class HookRows(HookHealth):
    """The endpoint's create, rotate and delete, the owner's disable, and the dispatcher's reads
    (matching, ``sendable``), on top of the health writes."""

    async def insert_within(
        self,
        hook_id: str,
        endpoint_id: str,
        *,
        ceiling: int,
        url_enc: bytes,
        url_display: str,
        queues: Sequence[str],
        ignore_presence: bool,
        secret_enc: bytes,
        rate_per_minute: int | None = None,
    ) -> tuple[Hook | None, int]:
        """Insert the hook if the endpoint has fewer than ``ceiling``: ``(hook, hooks before)``, or
        ``(None, hooks)`` when it is full and nothing was written."""
        now = ms(self.clock.now())
        async with self.db.begin() as conn:
            # Serialise creates per endpoint so two racing calls cannot both pass the count.
            await lock_endpoint(conn, endpoint_id)
            used = int(
                (
                    await conn.execute(
                        select(func.count()).select_from(notify_hooks).where(_H.endpoint_id == endpoint_id)
                    )
                ).scalar_one()
            )
            if used >= ceiling:
                return None, used
            await conn.execute(
                insert(notify_hooks).values(
                    id=hook_id,
                    endpoint_id=endpoint_id,
                    url_enc=url_enc,
                    url_display=url_display,
                    queues=json.dumps(sorted(set(queues))),
                    ignore_presence=ignore_presence,
                    enabled=True,
                    secret_enc=secret_enc,
                    consecutive_failures=0,
                    rate_per_minute=rate_per_minute,
                    created_at=now,
                    updated_at=now,
                )
            )
            row = (await conn.execute(select(notify_hooks).where(_H.id == hook_id))).one()
        return Hook.from_row(row), used

    async def count(self, endpoint_id: str) -> int:
        async with self.db.read() as conn:
            stmt = select(func.count()).select_from(notify_hooks).where(_H.endpoint_id == endpoint_id)
            return int((await conn.execute(stmt)).scalar_one())

    async def list_for_endpoint(self, endpoint_id: str) -> list[Hook]:
        stmt = select(notify_hooks).where(_H.endpoint_id == endpoint_id).order_by(_H.id)
        async with self.db.read() as conn:
            return [Hook.from_row(r) for r in (await conn.execute(stmt)).all()]

    async def find(self, endpoint_id: str, hook_id: str) -> Hook | None:
        """The endpoint's own hook, or None (another endpoint's id included)."""
        async with self.db.read() as conn:
            row = (await conn.execute(select(notify_hooks).where(_mine(endpoint_id, hook_id)))).first()
        return None if row is None else Hook.from_row(row)

    async def rotate_row(
        self, endpoint_id: str, hook_id: str, reseal: Reseal, *, grace_until: int, by_owner: bool = False
    ) -> Hook | None:
        """Replace the secret with what ``reseal`` makes of the current one, keep that one until
        ``grace_until``, and re-enable the hook if it was disabled automatically (REQ-8). A hook its
        human disabled stays disabled: the decision is made by the UPDATE itself, on the row as it is
        then, so a disable that commits meanwhile holds. None when the hook is not the endpoint's."""
        async with self.db.begin() as conn:
            row = (await conn.execute(select(_H.secret_enc).where(_mine(endpoint_id, hook_id)))).first()
            if row is None:
                return None
            secret_enc, prev_secret_enc = reseal(row.secret_enc)
            # an owner's disable outlives the endpoint's rotation; the owner's own rotate lifts it
            held = false() if by_owner else _H.disabled_reason == HUMAN_DISABLE
            await conn.execute(
                update(notify_hooks)
                .where(_mine(endpoint_id, hook_id))
                .values(
                    secret_enc=secret_enc,
                    prev_secret_enc=prev_secret_enc,
                    prev_secret_expires_at=grace_until,
                    enabled=case((held, _H.enabled), else_=True),
                    disabled_reason=case((held, _H.disabled_reason), else_=None),
                    disabled_at=case((held, _H.disabled_at), else_=None),
                    consecutive_failures=case((held, _H.consecutive_failures), else_=0),
                    updated_at=ms(self.clock.now()),
                )
            )
            fresh = (await conn.execute(select(notify_hooks).where(_H.id == hook_id))).one()
        return Hook.from_row(fresh)

    async def delete_row(self, endpoint_id: str, hook_id: str) -> bool:
        """Delete the endpoint's own hook; False when there was none."""
        async with self.db.begin() as conn:
            gone = await conn.execute(delete(notify_hooks).where(_mine(endpoint_id, hook_id)))
        return gone.rowcount == 1

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
        cond = _mine(endpoint_id, hook_id)
        if not enabled:
            cond = and_(
                cond,
                or_(_H.enabled.is_(True), _H.disabled_reason.is_(None), _H.disabled_reason != HUMAN_DISABLE),
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
        if self.db.is_sqlite:  # one trip to the driver's thread (notify_hooks_sqlite)
            rows = [MatchRow(*r) for r in await self.db.sqlite_fetch(MATCH_SQL, ids_param(ids))]
        else:
            rows = await self.db.fetch(MATCH, {"p_endpoint_ids": ids})
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

    async def sendable_rows(self, hook_ids: Iterable[str]) -> dict[str, Any]:
        """The rows ``sendable`` reads, for several hooks with one statement (the dispatcher batches the
        reads its workers ask for at the same moment), still sealed: ``None`` for a hook that is gone
        or disabled. The notify package opens each, so a row that does not open fails its own hook."""
        ids = sorted(set(hook_ids))
        if not ids:
            return {}
        rows: Sequence[Any]
        if self.db.is_sqlite:  # one trip to the driver's thread (notify_hooks_sqlite)
            rows = [SendableRow(*r) for r in await self.db.sqlite_fetch(SENDABLE_SQL, ids_param(ids))]
        else:
            rows = await self.db.fetch(SENDABLE_MANY, {"p_hook_ids": ids})  # no transaction: one statement
        found: dict[str, Any] = dict.fromkeys(ids)
        for row in rows:
            found[row.id] = row
        return found

    async def destroy_expired_secrets(self) -> int:
        """REQ-4: when the grace period ends, the previous secret is destroyed."""
        async with self.db.begin() as conn:
            result = await conn.execute(
                update(notify_hooks)
                .where(_H.prev_secret_expires_at <= ms(self.clock.now()))
                .values(prev_secret_enc=None, prev_secret_expires_at=None)
            )
        return int(result.rowcount or 0)


async def update_rate(
    db: Database, clock: Clock, endpoint_id: str, hook_id: str, rate: int | None
) -> Hook | None:
    """Store the hook's own per-minute limit (None: back to the server's, issue 29); None when the
    hook is not the endpoint's."""
    async with db.begin() as conn:
        moved = await conn.execute(
            update(notify_hooks)
            .where(_mine(endpoint_id, hook_id))
            .values(rate_per_minute=rate, updated_at=ms(clock.now()))
        )
        if moved.rowcount != 1:
            return None
        row = (await conn.execute(select(notify_hooks).where(_mine(endpoint_id, hook_id)))).one()
    return Hook.from_row(row)
