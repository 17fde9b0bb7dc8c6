"""Per-endpoint A2A settings: the default queue of a message that names none (docs/a2a.md).

One service for every face (the vend CLI, the web console): an endpoint's default A2A queue is the one
set here, else the first (alphabetical) queue of its own scope. A generic A2A client knows nothing of
``metadata.queue``; its messages go there.
"""

from __future__ import annotations

from switchboard.core.clock import ms
from switchboard.services import Services
from switchboard.store import a2a_settings
from switchboard.store.accounts import QUEUE, Endpoint


async def set_default_queue(services: Services, endpoint_id: str, queue: str | None) -> None:
    """Set (or with ``None`` clear) the endpoint's default A2A queue. ValueError on a bad name."""
    if queue is None:
        await a2a_settings.clear_default_queue(services.db, endpoint_id)
        return
    if not QUEUE.match(queue):
        raise ValueError(
            "the default A2A queue must be a queue name (lower-case letters, digits, '.', '_', '-')"
        )
    await a2a_settings.put_default_queue(services.db, endpoint_id, queue, ms(services.clock.now()))


async def configured_default_queue(services: Services, endpoint_id: str) -> str | None:
    """The queue set with :func:`set_default_queue`, or None."""
    return await a2a_settings.get_default_queue(services.db, endpoint_id)


async def default_queue(services: Services, endpoint: Endpoint) -> str | None:
    """Where this endpoint's messages without ``metadata.queue`` go: the set one, else the first queue
    of its scope (None when it has none)."""
    configured = await configured_default_queue(services, endpoint.id)
    if configured:
        return configured
    return min(endpoint.queues) if endpoint.queues else None
