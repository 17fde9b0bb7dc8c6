"""Inbound priority: a sender's next attempt waits while an inbound write request is in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from switchboard.priority import InboundPriority, InboundTracking


class Gatekeeper:
    """A route that holds its request open until the test lets it go."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, request: Request) -> Response:
        self.entered.set()
        await self.release.wait()
        if request.query_params.get("boom"):
            raise RuntimeError("handler failed")
        return PlainTextResponse("ok")


@pytest.fixture
async def world() -> AsyncIterator[tuple[InboundPriority, Gatekeeper, httpx.AsyncClient]]:
    gate = InboundPriority(max_defer=30.0, horizon=30.0)
    keeper = Gatekeeper()
    app = Starlette(
        routes=[Route("/hold", keeper.handle, methods=["GET", "POST"])],
        middleware=[Middleware(InboundTracking, gate=gate)],
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as client:
        yield gate, keeper, client


async def test_idle_loop_does_not_defer() -> None:
    gate = InboundPriority(max_defer=30.0)
    await asyncio.wait_for(gate.yield_to_inbound(), 1.0)
    assert gate.deferred == 0


async def test_an_attempt_waits_for_the_inbound_write_to_finish(
    world: tuple[InboundPriority, Gatekeeper, httpx.AsyncClient],
) -> None:
    gate, keeper, client = world
    request = asyncio.create_task(client.post("/hold"))
    await keeper.entered.wait()
    assert gate.active == 1
    sender = asyncio.create_task(gate.yield_to_inbound())
    await asyncio.sleep(0)  # let the sender reach its wait
    assert not sender.done()
    keeper.release.set()
    assert (await request).status_code == 200
    await asyncio.wait_for(sender, 1.0)  # released by the response, far before max_defer
    assert gate.active == 0
    assert gate.deferred == 1


async def test_reads_do_not_hold_senders_back(
    world: tuple[InboundPriority, Gatekeeper, httpx.AsyncClient],
) -> None:
    gate, keeper, client = world
    request = asyncio.create_task(client.get("/hold"))
    await keeper.entered.wait()
    assert gate.active == 0
    await asyncio.wait_for(gate.yield_to_inbound(), 1.0)
    assert gate.deferred == 0
    keeper.release.set()
    await request


async def test_a_failing_request_releases_its_ticket(
    world: tuple[InboundPriority, Gatekeeper, httpx.AsyncClient],
) -> None:
    gate, keeper, client = world
    keeper.release.set()
    response = await client.post("/hold?boom=1")
    assert response.status_code == 500
    assert gate.active == 0


async def test_the_wait_is_bounded_by_max_defer() -> None:
    gate = InboundPriority(max_defer=0.01, horizon=0)
    ticket = gate.enter()
    await asyncio.wait_for(gate.yield_to_inbound(), 5.0)  # returns after max_defer: never starved
    assert gate.active == 1 and gate.deferred == 1
    ticket.release()
    ticket.release()  # idempotent: the response and the finally both release
    assert gate.active == 0


async def test_a_request_counts_for_its_horizon_only() -> None:
    gate = InboundPriority(max_defer=30.0, horizon=0.02)
    ticket = gate.enter()
    assert gate.active == 1
    await asyncio.wait_for(gate.yield_to_inbound(), 5.0)  # the horizon, not max_defer, ends the wait
    assert gate.active == 0
    ticket.release()  # the late release changes nothing
    assert gate.active == 0


async def test_zero_max_defer_turns_the_priority_off() -> None:
    gate = InboundPriority(max_defer=0, horizon=0)
    gate.enter()
    await asyncio.wait_for(gate.yield_to_inbound(), 1.0)
    assert gate.deferred == 0
