"""Per-origin fast-fail: after a connect to an origin is refused, further attempts to it within
``fast_fail_seconds`` fail at once without dialling, on real sockets on loopback.

Dials are counted at the only place the transport opens sockets (`_connection.connect_tcp`);
the window runs on an injected clock. ``send`` still validates first, so a URL that now resolves to
a refused address is ``rejected_ssrf``, never a fast network failure.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trustme

from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    Sender,
    TargetRejected,
    TLSFailure,
)
from switchboard.push import _transport as transport
from tests.integration.push.support import BODY, HOST, DialCounter, FakeClock, PeerReceiver, free_port
from tests.support.receivers import HangBeforeHeaders, StaticResolver


@pytest.fixture
def dials(monkeypatch: pytest.MonkeyPatch) -> DialCounter:
    return DialCounter().attach(monkeypatch)


async def refused(sender: Sender, url: str) -> NetworkFailure:
    with pytest.raises(NetworkFailure) as info:
        await sender.send(url, body=BODY, headers={})
    assert (info.value.stage, info.value.reason) == ("connect", "connection_refused")
    return info.value


async def test_a_refused_origin_fails_fast_within_the_window_then_is_dialled_again(
    make_sender: Callable[..., Sender], dials: DialCounter, clock: FakeClock, resolver: StaticResolver
) -> None:
    sender = make_sender(fast_fail_seconds=0.5)
    url = f"https://{HOST}:{free_port()}/hook"
    first = await refused(sender, url)
    assert first.fast_fail is False and len(dials.dials) == 1

    clock.advance(0.4)
    second = await refused(sender, url)
    assert second.fast_fail is True
    assert (second.result, second.retryable) == ("network", True)
    assert second.duration is not None and second.duration < 1
    assert "fast-fail" in str(second)
    assert len(dials.dials) == 1  # not dialled
    assert len(resolver.calls) == 2  # but validated

    pre = sender.fast_failure(url)  # the synchronous pre-check: no lookup, no dial
    assert isinstance(pre, NetworkFailure)
    assert (pre.stage, pre.reason, pre.fast_fail, pre.duration) == (
        "connect",
        "connection_refused",
        True,
        0.0,
    )
    assert len(resolver.calls) == 2 and len(dials.dials) == 1

    clock.advance(0.1)  # the window is over
    assert sender.fast_failure(url) is None
    again = await refused(sender, url)
    assert again.fast_fail is False and len(dials.dials) == 2
    assert sender.fast_failure(url) is not None  # re-armed


async def test_a_connection_to_the_origin_clears_it(
    rx: PeerReceiver, make_sender: Callable[..., Sender], dials: DialCounter, resolver: StaticResolver
) -> None:
    sender = make_sender()
    url = rx.url()
    resolver.answers[HOST] = ["127.0.0.2"]  # nothing listens there on rx's port
    await refused(sender, url)
    assert sender.fast_failure(url) is not None
    # Within the window, the name now resolves to other addresses: those are dialled (a fast-fail
    # holds only for the addresses that refused), and the success clears the origin.
    resolver.answers[HOST] = ["127.0.0.1"]
    assert (await sender.send(url, body=BODY, headers={})).status == 204
    assert sender.fast_failure(url) is None
    resolver.answers[HOST] = ["127.0.0.2"]
    assert (await refused(sender, url)).fast_fail is False  # dialled, not fast-failed
    assert len(dials.dials) == 3


async def test_a_url_that_validation_refuses_is_rejected_not_fast_failed(
    make_sender: Callable[..., Sender], dials: DialCounter, resolver: StaticResolver
) -> None:
    sender = make_sender()
    url = f"https://{HOST}:{free_port()}/hook"
    await refused(sender, url)
    resolver.answers[HOST] = ["10.0.0.5"]  # rebinds to a refused class within the window
    with pytest.raises(TargetRejected) as info:
        await sender.send(url, body=BODY, headers={})
    assert (info.value.reason, info.value.result, info.value.fast_fail) == ("private", "rejected_ssrf", False)
    # The pre-check cannot validate (no lookup): it still reports the origin's refusal, which is
    # safe only because acting on it dials nothing. send() is what classifies.
    assert sender.fast_failure(url) is not None
    assert len(dials.dials) == 1


async def test_only_a_refused_connect_arms_it(
    trustme_ca: trustme.CA, make_sender: Callable[..., Sender]
) -> None:
    sender = make_sender(timeout=0.3)
    async with PeerReceiver(trustme_ca, cert_hostnames=("other.test",)) as wrong_cert:
        for _ in range(2):
            with pytest.raises(TLSFailure):
                await sender.send(wrong_cert.url(), body=BODY, headers={})
        assert wrong_cert.connections == 2
        assert sender.fast_failure(wrong_cert.url()) is None
    async with PeerReceiver(trustme_ca, behaviour=HangBeforeHeaders()) as silent:
        for _ in range(2):
            with pytest.raises(AttemptTimeout):
                await sender.send(silent.url(), body=BODY, headers={})
        assert silent.connections == 2
        assert sender.fast_failure(silent.url()) is None
    await sender.aclose()


async def test_fast_fail_seconds_zero_turns_it_off(
    make_sender: Callable[..., Sender], dials: DialCounter
) -> None:
    sender = make_sender(fast_fail_seconds=0)
    url = f"https://{HOST}:{free_port()}/hook"
    assert [(await refused(sender, url)).fast_fail for _ in range(3)] == [False] * 3
    assert len(dials.dials) == 3
    assert sender.fast_failure(url) is None


async def test_the_origin_map_is_bounded(
    make_sender: Callable[..., Sender], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "_MAX_FAST_FAIL_ORIGINS", 2)
    sender = make_sender()
    urls = [f"https://{HOST}:{free_port()}/hook" for _ in range(3)]
    for url in urls:
        await refused(sender, url)
    assert [sender.fast_failure(url) is not None for url in urls] == [False, True, True]


def test_the_pre_check_parses_as_the_validator_does(make_sender: Callable[..., Sender]) -> None:
    sender = make_sender()
    sender._remember(  # an origin that refused a moment ago
        transport.ValidatedTarget("https", HOST, 8443, "/", ("127.0.0.1",)),
        transport._Progress(deadline=0.0),
        NetworkFailure(stage="connect", reason="connection_refused"),
    )
    for same in (
        f"https://{HOST}:8443/other?q=1",
        "https://HOOKS.test.:8443/",
        "https://ｈｏｏｋｓ.test:8443/",  # full-width letters: IDNA maps them, as validation does
    ):
        assert sender.fast_failure(same) is not None, same
    for other in (f"https://{HOST}/", f"http://{HOST}:8443/", "https://u@hooks.test:8443/", "not a url"):
        assert sender.fast_failure(other) is None, other


def test_unreachable_arms_it_and_other_connect_failures_do_not(make_sender: Callable[..., Sender]) -> None:
    sender = make_sender()
    target = transport.ValidatedTarget("https", HOST, 8443, "/", ("127.0.0.1",))
    url = f"https://{HOST}:8443/"
    sender._remember(
        target, transport._Progress(0.0), NetworkFailure(stage="connect", reason="connect_failed")
    )
    assert sender.fast_failure(url) is None
    sender._remember(target, transport._Progress(0.0), NetworkFailure(stage="connect", reason="unreachable"))
    err = sender.fast_failure(url)
    assert err is not None and (err.reason, err.fast_fail) == ("unreachable", True)
