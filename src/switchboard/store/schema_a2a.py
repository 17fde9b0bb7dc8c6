"""A2A task and push-notification tables (issue 6), on the shared metadata. Migration 0003."""

from __future__ import annotations

from switchboard.store.schema import metadata

__all__ = ["metadata"]
