"""a2a_push_outbox: an index on task_id, for the retention sweep (issue 28)

Deleting an ``a2a_tasks`` row makes the database find its ``a2a_push_outbox`` rows by ``task_id`` (the
ON DELETE CASCADE). No index led with that column, so each deleted task scanned the whole outbox, and
the retention sweep deletes hundreds of tasks per statement. Plain ``CREATE INDEX``, idempotent like
the revisions below it.

Revision ID: retention
Revises: todo_leases
"""

import sqlalchemy as sa
from alembic import op


revision = 'retention'
down_revision = 'todo_leases'
branch_labels = None
depends_on = None


def upgrade() -> None:
    indexes = {i['name'] for i in sa.inspect(op.get_bind()).get_indexes('a2a_push_outbox')}
    if 'ix_a2a_push_outbox_task' not in indexes:
        op.create_index('ix_a2a_push_outbox_task', 'a2a_push_outbox', ['task_id'])


def downgrade() -> None:
    op.drop_index('ix_a2a_push_outbox_task', table_name='a2a_push_outbox')
