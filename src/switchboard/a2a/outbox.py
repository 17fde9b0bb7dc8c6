"""The A2A push outbox as the a2a package sees it: the statements live in ``store/push_outbox.py``.

Enqueueing mints each push's message id here (``webhook-id``, the same on every attempt), so the
store layer never depends on the push package.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.push import new_message_id
from switchboard.store import push_outbox
from switchboard.store.push_outbox import Backlog, Claimed, OutboxStore

__all__ = ["Backlog", "Claimed", "OutboxStore", "enqueue"]


async def enqueue(
    conn: AsyncConnection,
    *,
    task_id: str,
    seq: int,
    body: bytes,
    targets: Sequence[tuple[str, str]],
    now_ms: int,
) -> None:
    """One pending row per (config, this transition), in the transition's own transaction."""
    await push_outbox.enqueue(
        conn,
        task_id=task_id,
        seq=seq,
        body=body,
        targets=[(config_row_id, host, new_message_id()) for config_row_id, host in targets],
        now_ms=now_ms,
    )
