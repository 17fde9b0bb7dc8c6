"""Liveness and readiness (docs/self-hosting.md, "Health checks").

``/healthz`` answers while the process serves HTTP at all: restart the process when it stops answering.
``/readyz`` answers 200 only when this instance can do its work: the database answers within
``DB_TIMEOUT`` and its schema is the one this build runs, and the background workers that deliver
notifications are running. Otherwise 503 with every reason, so a load balancer takes the instance out
of rotation and an operator reads why.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.exc import SQLAlchemyError

from switchboard.services import Services
from switchboard.store.errors import StoreUnavailable

DB_TIMEOUT = 2.0  # seconds: a probe must answer well within a load balancer's own timeout
A2A_WORKER_TASK = "a2a-push-worker"  # the name switchboard.a2a.worker gives its delivery loop


async def readiness(services: Services) -> list[str]:
    """Why this instance is not ready; empty when it is."""
    reasons = await _database(services)
    reasons += _notify_workers(services)
    reasons += _a2a_worker(services)
    return reasons


async def _database(services: Services) -> list[str]:
    try:
        async with asyncio.timeout(DB_TIMEOUT):
            status = await services.db.schema_status()
    except TimeoutError:
        return [f"database did not answer within {DB_TIMEOUT:g} s"]
    except (StoreUnavailable, SQLAlchemyError, OSError) as exc:
        return [f"database unreachable ({type(exc).__name__})"]
    if status.state == "unknown":
        return [f"schema at {status.current}, unknown to this build (head {status.head})"]
    if status.state != "head":
        return [
            f"schema at {status.current or 'none'}, behind head {status.head}: run `switchboard db upgrade`"
        ]
    return []


def _notify_workers(services: Services) -> list[str]:
    """Every notify worker child is running and reading what it is sent (a child that stops reading
    lets its pipe fill past the dispatcher's buffer: wedged)."""
    from switchboard.notify.component import NotifyComponent  # the features load with the app, not here
    from switchboard.notify.process import RemoteDispatcher

    component = services.parts.get(NotifyComponent)
    if component is None or not component.enabled:
        return []
    dispatcher = component.dispatcher
    if not isinstance(dispatcher, RemoteDispatcher):  # it runs in this process: as alive as this answer
        return []
    reasons = []
    for worker in dispatcher.workers:
        proc = worker.proc
        if proc is None or proc.returncode is not None:
            reasons.append(f"notify worker {worker.index} not running")
        elif proc.stdin is not None and proc.stdin.transport.get_write_buffer_size() > dispatcher.max_buffer:
            reasons.append(f"notify worker {worker.index} not reading (wedged)")
    return reasons


def _a2a_worker(services: Services) -> list[str]:
    from switchboard.a2a.component import A2AComponent

    component = services.parts.get(A2AComponent)
    if component is None or not component.push_enabled:
        return []
    alive = any(task.get_name() == A2A_WORKER_TASK and not task.done() for task in asyncio.all_tasks())
    return [] if alive else ["A2A push worker not running"]
