"""Fenced leases (issue 28): every claim writes a fresh handle (``todos.lease_id``) and the holder verbs
act only when the caller names the current one.

A worker stalls, its lease runs out, the reaper requeues the todo and another worker claims it: the
first worker's late ``heartbeat``, ``fail``, ``ack`` or ``ask`` must change nothing. The handle is kept
after the claim ends, so a refused call can be explained from the row alone (:func:`verdict`):
``lease_lost`` when the caller's claim is over (another claim, a requeue, its lease ran out),
``canceled`` when its own claim was ended by a cancel (console, A2A ``CancelTask``), which the holder
hears on its next heartbeat.

The handle is made where the claim is made: in SQL for the claim path's batch statements (one per
row, no read first), in Python for the one-row claim (:func:`new_lease`); both are ``ls_`` and 32 hex
digits of randomness, never derived from the todo id or the attempt (an operator's requeue resets the
attempt, so an attempt number could repeat).
"""

from __future__ import annotations

import secrets
from typing import Literal, NamedTuple

# One handle per claimed row, inside the claim's UPDATE.
LEASE_SQL_PG = "'ls_' || replace(CAST(gen_random_uuid() AS text), '-', '')"
LEASE_SQL_SQLITE = "'ls_' || lower(hex(randomblob(16)))"
LEASE_LENGTH = 35

Verdict = Literal["not_found", "held", "lease_lost", "canceled", "done"]


def new_lease() -> str:
    return f"ls_{secrets.token_hex(16)}"


class Holding(NamedTuple):
    """What a refused holder call is explained from: the row's status and latest claim."""

    status: str
    lease_id: str | None
    lease_expires_at: int | None


def verdict(row: Holding | None, lease: str, now_ms: int) -> Verdict:
    """Whether the caller naming ``lease`` holds the todo now, and if not, why.

    ``done`` is this very claim's own ack, already committed (a retried ack whose answer was lost);
    ``canceled`` is this claim's todo canceled under it; anything else that is not a live claim under
    this handle is ``lease_lost``, whatever the todo's state now."""
    if row is None:
        return "not_found"
    if row.lease_id is None or not secrets.compare_digest(row.lease_id.encode(), lease.encode()):
        return "lease_lost"
    if row.status == "claimed":
        live = row.lease_expires_at is not None and row.lease_expires_at >= now_ms
        return "held" if live else "lease_lost"
    if row.status == "canceled":
        return "canceled"
    if row.status == "done":
        return "done"
    return "lease_lost"
