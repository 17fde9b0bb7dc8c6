"""The server's notify Sender keeps as many idle connections per receiver as one process runs attempts
at once (``switchboard.push.from_settings``): a burst to one receiver followed by another burst dials nothing new.
With the Sender's default of 16 kept, the surplus of a 32-wide burst was closed and dialled again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import trustme

from switchboard.push.from_settings import KEPT_SOCKETS, keepalive_per_target, notify_outbound
from switchboard.services import build_services
from tests.integration.push.support import PeerReceiver
from tests.support.receivers import StaticResolver, client_ssl_context
from tests.support.server import make_settings

BODY = json.dumps({"type": "todo.ready", "todo_id": "td_1"}).encode()
WORKERS = 24  # above the Sender's default of 16 kept per target


def test_the_bound_per_target_follows_the_workers_and_the_total_stays() -> None:
    assert keepalive_per_target(4) == 16  # never below the Sender's own default
    assert keepalive_per_target(WORKERS) == WORKERS
    assert keepalive_per_target(64) * (KEPT_SOCKETS // keepalive_per_target(64)) <= KEPT_SOCKETS


async def test_a_second_burst_to_one_receiver_reuses_every_connection(
    tmp_path: Path, trustme_ca: trustme.CA
) -> None:
    services = build_services(
        make_settings(tmp_path, notify_hook_allow_cidrs="127.0.0.1/32", notify_workers=WORKERS),
        resolver=StaticResolver({"hooks.test": ["127.0.0.1"]}),
        ssl_context=client_ssl_context(trustme_ca),
    )
    _, sender = notify_outbound(services)
    try:
        async with PeerReceiver(trustme_ca) as rx:
            # Nothing is kept yet, so the first burst dials one connection per request.
            results = await asyncio.gather(
                *(sender.send(rx.url(), body=BODY, headers={}) for _ in range(WORKERS))
            )
            assert rx.connections == WORKERS
            results += await asyncio.gather(
                *(sender.send(rx.url(), body=BODY, headers={}) for _ in range(WORKERS))
            )
            assert [r.status for r in results] == [204] * (2 * WORKERS)
            assert rx.connections == WORKERS  # the second burst dialled nothing
    finally:
        await services.close()
