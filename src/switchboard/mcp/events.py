"""A bounded in-memory ``EventStore`` so streamable-HTTP SSE responses carry event ids and can resume.

The SDK defines the interface (``mcp.server.streamable_http.EventStore``) and ships no implementation.
With a store configured it primes every SSE stream with an id (and the ``retry`` hint), stores each
message it sends, and answers a GET with ``Last-Event-ID`` by replaying what came after on the same
stream. This store keeps the most recent events across all streams of this process, in one ordered
dict, bounded twice: at most ``capacity`` events and about ``max_bytes`` of them. The size is estimated
without serializing (a tool result's text blocks, twice, since ``structuredContent`` repeats the text),
so storing stays an append and an occasional eviction and the per-call cost negligible, while a burst
of claims with 1 MiB payloads cannot pin gigabytes. A client that resumes from an evicted id gets nothing replayed (and calls
``claim_next`` or re-reads, as after any reconnect: the queue is the ledger).

The SDK hands the store a stream id only (a request id, or the GET stream's fixed key), which is not
unique across sessions. So every event also records the endpoint whose request produced it (the
authenticated principal of the running context; the SDK binds a session to the principal that created
it), and a replay serves only the same endpoint's events: one endpoint can never read another's.
Event ids carry a random part, so they cannot be guessed either.
"""

from __future__ import annotations

import itertools
import secrets
from collections import OrderedDict

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

from switchboard.mcp.auth import caller_endpoint_id

DEFAULT_CAPACITY = 2048
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
BASE_SIZE = 256  # envelope, ids, small results


def approx_size(message: JSONRPCMessage | None) -> int:
    """A cheap upper-ish estimate of a message's JSON size: what dominates is a tool result's text."""
    result = getattr(message, "result", None)
    if not isinstance(result, dict):
        return BASE_SIZE
    content = result.get("content")
    text = 0
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                text += len(block["text"])
    return BASE_SIZE + 2 * text


_Event = tuple[str, str | None, StreamId, JSONRPCMessage | None, int]


class MemoryEventStore(EventStore):
    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.bytes = 0
        # number -> (event id, owner, stream id, message, size); ordered by number, oldest first.
        self._events: OrderedDict[int, _Event] = OrderedDict()
        self._numbers = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        number = next(self._numbers)
        event_id = f"{number}-{secrets.token_hex(6)}"
        size = approx_size(message)
        self._events[number] = (event_id, caller_endpoint_id(), stream_id, message, size)
        self.bytes += size
        while len(self._events) > 1 and (len(self._events) > self.capacity or self.bytes > self.max_bytes):
            self.bytes -= self._events.popitem(last=False)[1][4]
        return event_id

    @property
    def count(self) -> int:
        """Events held. (Not ``__len__``: the SDK tests the store's truthiness to see if it has one.)"""
        return len(self._events)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        number_text, _, _ = last_event_id.partition("-")
        if not number_text.isdigit():
            return None
        after = int(number_text)
        found = self._events.get(after)
        owner = caller_endpoint_id()
        if found is None or found[0] != last_event_id or found[1] != owner:
            return None
        stream_id = found[2]
        # Snapshot first: sending awaits, and new events may be stored meanwhile.
        later = [
            (event_id, message)
            for n, (event_id, who, stream, message, _) in self._events.items()
            if n > after and stream == stream_id and who == owner
        ]
        for event_id, message in later:
            if message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id
