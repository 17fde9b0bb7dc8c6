"""a2a: input-required (a worker's question) and follow-ups since the claim (issue 20)

Revision ID: a2a_input
Revises: repair
"""

from alembic import op
import sqlalchemy as sa


revision = 'a2a_input'
down_revision = 'repair'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('a2a_tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('input_required_at', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('claim_followups', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('a2a_tasks', schema=None) as batch_op:
        batch_op.drop_column('claim_followups')
        batch_op.drop_column('input_required_at')
