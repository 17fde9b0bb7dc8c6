"""Polling a process's effect from a test, where a process boundary offers nothing to await."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def wait_until(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll an (async or plain) check until it returns something truthy, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.1)
