"""rate_windows: shared rate windows, so a limit holds for the cluster (issue 18)

Idempotent, like the revisions below it: it creates the table only when it is missing, so a database
stamped back one revision upgrades again safely (the readiness and first-hour tests do that).

Revision ID: rate_windows
Revises: repair
"""

import sqlalchemy as sa
from alembic import op


revision = 'rate_windows'
down_revision = 'repair'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if 'rate_slots' in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        'rate_slots',
        sa.Column('key', sa.String(length=100), nullable=False),
        sa.Column('slot', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('at', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('key', 'slot', name=op.f('pk_rate_slots')),
    )


def downgrade() -> None:
    op.drop_table('rate_slots')
