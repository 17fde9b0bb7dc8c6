"""HookStore's dispatch statements on SQLite and PostgreSQL: the batch matching read, ``sendable``, and
the folded health write (REQ-8: a success resets, each failed delivery adds one, the 10th in a row on an
enabled hook disables it in the same statement, once)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchboard.core.clock import ms
from switchboard.notify.reads import HookReads
from switchboard.notify.store import (
    DISABLE_AFTER,
    FOLD_STATEMENT_SIZES,
    FOLDS_PER_STATEMENT,
    HealthFold,
    SendableHook,
)
from tests.support import hook_health
from tests.unit.notify.conftest import NotifyDB, queries, selects_on_hooks, updates_on_hooks


def fold_of(outcomes: str, at: int = 1000) -> HealthFold:
    """'F' a failed delivery (503), 'S' a delivered one (204)."""
    fold = HealthFold()
    for i, o in enumerate(outcomes):
        if o == "S":
            fold.delivered(204, at + i, f"msg_{i}")
        else:
            fold.failed(503, "server_error", at + i, f"msg_{i}")
    return fold


def step_by_step(streak: int, enabled: bool, outcomes: str) -> tuple[int, bool, bool]:
    """REQ-8 applied one outcome at a time: (streak, enabled, disabled by these outcomes)."""
    tripped = False
    for o in outcomes:
        streak = 0 if o == "S" else streak + 1
        if enabled and streak >= DISABLE_AFTER:
            enabled, tripped = False, True
    return streak, enabled, tripped


@given(st.integers(0, DISABLE_AFTER - 1), st.text(alphabet="SF", min_size=1, max_size=40))
def test_a_fold_is_its_outcomes_applied_in_turn(streak: int, outcomes: str) -> None:
    fold = fold_of(outcomes)
    final, _, tripped = step_by_step(streak, True, outcomes)
    assert fold.after(streak) == final
    assert fold.trips(streak) == tripped
    assert fold.outcomes == len(outcomes) and fold.failures == outcomes.count("F")
    assert fold.error == ("server_error" if outcomes[-1] == "F" else None)


async def test_ten_failures_in_one_fold_disable_once(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    with ndb.statements() as seen:
        outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("F" * 10))
    assert len(queries(seen)) == 1 and len(updates_on_hooks(seen)) == 1
    assert outcome is not None and outcome.disabled_now and outcome.consecutive_failures == 10
    row = await ndb.row(hook.id)
    assert not row.enabled and row.disabled_reason == "consecutive_failures"
    assert row.disabled_at == 1009 and row.last_attempt_at == 1009
    assert row.last_status == 503 and row.last_error == "server_error"
    # a later fold on the disabled hook (an attempt that was in flight) is not a second disable,
    # even at the same instant
    again = await hook_health.record(ndb.hooks, hook.id, fold_of("F", at=1009))
    assert again is not None and not again.disabled_now and again.consecutive_failures == 11
    assert (await ndb.row(hook.id)).disabled_at == 1009


async def test_the_stored_streak_counts(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    await ndb.set_hook(hook.id, consecutive_failures=7)
    outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("FF"))
    assert outcome is not None and not outcome.disabled_now and outcome.consecutive_failures == 9
    assert (await ndb.row(hook.id)).enabled
    outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("F"))
    assert outcome is not None and outcome.disabled_now and not (await ndb.row(hook.id)).enabled


async def test_a_success_resets_and_failures_after_it_count_from_zero(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    await ndb.set_hook(hook.id, consecutive_failures=7)
    outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("SFFF"))
    row = await ndb.row(hook.id)
    assert outcome is not None and not outcome.disabled_now
    assert row.consecutive_failures == 3 and row.enabled
    assert row.last_status == 503 and row.last_error == "server_error" and row.last_attempt_at == 1003


async def test_a_success_after_failures_resets(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    await ndb.set_hook(hook.id, consecutive_failures=7)
    await hook_health.record(ndb.hooks, hook.id, fold_of("FFS"))  # 9, then delivered
    row = await ndb.row(hook.id)
    assert row.consecutive_failures == 0 and row.enabled
    assert row.last_status == 204 and row.last_error is None and row.last_attempt_at == 1002


async def test_reaching_ten_inside_a_fold_disables_even_when_a_success_follows(ndb: NotifyDB) -> None:
    for slug, stored, outcomes in (
        ("ep-a", 0, "F" * 10 + "S"),
        ("ep-b", 0, "S" + "F" * 10 + "S"),
        ("ep-c", 8, "FFS"),
    ):
        hook = await ndb.hook(await ndb.endpoint(slug))
        await ndb.set_hook(hook.id, consecutive_failures=stored)
        outcome = await hook_health.record(ndb.hooks, hook.id, fold_of(outcomes))
        row = await ndb.row(hook.id)
        assert outcome is not None and outcome.disabled_now, slug
        assert not row.enabled and row.disabled_reason == "consecutive_failures", slug
        assert row.consecutive_failures == 0 and row.last_status == 204, slug


async def test_a_disabled_hook_is_not_disabled_again_and_keeps_its_reason(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    assert await ndb.hooks.set_enabled_by_owner(hook.endpoint_id, hook.id, False)
    outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("F" * 12))
    row = await ndb.row(hook.id)
    assert outcome is not None and not outcome.disabled_now
    assert row.disabled_reason == "operator" and row.consecutive_failures == 12


async def test_a_deleted_hook_writes_nothing(ndb: NotifyDB) -> None:
    endpoint = await ndb.endpoint("ep-a")
    hook = await ndb.hook(endpoint)
    await ndb.hooks.delete(endpoint.id, hook.id)
    assert await hook_health.record(ndb.hooks, hook.id, fold_of("F")) is None


async def test_the_legacy_single_outcome_writes_still_work(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    for _ in range(DISABLE_AFTER - 1):
        outcome = await hook_health.failed(ndb.hooks, hook.id, None, "timeout")
        assert outcome is not None and not outcome.disabled_now
    outcome = await hook_health.failed(ndb.hooks, hook.id, None, "timeout")
    assert outcome is not None and outcome.disabled_now
    await hook_health.delivered(ndb.hooks, hook.id, 204)
    row = await ndb.row(hook.id)
    assert row.consecutive_failures == 0 and not row.enabled and row.last_error is None


async def test_matching_reads_every_endpoint_of_a_batch_in_one_statement(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a", ("inbox", "reviews"))
    b = await ndb.endpoint("ep-b")
    c = await ndb.endpoint("ep-c")  # no hooks
    d = await ndb.endpoint("ep-d")  # only a disabled hook
    a2, a1 = await ndb.hook(a, path="/a2"), await ndb.hook(a, ["reviews"], path="/a1")
    b1 = await ndb.hook(b, ignore_presence=True)
    d1 = await ndb.hook(d)
    await ndb.hooks.set_enabled_by_owner(d.id, d1.id, False)
    with ndb.statements() as seen:
        found = await ndb.hooks.enabled_with_endpoints([a.id, b.id, c.id, d.id, a.id])
    assert len(queries(seen)) == 1 and len(selects_on_hooks(seen)) == 1
    assert set(found) == {a.id, b.id}
    assert [m.hook.id for m in found[a.id].hooks] == sorted([a1.id, a2.id])
    assert found[a.id].endpoint.queues == ("inbox", "reviews") and found[a.id].endpoint.slug == "ep-a"
    assert [m.hook.ignore_presence for m in found[b.id].hooks] == [True]
    assert found[b.id].endpoint.human_id != found[a.id].endpoint.human_id
    opened = {ndb.hooks.open_url(m.hook.id, m.url_sealed) for m in found[a.id].hooks}
    assert opened == {"https://hooks.test/a1?key=QUERYCANARY", "https://hooks.test/a2?key=QUERYCANARY"}
    assert "QUERYCANARY" not in repr(found)  # the sealed URL is not in any repr either
    assert await ndb.hooks.enabled_with_endpoints([]) == {}
    single = await ndb.hooks.enabled_with_endpoints([b.id])
    assert [m.hook.id for m in single[b.id].hooks] == [b1.id]


async def test_sendable_is_one_prebuilt_statement_and_carries_the_stored_streak(ndb: NotifyDB) -> None:
    endpoint = await ndb.endpoint("ep-a")
    hook = await ndb.hook(endpoint)
    await ndb.set_hook(hook.id, consecutive_failures=4)
    executed: list[object] = []
    from sqlalchemy import event

    def record(conn: object, clauseelement: object, *args: object) -> None:
        executed.append(clauseelement)

    fetch = ndb.db.sqlite_fetch

    async def text_read(sql: str, params: Any) -> Any:  # SQLite: the read's SQL text, one trip
        executed.append(sql)
        return await fetch(sql, params)

    event.listen(ndb.db.engine.sync_engine, "before_execute", record)
    ndb.db.sqlite_fetch = text_read  # type: ignore[method-assign]
    try:
        first = await HookReads(ndb.hooks).sendable(hook.id)
        second = await HookReads(ndb.hooks).sendable(hook.id)
    finally:
        event.remove(ndb.db.engine.sync_engine, "before_execute", record)
        del ndb.db.sqlite_fetch
    assert first is not None and second is not None
    assert first.url == "https://hooks.test/h?key=QUERYCANARY" and len(first.secrets) == 1
    assert first.consecutive_failures == 4
    assert "QUERYCANARY" not in repr(first) and first.secrets[0] not in repr(first)
    statements = [e for e in executed if "notify_hooks" in str(e)]
    assert len(statements) == 2 and statements[0] is statements[1]  # built once, not per call
    await ndb.hooks.set_enabled_by_owner(endpoint.id, hook.id, False)
    assert await HookReads(ndb.hooks).sendable(hook.id) is None  # a disabled hook gets no attempt
    await ndb.hooks.set_enabled_by_owner(endpoint.id, hook.id, True)
    await ndb.hooks.delete(endpoint.id, hook.id)
    assert await HookReads(ndb.hooks).sendable(hook.id) is None


async def test_a_fold_records_the_given_disable_time(ndb: NotifyDB) -> None:
    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    now = ms(ndb.clock.now())
    outcome = await hook_health.record(ndb.hooks, hook.id, fold_of("F" * 10, at=now), disabled_at=now + 1)
    assert outcome is not None and outcome.disabled_now and outcome.disabled_at == now + 1
    row = await ndb.row(hook.id)
    assert row.disabled_at == now + 1 and row.last_attempt_at == now + 9


async def test_many_hooks_folds_are_one_statement_with_each_hooks_own_outcome(ndb: NotifyDB) -> None:
    """A flush writes every hook's fold with one UPDATE (SQLite's write lock is taken once), and each
    row gets exactly what its own fold says, as if written alone."""
    endpoint = await ndb.endpoint("ep-a")
    tripping, recovering, gone = [await ndb.hook(endpoint) for _ in range(3)]
    await hook_health.record(ndb.hooks, recovering.id, fold_of("FFFF"))
    await ndb.hooks.delete(endpoint.id, gone.id)
    with ndb.statements() as seen:
        out = await ndb.hooks.record_many(
            [
                (tripping.id, fold_of("F" * 10), 5000),
                (recovering.id, fold_of("FSF", at=2000), 6000),
                (gone.id, fold_of("S"), 7000),
            ]
        )
    assert len(queries(seen)) == 1 and len(updates_on_hooks(seen)) == 1
    assert out[gone.id] is None
    first, second = out[tripping.id], out[recovering.id]
    assert first is not None and first.disabled_now and first.consecutive_failures == 10
    assert second is not None and not second.disabled_now and second.consecutive_failures == 1
    row = await ndb.row(tripping.id)
    assert not row.enabled and row.disabled_at == 5000 and row.last_status == 503
    row = await ndb.row(recovering.id)
    assert row.enabled and row.consecutive_failures == 1 and row.last_attempt_at == 2002


async def test_more_folds_than_one_statement_holds_are_all_written(ndb: NotifyDB) -> None:
    ids = []
    for e in range(FOLDS_PER_STATEMENT // 5 + 1):  # 5 hooks per endpoint (the ceiling)
        endpoint = await ndb.endpoint(f"ep-{e}")
        ids += [(await ndb.hook(endpoint)).id for _ in range(5)]
    with ndb.statements() as seen:
        out = await ndb.hooks.record_many([(i, fold_of("FF"), 1) for i in ids])
    assert len(updates_on_hooks(seen)) == 2
    assert all(o is not None and o.consecutive_failures == 2 for o in out.values()) and len(out) == len(ids)
    assert [(await ndb.row(i)).consecutive_failures for i in ids] == [2] * len(ids)


async def test_flush_sizes_share_a_few_statements_and_their_spare_rows_touch_nothing(ndb: NotifyDB) -> None:
    endpoint = await ndb.endpoint("ep-a")
    ids = [(await ndb.hook(endpoint)).id for _ in range(5)]
    bystander = (await ndb.hook(await ndb.endpoint("ep-b"))).id
    statements: set[str] = set()
    for n in range(1, 6):  # 3 and 4 folds use the 4-row statement, 5 the 8-row one
        with ndb.statements() as seen:
            out = await ndb.hooks.record_many([(i, fold_of("F"), 1) for i in ids[:n]])
        assert set(out) == set(ids[:n]) and all(o is not None for o in out.values())
        statements.update(updates_on_hooks(seen))
    assert len(statements) == len([k for k in FOLD_STATEMENT_SIZES if k <= 8])  # 1, 2, 4, 8 rows
    assert [(await ndb.row(i)).consecutive_failures for i in ids] == [5, 4, 3, 2, 1]
    row = await ndb.row(bystander)
    assert row.consecutive_failures == 0 and row.last_attempt_at is None and row.enabled


async def test_reads_asked_for_together_are_one_statement_and_a_bad_row_fails_only_its_hook(
    ndb: NotifyDB,
) -> None:
    """The dispatcher's batched read before attempts (``HookReads``): same answers as ``sendable``."""
    from switchboard.notify.reads import HookReads

    endpoint = await ndb.endpoint("ep-a")
    good, disabled, broken = [await ndb.hook(endpoint) for _ in range(3)]
    await ndb.set_hook(good.id, consecutive_failures=3)
    await ndb.hooks.set_enabled_by_owner(endpoint.id, disabled.id, False)
    await ndb.set_hook(broken.id, secret_enc=b"not an envelope")
    reads = HookReads(ndb.hooks)
    with ndb.statements() as seen:
        answers = await asyncio.gather(
            reads.sendable(good.id),
            reads.sendable(disabled.id),
            reads.sendable(broken.id),
            reads.sendable("nh_gone"),
            reads.sendable(good.id),
            return_exceptions=True,
        )
    assert len(selects_on_hooks(seen)) == 1
    first, off, bad, gone, again = answers
    assert isinstance(first, SendableHook) and first == await HookReads(ndb.hooks).sendable(good.id) == again
    assert first.consecutive_failures == 3
    assert off is None and gone is None
    assert isinstance(bad, Exception) and not isinstance(bad, SendableHook)
    # asked for after that read: a read of its own, which sees the change
    await ndb.hooks.set_enabled_by_owner(endpoint.id, good.id, False)
    with ndb.statements() as seen:
        assert await reads.sendable(good.id) is None
    assert len(selects_on_hooks(seen)) == 1


