"""The ``push_notification_configs`` home: an A2A task's push configs, as sealed rows.

What a config may be (the SSRF guard, the field grammar, the placeholder rules, the per-task ceiling)
and the sealing of its secrets stay in ``switchboard.a2a.configs`` (``ConfigStore``); here are the
statements and the row mapping. The secret columns (``url_enc``, ``token_enc``, ``credentials_enc``)
hold the cred envelope's ciphertext, bound to the row id and field, and are never opened here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store import a2a_tasks, push_outbox
from switchboard.store.accounts import slug_of, verbs_of
from switchboard.store.db import Database
from switchboard.store.schema_a2a import push_notification_configs

cfg = push_notification_configs


@dataclass(frozen=True, slots=True)
class ConfigView:
    """A stored config as the API shows it: URL query, token and credentials redacted."""

    config_id: str
    task_id: str
    url_display: str
    has_token: bool
    scheme: str | None


@dataclass(frozen=True, slots=True)
class Stored:
    """What a replacing write checks a kept placeholder against (the sealed values stay sealed)."""

    id: str
    url_display: str
    token_enc: bytes | None
    auth_scheme: str | None
    credentials_enc: bytes | None


@dataclass(frozen=True, slots=True)
class Sealed:
    """What one delivery attempt reads, still sealed, with the owning endpoint's verbs."""

    url_enc: bytes
    token_enc: bytes | None
    auth_scheme: str | None
    credentials_enc: bytes | None
    verbs: frozenset[str]  # empty when the endpoint is gone
    owner_endpoint_id: str | None = None

    def __repr__(self) -> str:
        return f"Sealed(auth_scheme={self.auth_scheme!r})"


def _view(row: Row[Any]) -> ConfigView:
    return ConfigView(row.config_id, row.task_id, row.url_display, row.token_enc is not None, row.auth_scheme)


async def insert_in(
    conn: AsyncConnection,
    *,
    row_id: str,
    task_id: str,
    config_id: str,
    owner_endpoint_id: str,
    now_ms: int,
    columns: Mapping[str, Any],
) -> None:
    """A new config row in the caller's transaction; ``columns``: the sealed and shown fields."""
    await conn.execute(
        insert(cfg).values(
            id=row_id,
            task_id=task_id,
            config_id=config_id,
            owner_endpoint_id=owner_endpoint_id,
            created_at=now_ms,
            updated_at=now_ms,
            **columns,
        )
    )


async def stored_in(conn: AsyncConnection, task_id: str, config_id: str) -> Stored | None:
    """The task's config with this id, as this transaction sees it."""
    stmt = select(
        cfg.c.id, cfg.c.url_display, cfg.c.token_enc, cfg.c.auth_scheme, cfg.c.credentials_enc
    ).where(cfg.c.task_id == task_id, cfg.c.config_id == config_id)
    row = (await conn.execute(stmt)).first()
    return None if row is None else Stored(*row)


async def update_in(conn: AsyncConnection, row_id: str, now_ms: int, columns: Mapping[str, Any]) -> None:
    """Replace the given fields of a config row (a field left out keeps its stored value)."""
    await conn.execute(update(cfg).where(cfg.c.id == row_id).values(updated_at=now_ms, **columns))


async def count_in(conn: AsyncConnection, task_id: str) -> int:
    """How many configs the task holds (the ceiling's count, under the task row's lock)."""
    stmt = select(func.count()).select_from(cfg).where(cfg.c.task_id == task_id)
    return int((await conn.execute(stmt)).scalar_one())


async def view_in(conn: AsyncConnection, task_id: str, config_id: str) -> ConfigView:
    """The task's config with this id as the API shows it (it must exist)."""
    stmt = select(cfg).where(cfg.c.task_id == task_id, cfg.c.config_id == config_id)
    return _view((await conn.execute(stmt)).one())


async def get(db: Database, owner_endpoint_id: str, task_id: str, config_id: str) -> ConfigView | None:
    stmt = select(cfg).where(
        cfg.c.task_id == task_id,
        cfg.c.config_id == config_id,
        cfg.c.owner_endpoint_id == owner_endpoint_id,
    )
    async with db.read() as conn:
        row = (await conn.execute(stmt)).first()
    return None if row is None else _view(row)


async def list_for_task(db: Database, owner_endpoint_id: str, task_id: str) -> list[ConfigView]:
    stmt = (
        select(cfg)
        .where(cfg.c.task_id == task_id, cfg.c.owner_endpoint_id == owner_endpoint_id)
        .order_by(cfg.c.created_at, cfg.c.id)
    )
    async with db.read() as conn:
        return [_view(r) for r in (await conn.execute(stmt)).all()]


