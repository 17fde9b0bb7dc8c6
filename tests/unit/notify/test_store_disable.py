"""Who disabled a hook decides who may re-enable it (SPEC-0024 REQ-8, REQ-10; issue 14).

The endpoint's rotate_notify_hook re-enables only an automatic disable (10 failed deliveries); a disable
by the owning human holds through any rotate until the human re-enables it. On both engines.
"""

from __future__ import annotations

from switchboard.notify.reads import HookReads
from switchboard.notify.store import HealthFold
from tests.support import hook_health
from tests.unit.notify.conftest import NotifyDB


async def disable_automatically(ndb: NotifyDB, hook_id: str) -> None:
    fold = HealthFold()
    for i in range(10):
        fold.failed(503, "server_error", 1000 + i, f"msg_{i}")
    outcome = await hook_health.record(ndb.hooks, hook_id, fold)
    assert outcome is not None and outcome.disabled_now


async def test_a_human_disable_holds_through_a_rotate(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    assert await ndb.hooks.set_enabled_by_owner(a.id, hook.id, False)
    rotated, secret = await ndb.hooks.rotate(a.id, hook.id)
    assert secret.startswith("whsec_") and rotated.rotating_until is not None  # the secret did rotate
    assert (rotated.enabled, rotated.disabled_reason) == (False, "operator")
    assert await HookReads(ndb.hooks).sendable(hook.id) is None  # and nothing is sent
    assert await ndb.hooks.set_enabled_by_owner(a.id, hook.id, True)  # only the human lifts it
    assert (await ndb.hooks.get(a.id, hook.id)).enabled


async def test_a_rotate_lifts_an_automatic_disable(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    await disable_automatically(ndb, hook.id)
    rotated, _ = await ndb.hooks.rotate(a.id, hook.id)
    assert (rotated.enabled, rotated.disabled_reason, rotated.consecutive_failures) == (True, None, 0)


async def test_a_human_can_take_over_an_automatic_disable(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    await disable_automatically(ndb, hook.id)
    assert await ndb.hooks.set_enabled_by_owner(a.id, hook.id, False)  # "Keep disabled"
    assert not await ndb.hooks.set_enabled_by_owner(a.id, hook.id, False)  # already the human's
    held = await ndb.hooks.get(a.id, hook.id)
    assert (held.enabled, held.disabled_reason, held.consecutive_failures) == (False, "operator", 10)
    rotated, _ = await ndb.hooks.rotate(a.id, hook.id)
    assert (rotated.enabled, rotated.disabled_reason) == (False, "operator")


async def test_failures_never_relabel_a_human_disable(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    assert await ndb.hooks.set_enabled_by_owner(a.id, hook.id, False)
    fold = HealthFold()
    for i in range(12):  # outcomes of attempts in flight when the human disabled it
        fold.failed(None, "network", 2000 + i, f"msg_{i}")
    outcome = await hook_health.record(ndb.hooks, hook.id, fold)
    assert outcome is not None and not outcome.disabled_now
    assert (await ndb.hooks.get(a.id, hook.id)).disabled_reason == "operator"
    rotated, _ = await ndb.hooks.rotate(a.id, hook.id)
    assert not rotated.enabled
