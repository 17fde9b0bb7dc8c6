"""The dispatcher on a real database (SQLite and PostgreSQL) with a scripted sender.

* Batch matching: queued transitions are matched with one read, with results identical to matching them
  one at a time (scope, presence, ignore_presence, other endpoints, gates, rate limit).
* Coalesced health: final outcomes are folded per hook and written with one statement per flush; the
  10th failed delivery in a row disables the hook once, and no attempt starts after it, even before the
  flush; a health-write failure is logged with the ids and the dispatcher carries on (REQ-8, REQ-12).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pytest

from switchboard.notify.dispatcher import Dispatcher
from switchboard.notify.notification import Notification
from switchboard.notify.store import Hook
from switchboard.push import AttemptResult, NetworkFailure, PermanentClientError, PushError
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable
from switchboard.store.transitions import Transition, TransitionHub
from tests.unit.notify.conftest import NotifyDB, selects_on_hooks, updates_on_hooks


class ScriptedSender:
    """Answers each attempt from ``script`` (a status, or an exception to raise); the last entry repeats.
    With ``gate``, every attempt waits for it first."""

    def __init__(self, *script: int | Exception, gate: asyncio.Event | None = None) -> None:
        self.script = list(script) or [204]
        self.gate = gate
        self.calls: list[str] = []
        self.fast: list[PushError] = []  # what fast_failure answers, one per call, then None

    def fast_failure(self, url: str) -> PushError | None:
        return self.fast.pop(0) if self.fast else None

    async def send(self, url: str, *, body: bytes, headers: Any) -> AttemptResult:
        self.calls.append(url)
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(outcome, Exception):
            raise outcome
        return AttemptResult(outcome, 0.001, 0)


def dispatcher(ndb: NotifyDB, sender: ScriptedSender, **kw: Any) -> Dispatcher:
    kw.setdefault("retry_delays", (0.01, 0.02))
    return Dispatcher(
        hooks=ndb.hooks,
        todos=cast(Any, None),
        sender=cast(Any, sender),
        metrics=ndb.metrics,
        clock=ndb.clock,
        **kw,
    )


def ready(endpoint: Endpoint | None, queue: str = "inbox", n: int = 0, **kw: Any) -> Transition:
    base: dict[str, Any] = {
        "todo_id": f"td_{n:04d}",
        "endpoint_id": endpoint.id if endpoint else None,
        "queue": queue,
        "kind": "pull_request",
        "source": "gitea",
        "title": f"todo {n}",
        "attempt": 0,
        "transition": "created",
        "reason": None,
        "push_eligible": True,
        "push_excluded": False,
        "at": 0.0,
    }
    base.update(kw)
    return Transition(**base)


def drain(d: Dispatcher) -> list[Notification]:
    out = []
    while not d.queue.empty():
        out.append(d.queue.get_nowait())
    return out


def seen_as(notes: Sequence[Notification]) -> list[tuple[str, str, str, str, str | None, bytes, str]]:
    return [(n.type, n.hook_id, n.endpoint_id, n.owner_id, n.todo_id, n.body, n.url) for n in notes]


def metric(ndb: NotifyDB, name: str, **labels: str) -> float:
    return float(ndb.metrics.registry.get_sample_value(name, labels) or 0.0)


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.005)


@dataclass
class World:
    transitions: list[Transition]
    expected: list[tuple[int, Hook]]  # (index of the transition, hook), in matching order


async def matching_world(ndb: NotifyDB) -> World:
    a = await ndb.endpoint("ep-a", ("inbox", "reviews"))
    a_all = await ndb.hook(a, path="/a-all")
    a_rev = await ndb.hook(a, ["reviews"], path="/a-rev")
    a_ign = await ndb.hook(a, ignore_presence=True, path="/a-ign")
    b = await ndb.endpoint("ep-b")  # another human's endpoint draining the same queue name
    b_all = await ndb.hook(b, path="/b-all")
    c = await ndb.endpoint("ep-c")  # clocked out
    await ndb.hook(c, path="/c-norm")
    c_ign = await ndb.hook(c, ignore_presence=True, path="/c-ign")
    await ndb.set_endpoint(c.id, presence="out")
    g = await ndb.endpoint("ep-g")  # in, but an operator override says out
    await ndb.hook(g, path="/g-norm")
    await ndb.set_endpoint(g.id, presence_override="out")
    d = await ndb.endpoint("ep-d")  # no hooks
    e = await ndb.endpoint("ep-e", ("inbox", "reviews"))  # reviews is later taken out of its scope
    await ndb.hook(e, ["reviews"], path="/e-rev")
    e_all = await ndb.hook(e, path="/e-all")
    await ndb.set_endpoint(e.id, queues='["inbox"]')
    h = await ndb.endpoint("ep-h")
    h_off = await ndb.hook(h, path="/h-off")
    await ndb.hooks.set_enabled_by_owner(h.id, h_off.id, False)
    s = await ndb.endpoint("ep-s")  # its owner later took every notify-hook verb away
    await ndb.hook(s, path="/s-cut")
    await ndb.hook(s, ignore_presence=True, path="/s-cut-ign")
    await ndb.accounts.set_scope(s.id, verbs=["claim_next"])

    ts = [
        ready(a, "inbox", 0),  # a_all, a_ign (a_rev is for reviews)
        ready(a, "reviews", 1),  # a_rev, a_all, a_ign (hook-id order)
        ready(b, "inbox", 2),  # b_all only: A's hooks never see B's todos
        ready(c, "inbox", 3),  # out: only the ignore_presence hook
        ready(d, "inbox", 4),  # no hooks
        ready(e, "reviews", 5),  # out of scope now: neither e_rev nor e_all
        ready(e, "inbox", 6),  # e_all
        ready(None, "inbox", 7),  # a system todo fires nothing
        ready(a, "inbox", 8, push_eligible=False),  # the sender gate
        ready(a, "inbox", 9, push_excluded=True),  # self-test / quarantine
        ready(a, "inbox", 10, transition="claimed"),  # not a transition into pending
        ready(a, "inbox", 11, transition="requeued", reason="lease_expired", attempt=1),  # a_all, a_ign
        ready(g, "inbox", 12),  # override out
        ready(b, "other", 13),  # not in B's scope
        ready(h, "inbox", 14),  # its only hook is disabled
        ready(a, "reviews", 15),  # a_rev; a_all and a_ign are over their rate (2 per minute here)
        ready(s, "inbox", 16),  # scope cut: its hooks are paused
    ]
    by_id = sorted([a_all, a_rev, a_ign], key=lambda x: x.id)
    expected = [
        *((0, x) for x in by_id if x is not a_rev),
        *((1, x) for x in by_id),
        (2, b_all),
        (3, c_ign),
        (6, e_all),
        (15, a_rev),
    ]
    # transition 11 is dropped for a_all and a_ign: each already had 2 (its burst) from 0 and 1
    return World(ts, expected)


async def test_a_batch_is_matched_with_one_read_and_exactly_as_one_by_one(ndb: NotifyDB) -> None:
    world = await matching_world(ndb)
    pushable = [t for t in world.transitions if t.pushable]

    one = dispatcher(ndb, ScriptedSender(), rate_per_minute=2)
    one.accepting = True  # matching only: no workers, notifications stay queued
    with ndb.statements() as seen_one:
        for t in world.transitions:
            await one.on_transition(t)
    singly = drain(one)
    dropped_singly = metric(
        ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
    )

    batched = dispatcher(ndb, ScriptedSender(), rate_per_minute=2)
    batched.accepting = True
    with ndb.statements() as seen_batch:
        await batched.on_transitions(world.transitions)
    together = drain(batched)
    dropped_total = metric(
        ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
    )

    assert len(selects_on_hooks(seen_one)) == len(pushable)  # one read per transition
    assert len(selects_on_hooks(seen_batch)) == 1  # one read for the batch
    assert seen_as(together) == seen_as(singly)
    assert dropped_total - dropped_singly == dropped_singly == 4  # the rate limit, in the same places
    expected = [(world.transitions[i].todo_id, hook.id) for i, hook in world.expected]
    assert [(n.todo_id, n.hook_id) for n in together] == expected
    display = {hook.id: hook.url_display for _, hook in world.expected}
    for n in together:  # the URL as read at match time, carried whole and never shown
        assert n.url == display[n.hook_id].replace("?[redacted]", "?key=QUERYCANARY")
        assert "QUERYCANARY" not in repr(n)
    assert len({n.id for n in together} | {n.id for n in singly}) == 2 * len(together)


async def test_queued_transitions_reach_the_dispatcher_as_one_batch_and_one_read(
    ndb: NotifyDB, hub: TransitionHub
) -> None:
    a = await ndb.endpoint("ep-a")
    b = await ndb.endpoint("ep-b")
    await ndb.hook(a)
    await ndb.hook(b)
    d = dispatcher(ndb, ScriptedSender())
    d.accepting = True
    hub.subscribe_batch("notify_hooks", d.on_transitions)
    with ndb.statements() as seen:
        hub.publish([ready(a if i % 2 else b, "inbox", i) for i in range(50)])
        await hub.idle()
    assert len(selects_on_hooks(seen)) == 1
    assert sorted(n.todo_id or "" for n in drain(d)) == [f"td_{i:04d}" for i in range(50)]
    # at low load, a batch is one transition: one read each, as before
    with ndb.statements() as seen:
        for i in range(3):
            hub.publish([ready(a, "inbox", 100 + i)])
            await hub.idle()
    assert len(selects_on_hooks(seen)) == 3


async def test_a_url_that_does_not_open_fails_that_hook_only(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    broken = await ndb.hook(a, path="/broken")
    fine = await ndb.hook(a, path="/fine")
    other = await ndb.hook(await ndb.endpoint("ep-x"), path="/other")
    await ndb.set_hook(broken.id, url_enc=(await ndb.row(other.id)).url_enc)  # bound to another row
    d = dispatcher(ndb, ScriptedSender())
    d.accepting = True
    await d.on_transitions([ready(a, "inbox", 0), ready(a, "inbox", 1)])
    assert [(n.hook_id, n.todo_id) for n in drain(d)] == [(fine.id, "td_0000"), (fine.id, "td_0001")]
    assert (
        metric(ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed") == 2
    )


async def test_ten_failed_deliveries_in_one_window_disable_once_with_one_statement(
    ndb: NotifyDB, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    gate = asyncio.Event()
    sender = ScriptedSender(PermanentClientError(401), gate=gate)
    d = dispatcher(ndb, sender, workers=10, per_owner_inflight=10, health_flush_interval=30)
    await d.start()
    try:
        await d.on_transitions([ready(a, "inbox", i) for i in range(10)])
        await until(lambda: len(sender.calls) == 10)
        with ndb.statements() as seen:
            gate.set()  # all ten fail together, inside one flush window
            await asyncio.wait_for(d.idle(), 5)  # the 10th cuts the 30 s wait short
        assert len(updates_on_hooks(seen)) == 1
        row = await ndb.row(hook.id)
        assert not row.enabled and row.disabled_reason == "consecutive_failures"
        assert row.consecutive_failures == 10 and row.last_status == 401 and row.last_error == "client_error"
        assert metric(ndb, "switchboard_notify_hooks_disabled_total", reason="consecutive_failures") == 1
        warnings = [r for r in caplog.records if r.getMessage() == "notify hook disabled"]
        assert len(warnings) == 1 and warnings[0].__dict__["fields"]["hook_id"] == hook.id
        # the 11th is never matched, let alone sent
        await d.on_transitions([ready(a, "inbox", 10)])
        await asyncio.wait_for(d.idle(), 5)
        assert len(sender.calls) == 10
    finally:
        await d.stop()
    assert len([r for r in caplog.records if r.getMessage() == "notify hook disabled"]) == 1


@pytest.mark.parametrize(("stored", "notifications", "sent"), [(0, 12, 10), (7, 5, 3)])
async def test_no_attempt_after_the_disabling_failure_even_before_the_flush(
    ndb: NotifyDB, caplog: pytest.LogCaptureFixture, stored: int, notifications: int, sent: int
) -> None:
    caplog.set_level(logging.INFO)
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    await ndb.set_hook(hook.id, consecutive_failures=stored)
    sender = ScriptedSender(PermanentClientError(401))
    d = dispatcher(ndb, sender, workers=1, per_owner_inflight=1, health_flush_interval=3600)
    await d.start()
    assert d.health._flusher is not None
    d.health._flusher.cancel()  # no periodic flush at all: only the check before each attempt can stop it
    try:
        # all matched while the hook is enabled, so every one reaches the attempt check
        await d.on_transitions([ready(a, "inbox", i) for i in range(notifications)])

        def finished() -> bool:
            ended = metric(
                ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed"
            )
            gone = metric(
                ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
            )
            return ended + gone == notifications

        await until(finished)
        assert len(sender.calls) == sent
        await asyncio.wait_for(d.idle(), 10)
        row = await ndb.row(hook.id)
        assert (
            not row.enabled
            and row.disabled_reason == "consecutive_failures"
            and row.consecutive_failures == 10
        )
        dropped = metric(
            ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped"
        )
        assert dropped == notifications - sent
        assert len([r for r in caplog.records if r.getMessage() == "notify hook disabled"]) == 1
    finally:
        d.health._flusher = None
        await d.stop()


async def test_a_success_then_failures_are_written_in_order_by_stop(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    await ndb.set_hook(hook.id, consecutive_failures=5)
    sender = ScriptedSender(204, PermanentClientError(401))
    d = dispatcher(ndb, sender, workers=1, per_owner_inflight=1, health_flush_interval=3600)
    await d.start()
    await d.on_transitions([ready(a, "inbox", i) for i in range(4)])

    def done() -> bool:
        failed = metric(
            ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed"
        )
        return failed == 3

    await until(done)
    assert (await ndb.row(hook.id)).last_attempt_at is None  # not written yet: one window
    with ndb.statements() as seen:
        await d.stop()  # writes what is pending
    assert len(updates_on_hooks(seen)) == 1
    row = await ndb.row(hook.id)
    assert row.consecutive_failures == 3 and row.enabled  # reset by the success, then three
    assert row.last_status == 401 and row.last_error == "client_error"


async def test_a_success_after_failures_resets(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    await ndb.set_hook(hook.id, consecutive_failures=7)
    sender = ScriptedSender(PermanentClientError(401), PermanentClientError(401), 204)
    d = dispatcher(ndb, sender, workers=1, per_owner_inflight=1, health_flush_interval=1.0)
    await d.start()
    try:
        with ndb.statements() as seen:
            await d.on_transitions([ready(a, "inbox", i) for i in range(3)])
            await asyncio.wait_for(d.idle(), 10)  # idle: queued, in flight, retrying and health all done
        assert len(sender.calls) == 3 and len(updates_on_hooks(seen)) == 1
        row = await ndb.row(hook.id)
        assert row.consecutive_failures == 0 and row.enabled
        assert row.last_status == 204 and row.last_error is None
    finally:
        await d.stop()


async def test_a_health_write_failure_is_logged_and_the_dispatcher_carries_on(
    ndb: NotifyDB, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    real = ndb.hooks.record_many
    calls = 0

    async def flaky(folds: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreUnavailable("database unavailable")
        return await real(folds)

    monkeypatch.setattr(ndb.hooks, "record_many", flaky)
    sender = ScriptedSender(204)
    d = dispatcher(ndb, sender, health_flush_interval=0.01)
    await d.start()
    try:
        await d.on_transitions([ready(a, "inbox", 0)])
        await asyncio.wait_for(d.idle(), 5)
        (failure,) = [
            r.__dict__["fields"] for r in caplog.records if r.getMessage() == "hook health update failed"
        ]
        assert failure["hook_id"] == hook.id and failure["stage"] == "health"
        assert failure["notification_id"].startswith("msg_") and failure["notification_ids"] == [
            failure["notification_id"]
        ]
        assert (await ndb.row(hook.id)).last_status is None  # that write was lost, and said so
        ndb.clock.advance(1)
        await d.on_transitions([ready(a, "inbox", 1)])
        await asyncio.wait_for(d.idle(), 5)
        assert len(sender.calls) == 2
        row = await ndb.row(hook.id)
        assert row.last_status == 204 and row.last_attempt_at is not None
    finally:
        await d.stop()


async def test_notification_repr_never_shows_the_url() -> None:
    n = Notification(
        id="msg_1", type="todo.ready", hook_id="nh_1", endpoint_id="ep_1", owner_id="hu_1", todo_id="td_1",
        body=b"{}", url="https://hooks.test/h?key=QUERYCANARY",
    )  # fmt: skip
    assert "QUERYCANARY" not in repr(n) and "QUERYCANARY" not in repr(replace(n, attempts=1))


async def test_a_fast_failed_attempt_skips_the_hook_read_but_never_the_last_attempt(ndb: NotifyDB) -> None:
    """Attempts before the last to an origin that just refused fail without a read or a send; the third
    reads the hook and goes to the sender, and the failed delivery is written as usual."""
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    refused = NetworkFailure(stage="connect", reason="connection_refused", fast_fail=True)
    sender = ScriptedSender(NetworkFailure(stage="connect", reason="connection_refused"))
    sender.fast = [refused, refused, refused]  # the origin stays refused for every pre-check
    d = dispatcher(ndb, sender, workers=1, per_owner_inflight=1)
    await d.start()
    try:
        await d.on_transitions([ready(a, "inbox", 0)])
        with ndb.statements() as seen:
            await asyncio.wait_for(d.idle(), 5)
    finally:
        await d.stop()
    assert len(sender.calls) == 1  # only the third attempt reached send()
    assert sender.fast == [refused]  # the last attempt never asked for a fast failure
    assert len(selects_on_hooks(seen)) == 1  # one hook read, for the last attempt
    assert metric(ndb, "switchboard_notify_hook_attempts_total", result="network") == 3
    row = await ndb.row(hook.id)
    assert row.consecutive_failures == 1 and row.last_error == "network"
