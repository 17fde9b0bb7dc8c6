"""The workers' reads of their hooks before an attempt, batched (one read per attempt cost a fifth of
a worker process's CPU in a burst)."""

from __future__ import annotations

import asyncio
from typing import Any

from switchboard.notify.store import HookStore, SendableHook


class HookReads:
    """The workers' reads of their hooks before an attempt, batched: the ids asked for while a read
    runs go out together in the next one, each answer still read after it was asked for (REQ-2,
    REQ-8). One read per attempt cost a fifth of a worker process's CPU in a burst."""

    def __init__(self, hooks: HookStore) -> None:
        self._hooks = hooks
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def sendable(self, hook_id: str) -> SendableHook | None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(hook_id, []).append(future)
        if self._task is None:
            self._task = asyncio.create_task(self._read(), name="notify-hook-reads")
        row = await future
        return None if row is None else self._hooks.open_sendable(hook_id, row)

    async def _read(self) -> None:
        batch: dict[str, list[asyncio.Future[Any]]] = {}
        try:
            await asyncio.sleep(0)  # the other workers asking in this turn of the loop join the first read
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                try:
                    rows = await self._hooks.sendable_rows(batch)
                except Exception as exc:  # every waiter logs it with its own ids
                    for futures in batch.values():
                        for f in futures:
                            if not f.done():
                                f.set_exception(exc)
                    continue
                for hook_id, futures in batch.items():
                    for f in futures:
                        if not f.done():
                            f.set_result(rows.get(hook_id))
        finally:
            self._task = None
            for futures in [*batch.values(), *self._waiting.values()]:  # only if this task was cancelled
                for f in futures:
                    if not f.done():
                        f.set_exception(RuntimeError("the hook read was abandoned"))
            self._waiting = {}