async def test_a_batched_read_that_is_cancelled_fails_its_waiters(ndb: NotifyDB) -> None:
    """Nobody waits forever on a read that will not come (the dispatcher logs the failure per hook)."""
    from switchboard.notify.reads import HookReads

    hook = await ndb.hook(await ndb.endpoint("ep-a"))
    entered, gate = asyncio.Event(), asyncio.Event()

    class HeldStore:
        """The real store, held at the start of its read."""

        async def sendable_rows(self, ids: Any) -> Any:
            entered.set()
            await gate.wait()
            return await ndb.hooks.sendable_rows(ids)

        def open_sendable(self, hook_id: str, row: Any) -> Any:
            return ndb.hooks.open_sendable(hook_id, row)

    reads = HookReads(HeldStore())  # type: ignore[arg-type]
    waiter = asyncio.create_task(reads.sendable(hook.id))
    await entered.wait()
    assert reads._task is not None
    reads._task.cancel()
    async with asyncio.timeout(10):  # before the fix it waited forever
        with pytest.raises(RuntimeError, match="abandoned"):
            await waiter
    # the next read starts afresh and answers
    gate.set()
    assert (await reads.sendable(hook.id)) == await HookReads(ndb.hooks).sendable(hook.id)


async def test_prepare_runs_every_health_statement_and_writes_nothing(ndb: NotifyDB) -> None:
    """The worker compiles the health statements at start (``HookHealth.prepare``): one execution of
    each size, and no hook row changes."""
    hook = (await ndb.hook(await ndb.endpoint("ep-a"))).id
    before = await ndb.row(hook)
    with ndb.statements() as seen:
        await ndb.hooks.prepare()
    assert len(updates_on_hooks(seen)) == len(FOLD_STATEMENT_SIZES)
    assert await ndb.row(hook) == before


