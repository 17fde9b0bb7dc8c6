"""todos: the lease, retry and per-endpoint indexes cover only the states they serve (issue 18)

``claim_next`` must read ``ix_todos_claim_pending`` whatever PostgreSQL's statistics say. A queue table's
statistics usually say "almost nothing is pending" (the history is ``done``: the last ANALYZE ran while
the queues were drained), and then any index that starts with ``status`` looks as cheap as the claim's
own: the planner was seen walking ``ix_todos_retry`` (status, retry_at) over every pending row of every
endpoint and sorting them, per claim (390 buffers per claim at 2,400 pending, 8x the claim's own
index), with the UPDATE joined to that scan instead of the primary key.

So on PostgreSQL no other index can serve ``status = 'pending'``:

* ``ix_todos_lease`` (status, lease_expires_at) becomes ``(lease_expires_at) WHERE status = 'claimed'``
  (the lease sweep's only reader), and ``ix_todos_retry`` (status, retry_at) becomes
  ``(retry_at) WHERE status = 'failed'`` (the retry sweep's); both engines, both smaller;
* ``ix_todos_claim`` (endpoint_id, status, queue, created_at) keeps its columns for the console's and the
  CLI's per-endpoint reads but leaves pending rows to ``ix_todos_claim_pending`` (PostgreSQL only:
  SQLite uses a partial index only when the query repeats its predicate, so it keeps the full index).

A claim or an ack changes ``status``, so every index gets a new entry unless its predicate excludes the
new row: the partial indexes also make each claim and ack write fewer index entries.

Idempotent, like the revisions below it: it drops and creates only what is not yet as described, so a
database stamped back one revision upgrades again safely. On PostgreSQL the indexes are built with a
plain CREATE INDEX, which blocks writes to ``todos`` while it runs (seconds per million rows).

Revision ID: todo_state_indexes
Revises: endpoint_epoch
"""

import sqlalchemy as sa
from alembic import op


revision = 'todo_state_indexes'
down_revision = 'endpoint_epoch'
branch_labels = None
depends_on = None

CLAIMED = "status = 'claimed'"
FAILED = "status = 'failed'"
NOT_PENDING = "status <> 'pending'"

# name -> (columns, predicate or None, dialects it is partial on)
NEW = {
    'ix_todos_lease': (['lease_expires_at'], CLAIMED, ('sqlite', 'postgresql')),
    'ix_todos_retry': (['retry_at'], FAILED, ('sqlite', 'postgresql')),
    'ix_todos_claim': (['endpoint_id', 'status', 'queue', 'created_at'], NOT_PENDING, ('postgresql',)),
}
OLD = {
    'ix_todos_lease': ['status', 'lease_expires_at'],
    'ix_todos_retry': ['status', 'retry_at'],
    'ix_todos_claim': ['endpoint_id', 'status', 'queue', 'created_at'],
}


def _partial(bind: sa.engine.Connection, name: str) -> bool:
    """Whether index ``name`` on todos already has a predicate."""
    if bind.dialect.name == 'sqlite':
        sql = bind.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :n"), {'n': name}
        ).scalar()
        return sql is not None and ' WHERE ' in sql.upper()
    found = bind.execute(
        sa.text("SELECT indpred IS NOT NULL FROM pg_index WHERE indexrelid = to_regclass(:n)"), {'n': name}
    ).scalar()
    return bool(found)


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    present = {ix['name'] for ix in sa.inspect(bind).get_indexes('todos')}
    for name, (columns, predicate, partial_on) in NEW.items():
        if dialect not in partial_on:
            continue  # stays as it is on this engine
        if name in present and _partial(bind, name):
            continue  # already made by an earlier run of this revision
        # Not in batch mode (as claim_index): on SQLite that may copy and drop ``todos``.
        if name in present:
            op.drop_index(name, table_name='todos')
        where = sa.text(predicate)
        op.create_index(name, 'todos', columns, unique=False, sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    bind = op.get_bind()
    present = {ix['name'] for ix in sa.inspect(bind).get_indexes('todos')}
    for name, columns in OLD.items():
        if name in present:
            op.drop_index(name, table_name='todos')
        op.create_index(name, 'todos', columns, unique=False)
