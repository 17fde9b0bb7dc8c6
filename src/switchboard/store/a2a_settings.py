"""The ``a2a_endpoint_settings`` home: an endpoint's default A2A queue (docs/a2a.md).

The rules (what a queue name may be, the fallback to the endpoint's first queue) stay in
``switchboard.a2a.settings``, the one service every face calls; here are only its statements.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from switchboard.store.db import Database
from switchboard.store.schema_a2a import a2a_endpoint_settings


async def clear_default_queue(db: Database, endpoint_id: str) -> None:
    """Forget the endpoint's default A2A queue (nothing when it has none)."""
    async with db.begin() as conn:
        await conn.execute(
            delete(a2a_endpoint_settings).where(a2a_endpoint_settings.c.endpoint_id == endpoint_id)
        )


async def put_default_queue(db: Database, endpoint_id: str, queue: str, now_ms: int) -> None:
    """Set the endpoint's default A2A queue, replacing any set before (one upsert per dialect)."""
    insert = pg_insert if db.dialect == "postgresql" else sqlite_insert
    stmt = insert(a2a_endpoint_settings).values(
        endpoint_id=endpoint_id, default_queue=queue, updated_at=now_ms
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[a2a_endpoint_settings.c.endpoint_id],
        set_={"default_queue": queue, "updated_at": now_ms},
    )
    async with db.begin() as conn:
        await conn.execute(stmt)


async def get_default_queue(db: Database, endpoint_id: str) -> str | None:
    """The queue :func:`put_default_queue` set, or None."""
    stmt = select(a2a_endpoint_settings.c.default_queue).where(
        a2a_endpoint_settings.c.endpoint_id == endpoint_id
    )
    async with db.read() as conn:
        return (await conn.execute(stmt)).scalar_one_or_none()
