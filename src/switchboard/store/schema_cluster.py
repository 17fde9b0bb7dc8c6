"""Tables that make several instances on one PostgreSQL database one system (issue 18)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, String, Table

from switchboard.store.schema import metadata

# Shared rate windows (store/windows.py): ``limit`` slots per key, each holding the time of one
# admission (microseconds on the database's clock). An admission takes a slot whose time is more than
# a window old, so no window ever holds more than ``limit`` admissions for the key, across every
# process and instance. Used on PostgreSQL; declared on both engines like every table.
rate_slots = Table(
    "rate_slots",
    metadata,
    Column("key", String(100), primary_key=True),  # e.g. "hook:nh_..."
    Column("slot", Integer, primary_key=True, autoincrement=False),
    Column("at", BigInteger, nullable=False),
)
