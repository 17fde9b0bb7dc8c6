"""Per-queue backlog and oldest-pending age, read at scrape time with one grouped query.

Label policy (docs/self-hosting.md, "Observability"): queue names are tenant data, chosen by whoever
vends endpoints and routes. They are used as label values because an operator needs to see which queue
backs up, but never with a tenant, endpoint or source id beside them (two tenants' ``inbox`` queues are
one series), and at most ``MAX_QUEUES`` of them: the queues with the largest backlog, the rest summed into
``queue="_other"`` (a name no queue can have: queue names start with a letter or digit).
"""

from __future__ import annotations

import asyncio
from typing import Any

from switchboard.obs.logs import get_logger
from switchboard.store.todo_queries import waiting_by_queue

MAX_QUEUES = 50
OTHER = "_other"
READ_TIMEOUT = 2.0

log = get_logger("switchboard.metrics")


async def refresh_queue_gauges(services: Any) -> None:
    metrics = services.metrics
    try:
        async with asyncio.timeout(READ_TIMEOUT), services.db.read() as conn:
            rows = await waiting_by_queue(conn)
    except Exception as exc:  # a scrape must not fail because the database is slow; say so instead
        metrics.queue_stats_errors.inc()
        log.warning("queue statistics unavailable", error_type=type(exc).__name__)
        return
    now_ms = services.clock.now() * 1000
    backlog: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for queue, status, count, first in rows:
        backlog[queue] = backlog.get(queue, 0) + int(count)
        if status == "pending" and first is not None:
            oldest[queue] = max(oldest.get(queue, 0.0), (now_ms - int(first)) / 1000)
    ranked = sorted(backlog, key=lambda q: (-backlog[q], q))
    shown, rest = ranked[:MAX_QUEUES], ranked[MAX_QUEUES:]
    metrics.queue_backlog.clear()
    metrics.queue_oldest_pending.clear()
    for queue in shown:
        metrics.queue_backlog.labels(queue).set(backlog[queue])
        metrics.queue_oldest_pending.labels(queue).set(max(oldest.get(queue, 0.0), 0.0))
    if rest:
        metrics.queue_backlog.labels(OTHER).set(sum(backlog[q] for q in rest))
        metrics.queue_oldest_pending.labels(OTHER).set(max((oldest.get(q, 0.0) for q in rest), default=0.0))
