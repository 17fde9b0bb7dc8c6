"""The server's shutdown closes the outbound Senders' kept connections: the app lifespan ends with
``Services.close()``, which runs what ``switchboard.push.from_settings`` registered."""

from __future__ import annotations

import json
from pathlib import Path

import trustme

from switchboard.push.from_settings import a2a_outbound, notify_outbound
from switchboard.services import build_services
from tests.integration.push.support import PeerReceiver
from tests.support.receivers import StaticResolver, client_ssl_context
from tests.support.server import make_settings

BODY = json.dumps({"type": "todo.ready", "todo_id": "td_1"}).encode()


async def test_services_close_closes_the_outbound_senders(tmp_path: Path, trustme_ca: trustme.CA) -> None:
    services = build_services(
        make_settings(tmp_path, notify_hook_allow_cidrs="127.0.0.1/32", a2a_push_allow_cidrs="127.0.0.0/8"),
        resolver=StaticResolver({"hooks.test": ["127.0.0.1"]}),
        ssl_context=client_ssl_context(trustme_ca),
    )
    async with PeerReceiver(trustme_ca) as rx:
        for _, sender in (notify_outbound(services), a2a_outbound(services)):
            assert (await sender.send(rx.url(), body=BODY, headers={})).status == 204
        assert rx.connections == 2 and rx.closed == 0  # one kept by each Sender
        await services.close()
        await rx.wait_closed(2)
