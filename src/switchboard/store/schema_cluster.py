"""Tables that make several instances on one PostgreSQL database one system (issue 18)."""

from __future__ import annotations

from sqlalchemy import Column, String, Table, Text

from switchboard.store.schema import metadata

# Shared rate windows (store/windows.py): one row per key, ``buckets`` the JSON
# ``{"b": [[start, end, count], ...], "t": taken}``: ``count`` admissions whose calls fall in
# ``[start, end)`` (microseconds on the database's clock), buckets a sixtieth of the window wide, only
# those some window reaching now can touch kept, so the row stays small whatever the limit; ``t`` is
# what the last admission took (its RETURNING). Used on PostgreSQL; declared on both engines.
rate_buckets = Table(
    "rate_buckets",
    metadata,
    Column("key", String(100), primary_key=True),  # e.g. "hook:nh_..."
    Column("buckets", Text, nullable=False),
)
