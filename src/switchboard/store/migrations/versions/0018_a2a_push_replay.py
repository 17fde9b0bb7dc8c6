"""delivery log and A2A outbox: what a push's replay needs (issue 29)

* ``notify_deliveries.event_seq``: the task's sequence number of the transition an A2A push carried
  (its ``x-switchboard-sequence``), so a replay sends that event again from the task's event log.
  NULL for notify rows and for A2A rows logged before this revision: those cannot be replayed.
* ``a2a_push_outbox.reason``: ``replay`` on a row a resend or recover queued (NULL for a transition's
  push), so its delivery-log row says so.

Plain ``ADD COLUMN`` (nullable, no default): no table copy on SQLite, no rewrite on PostgreSQL.
Idempotent, like the revisions below it.

Revision ID: a2a_push_replay
Revises: hook_rate_limit
"""

import sqlalchemy as sa
from alembic import op


revision = 'a2a_push_replay'
down_revision = 'hook_rate_limit'
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {c['name'] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    if 'event_seq' not in _columns('notify_deliveries'):
        op.add_column('notify_deliveries', sa.Column('event_seq', sa.BigInteger(), nullable=True))
    if 'reason' not in _columns('a2a_push_outbox'):
        op.add_column('a2a_push_outbox', sa.Column('reason', sa.String(length=16), nullable=True))


def downgrade() -> None:
    # Not in batch mode, as 0017: plain DROP COLUMN (SQLite 3.35+), no copy of the table.
    op.drop_column('a2a_push_outbox', 'reason')
    op.drop_column('notify_deliveries', 'event_seq')
