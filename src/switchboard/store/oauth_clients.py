"""The ``oauth_clients`` rows of the OAuth home (``store/oauth*.py``): MCP OAuth clients, registered
dynamically or known by their client metadata document.

The client secret column holds the cred envelope's ciphertext; the web layer
(``switchboard.web.oauth_clients``) seals and opens it, bound to the client id.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store.db import Database
from switchboard.store.schema_web import oauth_clients


@dataclass(frozen=True, slots=True)
class ClientRow:
    info_json: str  # the registration record, as registered or as the document said
    secret_enc: bytes | None


async def insert_client(
    db: Database, client_id: str, name: str | None, info_json: str, secret_enc: bytes | None, now_ms: int
) -> None:
    """A new client; :class:`switchboard.store.errors.Conflict` when the id is taken."""
    async with db.begin() as conn:
        await conn.execute(
            insert(oauth_clients).values(
                id=client_id, client_name=name, info=info_json, secret_enc=secret_enc, created_at=now_ms
            )
        )


async def update_client(db: Database, client_id: str, name: str | None, info_json: str) -> bool:
    """Replace a client's name and record; False when there is no such client."""
    async with db.begin() as conn:
        updated = await conn.execute(
            update(oauth_clients)
            .where(oauth_clients.c.id == client_id)
            .values(client_name=name, info=info_json)
        )
    return updated.rowcount == 1


async def client_row(db: Database, client_id: str) -> ClientRow | None:
    stmt = select(oauth_clients.c.info, oauth_clients.c.secret_enc).where(oauth_clients.c.id == client_id)
    async with db.read() as conn:
        row = (await conn.execute(stmt)).first()
    return None if row is None else ClientRow(row.info, row.secret_enc)


async def mark_granted_in(conn: AsyncConnection, client_id: str, now_ms: int) -> None:
    """Stamp the client's first grant (a client never granted is swept after a day)."""
    await conn.execute(
        update(oauth_clients)
        .where(oauth_clients.c.id == client_id, oauth_clients.c.first_grant_at.is_(None))
        .values(first_grant_at=now_ms)
    )


async def sweep_unused_in(conn: AsyncConnection, created_before_ms: int) -> None:
    """Drop registrations created before the cut that never led to a grant."""
    await conn.execute(
        delete(oauth_clients).where(
            oauth_clients.c.first_grant_at.is_(None), oauth_clients.c.created_at <= created_before_ms
        )
    )


async def count_clients(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(oauth_clients))).scalar_one())
