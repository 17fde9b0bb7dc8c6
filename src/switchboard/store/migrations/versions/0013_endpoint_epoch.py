"""endpoint_epoch: a counter that only endpoint writes move, for the verified-credential cache (issue 18)

The MCP verifier keeps a verified credential's endpoint row while it is provably current. On SQLite it
used ``PRAGMA data_version``, which moves on every commit to the file: under claim and ack traffic
every call is a write, so the cache never held. ``endpoint_epoch`` is one row whose ``n`` is moved, in
the writer's own transaction whatever process writes (the server, the CLI), by triggers on every
INSERT, UPDATE and DELETE of ``endpoints`` (a cascade from a human's delete included). Every column
counts: the cached row is the whole row the gate uses (token hash, scope, presence, slug, owner), and
no endpoint column is written per call. The verifier reads ``n`` before its read and trusts the row
while ``n`` is unchanged.

On PostgreSQL the table exists (one schema for both engines) but has no triggers and is not read: the
cluster relay's ``pg_notify`` invalidates cached rows there.

Idempotent, like the revisions below it: it creates only what is missing, so a database stamped back
one revision upgrades again safely (the readiness and first-hour tests do that).

Revision ID: endpoint_epoch
Revises: rate_buckets
"""

import sqlalchemy as sa
from alembic import op


revision = 'endpoint_epoch'
down_revision = 'rate_buckets'
branch_labels = None
depends_on = None

# trigger name -> the event it follows (SQLite only)
TRIGGERS = {
    'endpoint_epoch_after_insert': 'AFTER INSERT ON endpoints',
    'endpoint_epoch_after_update': 'AFTER UPDATE ON endpoints',
    'endpoint_epoch_after_delete': 'AFTER DELETE ON endpoints',
}


def upgrade() -> None:
    bind = op.get_bind()
    if 'endpoint_epoch' not in sa.inspect(bind).get_table_names():
        op.create_table(
            'endpoint_epoch',
            sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
            sa.Column('n', sa.BigInteger(), nullable=False),
            sa.CheckConstraint('id = 1', name='ck_endpoint_epoch_one_row'),
            sa.PrimaryKeyConstraint('id', name=op.f('pk_endpoint_epoch')),
        )
    op.execute(
        "INSERT INTO endpoint_epoch (id, n) SELECT 1, 0 WHERE NOT EXISTS (SELECT 1 FROM endpoint_epoch)"
    )
    if bind.dialect.name == 'sqlite':
        for name, event in TRIGGERS.items():
            op.execute(
                f"CREATE TRIGGER IF NOT EXISTS {name} {event} "
                "BEGIN UPDATE endpoint_epoch SET n = n + 1 WHERE id = 1; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table('endpoint_epoch')
