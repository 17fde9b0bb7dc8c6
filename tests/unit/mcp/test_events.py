"""The resumability store: bounded by count and by estimated size, replays one stream in order, and
only to the endpoint whose requests produced the events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from switchboard.mcp.auth import ENDPOINT_CLAIM
from switchboard.mcp.events import BASE_SIZE, MemoryEventStore


@contextmanager
def acting_as(endpoint_id: str) -> Iterator[None]:
    """What the SDK's auth middleware sets for an authenticated request."""
    access = AccessToken(token="t", client_id=endpoint_id, scopes=[], claims={ENDPOINT_CLAIM: endpoint_id})
    reset = auth_context_var.set(AuthenticatedUser(access))
    try:
        yield
    finally:
        auth_context_var.reset(reset)


def result(request_id: int, text: str = "{}") -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"content": [{"type": "text", "text": text}]})


async def test_replays_what_came_after_on_the_same_stream_only() -> None:
    store = MemoryEventStore()
    replayed: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        replayed.append(event)

    with acting_as("ep_a"):
        priming = await store.store_event("1", None)
        other = await store.store_event("2", result(2))
        first = await store.store_event(
            "1", JSONRPCNotification(jsonrpc="2.0", method="notifications/progress")
        )
        second = await store.store_event("1", result(1))
        assert await store.replay_events_after(priming, collect) == "1"
    assert [e.event_id for e in replayed] == [first, second]
    assert other not in {e.event_id for e in replayed}


async def test_another_endpoint_and_forged_ids_replay_nothing() -> None:
    store = MemoryEventStore()
    replayed: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        replayed.append(event)

    with acting_as("ep_a"):
        priming = await store.store_event("1", None)
        await store.store_event("1", result(1, "secret"))
    with acting_as("ep_b"):
        assert await store.replay_events_after(priming, collect) is None
    number = priming.partition("-")[0]
    with acting_as("ep_a"):
        assert await store.replay_events_after(f"{number}-000000000000", collect) is None  # guessed
        assert await store.replay_events_after("not an id", collect) is None
    assert replayed == []


def test_an_empty_store_is_still_a_store() -> None:
    assert MemoryEventStore()  # the SDK enables resumability with `if self._event_store:`


async def test_bounded_by_count_and_by_estimated_size() -> None:
    by_count = MemoryEventStore(capacity=3)
    ids = [await by_count.store_event("1", result(i)) for i in range(5)]
    assert by_count.count == 3
    replayed: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        replayed.append(event)

    assert await by_count.replay_events_after(ids[1], collect) is None  # aged out: nothing to resume
    assert await by_count.replay_events_after(ids[2], collect) == "1"
    assert [e.event_id for e in replayed] == ids[3:]
    big = MemoryEventStore(max_bytes=10 * 1024 * 1024)
    for i in range(40):  # forty 1 MiB payloads (text and structured copy) would be 80 MiB
        await big.store_event(str(i), result(i, "x" * 1024 * 1024))
    assert big.bytes <= big.max_bytes and big.count == 4
    assert big.bytes == 4 * (BASE_SIZE + 2 * 1024 * 1024)
