"""Prefixed ULID identifiers: sortable, unguessable enough for ids, and self-describing in logs."""

from __future__ import annotations

import os
import socket

from ulid import ULID


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"


def instance_id() -> str:
    """This process's name in logs, metrics and /healthz when SWITCHBOARD_INSTANCE_ID is not set."""
    return f"{socket.gethostname()}-{os.getpid()}-{new_id('i')[-6:]}"


def todo_id() -> str:
    return new_id("td")


def looks_like(prefix: str, value: object) -> bool:
    """Cheap shape check so malformed ids are ``not_found`` without a query."""
    return isinstance(value, str) and value.startswith(prefix + "_") and len(value) == len(prefix) + 27
