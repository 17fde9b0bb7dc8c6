"""The pinned transport against real sockets and real TLS on loopback.

Every URL uses a test host name (hooks.test) that only the injected resolver knows, so
the only addresses ever dialled are 127.0.0.1 and ::1.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable

import pytest
import trustme
from standardwebhooks import Webhook

from switchboard.push import (
    USER_AGENT,
    AttemptTimeout,
    NetworkFailure,
    PermanentClientError,
    PushError,
    RedirectRefused,
    RetryableStatus,
    Sender,
    TargetRejected,
    TLSFailure,
    Validator,
    mint_secret,
    new_message_id,
    standard_headers,
)
from tests.support.receivers import (
    HANG,
    CloseWithoutResponse,
    HangBeforeHeaders,
    HTTPSReceiver,
    ListeningSocket,
    RawResponse,
    Respond,
    StaticResolver,
    StreamBody,
    client_ssl_context,
    make_ca,
    redirect,
)

HOST = "hooks.test"
PUBLIC = "93.184.215.14"
QUERY_SECRET = "tok3n-in-the-query"
BODY = json.dumps({"type": "todo.ready", "todo_id": "td_1"}).encode()


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def assert_clean(err: PushError) -> None:
    """No query string in the message, and no library exception chained behind it."""
    assert QUERY_SECRET not in str(err)
    assert QUERY_SECRET not in repr(err)
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__
    assert err.duration is not None and err.duration >= 0


@pytest.fixture
def resolver() -> StaticResolver:
    return StaticResolver({HOST: ["127.0.0.1"]})


@pytest.fixture
async def make_sender(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> AsyncIterator[Callable[..., Sender]]:
    made: list[Sender] = []

    def make(
        *, allow: tuple[str, ...] = ("127.0.0.1/32", "::1/128"), timeout: float = 5.0, **kw: object
    ) -> Sender:
        validator = Validator(allow_cidrs=allow, resolver=resolver, **kw)  # type: ignore[arg-type]
        made.append(Sender(validator, timeout=timeout, ssl_context=client_ssl_context(trustme_ca)))
        return made[-1]

    yield make
    for sender in made:  # their kept connections
        await sender.aclose()


@pytest.fixture
async def receiver(trustme_ca: trustme.CA) -> AsyncIterator[HTTPSReceiver]:
    async with HTTPSReceiver(trustme_ca) as rx:
        yield rx


def signed(secrets: list[str], timestamp: int | None = None, msg_id: str | None = None) -> dict[str, str]:
    return standard_headers(secrets, msg_id or new_message_id(), timestamp or int(time.time()), BODY)


# --- delivery and what is sent ----------------------------------------------------------


async def test_delivers_and_sends_only_its_own_headers(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    secret = mint_secret()
    result = await make_sender().send(
        receiver.url(f"/hook?token={QUERY_SECRET}"), body=BODY, headers=signed([secret])
    )
    assert result.status == 204
    assert result.body_bytes_read == 0
    assert 0 < result.duration < 5
    request = await receiver.next_request()
    assert request.method == "POST"
    assert request.path == f"/hook?token={QUERY_SECRET}"  # the query is sent, just never logged
    assert request.body == BODY
    assert [name for name, _ in request.headers] == [
        "host",
        "user-agent",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "content-length",
    ]
    assert request.header("host") == f"{HOST}:{receiver.port}"
    assert request.header("user-agent") == USER_AGENT
    assert USER_AGENT.startswith("switchboard/")
    assert Webhook(secret).verify(request.body, request.header_map) == json.loads(BODY)
    assert resolver.calls == [(HOST, receiver.port)]


async def test_stock_verifier_accepts_every_attempt_across_a_rotation(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    old, new = mint_secret(), mint_secret()
    sender = make_sender()
    msg_id = new_message_id()
    now = int(time.time())
    # Before the rotation: one entry. During the grace period: two, newest first,
    # with the same webhook-id on a retry and a fresh timestamp per attempt.
    await sender.send(receiver.url(), body=BODY, headers=signed([old], now - 2, msg_id))
    await sender.send(receiver.url(), body=BODY, headers=signed([new, old], now - 1, msg_id))
    await sender.send(receiver.url(), body=BODY, headers=signed([new, old], now, msg_id))
    before, during, retry = [await receiver.next_request() for _ in range(3)]
    assert len(before.header_map["webhook-signature"].split(" ")) == 1
    Webhook(old).verify(before.body, before.header_map)
    for request in (during, retry):
        entries = request.header_map["webhook-signature"].split(" ")
        assert len(entries) == 2 and all(e.startswith("v1,") for e in entries)
        Webhook(new).verify(request.body, request.header_map)
        Webhook(old).verify(request.body, request.header_map)
    assert {r.header("webhook-id") for r in (before, during, retry)} == {msg_id}
    assert len({r.header("webhook-timestamp") for r in (before, during, retry)}) == 3


async def test_plain_http_only_with_the_opt_in(trustme_ca: trustme.CA, resolver: StaticResolver) -> None:
    async with HTTPSReceiver(tls=False) as rx:
        strict = Sender(Validator(allow_cidrs=["127.0.0.1/32"], resolver=resolver))
        with pytest.raises(TargetRejected) as info:
            await strict.send(rx.url(), body=BODY, headers={})
        assert info.value.reason == "scheme"
        opted_in = Sender(Validator(allow_http=True, allow_cidrs=["127.0.0.1/32"], resolver=resolver))
        assert (await opted_in.send(rx.url(), body=BODY, headers={})).status == 204
        assert (await rx.next_request()).header("host") == f"{HOST}:{rx.port}"


async def test_caller_cannot_set_owned_headers(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    sender = make_sender()
    for name in ("Host", "user-agent", "Content-Length", "transfer-encoding", "connection"):
        with pytest.raises(ValueError, match="set by the Sender"):
            await sender.send(receiver.url(), body=BODY, headers={name: "x"})
    with pytest.raises(ValueError, match="invalid value"):
        await sender.send(receiver.url(), body=BODY, headers={"x-a": "1\r\nhost: evil"})
    assert resolver.calls == [] and receiver.connections == 0


# --- TLS --------------------------------------------------------------------------------


async def test_certificate_for_another_name_fails_as_tls(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender]
) -> None:
    async with HTTPSReceiver(trustme_ca, cert_hostnames=("other.test",)) as rx:
        with pytest.raises(TLSFailure) as info:
            await make_sender().send(rx.url(f"/?t={QUERY_SECRET}"), body=BODY, headers={})
    err = info.value
    # retryable like any failure without a status (REQ-7): a renewal or one bad node may be the cause
    assert (err.stage, err.reason, err.result, err.retryable) == ("tls", "hostname_mismatch", "tls", True)
    assert rx.connections == 1 and rx.requests == []
    assert_clean(err)


async def test_untrusted_certificate_fails_as_tls(trustme_ca: trustme.CA, resolver: StaticResolver) -> None:
    stranger = make_ca()
    async with HTTPSReceiver(trustme_ca) as rx:
        validator = Validator(allow_cidrs=["127.0.0.1/32"], resolver=resolver)
        sender = Sender(validator, ssl_context=client_ssl_context(stranger))
        with pytest.raises(TLSFailure) as info:
            await sender.send(rx.url(), body=BODY, headers={})
    assert info.value.reason == "certificate"
    assert rx.requests == []


async def test_ip_literal_host_is_verified_against_the_ip(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    async with HTTPSReceiver(trustme_ca, cert_hostnames=("127.0.0.1",)) as rx:
        result = await make_sender().send(f"https://127.0.0.1:{rx.port}/hook", body=BODY, headers={})
        assert result.status == 204
        assert (await rx.next_request()).header("host") == f"127.0.0.1:{rx.port}"
    async with HTTPSReceiver(trustme_ca, cert_hostnames=(HOST,)) as rx:
        with pytest.raises(TLSFailure) as info:
            await make_sender().send(f"https://127.0.0.1:{rx.port}/hook", body=BODY, headers={})
        assert info.value.reason == "hostname_mismatch"
    assert resolver.calls == []


def test_sender_refuses_a_context_that_does_not_verify() -> None:
    lax = ssl.create_default_context()
    lax.check_hostname = False
    with pytest.raises(ValueError, match="verify"):
        Sender(Validator(), ssl_context=lax)


async def test_tls_stage_timeout(make_sender: Callable[..., Sender], resolver: StaticResolver) -> None:
    async with ListeningSocket() as silent:  # accepts, never sends a ServerHello
        start = time.monotonic()
        with pytest.raises(AttemptTimeout) as info:
            await make_sender(timeout=0.5).send(f"https://{HOST}:{silent.port}/", body=BODY, headers={})
        assert 0.4 < time.monotonic() - start < 2.0
        assert silent.connections == 1
    assert (info.value.stage, info.value.reason, info.value.result) == ("tls", "timeout", "timeout")
    assert info.value.retryable


async def test_attempts_stuck_in_the_tls_handshake_hold_little_memory(
    make_sender: Callable[..., Sender],
) -> None:
    """Every attempt in flight to a receiver that accepts TCP and never answers holds its connection
    until the timeout. asyncio's own TLS protocol held a 256 KiB read buffer for each (a notify worker
    with 16 such attempts: 4 MiB); ours holds what arrived (nothing here). The peak of what Python
    allocated while 16 of them wait together stays under 64 KiB per attempt."""
    sender = make_sender(timeout=0.5)
    async with ListeningSocket() as silent:
        url = f"https://{HOST}:{silent.port}/"
        await asyncio.gather(  # warm: what a first attempt creates once (imports, caches) is not counted
            *(sender.send(url, body=BODY, headers={}) for _ in range(2)), return_exceptions=True
        )
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            results = await asyncio.gather(
                *(sender.send(url, body=BODY, headers={}) for _ in range(16)), return_exceptions=True
            )
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert silent.connections == 18
    assert all(isinstance(r, AttemptTimeout) and r.stage == "tls" for r in results)
    assert peak - before < 16 * 64 * 1024
    await sender.aclose()


# --- redirects, statuses, bodies ----------------------------------------------------------


async def test_a_kept_connection_answers_the_servers_close_notify(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender]
) -> None:
    """A server that closes a kept TLS connection gracefully (uvicorn shutting down, asyncio's TLS
    layer) sends close_notify and waits for the client's before it lets the socket go: the connection
    answers it at once, so such a server is not held for its TLS shutdown timeout (20 s here)."""
    held: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # keep-alive: the client keeps the connection
        await writer.drain()
        await asyncio.sleep(0.3)  # the connection sits idle in the sender's pool meanwhile
        started = time.monotonic()
        writer.close()  # close_notify, then the wait for the client's
        await writer.wait_closed()
        held.set_result(time.monotonic() - started)

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme_ca.issue_cert(HOST).configure_cert(server_ctx)
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx, ssl_shutdown_timeout=20)
    try:
        port = server.sockets[0].getsockname()[1]
        result = await make_sender().send(
            f"https://{HOST}:{port}/hook", body=BODY, headers=signed([mint_secret()])
        )
        assert result.status == 204
        assert await asyncio.wait_for(held, 10) < 5
    finally:
        server.close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirect_is_a_failure_and_location_is_never_dialled(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], status: int
) -> None:
    async with ListeningSocket() as elsewhere:
        receiver.behaviour = redirect(f"https://{HOST}:{elsewhere.port}/stolen", status)
        with pytest.raises(RedirectRefused) as info:
            await make_sender().send(receiver.url(f"/?t={QUERY_SECRET}"), body=BODY, headers={})
        await elsewhere.assert_untouched()
    err = info.value
    assert (err.status, err.stage, err.reason, err.result, err.retryable) == (
        status,
        "response",
        "redirect",
        "3xx",
        False,
    )
    assert len(receiver.requests) == 1
    assert_clean(err)


async def test_redirect_to_metadata_is_not_followed(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    receiver.behaviour = redirect("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(RedirectRefused) as info:
        await make_sender().send(receiver.url(), body=BODY, headers={})
    assert info.value.status == 302
    assert len(receiver.requests) == 1 and receiver.connections == 1
    assert resolver.calls == [(HOST, receiver.port)]


@pytest.mark.parametrize(
    ("status", "error", "reason", "result", "retryable"),
    [
        (400, PermanentClientError, "client_error", "4xx", False),
        (401, PermanentClientError, "client_error", "4xx", False),
        (404, PermanentClientError, "client_error", "4xx", False),
        (410, PermanentClientError, "gone", "4xx", False),
        (408, RetryableStatus, "request_timeout", "4xx", True),
        (429, RetryableStatus, "rate_limited", "4xx", True),
        (500, RetryableStatus, "server_error", "5xx", True),
        (503, RetryableStatus, "server_error", "5xx", True),
    ],
)
async def test_status_classification(
    receiver: HTTPSReceiver,
    make_sender: Callable[..., Sender],
    status: int,
    error: type[PushError],
    reason: str,
    result: str,
    retryable: bool,
) -> None:
    receiver.behaviour = Respond(status, headers=[("retry-after", "7")], body=b"secret receiver text")
    with pytest.raises(error) as info:
        await make_sender().send(receiver.url(f"/?t={QUERY_SECRET}"), body=BODY, headers={})
    err = info.value
    assert (getattr(err, "status"), err.reason, err.result, err.retryable) == (
        status,
        reason,
        result,
        retryable,
    )
    assert "secret receiver text" not in str(err)
    if isinstance(err, RetryableStatus):
        assert err.retry_after == 7.0
    assert_clean(err)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
async def test_any_2xx_is_delivered(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], status: int
) -> None:
    receiver.behaviour = Respond(status, body=b"ok" if status != 204 else b"")
    assert (await make_sender().send(receiver.url(), body=BODY, headers={})).status == status


async def test_ten_mebibyte_body_is_cut_at_64_kib(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    receiver.behaviour = StreamBody(total=10 * 1024 * 1024)
    start = time.monotonic()
    result = await make_sender().send(receiver.url(), body=BODY, headers={})
    assert time.monotonic() - start < 2.0
    assert result.status == 200
    assert result.body_bytes_read == 65536
    # (Whether the receiver's writes finish depends on loopback socket buffers, which
    # autotune to megabytes, so only the client side is asserted.)


async def test_body_cap_is_configurable(
    receiver: HTTPSReceiver, trustme_ca: trustme.CA, resolver: StaticResolver
) -> None:
    receiver.behaviour = Respond(200, body=b"x" * 5000)
    validator = Validator(allow_cidrs=["127.0.0.1/32"], resolver=resolver)
    sender = Sender(validator, max_body=1000, ssl_context=client_ssl_context(trustme_ca))
    assert (await sender.send(receiver.url(), body=BODY, headers={})).body_bytes_read == 1000


@pytest.mark.slow
async def test_receiver_that_never_answers_times_out_in_five_seconds(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    receiver.behaviour = HangBeforeHeaders()
    start = time.monotonic()
    with pytest.raises(AttemptTimeout) as info:
        await make_sender().send(receiver.url(f"/?t={QUERY_SECRET}"), body=BODY, headers={})
    elapsed = time.monotonic() - start
    assert 4.9 <= elapsed < 6.0
    assert (info.value.stage, info.value.reason, info.value.result) == ("response", "timeout", "timeout")
    assert 4.9 <= (info.value.duration or 0) < 6.0
    assert (await receiver.next_request(timeout=0)).body == BODY  # it did get the request
    assert_clean(info.value)


async def test_receiver_that_closes_without_answering(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    receiver.behaviour = CloseWithoutResponse()
    with pytest.raises(NetworkFailure) as info:
        await make_sender().send(receiver.url(), body=BODY, headers={})
    assert (info.value.stage, info.value.reason, info.value.retryable) == (
        "response",
        "connection_lost",
        True,
    )


async def test_receiver_that_does_not_speak_http(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    receiver.behaviour = RawResponse(b"SSH-2.0-OpenSSH_9.6 secret banner\r\n")
    with pytest.raises(NetworkFailure) as info:
        await make_sender().send(receiver.url(), body=BODY, headers={})
    assert (info.value.reason, info.value.result) == ("protocol", "network")
    assert "banner" not in str(info.value)
    assert_clean(info.value)


# --- connecting -------------------------------------------------------------------------


async def test_connection_refused(make_sender: Callable[..., Sender]) -> None:
    with pytest.raises(NetworkFailure) as info:
        await make_sender().send(f"https://{HOST}:{free_port()}/", body=BODY, headers={})
    assert (info.value.stage, info.value.reason, info.value.result) == (
        "connect",
        "connection_refused",
        "network",
    )
    assert info.value.retryable


async def test_no_second_lookup_anywhere(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an injected resolver, the system resolver is never consulted: not by the
    validator, not by httpcore, not by anyio, not by asyncio."""
    lookups: list[object] = []

    def spy(*args: object, **kwargs: object) -> list[object]:
        lookups.append(args[0])
        raise OSError("getaddrinfo must not be called")

    async def async_spy(self: object, *args: object, **kwargs: object) -> list[object]:
        return spy(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", spy)
    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "getaddrinfo", async_spy)
    result = await make_sender().send(receiver.url(), body=BODY, headers={})
    assert result.status == 204
    assert lookups == []


