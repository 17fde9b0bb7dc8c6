"""The pinned network backend refuses anything but the validated origin."""

from __future__ import annotations

import httpcore
import pytest

from switchboard.push._transport import _PinnedBackend


@pytest.fixture
def backend() -> _PinnedBackend:
    return _PinnedBackend("hooks.test", 443, ("127.0.0.1",))


@pytest.mark.parametrize(("host", "port"), [("evil.test", 443), ("hooks.test", 444), ("127.0.0.1", 443)])
async def test_refuses_other_origins_without_dialling(backend: _PinnedBackend, host: str, port: int) -> None:
    with pytest.raises(httpcore.ConnectError, match="not validated"):
        await backend.connect_tcp(host, port)


async def test_refuses_unix_sockets(backend: _PinnedBackend) -> None:
    with pytest.raises(httpcore.ConnectError, match="unix"):
        await backend.connect_unix_socket("/var/run/docker.sock")
