"""The loop every periodic sweep in ``queue/`` runs: one pass, its failure logged (never raised, so
the next pass still comes), then a jittered wait that a wake-up may cut short."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from switchboard.store.errors import StoreUnavailable


async def every(
    interval: float,
    sweep: Callable[[], Awaitable[object]],
    *,
    what: str,
    log: Any,
    wake: asyncio.Event | None = None,
) -> None:
    """Run ``sweep`` about every ``interval`` seconds for ever; ``what`` names it in the log lines."""
    while True:
        try:
            await sweep()
        except StoreUnavailable:
            log.warning(f"{what} skipped: database unavailable")
        except Exception:
            log.error(f"{what} failed", exc_info=True)
        # Jitter keeps several instances from sweeping in lockstep.
        pause = interval * random.uniform(0.8, 1.2)
        if wake is None:
            await asyncio.sleep(pause)
            continue
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                await wake.wait()
        wake.clear()