@needs_ipv6
async def test_ipv6_receiver(trustme_ca: trustme.CA, resolver: StaticResolver) -> None:
    async with HTTPSReceiver(trustme_ca, host="::1") as rx:
        resolver.answers[HOST] = ["::1"]
        sender = Sender(
            Validator(allow_cidrs=["::1/128"], resolver=resolver), ssl_context=client_ssl_context(trustme_ca)
        )
        assert (await sender.send(rx.url(), body=BODY, headers={})).status == 204
    async with HTTPSReceiver(trustme_ca, host="::1", cert_hostnames=("::1",)) as rx:
        result = await sender.send(f"https://[::1]:{rx.port}/x", body=BODY, headers={})
        assert result.status == 204
        assert (await rx.next_request()).header("host") == f"[::1]:{rx.port}"


@needs_ipv6
async def test_falls_back_to_the_next_validated_address(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender], resolver: StaticResolver
) -> None:
    resolver.answers[HOST] = ["::1", "127.0.0.1"]  # nothing listens on ::1 at that port
    assert (await make_sender().send(receiver.url(), body=BODY, headers={})).status == 204


# --- validation before every attempt --------------------------------------------------------


async def test_dns_rebinding_opens_no_connection(trustme_ca: trustme.CA) -> None:
    """Public at create time, 127.0.0.1 at attempt time: refused before any dial."""
    async with ListeningSocket() as target:
        url = f"https://{HOST}:{target.port}/hook?t={QUERY_SECRET}"
        resolver = StaticResolver({HOST: [PUBLIC]})
        validator = Validator(resolver=resolver)
        created = await validator.check(url)
        assert created.ips == (PUBLIC,)
        resolver.answers[HOST] = ["127.0.0.1"]  # the rebind
        with pytest.raises(TargetRejected) as info:
            await Sender(validator, ssl_context=client_ssl_context(trustme_ca)).send(
                url, body=BODY, headers={}
            )
        await target.assert_untouched()
    err = info.value
    assert (err.reason, err.result, err.retryable) == ("loopback", "rejected_ssrf", False)
    assert resolver.calls == [(HOST, target.port), (HOST, target.port)]
    assert_clean(err)


