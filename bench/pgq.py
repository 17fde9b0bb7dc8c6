"""Scenario 4's peer: pgqueuer (PyPI ``pgqueuer``), a PostgreSQL job queue, on the bench's cluster.

Used as its documentation shows: ``Queries(AsyncpgDriver(conn)).install()`` in a database of its own on
the same cluster (so it never touches Switchboard's tables), one batch ``enqueue`` of the jobs, then in
each of the two client processes ``consumers`` queue managers, each ``QueueManager(Queries(AsyncpgDriver
(conn)))`` on its own connection with one ``@qm.entrypoint("job")`` that only records the job's id, run
with ``qm.run(batch_size=..., mode=QueueExecutionMode.drain)``: ``batch_size=1`` is one job per
dequeue (Switchboard's ``claim_next``), 10 is pgqueuer's default.

What is measured: the jobs run per second, from the first job run to the last across both processes
(same clock; the job body does nothing); each dequeue's time (the claim), timed by overriding ``Queries.dequeue`` (a
public method) around the real one; afterwards every job is checked to have run once (ids distinct
across all consumers) and to be logged ``successful`` by pgqueuer (``Queries.job_status``), none left
in its queue (``Queries.queue_size``).

pgqueuer's own command line (``pgq run``) runs on uvloop when it is installed; here both pgqueuer and
Switchboard's bench server run on asyncio's loop.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

ENTRYPOINT = "job"
#: When nothing is queued, a draining manager waits this long for a notice before it checks again
#: (pgqueuer's default is 30 s: only the end of a run is affected, and the rate is not timed there).
DRAIN_POLL = timedelta(seconds=0.5)


def dsn(url: str) -> str:
    """The SQLAlchemy URL of the cluster's database as a plain libpq DSN for asyncpg."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def load(url: str, jobs: int, *, install: bool) -> list[int]:
    """Install pgqueuer's schema (once) and enqueue ``jobs`` jobs in one batch; their ids."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn(url))
    try:
        queries = Queries(AsyncpgDriver(conn))
        if install:
            await queries.install()
        ids = await queries.enqueue([ENTRYPOINT] * jobs, [None] * jobs, [0] * jobs)
        return [int(i) for i in ids]
    finally:
        await conn.close()


async def check(url: str, ids: list[int]) -> dict[str, Any]:
    """pgqueuer's own record of the run: each job's last status, and what is left in its queue."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn(url))
    try:
        queries = Queries(AsyncpgDriver(conn))
        statuses: dict[str, int] = {}
        for _, status in await queries.job_status(ids):
            statuses[status] = statuses.get(status, 0) + 1
        left = sum(s.count for s in await queries.queue_size())
        return {"statuses": statuses, "left_in_queue": left}
    finally:
        await conn.close()


async def consume(spec: dict[str, Any]) -> dict[str, Any]:
    """The client-process job: ``spec["consumers"]`` queue managers draining the queue, from
    ``spec["start_at"]`` (wall clock, so both processes start together)."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    claim_latency: list[float] = []
    ran: list[int] = []
    stamps: list[float] = []

    class TimedQueries(Queries):
        async def dequeue(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            jobs = await super().dequeue(*args, **kwargs)
            if jobs:
                claim_latency.append(time.monotonic() - t0)
            return jobs

    connections = [await asyncpg.connect(dsn(spec["url"])) for _ in range(spec["consumers"])]
    managers = []
    for conn in connections:
        qm = QueueManager(TimedQueries(AsyncpgDriver(conn)))

        @qm.entrypoint(ENTRYPOINT)
        async def job(j: Job) -> None:
            stamps.append(time.time())
            ran.append(int(j.id))

        managers.append(qm)
    delay = spec.get("start_at", 0.0) - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    started = time.time()
    try:
        async with asyncio.timeout(spec.get("max_seconds", 60.0)):
            await asyncio.gather(
                *(
                    qm.run(
                        batch_size=spec["batch_size"],
                        mode=QueueExecutionMode.drain,
                        dequeue_timeout=DRAIN_POLL,
                    )
                    for qm in managers
                )
            )
        timed_out = False
    except TimeoutError:
        timed_out = True
    ended = time.time()
    await asyncio.gather(*(c.close() for c in connections))
    return {
        "ran": ran,
        "first": min(stamps, default=0.0),
        "last": max(stamps, default=0.0),
        "started": started,
        "ended": ended,
        "claim_latency": claim_latency,
        "timed_out": timed_out,
    }
