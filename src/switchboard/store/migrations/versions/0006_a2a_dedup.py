"""a2a: messageId dedup, task event log for streaming, default queue, longer ids (issue 20)

Revision ID: a2a_dedup
Revises: console
"""

from alembic import op
import sqlalchemy as sa


revision = 'a2a_dedup'
down_revision = 'console'
branch_labels = None
depends_on = None


# On SQLite a batch alter recreates a table: the old one is dropped, and with foreign keys on (and a
# migration runs in a transaction, where the pragma cannot be turned off) the drop cascades to the rows
# that reference it. Recreating a2a_tasks would delete every push config and outbox row, and recreating
# push_notification_configs every outbox row. So on SQLite those rows are kept aside and put back.
_KEPT = ('push_notification_configs', 'a2a_push_outbox')  # parents first


def _keep(bind: sa.engine.Connection) -> dict[str, list[str]]:
    columns = {}
    for table in _KEPT:
        columns[table] = [row[1] for row in bind.exec_driver_sql(f'PRAGMA table_info("{table}")')]
        bind.exec_driver_sql(f'CREATE TEMP TABLE "kept_{table}" AS SELECT * FROM "{table}"')
    return columns


def _restore(bind: sa.engine.Connection, columns: dict[str, list[str]]) -> None:
    for table in reversed(_KEPT):
        bind.exec_driver_sql(f'DELETE FROM "{table}"')
    for table in _KEPT:
        names = ", ".join(f'"{c}"' for c in columns[table])
        bind.exec_driver_sql(f'INSERT INTO "{table}" ({names}) SELECT {names} FROM "kept_{table}"')
        bind.exec_driver_sql(f'DROP TABLE "kept_{table}"')


def upgrade() -> None:
    bind = op.get_bind()
    kept = _keep(bind) if bind.dialect.name == 'sqlite' else None
    op.create_table('a2a_task_events',
    sa.Column('task_id', sa.String(length=40), nullable=False),
    sa.Column('seq', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['a2a_tasks.todo_id'], name=op.f('fk_a2a_task_events_task_id_a2a_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('task_id', 'seq', name=op.f('pk_a2a_task_events'))
    )
    op.create_table('a2a_endpoint_settings',
    sa.Column('endpoint_id', sa.String(length=40), nullable=False),
    sa.Column('default_queue', sa.String(length=64), nullable=True),
    sa.Column('updated_at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_a2a_endpoint_settings_endpoint_id_endpoints'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('endpoint_id', name=op.f('pk_a2a_endpoint_settings'))
    )
    with op.batch_alter_table('a2a_tasks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('message_id', sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column('followups', sa.Text(), nullable=True))
        batch_op.alter_column('context_id', existing_type=sa.String(length=64), type_=sa.String(length=128), existing_nullable=False)
        batch_op.create_index('ux_a2a_tasks_message', ['owner_endpoint_id', 'message_id'], unique=True)
    with op.batch_alter_table('push_notification_configs', schema=None) as batch_op:
        batch_op.alter_column('config_id', existing_type=sa.String(length=64), type_=sa.String(length=255), existing_nullable=False)
    if kept is not None:
        _restore(bind, kept)


def downgrade() -> None:
    with op.batch_alter_table('push_notification_configs', schema=None) as batch_op:
        batch_op.alter_column('config_id', existing_type=sa.String(length=255), type_=sa.String(length=64), existing_nullable=False)
    with op.batch_alter_table('a2a_tasks', schema=None) as batch_op:
        batch_op.drop_index('ux_a2a_tasks_message')
        batch_op.alter_column('context_id', existing_type=sa.String(length=128), type_=sa.String(length=64), existing_nullable=False)
        batch_op.drop_column('followups')
        batch_op.drop_column('message_id')
    op.drop_table('a2a_endpoint_settings')
    op.drop_table('a2a_task_events')
