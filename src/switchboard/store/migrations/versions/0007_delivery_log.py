"""delivery log: one row per finished notification (issue 19)

Revision ID: delivery_log
Revises: a2a_dedup
"""

from alembic import op
import sqlalchemy as sa


revision = 'delivery_log'
# The brief said '0004'; 0005_console already hangs off 0004 on main, and two heads would stop
# `migrate` (upgrade to "head"). The lead re-chains the numbers at merge.
down_revision = 'a2a_dedup'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('notify_deliveries',
    sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=8), nullable=False),
    sa.Column('target_id', sa.String(length=64), nullable=False),
    sa.Column('endpoint_id', sa.String(length=40), nullable=True),
    sa.Column('subject_id', sa.String(length=64), nullable=True),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('detail', sa.String(length=40), nullable=True),
    sa.Column('attempts', sa.Text(), nullable=False),
    sa.Column('test', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('finished_at', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('seq', name=op.f('pk_notify_deliveries'))
    )
    with op.batch_alter_table('notify_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notify_deliveries_endpoint_id'), ['endpoint_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_notify_deliveries_finished_at'), ['finished_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_notify_deliveries_target_id'), ['target_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('notify_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notify_deliveries_target_id'))
        batch_op.drop_index(batch_op.f('ix_notify_deliveries_finished_at'))
        batch_op.drop_index(batch_op.f('ix_notify_deliveries_endpoint_id'))
    op.drop_table('notify_deliveries')
