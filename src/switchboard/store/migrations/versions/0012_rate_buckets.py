"""rate_buckets: shared rate windows kept as one row of time buckets per key (issue 18)

Replaces ``rate_slots`` (one row per admission: ``limit`` rows per key, a million for a raised MCP
limit) by ``rate_buckets``: one row per key whose ``buckets`` hold counts per slice of the window, so a
key's storage is bounded whatever its limit. Nothing reads ``rate_slots`` any more; its rows only
described windows at most a minute old, so it is dropped.

Idempotent, like the revisions below it: it creates what is missing and drops what is left, so a
database stamped back one revision upgrades again safely (the readiness and first-hour tests do that).

Revision ID: rate_buckets
Revises: rate_windows
"""

import sqlalchemy as sa
from alembic import op


revision = 'rate_buckets'
down_revision = 'rate_windows'
branch_labels = None
depends_on = None


def upgrade() -> None:
    tables = sa.inspect(op.get_bind()).get_table_names()
    if 'rate_buckets' not in tables:
        op.create_table(
            'rate_buckets',
            sa.Column('key', sa.String(length=100), nullable=False),
            sa.Column('buckets', sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint('key', name=op.f('pk_rate_buckets')),
        )
    if 'rate_slots' in tables:
        op.drop_table('rate_slots')


def downgrade() -> None:
    op.drop_table('rate_buckets')
    op.create_table(
        'rate_slots',
        sa.Column('key', sa.String(length=100), nullable=False),
        sa.Column('slot', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('at', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('key', 'slot', name=op.f('pk_rate_slots')),
    )
