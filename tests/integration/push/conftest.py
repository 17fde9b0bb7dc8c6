"""Fixtures for the push transport tests: a fresh trustme CA per test, and for the keep-alive and
fast-fail tests a resolver for ``hooks.test``, an injected clock, a Sender factory and a receiver that
reports connections (a test module may define its own fixture of the same name)."""

from collections.abc import AsyncIterator, Callable

import pytest
import trustme

from switchboard.push import Sender, Validator
from tests.integration.push.support import HOST, FakeClock, PeerReceiver
from tests.support.receivers import StaticResolver, client_ssl_context, trustme_ca

__all__ = ["trustme_ca"]


@pytest.fixture
def resolver() -> StaticResolver:
    return StaticResolver({HOST: ["127.0.0.1"]})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_sender(resolver: StaticResolver, trustme_ca: trustme.CA, clock: FakeClock) -> Callable[..., Sender]:
    def make(*, allow: tuple[str, ...] = ("127.0.0.0/8",), **kw: object) -> Sender:
        validator = Validator(allow_cidrs=allow, resolver=resolver)
        return Sender(validator, ssl_context=client_ssl_context(trustme_ca), clock=clock, **kw)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def rx(trustme_ca: trustme.CA) -> AsyncIterator[PeerReceiver]:
    async with PeerReceiver(trustme_ca) as receiver:
        yield receiver
