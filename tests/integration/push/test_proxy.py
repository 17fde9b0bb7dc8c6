"""The transport through an egress proxy (SWITCHBOARD_OUTBOUND_PROXY): a real CONNECT proxy on loopback
(tests/support/connect_proxy.py) and real HTTPS receivers. The guard validates first, the CONNECT names
the validated IP literal, TLS inside the tunnel checks the URL's host, and the proxy's failures are
connect failures of their own names."""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest
import trustme
from standardwebhooks import Webhook

from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    ProxyRefused,
    RedirectRefused,
    Sender,
    TargetRejected,
    TLSFailure,
    Validator,
    mint_secret,
    new_message_id,
    parse_proxy_url,
    standard_headers,
)
from tests.integration.push.support import BODY, HOST, DialCounter, free_port
from tests.integration.push.test_transport import needs_ipv6
from tests.support.connect_proxy import ConnectProxy, target_ip
from tests.support.receivers import (
    CloseWithoutResponse,
    HTTPSReceiver,
    ListeningSocket,
    RawResponse,
    StaticResolver,
    StreamBody,
    client_ssl_context,
    redirect,
)

USER, PASSWORD = "switchboard", "proxy-pass-w0rd"


@pytest.fixture
async def proxy() -> AsyncIterator[ConnectProxy]:
    async with ConnectProxy(credentials=(USER, PASSWORD)) as p:
        yield p


@pytest.fixture
async def receiver(trustme_ca: trustme.CA) -> AsyncIterator[HTTPSReceiver]:
    async with HTTPSReceiver(trustme_ca) as rx:
        yield rx


@pytest.fixture
async def make_sender(
    resolver: StaticResolver, trustme_ca: trustme.CA, proxy: ConnectProxy
) -> AsyncIterator[Callable[..., Sender]]:
    made: list[Sender] = []

    def make(
        *, allow: tuple[str, ...] = ("127.0.0.1/32", "::1/128"), proxy_url: str | None = None, **kw: object
    ) -> Sender:
        url = proxy_url or f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}"
        validator = Validator(allow_cidrs=allow, resolver=resolver)
        sender = Sender(
            validator,
            ssl_context=client_ssl_context(trustme_ca),
            proxy=parse_proxy_url(url),
            **kw,  # type: ignore[arg-type]
        )
        made.append(sender)
        return sender

    yield make
    for sender in made:
        await sender.aclose()


def all_ip_literals(proxy: ConnectProxy) -> bool:
    return all(r.method == "CONNECT" and target_ip(r.target) is not None for r in proxy.requests)


# --- delivery -----------------------------------------------------------------------------------


