"""A hook's health set through the path the delivery workers use (``HookHealth.record_outcomes`` with a
``HealthFold``), for tests that need a hook that delivered or failed without running a receiver."""

from __future__ import annotations

from switchboard.clock import ms
from switchboard.notify.hook_model import HealthFold, HealthOutcome
from switchboard.notify.store import HookHealth


async def delivered(store: HookHealth, hook_id: str, status: int) -> None:
    fold = HealthFold()
    fold.delivered(status, ms(store.clock.now()), "")
    await store.record_outcomes(hook_id, fold)


async def failed(store: HookHealth, hook_id: str, status: int | None, error: str) -> HealthOutcome | None:
    fold = HealthFold()
    fold.failed(status, error, ms(store.clock.now()), "")
    return await store.record_outcomes(hook_id, fold)
