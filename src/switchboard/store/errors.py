"""Store errors: driver exceptions are translated here, at the storage boundary."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for store failures."""


class StoreUnavailable(StoreError):
    """The database could not be reached; callers answer 503 and retry later."""


class Conflict(StoreError):
    """A uniqueness rule refused the write (for example a duplicate slug)."""


class NotFound(StoreError):
    """The row does not exist or does not belong to the caller."""
