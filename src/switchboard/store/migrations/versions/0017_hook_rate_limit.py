"""notify_hooks: a per-hook rate limit below SPEC-0024's ceiling (issue 29)

``rate_per_minute``: the most notifications of this hook any 60-second window admits, set by its
endpoint (1..120). NULL means the spec's 120 (the server's ``SWITCHBOARD_NOTIFY_RATE_PER_MINUTE``), so
every existing hook keeps the limit it had. Plain ``ADD COLUMN`` (nullable, no default): no table copy
on SQLite, no rewrite on PostgreSQL. Idempotent, like the revisions below it.

Revision ID: hook_rate_limit
Revises: retention
"""

import sqlalchemy as sa
from alembic import op


revision = 'hook_rate_limit'
down_revision = 'retention'
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c['name'] for c in sa.inspect(op.get_bind()).get_columns('notify_hooks')}
    if 'rate_per_minute' not in columns:
        op.add_column('notify_hooks', sa.Column('rate_per_minute', sa.Integer(), nullable=True))


def downgrade() -> None:
    # Not in batch mode, as 0015: plain DROP COLUMN (SQLite 3.35+), no copy of the table.
    op.drop_column('notify_hooks', 'rate_per_minute')