async def list_for_endpoint(db: Database, owner_endpoint_id: str, limit: int) -> list[ConfigView]:
    """The endpoint's configs across all its tasks, newest first."""
    stmt = (
        select(cfg)
        .where(cfg.c.owner_endpoint_id == owner_endpoint_id)
        .order_by(cfg.c.created_at.desc(), cfg.c.id)
        .limit(limit)
    )
    async with db.read() as conn:
        return [_view(r) for r in (await conn.execute(stmt)).all()]


async def delete_owned(db: Database, owner_endpoint_id: str, task_id: str, config_id: str) -> bool:
    """Idempotent; its outbox rows go with it (ON DELETE CASCADE). True when a row went."""
    stmt = delete(cfg).where(
        cfg.c.task_id == task_id,
        cfg.c.config_id == config_id,
        cfg.c.owner_endpoint_id == owner_endpoint_id,
    )
    async with db.begin() as conn:
        return bool((await conn.execute(stmt)).rowcount)


async def targets_in(conn: AsyncConnection, task_id: str) -> list[tuple[str, str]]:
    """(row id, host) of every config of a task, inside the transition's transaction."""
    stmt = select(cfg.c.id, cfg.c.host).where(cfg.c.task_id == task_id).order_by(cfg.c.id)
    return [(r.id, r.host) for r in (await conn.execute(stmt)).all()]


async def sealed(db: Database, row_id: str) -> Sealed | None:
    """A config as a delivery attempt reads it, with the owning endpoint's verbs in the same statement."""
    stmt = select(
        cfg.c.url_enc,
        cfg.c.token_enc,
        cfg.c.auth_scheme,
        cfg.c.credentials_enc,
        verbs_of(cfg.c.owner_endpoint_id).label("verbs"),
        cfg.c.owner_endpoint_id,
    ).where(cfg.c.id == row_id)
    async with db.read() as conn:
        row = (await conn.execute(stmt)).first()
    if row is None:
        return None
    verbs = frozenset(json.loads(row.verbs)) if row.verbs is not None else frozenset()
    return Sealed(
        row.url_enc, row.token_enc, row.auth_scheme, row.credentials_enc, verbs, row.owner_endpoint_id
    )


async def purge_finished(db: Database, before_ms: int) -> int:
    """Configs of tasks that reached a terminal state before ``before_ms`` and have no delivery left
    pending (their outbox rows go with them), and those tasks' stream event log, which is kept as
    long (docs/a2a.md, "Streaming"). How many configs went."""
    done = a2a_tasks.finished_before(before_ms)
    async with db.begin() as conn:
        result = await conn.execute(
            delete(cfg).where(cfg.c.task_id.in_(done), ~push_outbox.pending_for(cfg.c.id))
        )
        await a2a_tasks.purge_events_in(conn, before_ms)
    return int(result.rowcount or 0)


async def owner_of(db: Database, row_id: str) -> tuple[str, str, str | None] | None:
    """(client config id, owning endpoint id, its slug) of a config row; None once it is deleted."""
    stmt = select(cfg.c.config_id, cfg.c.owner_endpoint_id, slug_of(cfg.c.owner_endpoint_id)).where(
        cfg.c.id == row_id
    )
    rows: list[Any] = await db.fetch(stmt)
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


@dataclass(frozen=True, slots=True)
class Target:
    """A config row as a replay needs it (a2a/replay.py): whose it is and where its pushes go."""

    row_id: str
    task_id: str
    config_id: str
    host: str
    owner_endpoint_id: str


async def target(db: Database, row_id: str) -> Target | None:
    """The config row ``row_id``; None once it is deleted (or purged with its task)."""
    stmt = select(cfg.c.id, cfg.c.task_id, cfg.c.config_id, cfg.c.host, cfg.c.owner_endpoint_id).where(
        cfg.c.id == row_id
    )
    rows: list[Any] = await db.fetch(stmt)
    return Target(*rows[0]) if rows else None


async def owned_target(db: Database, owner_endpoint_id: str, task_id: str, config_id: str) -> Target | None:
    """The caller's config (task id, client config id); another endpoint's is None, like an unknown one."""
    stmt = select(cfg.c.id, cfg.c.task_id, cfg.c.config_id, cfg.c.host, cfg.c.owner_endpoint_id).where(
        cfg.c.task_id == task_id,
        cfg.c.config_id == config_id,
        cfg.c.owner_endpoint_id == owner_endpoint_id,
    )
    rows: list[Any] = await db.fetch(stmt)
    return Target(*rows[0]) if rows else None
