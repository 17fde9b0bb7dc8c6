"""One notification as the dispatcher's parts hand it around (SPEC-0024's terms: one logical message
about one event, with at most three attempts and one outcome)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from switchboard.store.notify_deliveries import Attempt


@dataclass(slots=True)
class Notification:
    """Slotted, and holding nothing per instance it does not need: up to ``SWITCHBOARD_NOTIFY_QUEUE_SIZE``
    of them wait in each worker's queue while receivers are down (scenario 3 of docs/benchmarks.md)."""

    id: str
    type: str  # todo.ready | todos.backlog
    hook_id: str
    endpoint_id: str
    owner_id: str
    todo_id: str | None
    body: bytes
    url: str = field(repr=False)  # the hook's URL as read at match time; never logged (REQ-11)
    attempts: int = 0
    started: float = field(default_factory=time.monotonic)
    outcome: str | None = None  # delivered | failed | dropped, once it has one (counted once)
    stage: str = "queued"  # where a worker is with it, for the REQ-12 log line of an unexpected error
    reason: str | None = None  # the body's reason (created, requeued, clock_in, test, ...)
    test: bool = False  # a test send from the endpoint card
    tried: tuple[Attempt, ...] = ()  # for the delivery log, once it has an outcome (at most 3)
    detail: str | None = None  # why it was dropped, or its last error class, once it has an outcome


Signer = Callable[[Sequence[str], str, int, bytes], dict[str, str]]
"""Builds one attempt's signed headers: ``switchboard.push.standard_headers`` (a seam for tests)."""


def probe_result(n: Notification) -> dict[str, Any]:
    """The answer of a test send from the endpoint card."""
    last = n.tried[-1] if n.tried else None
    return {
        "notification_id": n.id,
        "outcome": n.outcome,
        "status": last.status if last else None,
        "error": last.error if last else None,
        "detail": n.detail,
        "ms": last.ms if last else None,
    }
