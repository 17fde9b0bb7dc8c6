"""The dispatcher and hook store as the server and its notify worker process both build them.

A module of its own so that the worker process imports only what delivery needs: not the MCP tools,
the web routes or the A2A server the component wires up (each worker start pays for every import)."""

from __future__ import annotations

from collections.abc import Sequence

from switchboard.notify.dispatcher import Dispatcher
from switchboard.notify.store import HookStore
from switchboard.push.from_settings import notify_outbound
from switchboard.services import Services
from switchboard.store.notify_deliveries import DeliveryLog
from switchboard.store.windows import SharedWindows


def hook_store(services: Services) -> HookStore:
    """The hook store as the server and its notify worker process both build it."""
    grace = services.settings.notify_grace_hours * 3600
    return HookStore(services.db, services.envelope, services.clock, grace_seconds=grace)


def build_dispatcher(
    services: Services,
    store: HookStore,
    *,
    retry_delays: Sequence[float],
    drain_timeout: float = 5.0,
    queue_size: int | None = None,
    workers: int | None = None,
) -> Dispatcher:
    """The dispatcher as the server runs it, in this process or in the notify worker process.
    ``queue_size`` and ``workers``: a worker process's share of the instance's queue bound and of its
    concurrent attempts (default: all of them)."""
    s = services.settings
    _, sender = notify_outbound(services)
    return Dispatcher(
        hooks=store,
        todos=services.todos,
        sender=sender,
        metrics=services.metrics,
        clock=services.clock,
        queue_size=s.notify_queue_size if queue_size is None else queue_size,
        workers=s.notify_workers if workers is None else workers,
        rate_per_minute=s.notify_rate_per_minute,
        retry_delays=retry_delays,
        drain_timeout=drain_timeout,
        deliveries=DeliveryLog(services.db),
        # PostgreSQL: one window per hook for every instance and worker process (store/windows.py).
        shared_windows=None if services.db.is_sqlite else SharedWindows(services.db),
        operator=services.operator,  # a worker process's: gathered for the server (notify.worker)
    )
