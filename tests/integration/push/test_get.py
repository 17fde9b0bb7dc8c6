"""``Sender.get``: the pinned transport reading a small document (OAuth client metadata documents),
against real sockets and TLS on loopback. The guard, pinning and no-redirect rule are the POST's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from switchboard.push import (
    NetworkFailure,
    RedirectRefused,
    ResponseTooLarge,
    Sender,
    TargetRejected,
)
from tests.integration.push.support import HOST, PeerReceiver
from tests.support.receivers import (
    CloseWithoutResponse,
    ListeningSocket,
    RawResponse,
    Respond,
    StreamBody,
    redirect,
)

JSON = [("content-type", "application/json")]


async def test_get_returns_the_body_and_headers(rx: PeerReceiver, make_sender: Callable[..., Sender]) -> None:
    rx.behaviour = Respond(200, [*JSON, ("cache-control", "max-age=90")], b'{"a": 1}')
    sender = make_sender()
    got = await sender.get(
        rx.url("/doc.json", hostname=HOST), max_body=64, headers={"accept": "application/json"}
    )
    assert got.status == 200 and got.body == b'{"a": 1}'
    assert got.header("Content-Type") == "application/json" and got.header("cache-control") == "max-age=90"
    request = await rx.next_request()
    assert request.method == "GET" and request.path == "/doc.json" and request.body == b""
    assert request.header("accept") == "application/json" and request.header("host") == f"{HOST}:{rx.port}"
    # The connection is kept and reused, as for POSTs.
    await sender.get(rx.url("/doc.json", hostname=HOST), max_body=64, headers={})
    assert len(rx.peers) == 1
    await sender.aclose()


async def test_a_body_of_exactly_the_cap_passes_and_one_byte_more_fails(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    url = rx.url("/doc.json", hostname=HOST)
    rx.behaviour = Respond(200, JSON, b"x" * 100)
    assert len((await sender.get(url, max_body=100, headers={})).body) == 100
    rx.behaviour = Respond(200, JSON, b"x" * 101)
    with pytest.raises(ResponseTooLarge) as caught:
        await sender.get(url, max_body=100, headers={})
    assert caught.value.reason == "too_large" and "100 bytes" in str(caught.value)
    await sender.aclose()


async def test_a_long_body_without_content_length_stops_at_the_cap(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    # Content-Length is announced, and over the cap: nothing of the body is read.
    rx.behaviour = StreamBody(total=10 * 1024 * 1024, status=200)
    sender = make_sender()
    with pytest.raises(ResponseTooLarge):
        await sender.get(rx.url("/big", hostname=HOST), max_body=5120, headers={})
    assert not rx.stream_finished  # the connection was closed, not read to its end
    # Without Content-Length (read to close), the read stops one byte past the cap.
    chunked = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n" + b"y" * 9000
    rx.behaviour = RawResponse(chunked)
    with pytest.raises(ResponseTooLarge):
        await sender.get(rx.url("/big", hostname=HOST), max_body=5120, headers={})
    await sender.aclose()


async def test_redirects_are_not_followed(rx: PeerReceiver, make_sender: Callable[..., Sender]) -> None:
    async with ListeningSocket() as other:
        rx.behaviour = redirect(f"https://{HOST}:{other.port}/elsewhere")
        sender = make_sender()
        with pytest.raises(RedirectRefused):
            await sender.get(rx.url("/doc.json", hostname=HOST), max_body=64, headers={})
        await other.assert_untouched()
        await sender.aclose()


async def test_refused_address_is_never_dialled(make_sender: Callable[..., Sender]) -> None:
    async with ListeningSocket() as victim:
        sender = make_sender(allow=())  # loopback not allowed
        with pytest.raises(TargetRejected) as caught:
            await sender.get(f"https://{HOST}:{victim.port}/doc.json", max_body=64, headers={})
        assert caught.value.reason == "loopback"
        await victim.assert_untouched()


async def test_a_body_cut_short_is_a_network_failure(
    rx: PeerReceiver, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender()
    rx.behaviour = RawResponse(b'HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{"partial":')
    with pytest.raises(NetworkFailure):
        await sender.get(rx.url("/doc.json", hostname=HOST), max_body=64, headers={})
    rx.behaviour = CloseWithoutResponse()
    with pytest.raises(NetworkFailure):
        await sender.get(rx.url("/doc.json", hostname=HOST), max_body=64, headers={})
    await sender.aclose()
