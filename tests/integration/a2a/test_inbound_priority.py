"""A2A push yields to inbound requests: no delivery starts while an inbound write is in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path

from switchboard.priority import InboundPriority
from tests.integration.a2a.conftest import Env, a2a_env, message, push_config, send


async def test_delivery_waits_while_an_inbound_write_is_in_flight(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, inbound_priority_max_defer_ms=60_000) as env:
        await held_inbound_write_holds_delivery(env)


async def test_off_by_default_nothing_tracks_or_waits(env: Env) -> None:
    assert env.services.parts.get(InboundPriority) is None
    assert env.a2a.worker.priority is None


async def held_inbound_write_holds_delivery(env: Env) -> None:
    gate = env.services.parts.need(InboundPriority)
    assert isinstance(gate, InboundPriority)
    gate.horizon = 60.0  # only the held request's end may release the worker here
    _, token = await env.endpoint("client")
    client = await env.client(token)
    await env.worker()  # an endpoint that drains the queue

    # A webhook delivery whose body never comes: the request is in flight until the client goes away.
    _, writer = await asyncio.open_connection("127.0.0.1", env.inst.port)
    try:
        writer.write(b"POST /in/nowhere HTTP/1.1\r\nhost: switchboard.test\r\ncontent-length: 64\r\n\r\n")
        await writer.drain()
        await send(client, message(), push=push_config(env.url()))
        await asyncio.wait_for(gate.waiting.wait(), 10)  # the push worker woke and waits for the write
        assert env.pushes() == []
        assert gate.active == 1
    finally:
        writer.close()  # the held request ends (the client went away)
        await writer.wait_closed()
    first = await env.receiver.next_request(timeout=10)
    assert first.path == "/a2a-hook"
    assert gate.active == 0
