"""Prefixed ULID identifiers: sortable, unguessable enough for ids, and self-describing in logs."""

from __future__ import annotations

from ulid import ULID


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"


def todo_id() -> str:
    return new_id("td")


def looks_like(prefix: str, value: object) -> bool:
    """Cheap shape check so malformed ids are ``not_found`` without a query."""
    return isinstance(value, str) and value.startswith(prefix + "_") and len(value) == len(prefix) + 27
