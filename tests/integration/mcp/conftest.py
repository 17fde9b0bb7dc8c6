from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from tests.integration.mcp.real import RealServer, start_real_server
from tests.support.server import Instance, make_settings, run_instance


@pytest.fixture
async def inst(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Instance]:
    # The heartbeat is driven by hand (doorbell.heartbeat_once) so no test depends on timing.
    settings = make_settings(tmp_path, doorbell_heartbeat_seconds=3600)
    async with run_instance(settings, clock=clock) as instance:
        yield instance


@pytest.fixture
async def real_server(tmp_path: Path) -> AsyncIterator[RealServer]:
    """A ``switchboard serve`` child with one tenant (see real.py)."""
    server = await start_real_server(tmp_path / "sb")
    try:
        yield server
    finally:
        server.proc.stop()
