"""The operator console's tables, on the shared metadata. Migration 0005 (``console``).

* ``todo_events``: one row per todo transition (created, claimed with its lease, requeued, done, failed,
  dead, canceled), written inside the transition's own transaction, so a todo's timeline is exactly what
  happened to it. Operator actions carry the acting human's email in ``actor``.
* ``backlog_samples``: the pending count of each (endpoint, queue) once per sample bucket, for the
  24-hour backlog sparkline. The bucket is the primary key, so instances sampling the same bucket write
  one row.
* ``human_invites``: an operator's invitation, stored as the SHA-256 of a 256-bit link token.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, ForeignKey, Index, Integer, String, Table

from switchboard.store.schema import metadata

__all__ = ["backlog_samples", "human_invites", "metadata", "todo_events"]

todo_events = Table(
    "todo_events",
    metadata,
    Column("id", String(40), primary_key=True),  # te_<ULID>; the timeline orders by (at, id)
    Column("todo_id", String(40), ForeignKey("todos.id", ondelete="CASCADE"), nullable=False),
    Column("transition", String(16), nullable=False),
    Column("reason", String(40), nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("lease_expires_at", BigInteger, nullable=True),
    Column("actor", String(320), nullable=True),
    Column("instance_id", String(100), nullable=True),
    Column("at", BigInteger, nullable=False),
    Index("ix_todo_events_todo_id_at", "todo_id", "at"),
)

backlog_samples = Table(
    "backlog_samples",
    metadata,
    Column(
        "endpoint_id",
        String(40),
        ForeignKey("endpoints.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("queue", String(64), primary_key=True),
    Column("bucket", BigInteger, primary_key=True),  # epoch ms at the bucket's start
    Column("pending", Integer, nullable=False),
    Index("ix_backlog_samples_bucket", "bucket"),
)

human_invites = Table(
    "human_invites",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("email", String(320), nullable=False, unique=True),
    Column("is_operator", Boolean, nullable=False),
    Column("invited_by", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)
