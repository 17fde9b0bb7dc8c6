"""Web UI and MCP OAuth tables (issue 5), on the shared metadata. Migration 0004."""

from __future__ import annotations

from switchboard.store.schema import metadata

__all__ = ["metadata"]
