"""notify_hooks SQL, in one place.

* The ceiling is enforced in the transaction that inserts: the endpoint row is locked first
  (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises writers), then counted.
* Health updates are single parameterized statements on the hook row alone: ingest and claim never
  touch ``notify_hooks``, so nothing on those paths waits on them (REQ-13).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Row, and_, case, delete, func, insert, select, update

from switchboard.clock import Clock, ms
from switchboard.cred import Envelope
from switchboard.ids import looks_like, new_id
from switchboard.notify.errors import CeilingExceeded, HookNotFound
from switchboard.push import mint_secret, redact_url
from switchboard.store.accounts import Endpoint
from switchboard.store.db import Database
from switchboard.store.schema import endpoints, notify_hooks

DISABLE_AFTER = 10


@dataclass(frozen=True, slots=True)
class Hook:
    id: str
    endpoint_id: str
    url_display: str
    queues: tuple[str, ...]
    ignore_presence: bool
    enabled: bool
    last_attempt_at: int | None
    last_status: int | None
    last_error: str | None
    consecutive_failures: int
    disabled_reason: str | None
    disabled_at: int | None
    created_at: int
    rotating_until: int | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> Hook:
        return cls(
            id=row.id,
            endpoint_id=row.endpoint_id,
            url_display=row.url_display,
            queues=tuple(json.loads(row.queues)),
            ignore_presence=bool(row.ignore_presence),
            enabled=bool(row.enabled),
            last_attempt_at=row.last_attempt_at,
            last_status=row.last_status,
            last_error=row.last_error,
            consecutive_failures=int(row.consecutive_failures),
            disabled_reason=row.disabled_reason,
            disabled_at=row.disabled_at,
            created_at=row.created_at,
            rotating_until=row.prev_secret_expires_at,
        )

    def effective_queues(self, scope_queues: Sequence[str]) -> list[str]:
        """REQ-1: the hook's queues intersected with what the scope grants now; [] means all of them."""
        if not self.queues:
            return sorted(scope_queues)
        return sorted(set(self.queues) & set(scope_queues))


@dataclass(frozen=True, slots=True)
class SendableHook:
    """What one attempt needs, read fresh right before it starts."""

    id: str
    url: str
    secrets: tuple[str, ...]  # newest first; two during a rotation grace


@dataclass(frozen=True, slots=True)
class HealthOutcome:
    consecutive_failures: int
    disabled_now: bool


def _aad(hook_id: str, field: str) -> str:
    return f"notify_hooks:{hook_id}:{field}"


