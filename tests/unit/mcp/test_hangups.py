"""switchboard.mcp.hangups and the long-poll's use of it: a client that hangs up ends its waiting claim.

The middleware is driven as an ASGI server drives it (a receive that hands over the body, then answers
``http.disconnect`` when the connection ends); the waiter is the real ClaimWaiters.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope, Send

from switchboard.mcp.hangups import HANGUP_KEY, Hangups
from switchboard.queue.waiters import ClaimWaiters


async def test_a_disconnect_after_the_body_sets_the_event_the_app_sees() -> None:
    hung_up = asyncio.Event()
    seen: list[asyncio.Event] = []
    waiting = asyncio.Event()
    answered = asyncio.Event()

    async def server_receive() -> Message:
        if not seen:
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await hung_up.wait()  # the connection is open until the client closes it
        return {"type": "http.disconnect"}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["type"] == "http.request"
        event = scope[HANGUP_KEY].event()
        seen.append(event)
        waiting.set()
        await asyncio.wait_for(event.wait(), 5)  # the verb's wait, ended by the hang-up
        answered.set()

    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    running = asyncio.create_task(Hangups(app)(scope, server_receive, _no_send))
    await asyncio.wait_for(waiting.wait(), 5)  # the app has read its body and waits
    assert not answered.is_set() and not seen[0].is_set()
    hung_up.set()
    await asyncio.wait_for(running, 5)
    assert answered.is_set() and seen[0].is_set()


async def test_a_get_is_passed_through_without_an_event() -> None:
    scopes: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scopes.append(scope)

    await Hangups(app)(
        {"type": "http", "method": "GET", "path": "/mcp", "headers": []}, _no_receive, _no_send
    )
    assert HANGUP_KEY not in scopes[0]


async def test_a_waiting_claim_whose_client_hung_up_claims_nothing() -> None:
    waiters = ClaimWaiters()
    gone = asyncio.Event()
    claims: list[int] = []
    registered = asyncio.Event()

    async def claim() -> list[str]:
        claims.append(1)
        if len(claims) == 2:  # the re-check made once the waiter is registered
            registered.set()
        return []

    waiting = asyncio.create_task(waiters.claim_or_wait("ep", ["q"], 30, claim, lambda: gone))
    await asyncio.wait_for(registered.wait(), 5)
    assert len(waiters) == 1
    made = len(claims)
    gone.set()
    assert await asyncio.wait_for(waiting, 5) == []
    assert len(claims) == made  # no claim after the hang-up
    assert len(waiters) == 0


async def _no_receive() -> Message:
    raise AssertionError("not read")


async def _no_send(message: Message) -> None:
    return None


async def test_a_call_that_never_waits_reads_nothing_past_its_body() -> None:
    """The watch is a task per request: only a verb that asks for the event (a claim about to wait) or
    an app reading past the body starts it, so a quick call costs the server one receive."""
    reads: list[Message] = []

    async def server_receive() -> Message:
        message: Message = (
            {"type": "http.request", "body": b"{}", "more_body": False}
            if not reads
            else {"type": "http.disconnect"}
        )
        reads.append(message)
        return message

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["type"] == "http.request"
        await asyncio.sleep(0)  # a turn of the loop in which a started watch would have read

    await Hangups(app)(
        {"type": "http", "method": "POST", "path": "/mcp", "headers": []}, server_receive, _no_send
    )
    assert len(reads) == 1


async def test_a_client_gone_before_the_verb_asks_is_seen_when_it_asks() -> None:
    async def server_receive() -> Message:
        return (
            {"type": "http.request", "body": b"{}", "more_body": False}
            if not asked
            else {"type": "http.disconnect"}
        )

    asked: list[asyncio.Event] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["type"] == "http.request"
        asked.append(scope[HANGUP_KEY].event())
        await asyncio.wait_for(asked[0].wait(), 5)

    await Hangups(app)(
        {"type": "http", "method": "POST", "path": "/mcp", "headers": []}, server_receive, _no_send
    )
    assert asked[0].is_set()
