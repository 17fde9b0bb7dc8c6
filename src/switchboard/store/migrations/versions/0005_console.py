"""operator console: todo events, backlog samples, human invites

Revision ID: console
Revises: 0004
"""

from alembic import op
import sqlalchemy as sa


revision = 'console'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('todo_events',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('todo_id', sa.String(length=40), nullable=False),
    sa.Column('transition', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.String(length=40), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_expires_at', sa.BigInteger(), nullable=True),
    sa.Column('actor', sa.String(length=320), nullable=True),
    sa.Column('instance_id', sa.String(length=100), nullable=True),
    sa.Column('at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['todo_id'], ['todos.id'], name=op.f('fk_todo_events_todo_id_todos'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_todo_events'))
    )
    with op.batch_alter_table('todo_events', schema=None) as batch_op:
        batch_op.create_index('ix_todo_events_todo_id_at', ['todo_id', 'at'], unique=False)

    op.create_table('backlog_samples',
    sa.Column('endpoint_id', sa.String(length=40), nullable=False),
    sa.Column('queue', sa.String(length=64), nullable=False),
    sa.Column('bucket', sa.BigInteger(), nullable=False),
    sa.Column('pending', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_backlog_samples_endpoint_id_endpoints'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('endpoint_id', 'queue', 'bucket', name=op.f('pk_backlog_samples'))
    )
    with op.batch_alter_table('backlog_samples', schema=None) as batch_op:
        batch_op.create_index('ix_backlog_samples_bucket', ['bucket'], unique=False)

    op.create_table('human_invites',
    sa.Column('id_hash', sa.String(length=64), nullable=False),
    sa.Column('email', sa.String(length=320), nullable=False),
    sa.Column('is_operator', sa.Boolean(), nullable=False),
    sa.Column('invited_by', sa.String(length=40), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['invited_by'], ['humans.id'], name=op.f('fk_human_invites_invited_by_humans'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id_hash', name=op.f('pk_human_invites')),
    sa.UniqueConstraint('email', name=op.f('uq_human_invites_email'))
    )


def downgrade() -> None:
    op.drop_table('human_invites')
    with op.batch_alter_table('backlog_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_backlog_samples_bucket')
    op.drop_table('backlog_samples')
    with op.batch_alter_table('todo_events', schema=None) as batch_op:
        batch_op.drop_index('ix_todo_events_todo_id_at')
    op.drop_table('todo_events')