async def test_rebinding_control_the_same_url_does_reach_the_socket(trustme_ca: trustme.CA) -> None:
    """The control for the test above: when 127.0.0.1 is allowlisted, the same URL
    connects to that socket, so "untouched" above means "refused", not "unreachable"."""
    async with ListeningSocket() as target:
        resolver = StaticResolver({HOST: ["127.0.0.1"]})
        validator = Validator(allow_cidrs=["127.0.0.1/32"], resolver=resolver)
        sender = Sender(validator, timeout=0.3, ssl_context=client_ssl_context(trustme_ca))
        with pytest.raises(AttemptTimeout):
            await sender.send(f"https://{HOST}:{target.port}/hook", body=BODY, headers={})
        await target.wait_for_connection()


async def test_unresolvable_at_attempt_time_is_a_network_error(trustme_ca: trustme.CA) -> None:
    async with ListeningSocket() as target:
        resolver = StaticResolver({})  # NXDOMAIN
        sender = Sender(Validator(resolver=resolver), ssl_context=client_ssl_context(trustme_ca))
        with pytest.raises(NetworkFailure) as info:
            await sender.send(f"https://{HOST}:{target.port}/", body=BODY, headers={})
        await target.assert_untouched()
    assert (info.value.stage, info.value.reason, info.value.result, info.value.retryable) == (
        "connect",
        "dns",
        "network",
        True,
    )


