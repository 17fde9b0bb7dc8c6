"""``source`` and ``route`` commands, through the operations the web UI calls too (switchboard.manage)."""

from __future__ import annotations

import argparse
from typing import Any

from switchboard.cli.base import (
    EXIT_FAILED,
    REVEAL_NOTE,
    CliError,
    Output,
    emails_by_id,
    inbound_url,
    iso,
    render_table,
    require_human,
    shares_key_warning,
    warn,
)
from switchboard.manage import deletes
from switchboard.manage import sources as manage
from switchboard.services import Services
from switchboard.store.sources import Source


def _source_json(source: Source, email: str) -> dict[str, Any]:
    return {
        "id": source.id,
        "slug": source.slug,
        "human": email,
        "kind": source.kind,
        "trust": source.trust,
        "quarantined": source.quarantined,
        "created_at": iso(source.created_at),
    }


def _reveal(services: Services, minted: manage.Minted, first_line: str) -> tuple[dict[str, Any], str]:
    path = minted.inbound_path
    url = inbound_url(services.settings, path)
    text = (
        f"{first_line}\n"
        f"inbound path: {path}\n"
        + (f"inbound url:  {url}\n" if url else "")
        + f"secret: {minted.secret}\n{REVEAL_NOTE}"
    )
    return {"inbound_path": path, "inbound_url": url, "secret": minted.secret}, text


async def source_create(services: Services, args: argparse.Namespace) -> Output:
    human = await require_human(services, args.human)
    if warning := shares_key_warning(services.settings):
        warn(warning)
    minted = await manage.register_source(
        services.sources, human.id, args.slug, args.kind, args.trust, actor="cli"
    )
    source = minted.source
    shown, text = _reveal(
        services,
        minted,
        f"created source {source.slug} ({source.id}): kind {source.kind}, trust {source.trust}",
    )
    return Output({"source": _source_json(source, human.email), **shown}, text)


async def _require_source(services: Services, slug: str) -> Source:
    source = next((s for s in await services.sources.list_sources() if s.slug == slug), None)
    if source is None:
        raise CliError(f"no source with slug {slug!r}", "not_found", EXIT_FAILED)
    return source


async def source_rotate_secret(services: Services, args: argparse.Namespace) -> Output:
    """A new secret (printed once), minted by the same function as ``source create`` and the web's."""
    source = await _require_source(services, args.slug)
    if warning := shares_key_warning(services.settings):
        warn(warning)
    minted = await manage.rotate_source_secret(services.sources, source, actor="cli")
    shown, text = _reveal(
        services, minted, f"rotated the secret of source {source.slug}: the old one no longer verifies"
    )
    return Output({"source": source.slug, **shown}, text)


async def source_list(services: Services, args: argparse.Namespace) -> Output:
    emails = await emails_by_id(services)
    sources = [_source_json(s, emails.get(s.human_id, "")) for s in await services.sources.list_sources()]
    rows = [
        [s["slug"], s["human"], s["kind"], s["trust"], "yes" if s["quarantined"] else "no"] for s in sources
    ]
    text = render_table(["SLUG", "HUMAN", "KIND", "TRUST", "QUARANTINED"], rows, "(no sources)")
    return Output({"sources": sources}, text)


async def source_delete(services: Services, args: argparse.Namespace) -> Output:
    source = await _require_source(services, args.slug)
    gone = await deletes.delete_source(services.admin, source, actor="cli")
    return Output(
        {"deleted": source.slug, "with": gone},
        f"deleted source {source.slug} with {gone['routes']} routes; its {gone['todos']} todos stay",
    )


def _route_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "source": row.source,
        "kind": row.kind,
        "queue": row.queue,
        "endpoint": row.endpoint,
        "created_at": iso(row.created_at),
    }


async def route_create(services: Services, args: argparse.Namespace) -> Output:
    route = _route_json(
        await manage.create_route(
            services.sources, args.source, args.queue, args.endpoint, args.kind, actor="cli"
        )
    )
    route_id = route["id"]
    endpoint = await services.accounts.endpoint_by_slug(args.endpoint)
    if endpoint is not None and args.queue not in endpoint.queues:
        # Not refused: the owning human may widen the scope later. Until then the todos wait unclaimable.
        warn(f"endpoint {args.endpoint!r} may not drain queue {args.queue!r}: its todos stay unclaimed")
    kind = f" (kind {args.kind})" if args.kind else ""
    text = f"created route {route_id}: {args.source}{kind} -> {args.queue} @ {args.endpoint}"
    return Output({"route": route}, text)


async def route_list(services: Services, args: argparse.Namespace) -> Output:
    routes = [_route_json(r) for r in await services.sources.list_routes()]
    rows = [[r["id"], r["source"], r["kind"] or "*", r["queue"], r["endpoint"]] for r in routes]
    text = render_table(["ID", "SOURCE", "KIND", "QUEUE", "ENDPOINT"], rows, "(no routes)")
    return Output({"routes": routes}, text)
