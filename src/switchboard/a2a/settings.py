"""Per-endpoint A2A settings: the default queue of a message that names none (docs/a2a.md).

One service for every face (the vend CLI, the web console): an endpoint's default A2A queue is the one
set here, else the first (alphabetical) queue of its own scope. A generic A2A client knows nothing of
``metadata.queue``; its messages go there.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from switchboard.core.clock import ms
from switchboard.services import Services
from switchboard.store.accounts import QUEUE, Endpoint
from switchboard.store.schema_a2a import a2a_endpoint_settings


async def set_default_queue(services: Services, endpoint_id: str, queue: str | None) -> None:
    """Set (or with ``None`` clear) the endpoint's default A2A queue. ValueError on a bad name."""
    if queue is None:
        async with services.db.begin() as conn:
            await conn.execute(
                delete(a2a_endpoint_settings).where(a2a_endpoint_settings.c.endpoint_id == endpoint_id)
            )
        return
    if not QUEUE.match(queue):
        raise ValueError(
            "the default A2A queue must be a queue name (lower-case letters, digits, '.', '_', '-')"
        )
    now = ms(services.clock.now())
    insert = pg_insert if services.db.dialect == "postgresql" else sqlite_insert
    stmt = insert(a2a_endpoint_settings).values(endpoint_id=endpoint_id, default_queue=queue, updated_at=now)
    stmt = stmt.on_conflict_do_update(
        index_elements=[a2a_endpoint_settings.c.endpoint_id],
        set_={"default_queue": queue, "updated_at": now},
    )
    async with services.db.begin() as conn:
        await conn.execute(stmt)


async def configured_default_queue(services: Services, endpoint_id: str) -> str | None:
    """The queue set with :func:`set_default_queue`, or None."""
    stmt = select(a2a_endpoint_settings.c.default_queue).where(
        a2a_endpoint_settings.c.endpoint_id == endpoint_id
    )
    async with services.db.read() as conn:
        return (await conn.execute(stmt)).scalar_one_or_none()


async def default_queue(services: Services, endpoint: Endpoint) -> str | None:
    """Where this endpoint's messages without ``metadata.queue`` go: the set one, else the first queue
    of its scope (None when it has none)."""
    configured = await configured_default_queue(services, endpoint.id)
    if configured:
        return configured
    return min(endpoint.queues) if endpoint.queues else None
