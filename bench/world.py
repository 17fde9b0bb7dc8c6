"""Tenants for a scenario, written to the database before the server starts.

Setup is not measured, so it goes through the service layer (the code under the CLI and the MCP verbs)
in this process: humans, endpoints, signature-trust Gitea sources and their routes, and notify hooks
created by ``NotifyHooks.create`` (the ``create_notify_hook`` verb's body: URL validation against the
operator allowlist, the ceiling, a minted secret sealed by the cred envelope).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.server import bench_resolver
from switchboard.core.verbs import CONSUMER, NOTIFY_HOOKS
from switchboard.ingest.verify import mint_source_secret
from switchboard.notify.service import NotifyHooks
from switchboard.notify.store import HookStore
from switchboard.push.from_settings import notify_outbound
from switchboard.services import build_services
from switchboard.settings import Settings

VERBS = (*CONSUMER.verbs, *NOTIFY_HOOKS.verbs)


def new_cred_key() -> str:
    return secrets.token_hex(32)


@dataclass
class EndpointInfo:
    id: str
    slug: str
    token: str
    queues: tuple[str, ...]


@dataclass
class SourceInfo:
    slug: str
    secret: str
    fanout: int  # todos one delivery creates

    @property
    def path(self) -> str:
        return f"/in/{self.slug}"

    def target(self) -> dict[str, str]:
        return {"path": self.path, "secret": self.secret}


@dataclass
class World:
    endpoints: list[EndpointInfo] = field(default_factory=list)
    # One source per endpoint (index-aligned), each routed to its endpoint's first queue.
    own_sources: list[SourceInfo] = field(default_factory=list)
    # Fan-out sources: each routed to a group of endpoints (and every queue listed for them).
    fanout_sources: list[SourceInfo] = field(default_factory=list)
    # ``tenant_fanouts[n][i]``: endpoint i's second source of its own human, routed to its first n queues.
    tenant_fanouts: dict[int, list[SourceInfo]] = field(default_factory=dict)
    hooks: int = 0


async def build_world(
    settings: dict[str, Any],
    *,
    endpoints: int,
    queues: Sequence[str] = ("inbox",),
    own_sources: bool = True,
    fanout_groups: Sequence[Sequence[int]] = (),
    hook_urls: Sequence[Sequence[str]] = (),
    owners: str = "per_endpoint",
    own_source_every_queue: bool = False,
    tenant_fanouts: Sequence[int] = (),
) -> World:
    """``hook_urls[i]`` are endpoint i's hooks; ``fanout_groups`` lists endpoint indexes per fan-out
    source (routed to every queue in ``queues``). ``owners``: ``per_endpoint`` (every endpoint belongs to
    its own human: a multi-tenant instance) or ``one`` (one human owns every endpoint: a homelab). The
    dispatcher's fairness is per owning human, so this decides how many attempts may run at once.
    A source routes only to its own human's endpoints, so a fan-out group must share one owner; with
    ``own_source_every_queue`` each endpoint's own source is routed to every queue instead of the first,
    so one delivery makes ``len(queues)`` todos for one tenant (a multi-tenant fan-out). For each n in
    ``tenant_fanouts`` every endpoint also gets a source of its own human routed to its first n queues
    (one delivery: n todos for one tenant), beside its own one-todo source."""
    if any(not 0 < n <= len(queues) for n in tenant_fanouts):
        raise ValueError(f"tenant_fanouts {tuple(tenant_fanouts)} must be within 1..{len(queues)} queues")
    services = build_services(Settings(**settings), resolver=bench_resolver)
    world = World()
    try:
        await services.db.migrate()
        count = endpoints if owners == "per_endpoint" else 1
        humans = list(
            await asyncio.gather(
                *(
                    services.accounts.create_human(f"bench-{h:03d}@example.com", "bench-password-1")
                    for h in range(count)
                )
            )
        )
        for i in range(endpoints):
            human = humans[i % len(humans)]
            ep, token = await services.accounts.vend_endpoint(human, f"ep-{i:03d}", list(queues), list(VERBS))
            world.endpoints.append(EndpointInfo(ep.id, ep.slug, token, tuple(queues)))
            if own_sources:
                secret = mint_source_secret("gitea")
                src = await services.sources.create(human, f"src-{i:03d}", "gitea", "signature", secret)
                routed = list(queues) if own_source_every_queue else [queues[0]]
                for q in routed:
                    await services.sources.add_route(src.slug, q, ep.slug, None)
                world.own_sources.append(SourceInfo(src.slug, secret, len(routed)))
            for n in tenant_fanouts:
                secret = mint_source_secret("gitea")
                src = await services.sources.create(human, f"src-{i:03d}-x{n}", "gitea", "signature", secret)
                for q in queues[:n]:
                    await services.sources.add_route(src.slug, q, ep.slug, None)
                world.tenant_fanouts.setdefault(n, []).append(SourceInfo(src.slug, secret, n))
        for g, group in enumerate(fanout_groups):
            secret = mint_source_secret("gitea")
            src = await services.sources.create(humans[0], f"fan-{g:03d}", "gitea", "signature", secret)
            for i in group:
                for q in queues:
                    await services.sources.add_route(src.slug, q, world.endpoints[i].slug, None)
            world.fanout_sources.append(SourceInfo(src.slug, secret, len(group) * len(queues)))
        if hook_urls:
            s = services.settings
            store = HookStore(services.db, services.envelope, services.clock, grace_seconds=3600)
            verbs = NotifyHooks(store, notify_outbound(services)[0], s.notify_hook_ceiling)
            for i, urls in enumerate(hook_urls):
                ep_row = await services.accounts.endpoint(world.endpoints[i].id)
                assert ep_row is not None
                for url in urls:
                    await verbs.create(ep_row, url)
                    world.hooks += 1
    finally:
        await services.close()
    return world