async def test_delivers_through_a_tunnel_named_by_the_validated_ip(
    receiver: HTTPSReceiver,
    proxy: ConnectProxy,
    make_sender: Callable[..., Sender],
    resolver: StaticResolver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dials = DialCounter().attach(monkeypatch)
    secret = mint_secret()
    headers = standard_headers([secret], new_message_id(), int(time.time()), BODY)
    result = await make_sender().send(receiver.url("/hook?q=1"), body=BODY, headers=headers)
    assert result.status == 204
    assert proxy.lines == [f"CONNECT 127.0.0.1:{receiver.port} HTTP/1.1"]
    (connect,) = proxy.requests
    assert connect.header("host") == f"127.0.0.1:{receiver.port}"
    assert connect.header("proxy-authorization") == (
        "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    )
    request = await receiver.next_request()
    assert request.path == "/hook?q=1"
    assert request.header("host") == f"{HOST}:{receiver.port}"  # the name, inside the tunnel
    assert request.header("proxy-authorization") is None  # the proxy's credential stays with the proxy
    assert Webhook(secret).verify(request.body, request.header_map) is not None
    assert resolver.calls == [(HOST, receiver.port)]  # resolved once, by the guard
    assert dials.dials == [("127.0.0.1", proxy.port)]  # the only socket opened: to the proxy


async def test_no_system_lookup_with_a_proxy(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[object] = []

    def spy(*args: object, **kwargs: object) -> list[object]:
        lookups.append(args[0])
        raise OSError("getaddrinfo must not be called")

    async def async_spy(self: object, *args: object, **kwargs: object) -> list[object]:
        return spy(*args, **kwargs)

    sender = make_sender()  # built before the spies: the test's proxy itself binds by literal anyway
    monkeypatch.setattr(socket, "getaddrinfo", spy)
    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "getaddrinfo", async_spy)
    assert (await sender.send(receiver.url(), body=BODY, headers={})).status == 204
    assert lookups == []


async def test_a_kept_tunnel_carries_the_next_attempt(
    receiver: HTTPSReceiver, proxy: ConnectProxy, make_sender: Callable[..., Sender]
) -> None:
    """Keep-alive is unchanged: connections are kept per validated target, and a Sender has one proxy,
    so a kept tunnel is per (proxy, target IPs, host)."""
    sender = make_sender()
    for _ in range(3):
        assert (await sender.send(receiver.url(), body=BODY, headers={})).status == 204
    assert proxy.tunnels == 1 and len(proxy.requests) == 1
    assert receiver.connections == 1 and len(receiver.requests) == 3


async def test_the_next_validated_address_is_tried_when_the_proxy_cannot_reach_one(
    receiver: HTTPSReceiver, proxy: ConnectProxy, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    resolver.answers[HOST] = ["127.0.0.2", "127.0.0.1"]  # nothing listens on 127.0.0.2 at that port
    result = await make_sender(allow=("127.0.0.0/8",)).send(receiver.url(), body=BODY, headers={})
    assert result.status == 204
    assert proxy.lines == [
        f"CONNECT 127.0.0.2:{receiver.port} HTTP/1.1",
        f"CONNECT 127.0.0.1:{receiver.port} HTTP/1.1",
    ]


@needs_ipv6
async def test_an_ipv6_target_is_named_in_brackets(
    trustme_ca: trustme.CA, proxy: ConnectProxy, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    async with HTTPSReceiver(trustme_ca, host="::1") as rx:
        resolver.answers[HOST] = ["::1"]
        assert (await make_sender().send(rx.url(), body=BODY, headers={})).status == 204
    assert proxy.lines == [f"CONNECT [::1]:{rx.port} HTTP/1.1"]


async def test_plain_http_targets_are_tunnelled_too(
    proxy: ConnectProxy, trustme_ca: trustme.CA, resolver: StaticResolver
) -> None:
    """Never an absolute-form ``POST http://name/...``: the proxy would resolve the name itself."""
    async with HTTPSReceiver(tls=False) as rx:
        validator = Validator(allow_http=True, allow_cidrs=["127.0.0.1/32"], resolver=resolver)
        url = f"http://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}"
        sender = Sender(validator, proxy=parse_proxy_url(url), keepalive_expiry=0)
        assert (await sender.send(rx.url(), body=BODY, headers={})).status == 204
        assert (await rx.next_request()).header("host") == f"{HOST}:{rx.port}"
    assert proxy.lines == [f"CONNECT 127.0.0.1:{rx.port} HTTP/1.1"]


# --- the guard first -------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["10.0.0.5", "169.254.169.254", "127.0.0.2"])
async def test_a_refused_target_never_reaches_the_proxy(
    proxy: ConnectProxy, make_sender: Callable[..., Sender], resolver: StaticResolver, answer: str
) -> None:
    """What the proxy could reach (a private address, the metadata service, another loopback address)
    is refused by the guard before any connection to the proxy."""
    resolver.answers[HOST] = [answer]
    with pytest.raises(TargetRejected) as info:
        await make_sender().send(f"https://{HOST}/hook", body=BODY, headers={})
    assert info.value.result == "rejected_ssrf"
    await proxy.assert_untouched()
    assert proxy.requests == []


async def test_tls_inside_the_tunnel_verifies_the_url_host(
    trustme_ca: trustme.CA, proxy: ConnectProxy, make_sender: Callable[..., Sender]
) -> None:
    async with HTTPSReceiver(trustme_ca, cert_hostnames=("other.test",)) as rx:
        with pytest.raises(TLSFailure) as info:
            await make_sender().send(rx.url(), body=BODY, headers={})
        assert (info.value.stage, info.value.reason) == ("tls", "hostname_mismatch")
        assert rx.requests == []
    assert proxy.lines == [f"CONNECT 127.0.0.1:{rx.port} HTTP/1.1"]  # the tunnel was made; TLS failed
    async with HTTPSReceiver(trustme_ca, cert_hostnames=("127.0.0.1",)) as rx:  # an IP-literal URL
        assert (
            await make_sender().send(f"https://127.0.0.1:{rx.port}/", body=BODY, headers={})
        ).status == 204


async def test_redirects_and_the_body_cap_are_unchanged(
    trustme_ca: trustme.CA, proxy: ConnectProxy, make_sender: Callable[..., Sender]
) -> None:
    async with (
        ListeningSocket() as moved,
        HTTPSReceiver(trustme_ca, behaviour=redirect(f"https://{HOST}:{moved.port}/x")) as rx,
    ):
        with pytest.raises(RedirectRefused):
            await make_sender().send(rx.url(), body=BODY, headers={})
        await moved.assert_untouched()
        rx.behaviour = StreamBody(total=4 * 1024 * 1024)
        result = await make_sender().send(rx.url(), body=BODY, headers={})
        assert (result.status, result.body_bytes_read) == (200, 65536)
    assert all(line == f"CONNECT 127.0.0.1:{rx.port} HTTP/1.1" for line in proxy.lines)


# --- the proxy's failures --------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "password"), [(403, PASSWORD), (502, PASSWORD), (200, "wrong-pass")])
async def test_a_refused_connect_is_a_retryable_connect_failure(
    receiver: HTTPSReceiver,
    proxy: ConnectProxy,
    make_sender: Callable[..., Sender],
    answer: int,
    password: str,
) -> None:
    proxy.answer = answer
    sender = make_sender(proxy_url=f"http://{USER}:{password}@127.0.0.1:{proxy.port}")
    for attempt in (1, 2):  # no fast-fail: the proxy's refusal is not the receiver's
        with pytest.raises(ProxyRefused) as info:
            await sender.send(receiver.url(), body=BODY, headers={})
        err = info.value
        assert (err.stage, err.reason, err.result, err.retryable) == (
            "connect",
            "proxy_refused",
            "network",
            True,
        )
        assert err.proxy_status == (407 if password != PASSWORD else answer)
        assert str(err.proxy_status) in str(err) and password not in str(err) and not err.fast_fail
        assert len(proxy.requests) == attempt
    assert receiver.connections == 0


async def test_an_unreachable_proxy(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], monkeypatch: pytest.MonkeyPatch
) -> None:
    dials = DialCounter().attach(monkeypatch)
    port = free_port()
    sender = make_sender(proxy_url=f"http://127.0.0.1:{port}")
    for _ in (1, 2):
        with pytest.raises(NetworkFailure) as info:
            await sender.send(receiver.url(), body=BODY, headers={})
        assert (info.value.stage, info.value.reason, info.value.retryable) == (
            "connect",
            "proxy_unreachable",
            True,
        )
        assert not info.value.fast_fail
    assert dials.dials == [("127.0.0.1", port)] * 2
    assert receiver.connections == 0


@pytest.mark.parametrize(
    "behaviour",
    [
        RawResponse(b"SSH-2.0-OpenSSH_9.6 banner\r\n"),
        CloseWithoutResponse(),
        RawResponse(b"HTTP/1.1 200 Connection established\r\n\r\nearly bytes"),
    ],
    ids=["not-http", "hangs-up", "bytes-beyond-its-answer"],
)
async def test_a_proxy_that_does_not_answer_connect_properly(
    receiver: HTTPSReceiver,
    make_sender: Callable[..., Sender],
    behaviour: RawResponse | CloseWithoutResponse,
) -> None:
    async with HTTPSReceiver(tls=False, behaviour=behaviour) as bad:
        with pytest.raises(NetworkFailure) as info:
            await make_sender(proxy_url=f"http://127.0.0.1:{bad.port}").send(
                receiver.url(), body=BODY, headers={}
            )
        assert (info.value.stage, info.value.reason) == ("connect", "proxy_protocol")
        assert "banner" not in str(info.value)
        assert (await bad.next_request()).method == "CONNECT"
    assert receiver.connections == 0


async def test_the_attempt_deadline_covers_the_proxys_answer(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    async with ConnectProxy(silent=True) as silent:
        sender = make_sender(proxy_url=silent.url, timeout=1.0)
        start = time.monotonic()
        with pytest.raises(AttemptTimeout) as info:
            await sender.send(receiver.url(), body=BODY, headers={})
        assert 0.9 <= time.monotonic() - start < 2.0
        assert (info.value.stage, info.value.reason) == ("connect", "timeout")
        assert silent.lines == [f"CONNECT 127.0.0.1:{receiver.port} HTTP/1.1"]
    assert receiver.connections == 0


async def test_every_connect_line_names_an_ip_literal(
    trustme_ca: trustme.CA, proxy: ConnectProxy, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    names = ("hooks.test", "dispatch.test", "a.b.example.test")
    for name in names:
        resolver.answers[name] = ["127.0.0.1"]
    sender = make_sender()
    async with HTTPSReceiver(trustme_ca, cert_hostnames=names) as rx:
        for name in names:
            assert (await sender.send(rx.url(hostname=name), body=BODY, headers={})).status == 204
    assert proxy.lines == [f"CONNECT 127.0.0.1:{rx.port} HTTP/1.1"] * 3  # one tunnel per host name
    assert all_ip_literals(proxy)
