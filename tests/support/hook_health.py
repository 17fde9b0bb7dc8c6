"""A hook's health set through the path the delivery workers use (``HookHealth.record_many`` with a
``HealthFold``), for tests that need a hook that delivered or failed without running a receiver."""

from __future__ import annotations

from switchboard.core.clock import ms
from switchboard.notify.store import HealthFold, HealthOutcome, HookHealth


async def record(
    store: HookHealth, hook_id: str, fold: HealthFold, *, disabled_at: int | None = None
) -> HealthOutcome | None:
    """One hook's fold, written as the workers write a batch; ``disabled_at`` defaults to the fold's time."""
    stamp = fold.at if disabled_at is None else disabled_at
    return (await store.record_many([(hook_id, fold, stamp)]))[hook_id]


async def delivered(store: HookHealth, hook_id: str, status: int) -> None:
    fold = HealthFold()
    fold.delivered(status, ms(store.clock.now()), "")
    await record(store, hook_id, fold)


async def failed(store: HookHealth, hook_id: str, status: int | None, error: str) -> HealthOutcome | None:
    fold = HealthFold()
    fold.failed(status, error, ms(store.clock.now()), "")
    return await record(store, hook_id, fold)