async def test_sqlite_text_reads_return_what_the_statements_return(ndb: NotifyDB) -> None:
    """The dispatch path's two reads as SQLite text (store/notify_hooks_sqlite.py) against the SQLAlchemy
    statements PostgreSQL runs: the same rows, columns and order, disabled hooks and unknown ids left out."""
    if not ndb.db.is_sqlite:
        pytest.skip("SQLite's text reads")
    from switchboard.store.notify_hooks import MATCH, SENDABLE_MANY
    from switchboard.store.notify_hooks_sqlite import (
        MATCH_SQL,
        SENDABLE_SQL,
        MatchRow,
        SendableRow,
        ids_param,
    )

    a, b = await ndb.endpoint("ep-a", ("inbox", "reviews")), await ndb.endpoint("ep-b")
    a1, a2 = await ndb.hook(a, path="/a1"), await ndb.hook(a, ("reviews",), ignore_presence=True, path="/a2")
    b1 = await ndb.hook(b, path="/b1")
    await ndb.hooks.set_enabled_by_owner(b.id, b1.id, False)
    await ndb.hooks.rotate(a.id, a2.id)  # a previous secret and its expiry on one row
    await ndb.set_hook(a1.id, consecutive_failures=3)

    def plain(row: Any) -> tuple[Any, ...]:
        return tuple(int(v) if isinstance(v, bool) else v for v in row)

    endpoints_asked = sorted([a.id, b.id, "ep_unknown"])
    hooks_asked = sorted([a1.id, a2.id, b1.id, "nh_unknown"])
    match = await ndb.db.fetch(MATCH, {"p_endpoint_ids": endpoints_asked})
    match_text = [MatchRow(*r) for r in await ndb.db.sqlite_fetch(MATCH_SQL, ids_param(endpoints_asked))]
    assert [plain(r) for r in match] == [plain(r) for r in match_text] and len(match) == 2
    assert list(match[0]._fields) == list(MatchRow._fields)
    sendable = await ndb.db.fetch(SENDABLE_MANY, {"p_hook_ids": hooks_asked})
    sendable_text = [SendableRow(*r) for r in await ndb.db.sqlite_fetch(SENDABLE_SQL, ids_param(hooks_asked))]
    assert sorted(map(plain, sendable)) == sorted(map(plain, sendable_text)) and len(sendable) == 2
    assert list(sendable[0]._fields) == list(SendableRow._fields)
    assert any(r.prev_secret_enc is not None for r in sendable_text)
