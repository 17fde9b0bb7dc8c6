"""Notification bodies (REQ-5, REQ-9): identifiers and a neutralized summary only, never payload."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from switchboard.core.text import summary as neutral_summary
from switchboard.store.transitions import Transition

MAX_BODY = 4096
SUMMARY_LIMIT = 200


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def todo_ready(t: Transition, endpoint_slug: str, now: float) -> bytes:
    """``todo.ready``: exactly the REQ-5 fields; kind and source omitted when the todo has none."""
    body: dict[str, Any] = {
        "type": "todo.ready",
        "reason": "created" if t.transition == "created" else "requeued",
        "todo_id": t.todo_id,
        "queue": t.queue,
    }
    if t.kind:
        body["kind"] = t.kind
    if t.source:
        body["source"] = t.source
    body.update(
        {
            "summary": neutral_summary(t.title, SUMMARY_LIMIT),
            "endpoint": endpoint_slug,
            "attempt": t.attempt,
            "created_at": iso(now),
        }
    )
    raw = encode(body)
    while len(raw) > MAX_BODY and body["summary"]:
        # Only reachable with pathological escapes; the identifiers are bounded by the schema.
        body["summary"] = body["summary"][: len(body["summary"]) // 2]
        raw = encode(body)
    return raw


def test_ready(endpoint_slug: str, now: float) -> bytes:
    """The endpoint card's "send test": a ``todo.ready`` that names no todo and says it is a test."""
    return encode(
        {
            "type": "todo.ready",
            "reason": "test",
            "test": True,
            "todo_id": None,
            "queue": None,
            "summary": "Switchboard test notification",
            "endpoint": endpoint_slug,
            "attempt": 0,
            "created_at": iso(now),
        }
    )


def todos_backlog(
    endpoint_slug: str, reason: str, pending: int, queues: Sequence[str], oldest_seconds: int, now: float
) -> bytes:
    """``todos.backlog``: counts, queue names and the oldest age only (REQ-9)."""
    return encode(
        {
            "type": "todos.backlog",
            "reason": reason,
            "endpoint": endpoint_slug,
            "pending": pending,
            "queues": list(queues),
            "oldest_pending_seconds": oldest_seconds,
            "created_at": iso(now),
        }
    )
