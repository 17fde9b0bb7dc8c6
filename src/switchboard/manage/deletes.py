"""Deleting a human, an endpoint or a source, as the web UI and the CLI both do it: one store call (what
goes along is counted in one transaction) and one audit line naming who did it and what went."""

from __future__ import annotations

from switchboard.obs.audit import audit
from switchboard.store.accounts import Endpoint
from switchboard.store.admin import AdminStore
from switchboard.store.sources import Source


async def delete_human(admin: AdminStore, human_id: str, *, actor: str) -> dict[str, int]:
    """Refuses the last operator (``Conflict``); an unknown id is ``NotFound``."""
    gone = await admin.delete_human(human_id)
    audit("human.delete", actor, human_id=human_id, **gone)
    return gone


async def delete_endpoint(admin: AdminStore, endpoint: Endpoint, *, actor: str) -> dict[str, int]:
    gone = await admin.delete_endpoint(endpoint.id)
    audit("endpoint.delete", actor, endpoint_id=endpoint.id, slug=endpoint.slug, **gone)
    return gone


async def delete_source(admin: AdminStore, source: Source, *, actor: str) -> dict[str, int]:
    gone = await admin.delete_source(source.id)
    audit("source.delete", actor, source_id=source.id, slug=source.slug, **gone)
    return gone
