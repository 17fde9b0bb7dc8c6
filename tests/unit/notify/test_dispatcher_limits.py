"""The dispatcher's limits and failure paths (issue 14), on a real database with a scripted sender:

* the per-hook limit is a ceiling: no 60 s window admits more than the limit, the rest dropped;
* every drop reaches a ``notification dropped`` line and the lines' counts sum to the dropped counter,
  shutdown drops included;
* at most 3 attempts per notification, whatever hands it to a worker; the status classes end or retry a
  notification as REQ-7 says and are labelled as docs/push.md says (699: one attempt, ``other``);
* TLS failures are retried to the cap and stay ``tls``;
* a worker survives any exception of one notification (a failing signer, through the ``sign`` seam),
  the pool keeps its size and the next notification is delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from switchboard.notify.attempts import MAX_ATTEMPTS
from switchboard.notify.notification import Notification
from switchboard.push import (
    AttemptResult,
    NetworkFailure,
    PushError,
    TLSFailure,
    standard_headers,
)
from switchboard.push._errors import error_for_status
from tests.support.logcapture import LogCapture
from tests.unit.notify.conftest import NotifyDB
from tests.unit.notify.test_dispatcher import dispatcher, metric, ready, until

DROPPED = {"type": "todo.ready", "outcome": "dropped"}


class Receiver:
    """A scripted sender that records the webhook-id of every POST; ``answer`` is a status or an error,
    the same for every attempt."""

    def __init__(self, answer: int | PushError = 204) -> None:
        self.answer = answer
        self.ids: list[str] = []

    def fast_failure(self, url: str) -> PushError | None:
        return None

    async def send(self, url: str, *, body: bytes, headers: dict[str, str]) -> AttemptResult:
        self.ids.append(headers["webhook-id"])
        await asyncio.sleep(0)
        if isinstance(self.answer, PushError):
            raise self.answer
        failure = error_for_status(self.answer)
        if failure is not None:
            raise failure
        return AttemptResult(self.answer, 0.001, 0)

    def per_notification(self) -> list[int]:
        return sorted(Counter(self.ids).values())


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    capture = LogCapture()
    logger = logging.getLogger("switchboard.notify")
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)


def drop_lines(logs: LogCapture) -> list[dict[str, Any]]:
    return logs.events("notification dropped")


# --- the per-hook ceiling ------------------------------------------------------------------------


async def test_the_per_hook_limit_is_a_ceiling_per_sliding_minute(ndb: NotifyDB, logs: LogCapture) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    d = dispatcher(ndb, Receiver(), rate_per_minute=120)
    d.accepting = True  # matching only: what is admitted stays queued
    await d.on_transitions([ready(a, "inbox", i) for i in range(150)])
    assert (
        d.queue.qsize() == 120 and metric(ndb, "switchboard_notify_hook_notifications_total", **DROPPED) == 30
    )
    ndb.clock.advance(5)  # a bucket refilling 2/s would let 10 through here
    await d.on_transitions([ready(a, "inbox", 150 + i) for i in range(10)])
    assert d.queue.qsize() == 120
    ndb.clock.advance(55)  # exactly 60 s after the burst: still inside the window
    await d.on_transitions([ready(a, "inbox", 200)])
    assert d.queue.qsize() == 120
    ndb.clock.advance(0.01)
    await d.on_transitions([ready(a, "inbox", 300 + i) for i in range(130)])
    assert d.queue.qsize() == 240
    dropped = metric(ndb, "switchboard_notify_hook_notifications_total", **DROPPED)
    assert dropped == 30 + 10 + 1 + 10
    d.outcomes.drops.close()
    lines = drop_lines(logs)
    assert sum(line["drops"] for line in lines) == dropped
    assert {line["reason"] for line in lines} == {"rate_limited"}
    assert all(line["hook_ids"] == [hook.id] for line in lines)


# --- drops reach the log, shutdown included ------------------------------------------------------


async def test_every_drop_is_in_a_line_and_the_lines_sum_to_the_counter(
    ndb: NotifyDB, logs: LogCapture
) -> None:
    """Overflow across several hooks, then a stop that abandons queued and retrying notifications."""
    endpoints = [await ndb.endpoint(f"ep-{i}") for i in range(3)]
    hooks = [await ndb.hook(e) for e in endpoints]
    gate = asyncio.Event()

    class Held(Receiver):
        async def send(self, url: str, *, body: bytes, headers: dict[str, str]) -> AttemptResult:
            await gate.wait()
            return await super().send(url, body=body, headers=headers)

    d = dispatcher(ndb, Held(503), queue_size=4, workers=1, per_owner_inflight=1, drain_timeout=0.1)
    await d.start()
    try:
        for round_ in range(4):
            await d.on_transitions([ready(e, "inbox", 10 * round_ + i) for i, e in enumerate(endpoints)])
        gate.set()
        await until(lambda: bool(d.timers))  # some notification is waiting for its retry
    finally:
        await d.stop()
    dropped = metric(ndb, "switchboard_notify_hook_notifications_total", **DROPPED)
    lines = drop_lines(logs)
    assert dropped >= 8
    assert sum(line["drops"] for line in lines) == dropped
    assert {line["reason"] for line in lines} == {"queue_full", "shutdown"}
    named = {h for line in lines for h in line["hook_ids"]}
    assert named == {h.id for h in hooks}  # every hook's drops are named, not only the first one's
    assert not any("hooks.test" in line or "QUERYCANARY" in line for line in logs.lines)
    # every notification ended exactly once
    outcomes = sum(
        metric(ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome=o)
        for o in ("delivered", "failed", "dropped")
    )
    assert outcomes == 12


# --- the attempt cap and the status classes ------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "attempts", "label", "last_error"),
    [
        (204, 1, "2xx", None),
        (302, 1, "3xx", "redirect"),
        (401, 1, "4xx", "client_error"),
        (410, 1, "4xx", "client_error"),
        (408, 3, "4xx", "throttled"),
        (429, 3, "4xx", "throttled"),
        (503, 3, "5xx", "server_error"),
        (699, 1, "other", "unexpected_status"),
        (TLSFailure("certificate"), 3, "tls", "tls"),
        (TLSFailure("hostname_mismatch"), 3, "tls", "tls"),
        (NetworkFailure(stage="response", reason="protocol"), 3, "network", "network"),
    ],
    ids=str,
)
async def test_each_answer_gets_its_attempts_and_its_label(
    ndb: NotifyDB, answer: int | PushError, attempts: int, label: str, last_error: str | None
) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    rx = Receiver(answer)
    d = dispatcher(ndb, rx)
    await d.start()
    try:
        await d.on_transitions([ready(a, "inbox", 0)])
        await asyncio.wait_for(d.idle(), 10)
    finally:
        await d.stop()
    assert rx.per_notification() == [attempts]
    assert metric(ndb, "switchboard_notify_hook_attempts_total", result=label) == attempts
    row = await ndb.row(hook.id)
    assert row.last_error == last_error


async def test_a_notification_handed_to_workers_twice_still_gets_three_attempts(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    await ndb.hook(a)
    rx = Receiver(503)
    d = dispatcher(ndb, rx, workers=4, per_owner_inflight=4)
    await d.start()
    try:
        await d.on_transitions([ready(a, "inbox", 0)])
        (n,) = [d.queue.get_nowait()]  # taken before a worker ran, and handed back twice
        d.queue.task_done()
        d.intake.put(n)
        d.intake.put(n)
        await asyncio.wait_for(d.idle(), 10)
    finally:
        await d.stop()
    assert rx.per_notification() == [MAX_ATTEMPTS]
    assert (
        metric(ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed") == 1
    )


# --- a worker survives every error of one notification -------------------------------------------


async def test_a_failing_signer_leaves_the_pool_whole_and_the_next_notification_delivered(
    ndb: NotifyDB, logs: LogCapture
) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    failing = 0

    def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        nonlocal failing
        if failing:
            failing -= 1
            raise RuntimeError(f"cannot sign with {secrets[0]}")  # a message that quotes the secret
        return standard_headers(secrets, msg_id, timestamp, body)

    rx = Receiver(204)
    d = dispatcher(ndb, rx, workers=3, per_owner_inflight=3, sign=sign)
    await d.start()
    try:
        failing = 7  # more failures than workers: a worker lost per failure would leave none
        await d.on_transitions([ready(a, "inbox", i) for i in range(7)])
        await asyncio.wait_for(d.idle(), 10)
        assert d.pool.running == 3
        assert rx.ids == []
        row = await ndb.row(hook.id)  # seven failed deliveries of the hook, as the endpoint will see them
        assert (row.consecutive_failures, row.last_error, row.enabled) == (7, "internal_error", True)
        await d.on_transitions([ready(a, "inbox", 100)])
        await asyncio.wait_for(d.idle(), 10)
        assert len(rx.ids) == 1  # the next notification is delivered
        assert d.pool.running == 3
    finally:
        await d.stop()
    assert metric(ndb, "switchboard_notify_worker_errors_total", stage="sign") == 7
    assert (
        metric(ndb, "switchboard_notify_hook_notifications_total", type="todo.ready", outcome="failed") == 7
    )
    errors = logs.events("notify worker error")
    assert len(errors) == 7 and {e["hook_id"] for e in errors} == {hook.id}
    assert all(e["stage"] == "sign" and e["error_type"] == "RuntimeError" for e in errors)
    assert all("test_dispatcher_limits.py" in e["where"] for e in errors)
    assert not any("whsec_" in line or "cannot sign" in line for line in logs.lines)


class Escapes(BaseException):
    """Not an ``Exception``: nothing in the worker loop catches it, so the worker task ends."""


async def test_a_worker_that_ends_anyway_is_started_again(ndb: NotifyDB, logs: LogCapture) -> None:
    a = await ndb.endpoint("ep-a")
    await ndb.hook(a)
    escape = True

    def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        nonlocal escape
        if escape:
            escape = False
            raise Escapes()
        return standard_headers(secrets, msg_id, timestamp, body)

    rx = Receiver(204)
    d = dispatcher(ndb, rx, workers=2, sign=sign)
    await d.start()
    first = list(d.pool._workers)
    try:
        await d.on_transitions([ready(a, "inbox", 0)])
        await until(lambda: bool(logs.events("notify worker ended unexpectedly; starting it again")))
        assert d.pool.running == 2 and d.pool._workers != first  # one task replaced, none missing
        await d.on_transitions([ready(a, "inbox", 1)])
        await until(lambda: len(rx.ids) == 1)
    finally:
        await d.stop()
    (ended,) = logs.events("notify worker ended unexpectedly; starting it again")
    assert ended["error_type"] == "Escapes" and "test_dispatcher_limits.py" in ended["where"]


async def test_a_stop_counts_and_logs_what_it_cuts_off(ndb: NotifyDB, logs: LogCapture) -> None:
    a = await ndb.endpoint("ep-a")
    await ndb.hook(a)
    gate = asyncio.Event()  # never set: the attempt is in flight when the stop comes

    class Hanging(Receiver):
        async def send(self, url: str, *, body: bytes, headers: dict[str, str]) -> AttemptResult:
            self.ids.append(headers["webhook-id"])
            await gate.wait()
            raise AssertionError("unreachable")

    rx = Hanging()
    d = dispatcher(ndb, rx, workers=1, per_owner_inflight=1, drain_timeout=0.05)
    await d.start()
    await d.on_transitions([ready(a, "inbox", i) for i in range(3)])
    await until(lambda: len(rx.ids) == 1)
    await d.stop()
    dropped = metric(ndb, "switchboard_notify_hook_notifications_total", **DROPPED)
    assert dropped == 3  # one in flight, two queued: each ends once, as dropped
    assert sum(line["drops"] for line in drop_lines(logs)) == 3
    assert {line["reason"] for line in drop_lines(logs)} == {"shutdown"}


async def test_a_notification_past_its_attempts_is_refused_before_any_read(ndb: NotifyDB) -> None:
    a = await ndb.endpoint("ep-a")
    hook = await ndb.hook(a)
    rx = Receiver(503)
    d = dispatcher(ndb, rx)
    n = Notification(
        id="msg_x", type="todo.ready", hook_id=hook.id, endpoint_id=a.id, owner_id=a.human_id,
        todo_id="td_x", body=b"{}", url="https://hooks.test/h", attempts=MAX_ATTEMPTS,
    )  # fmt: skip
    await d.runner.attempt(n)
    assert rx.ids == [] and n.outcome is None
