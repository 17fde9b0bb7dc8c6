"""a2a: input-required (a worker's question) and follow-ups since the claim (issue 20)

Idempotent, like the repair below it: it adds only the columns that are missing, so a database stamped
back one revision upgrades again safely (the readiness and first-hour tests do that).

Revision ID: a2a_input
Revises: claim_index
"""

import sqlalchemy as sa
from alembic import op


revision = 'a2a_input'
down_revision = 'claim_index'
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {column['name'] for column in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    # Plain ADD COLUMN (SQLite has it): a batch copy would drop and recreate a2a_tasks, and the drop
    # cascades to its push configs and outbox rows.
    have = _columns('a2a_tasks')
    if 'input_required_at' not in have:
        op.add_column('a2a_tasks', sa.Column('input_required_at', sa.BigInteger(), nullable=True))
    if 'claim_followups' not in have:
        op.add_column('a2a_tasks', sa.Column('claim_followups', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('a2a_tasks', schema=None) as batch_op:
        batch_op.drop_column('claim_followups')
        batch_op.drop_column('input_required_at')
