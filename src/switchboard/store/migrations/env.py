"""Alembic environment: always run with a connection handed in by switchboard.store.db."""

from __future__ import annotations

from alembic import context

from switchboard.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - we never run alembic from its own CLI
    raise RuntimeError("run migrations through switchboard (Database.migrate)")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
