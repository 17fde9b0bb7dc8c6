"""A2A task and push-notification tables (issue 6), on the shared metadata. Migration 0003.

* ``a2a_tasks``: what makes a todo an A2A task. The todo row stays the ledger (status, result); this
  row adds who sent it (only that endpoint may read, cancel, or register push configs for it), the
  context id, the original message, and the per-task sequence counter that push deliveries carry.
* ``push_notification_configs``: the webhook targets of a task. URL, token and credentials are
  sealed by the cred envelope (AAD ``push_notification_configs:<id>:<field>``); ``url_display`` has
  its query redacted, ``host`` is kept in the clear for per-host rate limiting.
* ``a2a_push_outbox``: one row per (transition, config), written in the transition's transaction, so
  a restart loses nothing. ``due_at`` doubles as the claim lease: a claimed row is pushed into the
  future, and comes due again if the claiming instance dies.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from switchboard.store.schema import metadata

__all__ = [
    "a2a_endpoint_settings",
    "a2a_push_outbox",
    "a2a_task_events",
    "a2a_tasks",
    "metadata",
    "push_notification_configs",
]

a2a_tasks = Table(
    "a2a_tasks",
    metadata,
    Column("todo_id", String(40), ForeignKey("todos.id", ondelete="CASCADE"), primary_key=True),
    Column("owner_endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
    Column("context_id", String(128), nullable=False),
    Column("message", Text, nullable=False),  # the sent Message, as A2A JSON (the task's history)
    # SendMessage's messageId: a resend with the same id returns this task (migration 0005, dedup)
    Column("message_id", String(255), nullable=True),
    # Follow-up messages (a SendMessage with this taskId), JSON list of A2A Messages, oldest first
    Column("followups", Text, nullable=True),
    # Set by the MCP verb ``ask`` (the worker's question: TASK_STATE_INPUT_REQUIRED); cleared by the
    # sender's next follow-up and by every todo transition (migration 0008, a2a_input)
    Column("input_required_at", BigInteger, nullable=True),
    # How many ``followups`` the worker had when it claimed: heartbeat returns the ones after
    Column("claim_followups", Integer, nullable=False, server_default="0"),
    Column("last_seq", BigInteger, nullable=False, server_default="0"),
    Column("terminal_at", BigInteger, nullable=True),  # set by the transition into done/dead/canceled
    Column("created_at", BigInteger, nullable=False),
    Index("ix_a2a_tasks_owner", "owner_endpoint_id", "todo_id"),
    Index("ix_a2a_tasks_terminal", "terminal_at"),
    Index("ux_a2a_tasks_message", "owner_endpoint_id", "message_id", unique=True),
)

push_notification_configs = Table(
    "push_notification_configs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("task_id", String(40), ForeignKey("a2a_tasks.todo_id", ondelete="CASCADE"), nullable=False),
    Column("config_id", String(255), nullable=False),  # the id A2A clients see, unique per task
    Column("owner_endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
    Column("url_enc", LargeBinary, nullable=False),
    Column("url_display", Text, nullable=False),
    Column("host", String(255), nullable=False),
    Column("token_enc", LargeBinary, nullable=True),
    Column("auth_scheme", String(64), nullable=True),
    Column("credentials_enc", LargeBinary, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    UniqueConstraint("task_id", "config_id"),
)

a2a_push_outbox = Table(
    "a2a_push_outbox",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "config_id",
        String(40),
        ForeignKey("push_notification_configs.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("task_id", String(40), ForeignKey("a2a_tasks.todo_id", ondelete="CASCADE"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("msg_id", String(40), nullable=False),  # webhook-id: the same on every attempt
    Column("body", Text, nullable=False),  # the exact bytes sent (and signed)
    Column("host", String(255), nullable=False),
    Column("status", String(10), nullable=False),  # pending | delivered | failed
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("due_at", BigInteger, nullable=False),
    Column("claim_token", String(40), nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", String(40), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger, nullable=True),
    Column("reason", String(16), nullable=True),  # "replay": a resend or recover queued it (0018)
    UniqueConstraint("config_id", "seq"),
    Index("ix_a2a_push_outbox_due", "status", "due_at"),
    Index("ix_a2a_push_outbox_head", "config_id", "status", "seq"),
    Index("ix_a2a_push_outbox_task", "task_id"),  # a task's delete cascades here (migration retention)
)

# Migration 0005 (issue 20). Every transition's StreamResponse, in sequence order: what SSE streams
# (SendStreamingMessage, SubscribeToTask) send and replay from ``Last-Event-ID``. Kept as long as the
# task's push configs (terminal + SWITCHBOARD_A2A_PUSH_RETENTION_HOURS).
a2a_task_events = Table(
    "a2a_task_events",
    metadata,
    Column("task_id", String(40), ForeignKey("a2a_tasks.todo_id", ondelete="CASCADE"), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("body", Text, nullable=False),  # the StreamResponse JSON, as push sends it
    Column("created_at", BigInteger, nullable=False),
)

# Per-endpoint A2A settings: the queue a message without ``metadata.queue`` goes to.
a2a_endpoint_settings = Table(
    "a2a_endpoint_settings",
    metadata,
    Column("endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), primary_key=True),
    Column("default_queue", String(64), nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)
