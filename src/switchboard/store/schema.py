"""The tables, declared once. Alembic migrations must build exactly this (tests/unit/store/test_migrations.py).

Times are integer epoch milliseconds (``*_at`` columns): identical on SQLite and PostgreSQL, and trivial
to drive from an injected clock.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

LIVE_STATUSES = ("pending", "claimed", "failed")
# The live-dedup partial index's predicate, as literal SQL. ON CONFLICT must repeat it literally: with
# bound parameters PostgreSQL cannot match the index once a prepared statement goes to a generic plan
# (after 5 executions on one connection), and every insert fails.
PENDING_PREDICATE = text("status = 'pending'")  # ix_todos_claim_pending; the claim repeats it literally
NOT_PENDING_PREDICATE = text("status <> 'pending'")
CLAIMED_PREDICATE = text("status = 'claimed'")  # the lease sweep's index
FAILED_PREDICATE = text("status = 'failed'")  # the retry sweep's index
CLAIM_KEY_PREDICATE = text("claim_key IS NOT NULL AND status = 'claimed'")  # a retried claim's lookup
TERMINAL_PREDICATE = text("status IN ('done', 'dead', 'canceled')")  # the retention sweep's index
LIVE_DEDUP_PREDICATE = text("status IN ('pending', 'claimed', 'failed') AND dedup_key IS NOT NULL")

humans = Table(
    "humans",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("email", String(320), nullable=False, unique=True),
    Column("password_hash", String(255), nullable=False),
    Column("is_operator", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", BigInteger, nullable=False),
)

endpoints = Table(
    "endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("slug", String(64), nullable=False, unique=True),
    Column("human_id", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False, index=True),
    # sha256 of the bearer token; NULL once revoked. Tokens are 256-bit random, so a fast hash is enough.
    Column("token_hash", String(64), nullable=True, unique=True),
    Column("token_hint", String(16), nullable=True),
    Column("verbs", Text, nullable=False),  # JSON list of granted verbs
    Column("queues", Text, nullable=False),  # JSON list of drainable queues
    Column("presence", String(3), nullable=False, server_default="in"),
    Column("presence_override", String(3), nullable=True),
    Column("presence_seen", String(3), nullable=False, server_default="in"),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# One row whose ``n`` moves with every write to ``endpoints``, in the writer's transaction: SQLite
# triggers (migration 0013) bump it, so the credential cache (``store.changes.EndpointEpoch``) knows a
# cached endpoint row is current without reading it, whatever else commits to the file. Not written by
# the application, and unused on PostgreSQL (the cluster relay's notifications do that job there).
endpoint_epoch = Table(
    "endpoint_epoch",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("n", BigInteger, nullable=False),
    CheckConstraint("id = 1", name="ck_endpoint_epoch_one_row"),
)

sources = Table(
    "sources",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("slug", String(64), nullable=False, unique=True),
    Column("human_id", String(40), ForeignKey("humans.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("kind", String(16), nullable=False),
    Column("trust", String(16), nullable=False),
    Column("secret_enc", LargeBinary, nullable=False),  # cred envelope, AAD "sources:<id>:secret"
    Column("quarantined", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", BigInteger, nullable=False),
)

routes = Table(
    "routes",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("source_id", String(40), ForeignKey("sources.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("kind", String(100), nullable=True),
    Column("queue", String(64), nullable=False),
    Column(
        "endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False, index=True
    ),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint("source_id", "kind", "queue", "endpoint_id"),
)

todos = Table(
    "todos",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=True),
    Column("queue", String(64), nullable=False),
    Column("kind", String(100), nullable=True),
    Column("source", String(64), nullable=True),  # source slug, for display and notifications
    Column("source_id", String(40), nullable=True),
    Column("title", Text, nullable=False),
    Column("payload", Text, nullable=False),  # JSON
    Column("status", String(10), nullable=False),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("lease_expires_at", BigInteger, nullable=True),
    # The handle of the latest claim (migration todo_leases): holder verbs must name it. Kept after the
    # claim ends so a late call is told lease_lost or canceled.
    Column("lease_id", String(40), nullable=True),
    Column("claim_key", String(100), nullable=True),  # that claim's client request key, if any
    Column("retry_at", BigInteger, nullable=True),
    Column("delivery_id", String(200), nullable=True),
    # (source, delivery, queue, endpoint): redeliveries land on the live todo (unique while live).
    Column("dedup_key", String(400), nullable=True),
    Column("verified", Boolean, nullable=False, server_default=text("false")),
    Column("via_token", Boolean, nullable=False, server_default=text("false")),
    Column("self_test", Boolean, nullable=False, server_default=text("false")),
    Column("quarantined", Boolean, nullable=False, server_default=text("false")),
    Column("result", Text, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # Per-endpoint reads (console, CLI); on PostgreSQL not the pending rows, which only the claim's index
    # may serve whatever the statistics say (migration todo_state_indexes).
    Index(
        "ix_todos_claim",
        "endpoint_id",
        "status",
        "queue",
        "created_at",
        postgresql_where=NOT_PENDING_PREDICATE,
    ),
    # claim_next: an endpoint's pending rows in claim order (migration claim_index, issue 18).
    Index(
        "ix_todos_claim_pending",
        "endpoint_id",
        "created_at",
        "id",
        sqlite_where=PENDING_PREDICATE,
        postgresql_where=PENDING_PREDICATE,
    ),
    Index(
        "ix_todos_lease",
        "lease_expires_at",
        sqlite_where=CLAIMED_PREDICATE,
        postgresql_where=CLAIMED_PREDICATE,
    ),
    Index(
        "ix_todos_retry",
        "retry_at",
        sqlite_where=FAILED_PREDICATE,
        postgresql_where=FAILED_PREDICATE,
    ),
    Index(
        "ix_todos_claim_key",
        "endpoint_id",
        "claim_key",
        sqlite_where=CLAIM_KEY_PREDICATE,
        postgresql_where=CLAIM_KEY_PREDICATE,
    ),
    Index(
        "ix_todos_terminal",
        "updated_at",
        sqlite_where=TERMINAL_PREDICATE,
        postgresql_where=TERMINAL_PREDICATE,
    ),
    Index(
        "uq_todos_live_dedup",
        "dedup_key",
        unique=True,
        sqlite_where=LIVE_DEDUP_PREDICATE,
        postgresql_where=LIVE_DEDUP_PREDICATE,
    ),
)

# SPEC-0024 notify hooks. The URL is sealed too: its query string may be the receiver's credential.
notify_hooks = Table(
    "notify_hooks",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "endpoint_id", String(40), ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False, index=True
    ),
    Column("url_enc", LargeBinary, nullable=False),  # AAD "notify_hooks:<id>:url"
    Column("url_display", Text, nullable=False),  # scheme://host[:port]/path, query redacted
    Column("queues", Text, nullable=False),  # JSON list; [] = every queue the scope grants
    Column("ignore_presence", Boolean, nullable=False, server_default=text("false")),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("secret_enc", LargeBinary, nullable=False),  # AAD "notify_hooks:<id>:secret"
    Column("prev_secret_enc", LargeBinary, nullable=True),  # AAD "notify_hooks:<id>:prev_secret"
    Column("prev_secret_expires_at", BigInteger, nullable=True),
    Column("last_attempt_at", BigInteger, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", String(40), nullable=True),
    Column("consecutive_failures", Integer, nullable=False, server_default="0"),
    Column("disabled_reason", String(40), nullable=True),
    Column("disabled_at", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # the endpoint's own per-minute limit, 1..120 (issue 29); NULL = the server's (SPEC-0024's 120)
    Column("rate_per_minute", Integer, nullable=True),
)

# The delivery log (issue 19): one row per finished notification (notify hook or A2A push), written in
# batches by the delivery workers, pruned by count and age. What happened, never a queue (REQ-7): no
# body, no secret, no URL. No foreign keys: a write never waits on, or fails for, a deleted hook.
notify_deliveries = Table(
    "notify_deliveries",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # insertion order: the count bound
    Column("id", String(64), nullable=False),  # the notification (webhook-id / outbox row) id
    Column("kind", String(8), nullable=False),  # notify | a2a
    Column("target_id", String(64), nullable=False, index=True),  # the hook or the push config
    Column("endpoint_id", String(40), nullable=True, index=True),  # the owning endpoint (REQ-10)
    Column("subject_id", String(64), nullable=True),  # the todo or the A2A task
    Column("type", String(32), nullable=False),  # todo.ready | todos.backlog | task.status
    Column("reason", String(32), nullable=True),  # created | requeued | clock_in | test | ...
    Column("outcome", String(16), nullable=False),  # delivered | failed | dropped
    Column("detail", String(40), nullable=True),  # why it was dropped, or the last error class
    Column("attempts", Text, nullable=False),  # JSON [{"n", "at", "status", "error", "ms"}]
    Column("test", Boolean, nullable=False, server_default=text("false")),
    Column("finished_at", BigInteger, nullable=False, index=True),
    # An A2A push's task sequence number (migration 0018): what its replay sends again; NULL otherwise
    Column("event_seq", BigInteger, nullable=True),
)
