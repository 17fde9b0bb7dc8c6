"""repair the drift left by two landed migrations edited in place

Revision ID: repair
Revises: a2a_input

0003 and 0004 were edited after release: 0003 lost ``a2a_push_outbox.slot_at`` and 0004 gained
``oauth_clients.first_grant_at``. A database created from the released files reached revision 0004 with
the old shapes, so OAuth failed on the missing column. This revision inspects the live table and brings
either history to the same head; it is a no-op on a database built from the edited files.
"""

import sqlalchemy as sa
from alembic import op

revision = 'repair'
down_revision = 'a2a_input'
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {column['name'] for column in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    if 'first_grant_at' not in _columns('oauth_clients'):
        with op.batch_alter_table('oauth_clients', schema=None) as batch_op:
            batch_op.add_column(sa.Column('first_grant_at', sa.BigInteger(), nullable=True))
    if 'slot_at' in _columns('a2a_push_outbox'):
        with op.batch_alter_table('a2a_push_outbox', schema=None) as batch_op:
            batch_op.drop_column('slot_at')


def downgrade() -> None:
    # Both shapes are valid at 0004; the edited one is what 0004's file builds today.
    pass
