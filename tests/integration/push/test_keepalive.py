"""Connection reuse in the Sender, observed from the receiver's side of real TLS connections on loopback.

A kept connection serves an attempt only when that attempt's own validation returned exactly the
addresses it was dialled to; anything that leaves a connection in doubt (a body not read to its end,
a timeout, a protocol error, ``Connection: close``, a server that hung up) leads to a new connection.
The host name resolves only through the injected resolver; nothing but 127.0.0.0/8 is ever dialled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import trustme

from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    Sender,
    TargetRejected,
)
from tests.integration.push.support import BODY, HOST, FakeClock, PeerReceiver
from tests.support.receivers import (
    CloseWithoutResponse,
    HangBeforeHeaders,
    RawResponse,
    Respond,
    StaticResolver,
    server_ssl_context,
)


async def send(sender: Sender, rx: PeerReceiver) -> int:
    return (await sender.send(rx.url(), body=BODY, headers={})).status


# --- reuse ---------------------------------------------------------------------------------------


async def test_sequential_sends_reuse_one_connection(
    rx: PeerReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    sender = make_sender()
    rx.behaviour = Respond(200, body=b"accepted")  # a body read to its end keeps the connection
    results = [await sender.send(rx.url(), body=BODY, headers={}) for _ in range(4)]
    assert [(r.status, r.body_bytes_read) for r in results] == [(200, 8)] * 4
    assert rx.connections == 1
    assert len(rx.request_peers) == 4 and len(set(rx.request_peers)) == 1
    assert len(resolver.calls) == 4  # every attempt validated first, reused or not


async def test_keepalive_expiry_zero_is_one_connection_per_attempt(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender(keepalive_expiry=0)
    assert [await send(sender, rx) for _ in range(3)] == [204] * 3
    assert rx.connections == 3 and len(set(rx.request_peers)) == 3
    await rx.wait_closed(3)  # and none is left open


async def test_a_changed_resolution_dials_anew_and_never_reuses(
    rx: PeerReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    first = rx.request_peers[0]
    # Now the name resolves to 127.0.0.2, where nothing listens. The idle connection to 127.0.0.1
    # would have answered: the refusal proves it was not used.
    resolver.answers[HOST] = ["127.0.0.2"]
    with pytest.raises(NetworkFailure) as info:
        await send(sender, rx)
    assert (info.value.stage, info.value.reason) == ("connect", "connection_refused")
    # Back to 127.0.0.1: the kept connection serves again.
    resolver.answers[HOST] = ["127.0.0.1"]
    assert await send(sender, rx) == 204
    assert rx.connections == 1 and rx.request_peers == [first, first]
    # The same addresses in another order are another key: a new connection (127.0.0.2 refuses,
    # 127.0.0.1 answers), and each order keeps its own.
    resolver.answers[HOST] = ["127.0.0.1", "127.0.0.2"]
    assert await send(sender, rx) == 204
    resolver.answers[HOST] = ["127.0.0.2", "127.0.0.1"]
    assert await send(sender, rx) == 204
    resolver.answers[HOST] = ["127.0.0.1", "127.0.0.2"]
    assert await send(sender, rx) == 204
    assert rx.connections == 3
    assert rx.request_peers[2:] == [rx.peers[1], rx.peers[2], rx.peers[1]]


async def test_a_refused_validation_with_idle_connections_opens_nothing(
    rx: PeerReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    sender = make_sender(allow=("127.0.0.1/32",))
    assert await send(sender, rx) == 204  # an idle connection to 127.0.0.1 is kept
    for answer, reason in (
        (["127.0.0.1", "10.0.0.5"], "private"),  # one refused address refuses the whole target
        (["127.0.0.1", "127.0.0.2"], "loopback"),  # loopback outside the allowlist
        (["10.0.0.5"], "private"),
    ):
        resolver.answers[HOST] = answer
        with pytest.raises(TargetRejected) as info:
            await send(sender, rx)
        assert info.value.reason == reason
    assert len(rx.requests) == 1 and rx.connections == 1  # nothing was sent, nothing dialled
    # Control: the idle connection was there all along, and serves the next valid attempt.
    resolver.answers[HOST] = ["127.0.0.1"]
    assert await send(sender, rx) == 204
    assert rx.connections == 1 and rx.request_peers == [rx.peers[0]] * 2


async def test_concurrent_attempts_each_get_a_connection_and_a_few_are_kept(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender(max_keepalive_per_target=2)
    assert await asyncio.gather(*(send(sender, rx) for _ in range(6))) == [204] * 6
    assert rx.connections == 6  # nobody queued behind another attempt's connection
    await rx.wait_closed(4)  # all but two closed once idle
    assert [await send(sender, rx) for _ in range(4)] == [204] * 4
    assert rx.connections == 6 and rx.closed == 4


async def test_busy_connections_do_not_count_against_the_idle_limit(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    """httpcore's own limit closes a connection as it turns idle whenever the pool holds more than the
    limit, busy ones counted: with more attempts in flight than that, each request dialled anew."""
    sender = make_sender(max_keepalive_per_target=2)
    rx.behaviour = HangBeforeHeaders()
    busy = [asyncio.create_task(send(sender, rx)) for _ in range(3)]
    for _ in busy:
        await rx.next_request()
    rx.behaviour = Respond()
    try:
        assert [await send(sender, rx) for _ in range(4)] == [204] * 4
        assert rx.connections == 4  # three held by the hanging attempts, one carried all four requests
    finally:
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)


async def test_more_attempts_in_flight_than_the_idle_limit_keep_their_connections(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    """Eight senders in a loop against an idle limit of four: the connections are reused, not dialled
    again for each request."""
    sender = make_sender(max_keepalive_per_target=4)

    async def loop() -> list[int]:
        return [await send(sender, rx) for _ in range(5)]

    assert await asyncio.gather(*(loop() for _ in range(8))) == [[204] * 5] * 8
    assert len(rx.requests) == 40 and rx.connections <= 12


# --- what must not be reused -----------------------------------------------------------------------


async def test_a_body_not_read_to_its_end_is_not_reused(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    rx.behaviour = Respond(200, body=b"x" * (100 * 1024))  # complete, but we stop at 64 KiB
    result = await sender.send(rx.url(), body=BODY, headers={})
    assert (result.status, result.body_bytes_read) == (200, 65536)
    await rx.wait_closed(1)  # we hung up on it
    rx.behaviour = Respond(204)
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    assert rx.connections == 2
    assert rx.request_peers == [rx.peers[0], rx.peers[0], rx.peers[1], rx.peers[1]]


async def test_a_timeout_is_not_reused_and_is_blamed_on_the_current_attempt(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender(timeout=0.5)
    assert await send(sender, rx) == 204
    rx.behaviour = HangBeforeHeaders()
    with pytest.raises(AttemptTimeout) as info:
        await send(sender, rx)
    # The reused stream reported to this attempt: it was waiting for the response, not connecting.
    assert (info.value.stage, info.value.reason) == ("response", "timeout")
    rx.behaviour = Respond(204)
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    assert rx.connections == 2
    assert rx.request_peers == [rx.peers[0], rx.peers[0], rx.peers[1], rx.peers[1]]


async def test_a_protocol_error_is_not_reused_nor_retried(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    rx.behaviour = RawResponse(b"SSH-2.0-OpenSSH_9.6\r\n")  # bytes came back: not a stale connection
    with pytest.raises(NetworkFailure) as info:
        await send(sender, rx)
    assert (info.value.stage, info.value.reason) == ("response", "protocol")
    assert rx.connections == 1  # no second try
    rx.behaviour = Respond(204)
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    assert rx.connections == 2
    assert rx.request_peers == [rx.peers[0], rx.peers[0], rx.peers[1], rx.peers[1]]


async def test_connection_close_is_not_reused(rx: PeerReceiver, make_sender: Callable[..., Sender]) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    rx.behaviour = Respond(204, headers=[("connection", "close")])
    assert await send(sender, rx) == 204
    rx.behaviour = Respond(204)
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    assert rx.connections == 2
    assert rx.request_peers == [rx.peers[0], rx.peers[0], rx.peers[1], rx.peers[1]]


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    rx.hang_up_all()
    await rx.wait_closed(1)
    assert [await send(sender, rx) for _ in range(2)] == [204, 204]
    assert rx.connections == 2 and rx.dropped == 0
    assert rx.request_peers == [rx.peers[0], rx.peers[0], rx.peers[1], rx.peers[1]]


async def test_a_kept_connection_closed_as_the_request_goes_out_is_not_resent(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    """The receiver read the request on a kept connection and hung up without a byte: it may have acted
    on it, so the request is not sent again within the attempt (that would be a second POST of one
    attempt, past REQ-7's cap of 3). It fails as connection_lost, which the caller's policy retries."""
    sender = make_sender()
    assert await send(sender, rx) == 204
    rx.drop_reused = True  # the kept connection reads the next request and hangs up, silent
    with pytest.raises(NetworkFailure) as info:
        await sender.send(rx.url(), body=BODY, headers={})
    assert (info.value.stage, info.value.reason, info.value.retryable) == (
        "response",
        "connection_lost",
        True,
    )
    assert rx.dropped == 1 and rx.connections == 1  # the dropped request was its only POST
    assert await send(sender, rx) == 204  # the next attempt dials anew
    assert rx.connections == 2 and rx.dropped == 1 and rx.request_peers == [rx.peers[0], rx.peers[1]]


async def test_one_send_is_one_request_whatever_the_connection(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    rx.behaviour = CloseWithoutResponse()
    for sent in (2, 3):
        with pytest.raises(NetworkFailure) as info:
            await send(sender, rx)  # first on the kept connection, then on a new one: never twice
        assert (info.value.stage, info.value.reason) == ("response", "connection_lost")
        assert len(rx.requests) == sent
    assert rx.connections == 2


# --- expiry, bounds, closing ---------------------------------------------------------------------


async def test_idle_connections_expire_on_the_senders_clock(
    rx: PeerReceiver, make_sender: Callable[..., Sender], clock: FakeClock
) -> None:
    sender = make_sender(keepalive_expiry=5.0)
    assert await send(sender, rx) == 204
    clock.advance(4.9)
    assert await send(sender, rx) == 204  # reused, and its idle time starts again
    clock.advance(4.9)
    assert await send(sender, rx) == 204
    assert rx.connections == 1
    clock.advance(5.0)
    assert await send(sender, rx) == 204  # expired: closed, and a new one dialled
    await rx.wait_closed(1)
    assert rx.connections == 2
    assert rx.request_peers == [rx.peers[0]] * 3 + [rx.peers[1]]


async def test_an_idle_connection_expires_while_another_of_its_target_is_busy(
    rx: PeerReceiver, make_sender: Callable[..., Sender], clock: FakeClock
) -> None:
    sender = make_sender(keepalive_expiry=5.0)
    assert await asyncio.gather(send(sender, rx), send(sender, rx)) == [204, 204]
    assert rx.connections == 2
    clock.advance(4.0)
    assert await send(sender, rx) == 204  # one of the two is used; the other stays idle
    clock.advance(1.5)
    assert await send(sender, rx) == 204  # the target is recent, but that idle one is 5.5 s old
    await rx.wait_closed(1)
    assert rx.connections == 2 and rx.request_peers[2] == rx.request_peers[3]


async def test_an_expired_target_is_closed_by_a_send_elsewhere(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender], clock: FakeClock
) -> None:
    sender = make_sender()
    async with PeerReceiver(trustme_ca) as a, PeerReceiver(trustme_ca) as b:
        assert await send(sender, a) == 204
        clock.advance(5.0)
        assert await send(sender, b) == 204
        await a.wait_closed(1)  # nobody sent to a again, yet its idle socket is gone
        assert b.closed == 0
        await sender.aclose()


async def test_targets_are_bounded_least_recently_used_first(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender(max_targets=2)
    async with PeerReceiver(trustme_ca) as a, PeerReceiver(trustme_ca) as b, PeerReceiver(trustme_ca) as c:
        for rx in (a, b, a, c):  # c evicts b, the least recently used
            assert await send(sender, rx) == 204
        await b.wait_closed(1)
        assert (a.closed, c.closed) == (0, 0)
        for rx in (a, c, b):
            assert await send(sender, rx) == 204
        assert (a.connections, b.connections, c.connections) == (1, 2, 1)
        await sender.aclose()


async def test_aclose_closes_the_kept_sockets_and_later_sends_keep_none(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    assert await send(sender, rx) == 204
    assert rx.closed == 0
    await sender.aclose()
    await rx.wait_closed(1)
    assert await send(sender, rx) == 204  # still works, on a connection of its own
    await rx.wait_closed(2)
    assert rx.connections == 2


async def test_a_kept_connection_that_received_bytes_nobody_asked_for_is_not_reused(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender]
) -> None:
    """An idle HTTP/1.1 connection with unread bytes on it (here: a stray line after the response) is
    out of step with the server; the next request goes on a new connection, and is answered."""
    connections: list[asyncio.StreamWriter] = []
    send_stray, stray_sent = asyncio.Event(), asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
            if len(connections) == 1:
                await send_stray.wait()  # once the client has taken the answer and idles
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # nobody asked for this one
                await writer.drain()
                stray_sent.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ssl_context(trustme_ca, HOST))
    port = server.sockets[0].getsockname()[1]
    url = f"https://{HOST}:{port}/h"
    sender = make_sender()
    try:
        assert (await sender.send(url, body=BODY, headers={})).status == 204
        send_stray.set()
        await stray_sent.wait()
        await asyncio.sleep(0.05)  # let the client's event loop take in the stray bytes (no event to await)
        assert (await sender.send(url, body=BODY, headers={})).status == 204
        assert len(connections) == 2
    finally:
        await sender.aclose()
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()
