"""The Validator and Sender every outbound call goes through (notify hooks, A2A push), configured from
the operator's settings and the test seams on Services. One pair per allowlist, cached per instance:
notify hooks and A2A push have separate allowlists, and everything else is shared (the egress proxy,
SWITCHBOARD_OUTBOUND_PROXY, included). Each Sender keeps idle connections; ``Services.close`` closes them
on shutdown."""

from __future__ import annotations

from collections.abc import Sequence

from switchboard.push import OutboundProxy, Sender, Validator, parse_proxy_url
from switchboard.services import Services
from switchboard.settings import Settings

KEPT_SOCKETS = 1024  # idle outbound connections one Sender may keep, over all its targets (docs/push.md)


def keepalive_per_target(workers: int) -> int:
    """Idle connections kept per target: as many as one process runs attempts at once (at least the
    Sender's default 16). With fewer, whenever more attempts than that went to one receiver (many hooks
    behind one gateway), the surplus connections were closed as they turned idle and the next attempts
    paid for new TLS handshakes: 417 of them in 10,000 notifications at 1,000/s (scenario 2)."""
    return max(16, workers)


def outbound_proxy(settings: Settings) -> OutboundProxy | None:
    """SWITCHBOARD_OUTBOUND_PROXY, parsed (the settings checked its form at start-up)."""
    return parse_proxy_url(settings.outbound_proxy) if settings.outbound_proxy else None


def parse_cidrs(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def outbound_for(services: Services, allow_cidrs: Sequence[str]) -> tuple[Validator, Sender]:
    cache = services.outbound
    key = tuple(allow_cidrs)
    if key in cache:
        return cache[key]
    s = services.settings
    validator = Validator(
        allow_http=s.push_allow_http,
        allow_cidrs=tuple(allow_cidrs),
        listen_addresses=[(s.listen_host, s.listen_port)],
        resolver=services.resolver,
    )
    per_target = keepalive_per_target(s.notify_workers)
    sender = Sender(
        validator,
        ssl_context=services.ssl_context,
        max_keepalive_per_target=per_target,
        max_targets=max(1, KEPT_SOCKETS // per_target),
        proxy=outbound_proxy(s),
    )
    cache[key] = (validator, sender)
    services.on_close.append(sender.aclose)  # its kept connections
    return cache[key]


def notify_outbound(services: Services) -> tuple[Validator, Sender]:
    """Notify hooks: SWITCHBOARD_NOTIFY_HOOK_ALLOW_CIDRS."""
    return outbound_for(services, services.settings.allow_cidrs())


def a2a_outbound(services: Services) -> tuple[Validator, Sender]:
    """A2A push: SWITCHBOARD_A2A_PUSH_ALLOW_CIDRS."""
    return outbound_for(services, parse_cidrs(services.settings.a2a_push_allow_cidrs))