class HookStore:
    def __init__(self, db: Database, envelope: Envelope, clock: Clock, *, grace_seconds: float) -> None:
        self.db, self.envelope, self.clock = db, envelope, clock
        self.grace_seconds = grace_seconds

    async def create(
        self, endpoint_id: str, url: str, queues: Sequence[str], ignore_presence: bool, ceiling: int
    ) -> tuple[Hook, str]:
        """Insert a hook and mint its secret; returns the secret (its one reveal)."""
        hook_id = new_id("nh")
        secret = mint_secret()
        now = ms(self.clock.now())
        async with self.db.begin() as conn:
            # Serialise creates per endpoint so two racing calls cannot both pass the count.
            await conn.execute(select(endpoints.c.id).where(endpoints.c.id == endpoint_id).with_for_update())
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

    async def rotate(self, endpoint_id: str, hook_id: str) -> tuple[Hook, str]:
        """Mint a new secret, keep the current one for the grace period, and re-enable the hook."""
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
            await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id)
                .values(
                    secret_enc=self.envelope.seal(secret, _aad(hook_id, "secret")),
                    prev_secret_enc=self.envelope.seal(current, _aad(hook_id, "prev_secret")),
                    prev_secret_expires_at=ms(now + self.grace_seconds),
                    enabled=True,
                    disabled_reason=None,
                    disabled_at=None,
                    consecutive_failures=0,
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
        """The owning human's disable / re-enable from the endpoint card (REQ-10)."""
        now = ms(self.clock.now())
        values: dict[str, Any] = (
            {"enabled": True, "disabled_reason": None, "disabled_at": None, "consecutive_failures": 0}
            if enabled
            else {"enabled": False, "disabled_reason": "operator", "disabled_at": now}
        )
        cond = and_(notify_hooks.c.id == hook_id, notify_hooks.c.endpoint_id == endpoint_id)
        if not enabled:
            cond = and_(cond, notify_hooks.c.enabled.is_(True))
        async with self.db.begin() as conn:
            moved = await conn.execute(update(notify_hooks).where(cond).values(**values, updated_at=now))
        return moved.rowcount == 1

    # -- dispatch ----------------------------------------------------------------------------------

    async def enabled_for_endpoint(self, endpoint_id: str) -> list[Hook]:
        stmt = select(notify_hooks).where(
            notify_hooks.c.endpoint_id == endpoint_id, notify_hooks.c.enabled.is_(True)
        )
        async with self.db.read() as conn:
            return [Hook.from_row(r) for r in (await conn.execute(stmt)).all()]

    async def enabled_with_endpoint(self, endpoint_id: str) -> tuple[Endpoint, list[Hook]] | None:
        """Matching's one query: the endpoint (scope, presence, owner) with its enabled hooks."""
        stmt = (
            select(notify_hooks, *(c.label(f"ep_{c.name}") for c in endpoints.c))
            .join(endpoints, endpoints.c.id == notify_hooks.c.endpoint_id)
            .where(notify_hooks.c.endpoint_id == endpoint_id, notify_hooks.c.enabled.is_(True))
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        if not rows:
            return None
        ep = rows[0]._mapping
        endpoint = Endpoint.from_row(SimpleNamespace(**{c.name: ep[f"ep_{c.name}"] for c in endpoints.c}))  # type: ignore[arg-type]
        return endpoint, [Hook.from_row(r) for r in rows]

    async def sendable(self, hook_id: str) -> SendableHook | None:
        """Read right before an attempt: a deleted or disabled hook gets no attempt."""
        stmt = select(
            notify_hooks.c.url_enc,
            notify_hooks.c.secret_enc,
            notify_hooks.c.prev_secret_enc,
            notify_hooks.c.prev_secret_expires_at,
        ).where(notify_hooks.c.id == hook_id, notify_hooks.c.enabled.is_(True))
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        secrets = [self.envelope.open(row.secret_enc, _aad(hook_id, "secret"))]
        if row.prev_secret_enc is not None and (row.prev_secret_expires_at or 0) > ms(self.clock.now()):
            secrets.append(self.envelope.open(row.prev_secret_enc, _aad(hook_id, "prev_secret")))
        return SendableHook(hook_id, self.envelope.open(row.url_enc, _aad(hook_id, "url")), tuple(secrets))

    async def destroy_expired_secrets(self) -> int:
        """REQ-4: when the grace period ends, the previous secret is destroyed."""
        async with self.db.begin() as conn:
            result = await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.prev_secret_expires_at <= ms(self.clock.now()))
                .values(prev_secret_enc=None, prev_secret_expires_at=None)
            )
        return int(result.rowcount or 0)

    async def record_attempt(self, hook_id: str, status: int | None, error: str | None) -> None:
        """A non-final attempt: health fields only, the failure streak moves once per delivery."""
        async with self.db.begin() as conn:
            await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.id == hook_id)
                .values(last_attempt_at=ms(self.clock.now()), last_status=status, last_error=error)
            )

    async def record_delivered(self, hook_id: str, status: int, at_ms: int | None = None) -> None:
        async with self.db.begin() as conn:
            await conn.execute(
                update(notify_hooks)
                .where(notify_hooks.c.id == hook_id)
                .values(
                    last_attempt_at=at_ms if at_ms is not None else ms(self.clock.now()),
                    last_status=status,
                    last_error=None,
                    consecutive_failures=0,
                )
            )

    async def record_failed(self, hook_id: str, status: int | None, error: str) -> HealthOutcome | None:
        """One statement: bump the streak and, at the threshold, disable (REQ-8)."""
        now = ms(self.clock.now())
        streak = notify_hooks.c.consecutive_failures + 1
        trips = and_(notify_hooks.c.enabled.is_(True), streak >= DISABLE_AFTER)
        async with self.db.begin() as conn:
            row = (
                await conn.execute(
                    update(notify_hooks)
                    .where(notify_hooks.c.id == hook_id)
                    .values(
                        last_attempt_at=now,
                        last_status=status,
                        last_error=error,
                        consecutive_failures=streak,
                        disabled_reason=case(
                            (trips, "consecutive_failures"), else_=notify_hooks.c.disabled_reason
                        ),
                        disabled_at=case((trips, now), else_=notify_hooks.c.disabled_at),
                        enabled=case((trips, False), else_=notify_hooks.c.enabled),
                    )
                    .returning(
                        notify_hooks.c.consecutive_failures,
                        notify_hooks.c.disabled_reason,
                        notify_hooks.c.disabled_at,
                    )
                )
            ).first()
        if row is None:
            return None
        disabled_now = row.disabled_reason == "consecutive_failures" and row.disabled_at == now
        return HealthOutcome(int(row.consecutive_failures), disabled_now)
