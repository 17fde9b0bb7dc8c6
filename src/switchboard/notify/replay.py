"""Replay and recovery (issue 29): a finished notification sent again, from its delivery-log row.

Why it is shaped like this:

* The delivery log holds identifiers only (REQ-7: nothing pending is persisted), so a replay rebuilds
  the body at send time from the todo and the hook as they are now. A todo that no longer exists, or a
  hook that is disabled or deleted, is a clear error and nothing is sent.
* A replay is a :class:`Notification` with the logged id (the receiver's ``webhook-id`` is the same;
  the signature and timestamp are new, made at each attempt) and reason ``replay``, offered to the
  dispatcher's intake like any other: the per-hook window counts it, the bounded queue holds it, the
  workers give it a new attempt cycle, and its outcome is a delivery-log row of its own.
"""

from __future__ import annotations

from typing import Any

from switchboard.notify import body as bodies
from switchboard.notify.notification import Notification
from switchboard.store.transitions import Transition

RECOVER_MAX = 1000  # notifications one recover sends at most (the per-hook window drops beyond 120/min)
REPLAYABLE = ("todo.ready", "todos.backlog")


def ready_body(todo: Any, endpoint_slug: str, now: float) -> bytes:
    """``todo.ready`` rebuilt from the todo row as it is now (REQ-5's fields, as at match time)."""
    t = Transition(
        todo_id=todo.id,
        endpoint_id=todo.endpoint_id,
        queue=todo.queue,
        kind=todo.kind,
        source=todo.source,
        title=todo.title,
        attempt=todo.attempt,
        transition="created" if todo.attempt == 0 else "requeued",
        reason=None,
        push_eligible=True,
        push_excluded=False,
        at=now,
    )
    return bodies.todo_ready(t, endpoint_slug, now)


def replayed(request: dict[str, Any], *, owner_id: str, url: str, body: bytes) -> Notification:
    """The notification a replay sends: the logged id, reason ``replay``, a fresh attempt cycle."""
    return Notification(
        id=str(request["delivery_id"]),
        type=str(request["type"]),
        hook_id=str(request["hook_id"]),
        endpoint_id=str(request["endpoint_id"]),
        owner_id=owner_id,
        todo_id=request.get("todo_id"),
        body=body,
        url=url,
        reason="replay",
    )