async def test_lookup_timeout_at_attempt_time_is_a_timeout(trustme_ca: trustme.CA) -> None:
    resolver = StaticResolver({HOST: HANG})
    sender = Sender(Validator(resolver=resolver, timeout=0.2), ssl_context=client_ssl_context(trustme_ca))
    start = time.monotonic()
    with pytest.raises(AttemptTimeout) as info:
        await sender.send(f"https://{HOST}/", body=BODY, headers={})
    assert time.monotonic() - start < 1.0
    assert (info.value.stage, info.value.reason, info.value.retryable) == ("connect", "dns_timeout", True)


async def test_attempt_deadline_bounds_a_slow_lookup(trustme_ca: trustme.CA) -> None:
    """The Sender's own deadline covers the lookup too, even with a lax validator."""
    resolver = StaticResolver({HOST: HANG})
    sender = Sender(
        Validator(resolver=resolver, timeout=30), timeout=0.2, ssl_context=client_ssl_context(trustme_ca)
    )
    with pytest.raises(AttemptTimeout) as info:
        await sender.send(f"https://{HOST}/", body=BODY, headers={})
    assert info.value.reason == "dns_timeout"


# --- cancellation -------------------------------------------------------------------------


async def test_cancelling_an_attempt_propagates_and_closes_the_connection(
    receiver: HTTPSReceiver, make_sender: Callable[..., Sender]
) -> None:
    """A shutdown cancels in-flight attempts: CancelledError comes through unchanged
    (not an AttemptTimeout or NetworkFailure) and the socket is closed."""
    receiver.behaviour = HangBeforeHeaders()
    task = asyncio.create_task(make_sender().send(receiver.url(), body=BODY, headers={}))
    await receiver.next_request()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    receiver.behaviour = Respond(204)
    assert (await make_sender().send(receiver.url(), body=BODY, headers={})).status == 204
