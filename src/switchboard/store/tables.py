"""Every table, core and feature: import this (not schema.py) wherever the whole schema must be known
(migrations, the migration-equals-declaration test)."""

from __future__ import annotations

from switchboard.store import (  # noqa: F401  (declare their tables)
    schema_a2a,
    schema_cluster,
    schema_console,
    schema_web,
)
from switchboard.store.schema import metadata

__all__ = ["metadata"]
