"""The per-endpoint A2A stream cap's parts (a2a/stream_cap.py): the slots, and a held answer that is
ended from outside and still closes its body. The served behaviour is in
tests/conformance/test_limits_by_identity.py."""

from __future__ import annotations

import asyncio

import pytest
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from switchboard.a2a.stream_cap import HeldStream, StreamSlots


def test_a_stream_past_the_cap_ends_the_endpoints_oldest_only() -> None:
    slots = StreamSlots(2)
    a1, a1_ended = slots.hold("ep_a")
    _, a2_ended = slots.hold("ep_a")
    _, b1_ended = slots.hold("ep_b")
    assert not (a1_ended.is_set() or a2_ended.is_set() or b1_ended.is_set())
    _, a3_ended = slots.hold("ep_a")
    assert a1_ended.is_set() and not a2_ended.is_set() and not a3_ended.is_set()
    assert not b1_ended.is_set()  # another endpoint's stream is never the one ended
    assert slots.open_streams("ep_a") == 2 and slots.open_streams("ep_b") == 1
    slots.release("ep_a", a1)  # the ended stream's own release finds it already gone
    assert slots.open_streams("ep_a") == 2


def test_released_slots_are_forgotten() -> None:
    slots = StreamSlots(1)
    ticket, ended = slots.hold("ep_a")
    slots.release("ep_a", ticket)
    assert slots.open_streams("ep_a") == 0
    _, again = slots.hold("ep_a")
    assert not ended.is_set() and not again.is_set()  # a slot given back is room: nothing ended
    with pytest.raises(ValueError):
        StreamSlots(0)


class Streaming(Response):
    """Streams one chunk, then waits for the client to go, as sse-starlette does."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.stopped.set()  # a client gone: no closing body, like a real stream library


async def test_an_ended_stream_stops_and_its_body_is_closed() -> None:
    slots = StreamSlots(1)
    sent: list[Message] = []
    client_left = asyncio.Event()

    async def receive() -> Message:
        await client_left.wait()  # the real client never leaves in this test
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    inner = Streaming()
    held = asyncio.create_task(HeldStream(inner, slots, "ep_a")({"type": "http"}, receive, send))
    while slots.open_streams("ep_a") == 0:
        await asyncio.sleep(0)
    slots.hold("ep_a")  # one more stream of the endpoint: this one is past the cap
    await asyncio.wait_for(held, 5)
    assert inner.stopped.is_set()
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert slots.open_streams("ep_a") == 1  # only the new one is counted
