"""Sources (SPEC-0003) and routes (SPEC-0006) as every face changes them: register a source, mint and
rotate its secret, add a route. The CLI and the web UI both call these; neither mints or checks alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchboard.ingest.derive import valid_kind
from switchboard.ingest.verify import new_source_secret
from switchboard.obs.audit import audit
from switchboard.store.sources import Source, SourceStore

KIND_RULE = "up to 100 letters, digits, '_', '.', ':' or '-'"


@dataclass(frozen=True, slots=True)
class Minted:
    """A source with its secret, revealed once by the face that asked for it."""

    source: Source
    secret: str

    @property
    def inbound_path(self) -> str:
        """A token-trust source is authenticated by its URL path, which holds the secret."""
        if self.source.trust == "token":
            return f"/in/{self.source.slug}/{self.secret}"
        return f"/in/{self.source.slug}"


def check_event_kind(value: str) -> str:
    """A route's event kind, or ValueError: a kind derivation can never produce makes a route that
    never matches. The CLI's argument parser and the web form both ask this function."""
    if valid_kind(value) is None:
        raise ValueError(f"{value!r} is not an event kind ({KIND_RULE})")
    return value


async def register_source(
    sources: SourceStore, human_id: str, slug: str, kind: str, trust: str, *, actor: str
) -> Minted:
    """Mint the source's secret (one place: :func:`new_source_secret`) and store it sealed."""
    secret = new_source_secret(kind, trust)
    source = await sources.create(human_id, slug, kind, trust, secret)
    audit("source.create", actor, source_id=source.id, slug=source.slug, kind=kind, trust=trust)
    return Minted(source, secret)


async def rotate_source_secret(sources: SourceStore, source: Source, *, actor: str) -> Minted:
    """A new secret minted as at create; the old one stops verifying at once (no grace)."""
    secret = new_source_secret(source.kind, source.trust)
    rotated = await sources.rotate_secret(source.id, secret)
    audit("source.rotate_secret", actor, source_id=source.id, slug=source.slug)
    return Minted(rotated, secret)


async def create_route(
    sources: SourceStore,
    source_slug: str,
    queue: str,
    endpoint_slug: str,
    kind: str | None,
    *,
    actor: str,
) -> Any:
    """Route a source's deliveries (of one event kind, or every kind when ``kind`` is empty) to a queue
    of an endpoint of the same human; returns the stored route as the route lists show it."""
    wanted = check_event_kind(kind) if kind else None
    route_id = await sources.add_route(source_slug, queue, endpoint_slug, wanted)
    audit("route.create", actor, route_id=route_id, source=source_slug, endpoint=endpoint_slug)
    return next(r for r in await sources.list_routes() if r.id == route_id)
