"""SPEC-0024's limits and failure rules, shown against ``switchboard serve`` as shipped (issue 14).

Each test starts the real server in a subprocess with its default process layout (the notify worker
processes included), sets it up through the CLI and MCP, and looks only through the operator's windows:
receivers on loopback, ``/metrics``, list_notify_hooks, the web UI and the JSON log on stderr.

* the per-hook limit is a ceiling: no 60 s window of one hook holds more than 120 POSTs, and the
  dropped counter accounts for the rest;
* every drop reaches a ``notification dropped`` line (written by a timer, not by a later drop) and the
  lines' counts sum to the dropped counter, in the server and in its worker processes;
* at most 3 POSTs per webhook-id for every answer: 1 for 401 and 699, 3 for 503, a status line the
  parser refuses, a receiver that hangs up on a kept connection, and a certificate that does not verify
  (3 prompt attempts, ``tls``); a worker process killed mid-retry sends no more attempts;
* a hook its human disabled stays disabled through a rotate by its endpoint;
* a signing failure ends one notification, not a worker: the next notification is delivered.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard.cred.envelope import Envelope, load_or_create_key
from switchboard.notify.process import child_of
from switchboard.store.schema import notify_hooks
from tests.integration.web.helpers import Human
from tests.reliability.notify_served import Served, served
from tests.support.receivers import CloseWithoutResponse, RawResponse, Respond
from tests.support.server import TEST_CRED_KEY

NOTIFICATIONS = "switchboard_notify_hook_notifications_total"
ATTEMPTS = "switchboard_notify_hook_attempts_total"
PASSWORD = "correct horse battery"  # tests.reliability.procs.provision's


def busiest_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] - start <= window:
            j += 1
        best = max(best, j - i)
    return best


async def outcome(s: Served, kind: str) -> float:
    return await s.metric(NOTIFICATIONS, type="todo.ready", outcome=kind)


def drops_logged(s: Served) -> list[dict[str, Any]]:
    return s.log("notification dropped")


async def lines_account_for_the_counter(s: Served) -> tuple[list[dict[str, Any]], float]:
    """Wait (bounded) until the drop lines' counts sum to the dropped counter; both, once they do."""

    async def check() -> tuple[list[dict[str, Any]], float] | None:
        dropped = await outcome(s, "dropped")
        lines = drops_logged(s)
        return (lines, dropped) if sum(line["drops"] for line in lines) == dropped else None

    found: tuple[list[dict[str, Any]], float] = await s.until("drop lines sum to the dropped counter", check)
    return found


def todo_of(request: Any) -> str:
    return str(json.loads(request.body)["todo_id"])


# --- the per-hook ceiling -----------------------------------------------------------------------------


