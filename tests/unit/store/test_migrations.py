"""The migrations build exactly the schema the code declares, on both engines."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from switchboard.store.db import Database
from switchboard.store.tables import metadata


async def test_migrations_match_declared_schema(database: Database) -> None:
    def diff(sync_conn: Any) -> list[Any]:
        ctx = MigrationContext.configure(
            sync_conn, opts={"compare_type": True, "compare_server_default": False}
        )
        return list(compare_metadata(ctx, metadata))

    async with database.read() as conn:
        assert await conn.run_sync(diff) == []


async def test_migrate_is_idempotent(database: Database) -> None:
    await database.migrate()
    await database.migrate()
