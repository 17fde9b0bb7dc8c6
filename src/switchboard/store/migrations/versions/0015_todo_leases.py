"""todos: a lease handle per claim, a claim's request key, and an index for retention (issue 28)

* ``lease_id``: a fresh random handle written by every claim. The holder verbs (ack, fail, heartbeat,
  ask) act only when the caller names the current one, so a worker whose claim ended (its lease ran
  out, the todo was claimed again, requeued or finished) changes nothing. Kept after the claim ends, so
  a late call can be told ``lease_lost`` (another claim) from ``canceled`` (its own claim, canceled).
* ``claim_key``: the client's request key of the claim that holds the todo; a claim retried with the
  same key while the lease lives answers the same todos (``ix_todos_claim_key``, claimed rows only).
* ``ix_todos_terminal``: the retention sweep's scan, terminal rows by ``updated_at`` only, so pending
  and claimed rows are never in the index it walks.

Plain ``ADD COLUMN`` (nullable, no default) and ``CREATE INDEX``: no table copy on SQLite, and on
PostgreSQL no rewrite of ``todos``. Idempotent, like the revisions below it.

Revision ID: todo_leases
Revises: todo_state_indexes
"""

import sqlalchemy as sa
from alembic import op


revision = 'todo_leases'
down_revision = 'todo_state_indexes'
branch_labels = None
depends_on = None

CLAIM_KEY = "claim_key IS NOT NULL AND status = 'claimed'"
TERMINAL = "status IN ('done', 'dead', 'canceled')"


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    columns = {c['name'] for c in inspector.get_columns('todos')}
    if 'lease_id' not in columns:
        op.add_column('todos', sa.Column('lease_id', sa.String(40), nullable=True))
    if 'claim_key' not in columns:
        op.add_column('todos', sa.Column('claim_key', sa.String(100), nullable=True))
    indexes = {i['name'] for i in inspector.get_indexes('todos')}
    if 'ix_todos_claim_key' not in indexes:
        op.create_index(
            'ix_todos_claim_key',
            'todos',
            ['endpoint_id', 'claim_key'],
            sqlite_where=sa.text(CLAIM_KEY),
            postgresql_where=sa.text(CLAIM_KEY),
        )
    if 'ix_todos_terminal' not in indexes:
        op.create_index(
            'ix_todos_terminal',
            'todos',
            ['updated_at'],
            sqlite_where=sa.text(TERMINAL),
            postgresql_where=sa.text(TERMINAL),
        )


def downgrade() -> None:
    op.drop_index('ix_todos_terminal', table_name='todos')
    op.drop_index('ix_todos_claim_key', table_name='todos')
    # Not in batch mode: on SQLite that copies and drops ``todos``, and the drop would cascade.
    op.drop_column('todos', 'claim_key')
    op.drop_column('todos', 'lease_id')