async def test_no_minute_of_one_hook_holds_more_than_120_posts(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        rx = await s.receiver()
        a = await s.agent()
        hook_id = (await a.ok("create_notify_hook", {"url": rx.hook_url()}))["hook_id"]
        await s.deliver(150)
        burst_done = time.monotonic()

        async def burst_settled() -> bool:
            return await outcome(s, "delivered") + await outcome(s, "dropped") == 150

        await s.until("the burst delivered or dropped", burst_settled)
        assert len(rx.requests) == 120 and await outcome(s, "dropped") == 30
        # Six seconds on, a bucket refilling 2/s would admit 12 more: a ceiling admits none until the
        # first of the burst is a minute old.
        await asyncio.sleep(max(0.0, burst_done + 6 - time.monotonic()))  # the passing time is the test
        await s.deliver(10)

        async def late_settled() -> bool:
            return await outcome(s, "delivered") + await outcome(s, "dropped") == 160

        await s.until("the late ten delivered or dropped", late_settled)
        assert len(rx.requests) == 120 and await outcome(s, "delivered") == 120
        assert await outcome(s, "dropped") == 40
        assert busiest_window(rx.times, 60.0) <= 120
        lines, dropped = await lines_account_for_the_counter(s)
        assert dropped == 40 and {line["reason"] for line in lines} == {"rate_limited"}
        assert all(line["hook_ids"] == [hook_id] for line in lines)


# --- drops reach the log ------------------------------------------------------------------------------


async def test_under_overflow_the_drop_lines_sum_to_the_dropped_counter(tmp_path: Path) -> None:
    """A queue of 2 in the hub and 2 for the instance (split between its worker processes), one worker
    each, receivers that take 0.5 s: a burst to three hooks overflows it. Once the burst is over no later drop comes, and every drop must still be logged."""
    async with served(tmp_path, notify_queue_size=2, notify_workers=1) as s:
        receivers = [await s.receiver(answer_after=0.5) for _ in range(3)]
        a = await s.agent()
        hook_ids = {
            (await a.ok("create_notify_hook", {"url": r.hook_url(f"/h{i}?key=QUERYCANARY")}))["hook_id"]
            for i, r in enumerate(receivers)
        }
        await s.deliver(60, concurrency=32)

        async def settled() -> bool:
            # Each transition is either dropped before matching (one drop, counted by the hub's overflow
            # series too) or makes three notifications that each end delivered, failed or dropped.
            overflow = await s.metric(
                "switchboard_transition_subscriber_errors_total", subscriber="notify_hooks", error="overflow"
            )
            ended = sum([await outcome(s, o) for o in ("delivered", "failed", "dropped")])
            return ended + 2 * overflow == 180

        await s.until("every notification of the burst ended", settled, timeout=120)
        lines, dropped = await lines_account_for_the_counter(s)
        assert dropped >= 10, dropped
        for line in lines:
            assert line["drops"] >= 1 and line["reason"] in ("queue_full", "queue_full_unmatched")
            if line["reason"] == "queue_full":
                assert set(line["hook_ids"]) <= hook_ids and line["hook_ids"]
            else:
                assert line["endpoint_ids"] == [s.tenant.endpoint_id] and line["todo_ids"]
        named = {h for line in lines for h in line.get("hook_ids", ())}
        assert named == hook_ids or any(line["reason"] == "queue_full_unmatched" for line in lines)
        text = "\n".join(json.dumps(line) for line in lines)
        assert "127.0.0.1:" not in text and "QUERYCANARY" not in text and "https://" not in text


# --- the attempt cap, every answer --------------------------------------------------------------------


async def test_at_most_three_posts_per_webhook_id_for_every_answer(tmp_path: Path) -> None:
    async with served(tmp_path, notify_hook_ceiling=8) as s:
        rx = {
            "401": await s.receiver(behaviour=Respond(401)),
            "699": await s.receiver(behaviour=Respond(699)),
            "503": await s.receiver(behaviour=Respond(503)),
            "garbage": await s.receiver(
                behaviour=RawResponse(b"HTTP/1.1 6990 Weird\r\ncontent-length: 0\r\n\r\n")
            ),
            "hangup": await s.receiver(behaviour=Respond(204)),
            "tls": await s.receiver(cert_hostnames=("other.test",)),  # verifies for another name only
            "ok": await s.receiver(behaviour=Respond(204)),
        }
        a = await s.agent()
        hooks = {
            name: (await a.ok("create_notify_hook", {"url": r.hook_url()}))["hook_id"]
            for name, r in rx.items()
        }
        (warm,) = await s.deliver(1)
        await s.until("the warm-up reached the hang-up receiver", lambda: rx["hangup"].requests)
        # Its connection is kept (4 s); the next request on it is read and answered by a hang-up.
        rx["hangup"].behaviour = CloseWithoutResponse()
        (todo,) = await s.deliver(1)

        async def final() -> bool:
            return await outcome(s, "failed") + await outcome(s, "delivered") == 14

        await s.until("both notifications to all seven hooks final", final, timeout=60)
        posts = {name: sum(1 for q in r.requests if todo_of(q) == todo) for name, r in rx.items()}
        assert posts == {"401": 1, "699": 1, "503": 3, "garbage": 3, "hangup": 3, "tls": 0, "ok": 1}
        for name, r in rx.items():  # one webhook-id per notification, whatever the receiver saw
            per_todo = {todo_of(q) for q in r.requests}
            assert len(set(r.ids())) == len(per_todo)
        assert rx["tls"].connections == 6  # 3 handshakes per notification
        attempts = {e["hook_id"]: e for e in s.log("notify attempt")}
        tls_attempts = [e for e in s.log("notify attempt") if e["hook_id"] == hooks["tls"]]
        assert [e["result"] for e in tls_attempts] == ["tls"] * 6
        assert max(e["duration_ms"] for e in tls_attempts) < 2000  # prompt failures, not timeouts
        assert attempts  # every attempt is logged
        want = {"2xx": 3, "4xx": 2, "other": 2, "5xx": 6, "network": 9, "tls": 6, "3xx": 0, "timeout": 0}
        got = {label: await s.metric(ATTEMPTS, result=label) for label in want}
        assert got == want
        health = {h["hook_id"]: h for h in (await a.ok("list_notify_hooks"))["hooks"]}
        errors = {
            name: (health[hooks[name]]["last_status"], health[hooks[name]]["last_error"]) for name in rx
        }
        assert errors == {
            "401": (401, "client_error"),
            "699": (699, "unexpected_status"),
            "503": (503, "server_error"),
            "garbage": (None, "network"),
            "hangup": (None, "network"),
            "tls": (None, "tls"),
            "ok": (204, None),
        }
        assert warm != todo


async def test_a_worker_process_killed_mid_retry_sends_no_more_attempts(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        rx = await s.receiver(behaviour=Respond(503))
        a = await s.agent()
        await a.ok("create_notify_hook", {"url": rx.hook_url()})
        await s.deliver(1)
        await s.until("the first attempt", lambda: rx.requests)
        first_id = rx.ids()[0]
        workers = s.workers()
        index = child_of(s.tenant.endpoint_id, len(workers))
        starts = len(s.log("notify worker started"))
        os.kill(workers[index], signal.SIGKILL)  # between its first attempt and its retry (~1 s later)
        await s.until("the server saw it die", lambda: s.log("notify worker exited; starting it again"))
        # It is started again after 1 s: meanwhile its endpoints' transitions are dropped, and logged.
        await s.deliver(3)
        await s.until("started again", lambda: len(s.log("notify worker started")) > starts)
        await asyncio.sleep(8.0)  # past when the killed notification's attempts 2 and 3 would have come
        assert rx.ids().count(first_id) <= 3
        assert rx.ids().count(first_id) == len(rx.requests)  # nothing else reached it meanwhile
        lines, dropped = await lines_account_for_the_counter(s)
        assert dropped >= 1 and {line["reason"] for line in lines} == {"worker_unavailable"}
        assert all(line["endpoint_ids"] == [s.tenant.endpoint_id] for line in lines)
        # The new worker process serves the endpoint: 3 attempts, one webhook-id.
        seen = len(rx.requests)
        (todo,) = await s.deliver(1)
        await s.until(
            "three attempts", lambda: sum(1 for q in rx.requests if todo_of(q) == todo) >= 3, timeout=20
        )
        later = [q.header("webhook-id") for q in rx.requests[seen:] if todo_of(q) == todo]
        assert len(later) == 3 and len(set(later)) == 1


# --- who may re-enable --------------------------------------------------------------------------------


async def test_a_hook_its_human_disabled_stays_disabled_through_a_rotate(tmp_path: Path) -> None:
    async with served(tmp_path, slug="owned") as s:
        held, control = await s.receiver(), await s.receiver()
        a = await s.agent()
        hook_id = (await a.ok("create_notify_hook", {"url": held.hook_url()}))["hook_id"]
        await a.ok("create_notify_hook", {"url": control.hook_url()})
        owner = Human(cast(Any, SimpleNamespace(base_url=s.server.base_url)), s.tenant.email)
        s.stack.push_async_callback(owner.close)
        assert (await owner.sign_in(PASSWORD)).status_code == 303
        r = await owner.post(f"/endpoints/owned/hooks/{hook_id}/disable", {}, csrf_from="/endpoints/owned")
        assert r.status_code == 303

        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook_id})
        assert rotated["signing_secret"].startswith("whsec_")
        assert (rotated["enabled"], rotated["disabled_reason"]) == (False, "operator")
        listed = {h["hook_id"]: h for h in (await a.ok("list_notify_hooks"))["hooks"]}[hook_id]
        assert (listed["enabled"], listed["disabled_reason"]) == (False, "operator")
        (todo,) = await s.deliver(1)
        await s.until("the control hook's notification", lambda: control.requests)

        async def settled() -> bool:
            return (
                await outcome(s, "delivered") == 1
                and await s.metric("switchboard_notify_hook_queue_depth") == 0
            )

        await s.until("settled", settled)
        assert held.requests == [] and todo_of(control.requests[0]) == todo

        # Only the human re-enables it.
        r = await owner.post(f"/endpoints/owned/hooks/{hook_id}/enable", {}, csrf_from="/endpoints/owned")
        assert r.status_code == 303
        (again,) = await s.deliver(1)
        await s.until("the re-enabled hook is called", lambda: held.requests)
        assert todo_of(held.requests[0]) == again


