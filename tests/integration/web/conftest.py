from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from tests.support.server import Instance, make_settings, run_instance


@pytest.fixture
def wall_clock() -> ManualClock:
    """Near real time: the MCP SDK compares token expiries with time.time()."""
    return ManualClock(time.time())


@pytest.fixture
async def inst(tmp_path: Path, wall_clock: ManualClock) -> AsyncIterator[Instance]:
    async with run_instance(make_settings(tmp_path), clock=wall_clock) as instance:
        yield instance
