"""Stopping background tasks: the one idiom, written once."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel ``tasks`` (``None`` is skipped) and wait until each has finished, in order.

    A task ending cancelled is the expected end and is not raised; any other exception a task raises
    while it stops is, as awaiting it would. A cancellation of the caller itself still propagates: the
    copies this replaces (``with suppress(CancelledError): await task``) swallowed it, so a stop that
    was itself being cancelled carried on as if it had not been.
    """
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    me = asyncio.current_task()
    # A caller already being cancelled (stopping in a ``finally``) still waits for every task; only a
    # cancellation that arrives while it waits is its own to raise (the count grows: asyncio.timeout's test).
    already = me.cancelling() if me is not None else 0
    for task in live:
        try:
            await task
        except asyncio.CancelledError:
            if me is not None and me.cancelling() > already:
                raise