# --- a worker survives a signing failure --------------------------------------------------------------


async def test_a_signing_failure_leaves_the_worker_pool_whole(tmp_path: Path) -> None:
    """Four hooks whose stored secret the signer refuses (a hex ``whsec_``, as a legacy row could hold):
    every attempt to them raises in the signer. Each fails 10 deliveries before it is disabled, over 40
    failures in all, more than a worker process's 32 workers: if each ended a worker, the good hook on
    the same endpoint (so the same worker process) would stop being served."""
    async with served(tmp_path) as s:
        bad = [await s.receiver() for _ in range(4)]
        good = await s.receiver()
        a = await s.agent()
        bad_ids = [(await a.ok("create_notify_hook", {"url": r.hook_url()}))["hook_id"] for r in bad]
        await a.ok("create_notify_hook", {"url": good.hook_url()})
        envelope = Envelope(load_or_create_key(TEST_CRED_KEY, s.server.data_dir))
        engine = create_async_engine(
            f"sqlite+aiosqlite:///{(s.server.data_dir / 'switchboard.db').resolve()}"
        )
        try:
            async with engine.begin() as conn:
                for hook_id in bad_ids:
                    sealed = envelope.seal("whsec_" + "ab" * 32, f"notify_hooks:{hook_id}:secret")
                    stmt = update(notify_hooks).where(notify_hooks.c.id == hook_id).values(secret_enc=sealed)
                    await conn.execute(stmt)
        finally:
            await engine.dispose()

        todos = await s.deliver(12)

        async def bad_ones_disabled() -> bool:
            hooks = {h["hook_id"]: h for h in (await a.ok("list_notify_hooks"))["hooks"]}
            return all(not hooks[h]["enabled"] for h in bad_ids)

        await s.until("the four unsignable hooks disabled", bad_ones_disabled)
        await s.until(
            "the good hook served every todo", lambda: {todo_of(q) for q in good.requests} >= set(todos)
        )

        async def sign_errors() -> float:  # once the worker process's counters reached /metrics
            n = await s.metric("switchboard_notify_worker_errors_total", stage="sign")
            return n if n >= 40 and n == len(s.log("notify worker error")) else 0.0

        # each unsignable hook failed 10 deliveries (or a few more, in flight at its 10th): more
        # failures than a worker process has workers
        errors = await s.until("forty signing failures counted and logged", sign_errors)
        (last,) = await s.deliver(1)
        await s.until(
            "the next notification is delivered", lambda: any(todo_of(q) == last for q in good.requests)
        )
        assert all(r.requests == [] for r in bad)
        hooks = {h["hook_id"]: h for h in (await a.ok("list_notify_hooks"))["hooks"]}
        assert {(hooks[h]["disabled_reason"], hooks[h]["last_error"]) for h in bad_ids} == {
            ("consecutive_failures", "internal_error")
        }
        logged = s.log("notify worker error")
        assert len(logged) == errors and {e["hook_id"] for e in logged} == set(bad_ids)
        assert {(e["stage"], e["error_type"]) for e in logged} == {("sign", "ValueError")}
        assert "hex secrets are refused" not in s.log_text() and "whsec_ab" not in s.log_text()
