"""Polling a process's effect from a test, where a process boundary offers nothing to await."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def wait_until(
    check: Callable[[], Any],
    timeout: float = 20.0,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll an (async or plain) check until it returns something truthy, within ``timeout``; on a
    timeout the assertion carries ``detail()`` too (a server's log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s" + (f"\n{detail()}" if detail else ""))
        await asyncio.sleep(0.1)
