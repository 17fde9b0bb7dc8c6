"""The ``notify_hooks`` home's contract (store/notify_hook*.py), run against SQLite and a real
PostgreSQL: the rows as HookRows writes and reads them, with sealed values as opaque bytes (sealing is
the notify package's)."""

from __future__ import annotations

from switchboard.core.clock import ManualClock, ms
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.notify_hook_counts import count_for_endpoint, hook_counts, hook_owner
from switchboard.store.notify_hook_types import DISABLE_AFTER, HUMAN_DISABLE, HealthFold, Hook
from switchboard.store.notify_hooks import HookRows, update_rate


async def _endpoints(database: Database, clock: ManualClock) -> tuple[str, str]:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    a, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox"], ["claim_next"])
    b, _ = await accounts.vend_endpoint(hid, "ep-b", ["inbox"], ["claim_next"])
    return a.id, b.id


async def _insert(rows: HookRows, hook_id: str, endpoint_id: str, ceiling: int = 2) -> Hook | None:
    hook, _ = await rows.insert_within(
        hook_id,
        endpoint_id,
        ceiling=ceiling,
        url_enc=b"sealed-url",
        url_display="https://hooks.test/x",
        queues=["inbox", "inbox"],
        ignore_presence=False,
        secret_enc=b"secret-1",
    )
    return hook


async def test_create_within_and_over_the_ceiling(database: Database, clock: ManualClock) -> None:
    rows = HookRows(database, clock)
    a, b = await _endpoints(database, clock)
    first = await _insert(rows, "nh_1", a)
    assert first is not None and first.queues == ("inbox",) and first.enabled
    assert await _insert(rows, "nh_2", a) is not None
    hook, used = await rows.insert_within(
        "nh_3", a, ceiling=2, url_enc=b"u", url_display="d", queues=[], ignore_presence=True, secret_enc=b"s"
    )
    assert (hook, used) == (None, 2)
    assert [h.id for h in await rows.list_for_endpoint(a)] == ["nh_1", "nh_2"]  # nothing stored over it
    assert await rows.count(a) == 2 and await rows.count(b) == 0
    async with database.read() as conn:
        assert await count_for_endpoint(conn, a) == 2
        assert await hook_counts(conn, [a, b]) == {a: (2, 0)}
    assert (await hook_owner(database, {"hook_id": "nh_1"}))["endpoint_id"] == a
    assert await hook_owner(database, {"hook_id": "nh_gone"}) == {}


async def test_another_endpoints_hook_is_not_found(database: Database, clock: ManualClock) -> None:
    rows = HookRows(database, clock)
    a, b = await _endpoints(database, clock)
    await _insert(rows, "nh_1", a)
    assert await rows.find(b, "nh_1") is None
    assert await rows.rotate_row(b, "nh_1", lambda cur: (b"x", cur), grace_until=1) is None
    assert await rows.delete_row(b, "nh_1") is False
    assert await update_rate(database, clock, b, "nh_1", 5) is None
    assert await rows.set_enabled_by_owner(b, "nh_1", False) is False
    found = await rows.find(a, "nh_1")
    assert found is not None and found.enabled and found.rate_per_minute is None


async def test_rotate_keeps_the_previous_secret_for_the_grace(database: Database, clock: ManualClock) -> None:
    rows = HookRows(database, clock)
    a, _ = await _endpoints(database, clock)
    await _insert(rows, "nh_1", a)
    until = ms(clock.now() + 60)
    hook = await rows.rotate_row(a, "nh_1", lambda cur: (b"secret-2", b"prev:" + cur), grace_until=until)
    assert hook is not None and hook.rotating_until == until
    (row,) = (await rows.sendable_rows(["nh_1"])).values()
    assert (row.secret_enc, row.prev_secret_enc) == (b"secret-2", b"prev:secret-1")
    assert await rows.destroy_expired_secrets() == 0  # still in its grace
    clock.advance(61)
    assert await rows.destroy_expired_secrets() == 1
    (row,) = (await rows.sendable_rows(["nh_1"])).values()
    assert row.prev_secret_enc is None and row.secret_enc == b"secret-2"


async def test_owner_disable_holds_through_a_rotate(database: Database, clock: ManualClock) -> None:
    rows = HookRows(database, clock)
    a, _ = await _endpoints(database, clock)
    await _insert(rows, "nh_1", a)
    assert await rows.set_enabled_by_owner(a, "nh_1", False) is True
    assert await rows.set_enabled_by_owner(a, "nh_1", False) is False  # already the human's
    assert await rows.sendable_rows(["nh_1"]) == {"nh_1": None}
    assert await rows.enabled_with_endpoints([a]) == {}
    hook = await rows.rotate_row(a, "nh_1", lambda cur: (b"s2", cur), grace_until=1)
    assert hook is not None and not hook.enabled and hook.disabled_reason == HUMAN_DISABLE
    assert await rows.set_enabled_by_owner(a, "nh_1", True) is True
    matched = await rows.enabled_with_endpoints([a])
    assert [m.hook.id for m in matched[a].hooks] == ["nh_1"] and matched[a].endpoint.id == a


async def test_the_health_fold_disables_at_the_tenth_failure(database: Database, clock: ManualClock) -> None:
    rows = HookRows(database, clock)
    a, _ = await _endpoints(database, clock)
    await _insert(rows, "nh_1", a)
    for i in range(DISABLE_AFTER - 1):
        fold = HealthFold()
        fold.failed(503, "server_error", 1000 + i, f"msg_{i}")
        outcome = (await rows.record_many([("nh_1", fold, 5000 + i)]))["nh_1"]
        assert outcome is not None and outcome.consecutive_failures == i + 1 and not outcome.disabled_now
    assert (await rows.sendable_rows(["nh_1"]))["nh_1"] is not None  # nine: still enabled
    fold = HealthFold()
    fold.failed(503, "server_error", 2000, "msg_10")
    outcome = (await rows.record_many([("nh_1", fold, 9999)]))["nh_1"]
    assert outcome is not None and outcome.disabled_now and outcome.disabled_at == 9999
    hook = await rows.find(a, "nh_1")
    assert hook is not None and not hook.enabled and hook.disabled_reason == "consecutive_failures"
    assert (await rows.record_many([("nh_gone", fold, 1)])) == {"nh_gone": None}
