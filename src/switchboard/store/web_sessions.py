"""The ``web_sessions`` home: browser sessions of the web UI, one row per signed-in browser.

A session is stored by the SHA-256 of its cookie value (the caller hashes it), so the database never
holds a value that signs anyone in. Sessions are rows, so signing out everywhere works on every
instance at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store.db import Database
from switchboard.store.schema import humans
from switchboard.store.schema_web import web_sessions


@dataclass(frozen=True, slots=True)
class Human:
    """Who a live session signs in."""

    id: str
    email: str
    is_operator: bool


async def start(db: Database, id_hash: str, human_id: str, created_at: int, expires_at: int) -> None:
    async with db.begin() as conn:
        await conn.execute(
            insert(web_sessions).values(
                id_hash=id_hash, human_id=human_id, created_at=created_at, expires_at=expires_at
            )
        )


async def human_of(db: Database, id_hash: str, now_ms: int) -> Human | None:
    """The human a live session signs in, read with the session in one statement (every page view)."""
    stmt = (
        select(humans.c.id, humans.c.email, humans.c.is_operator)
        .join(web_sessions, web_sessions.c.human_id == humans.c.id)
        .where(web_sessions.c.id_hash == id_hash, web_sessions.c.expires_at > now_ms)
    )
    async with db.read() as conn:
        row = (await conn.execute(stmt)).first()
    return Human(row.id, row.email, bool(row.is_operator)) if row else None


async def end(db: Database, id_hash: str) -> None:
    async with db.begin() as conn:
        await conn.execute(delete(web_sessions).where(web_sessions.c.id_hash == id_hash))


async def end_all_in(conn: AsyncConnection, human_id: str, keep: str | None) -> int:
    """End the human's sessions but the one hashed ``keep``, in the caller's transaction (a password
    change, signing out everywhere). How many ended."""
    stmt = delete(web_sessions).where(web_sessions.c.human_id == human_id)
    if keep is not None:
        stmt = stmt.where(web_sessions.c.id_hash != keep)
    return int((await conn.execute(stmt)).rowcount or 0)


async def sweep(db: Database, now_ms: int) -> int:
    """Drop expired sessions; how many went."""
    async with db.begin() as conn:
        gone = await conn.execute(delete(web_sessions).where(web_sessions.c.expires_at <= now_ms))
    return int(gone.rowcount or 0)


async def count_live(conn: AsyncConnection, now_ms: int) -> int:
    stmt = select(func.count()).select_from(web_sessions).where(web_sessions.c.expires_at > now_ms)
    return int((await conn.execute(stmt)).scalar_one())
